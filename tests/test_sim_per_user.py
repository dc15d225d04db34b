"""Per-user figures in ``labhive simulate``: given a VC of 4 GPUs where bob floods 40 short
jobs and dave submits one a second later, expect each user's waits and Jain's index over the
VC's users in the text and in ``--json`` (under ``per_user``); fair share cuts dave's wait to
the next freed GPU. Given a trace without users, expect neither (old outputs unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labhive.scheduler.cli import main
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
