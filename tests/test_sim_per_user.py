"""Per-user figures in ``labhive simulate``: given a VC of 4 GPUs where bob floods 40 short
jobs and dave submits one a second later, expect each user's waits and Jain's index over the
VC's users in the text and in ``--json`` (under ``per_user``); fair share cuts dave's wait to
the next freed GPU. Given a trace without users, expect neither (old outputs unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from labhive.scheduler.cli import main
from labhive.scheduler.sim import metrics
from labhive.scheduler.sim.machines import Machine, cluster_dict

HEADER = "submit_time,vc,user,gpus,duration,status\n"


def flood(tmp_path: Path, users: bool = True) -> list[str]:
    """The trace and a one-node, 4-GPU cluster of VC ``course``; the CLI's arguments."""
    bob, dave = ("bob", "dave") if users else ("", "")
    rows = [f"0,course,{bob},1,6,Pass\n" for _ in range(40)] + [f"1,course,{dave},1,6,Pass\n"]
    trace = tmp_path / "flood.csv"
    trace.write_text(HEADER + "".join(rows))
    config = tmp_path / "cluster.yaml"
    config.write_text(json.dumps(cluster_dict([Machine("n0", 4)], {"course": 1})))
    return ["simulate", "--trace", str(trace), "--cluster", str(config)]


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*args, "--json"]) == 0
    doc: dict = json.loads(capsys.readouterr().out)
    return doc


def test_users_waits_and_jain_index_per_vc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*flood(tmp_path), "--policy", "hived", "--policy", "hived:fair_share=7d"]
    doc = run_json(args, capsys)
    fifo = doc["policies"]["hived"]["per_user"]["course"]
    fair = doc["policies"]["hived:fair_share=7d"]["per_user"]["course"]
    assert fifo["users"] == fair["users"] == 2
    assert fifo["by_user"]["dave"]["jobs"] == 1
    assert fifo["by_user"]["dave"]["queue_delay_avg"] >= 53  # behind bob's 36 waiting jobs
    assert fair["by_user"]["dave"]["queue_delay_avg"] <= 5  # the next GPU freed
    bob = fifo["by_user"]["bob"]
    assert bob["jobs"] == 40 and bob["queue_delay_median"] <= bob["queue_delay_p95"]
    waits = [fifo["by_user"][u]["queue_delay_avg"] for u in ("bob", "dave")]
    assert fifo["jain_user_wait"] == pytest.approx(
        sum(waits) ** 2 / (2 * sum(w * w for w in waits))
    )
    assert fifo["user_wait_worst"] == max(waits)
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "per user inside each VC" in text and "Jain wait" in text


def test_a_trace_without_users_has_no_per_user_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [*flood(tmp_path, users=False), "--policy", "hived"]
    doc = run_json(args, capsys)
    assert "per_user" not in doc["policies"]["hived"]
    assert main(args) == 0
    assert "per user" not in capsys.readouterr().out


def _columns(rows: int, users: int, vcs: int, seed: int) -> dict[str, np.ndarray]:
    """A run's columns (``JobTable.arrays``): users spread over VCs in random order (a user
    in several VCs), some jobs never started, some not ended, some shorter than a minute."""
    rng = np.random.default_rng(seed)
    submit = rng.uniform(0, 1e5, rows)
    first_start = submit + rng.exponential(600, rows)
    first_start[rng.random(rows) < 0.1] = np.nan
    duration = rng.exponential(3600, rows)
    end = first_start + duration
    end[rng.random(rows) < 0.1] = np.nan
    return {
        "submit": submit,
        "first_start": first_start,
        "duration": duration,
        "end": end,
        "vc": rng.integers(0, vcs, rows).astype(np.int16),
        "user": rng.integers(0, users, rows).astype(np.int64),
    }


def _masked(cols: dict[str, np.ndarray], vc: int, user: int) -> tuple[float | None, int]:
    """One (VC, user)'s mean queuing delay and job count, by the definition: its rows
    picked by a mask over all rows, in row order."""
    mine = (cols["vc"] == vc) & (cols["user"] == user)
    waits = (cols["first_start"] - cols["submit"])[mine & ~np.isnan(cols["first_start"])]
    return (float(waits.mean()) if len(waits) else None), int(mine.sum())


def test_each_users_figures_are_their_own_rows_to_the_bit() -> None:
    """Given 3 VCs whose 40 users' jobs interleave, expect each user's figures in each VC to
    be those of exactly their rows, in row order (the same bits as masking by VC and user)."""
    cols = _columns(5_000, users=40, vcs=3, seed=7)
    out = metrics.per_user(cols, ["c", "a", "b"], [f"u{i}" for i in range(40)])
    assert list(out) == ["a", "b", "c"]  # VCs by name
    for code, vc in enumerate(["c", "a", "b"]):
        present = sorted(set(cols["user"][cols["vc"] == code].tolist()))
        assert out[vc]["users"] == len(present)
        for user in present:
            mean, jobs = _masked(cols, code, user)
            got = out[vc]["by_user"][f"u{user}"]
            assert got["jobs"] == jobs
            assert got["queue_delay_avg"] == mean  # exact: the same rows, the same order


class _CountingEquals(np.ndarray):
    """A column that counts the whole-column comparisons made with it."""

    compared = 0

    def __eq__(self, other: object) -> np.ndarray:  # type: ignore[override]
        if self.shape and len(self) > 1_000:
            _CountingEquals.compared += 1
        return super().__eq__(other)  # type: ignore[no-any-return]


def test_many_users_cost_no_pass_over_every_row_per_user() -> None:
    """Given a million-job run's shape (one VC, 300 users), expect per_user not to compare
    the whole user column once per user: that made a 1M-job summary cost 300 passes over a
    million rows each (15 of a 1M FIFO run's 105 CPU s at load 8)."""
    cols = _columns(20_000, users=300, vcs=1, seed=3)
    cols["user"] = cols["user"].view(_CountingEquals)
    cols["vc"] = cols["vc"].view(_CountingEquals)
    _CountingEquals.compared = 0
    out = metrics.per_user(cols, ["only"], [f"u{i}" for i in range(300)])
    assert out["only"]["users"] == 300
    assert _CountingEquals.compared <= 1  # (at most one pass per VC, not one per user)


def test_a_users_percentiles_are_numpys_to_the_bit() -> None:
    """Given random waits (ties, one value, spreads from seconds to years, sizes around
    numpy's thresholds), expect ``linear_percentile`` of the sorted waits to give exactly the
    bits of ``np.percentile`` at the median and p95, and ``_user_waits`` exactly ``_stats``'s
    figures less p99 (the summary's per-user figures must not move by one bit)."""
    rng = np.random.default_rng(34)
    for case in range(800):
        n = int(rng.integers(1, 300)) if case % 3 else int(rng.integers(1, 12))
        scale = 10.0 ** int(rng.integers(0, 9))
        waits = rng.exponential(scale, n)
        if case % 5 == 0:  # ties: whole seconds from a few values
            waits = np.floor(rng.choice(waits, n))
        ordered = np.sort(waits).tolist()
        for q in (0.5, 0.95):
            want = float(np.percentile(waits, 100 * q))
            assert metrics.linear_percentile(ordered, q).hex() == want.hex(), (n, q)
        want_stats = metrics._stats(waits, "queue_delay")
        del want_stats["queue_delay_p99"]
        got = metrics._user_waits(waits)
        assert list(got) == list(want_stats)
        assert {k: v.hex() for k, v in got.items() if v is not None} == {
            k: v.hex() for k, v in want_stats.items() if v is not None
        }
    assert metrics._user_waits(np.array([])) == {
        "queue_delay_avg": None,
        "queue_delay_median": None,
        "queue_delay_p95": None,
    }
