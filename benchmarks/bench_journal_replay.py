"""How fast a week-long journal replays: ``labhive twin check`` and ``labhive whatif`` on it.

No service ran for a week here, so the week is synthesised: the first ``--days`` (7) of the
SYNTHETIC Philly-format trace (``shared/data/philly/synthetic``) run in the simulator under
HiveD on the squeezed Philly cluster (its first 360 machines, Helios' VC weights, as
``bench_simulator.py --contended``), one event at a time as the service's loop gives them,
and every event and decision is written to a job store's ``journal`` table exactly as the
loop writes it (``table.write``: one row per instant, the first one fresh). Then, timed:

- read: the journal read back and decoded (``table.read``);
- twin: the twin check's replay, every decision compared (``twin.replay``);
- whatif: the recorded jobs extracted and replayed twice (``whatif.whatif``: baseline, and
  the first VC with 10 more nodes).

    .venv/bin/python benchmarks/bench_journal_replay.py [--days 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "philly"
TRACE = DATA / "synthetic" / "synthetic_cluster_job_log.json.gz"
CLUSTER = DATA / "cluster_machine_list"
VCS = DATA / "philly_vc_nodes_helios.csv"
MACHINES = 360  # as bench_simulator.py --contended
BATCH = 2000  # journal rows per transaction while writing the week


class Recorder:
    """The policy, each event it is given and its decisions kept (one event at a time, as the
    service's loop hands them: no ``handle_batch``)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.steps: list[tuple[Any, list[Any]]] = []

    def handle(self, event: Any) -> list[Any]:
        out = list(self.policy.handle(event))
        self.steps.append((event, out))
        return out

    def __getattr__(self, name: str) -> Any:
        if name == "handle_batch":
            raise AttributeError(name)
        return getattr(self.policy, name)


def as_service(value: Any) -> Any:
    """An event or decision with the service's int job ids (the trace's are ``str(int)``)."""
    if dataclasses.is_dataclass(value) and hasattr(value, "job_id"):
        return dataclasses.replace(value, job_id=int(value.job_id))  # type: ignore[type-var]
    return value


def squeezed_philly() -> dict[str, Any]:
    """The cluster, as a config mapping (``--vc-quota`` edits one)."""
    from labhive.scheduler.sim.machines import cluster_dict, load_machine_list, load_vc_weights

    machines, _ = load_machine_list(CLUSTER)
    return cluster_dict(machines[:MACHINES], load_vc_weights(VCS))


def record_week(config: Any, days: float) -> tuple[list[tuple[float, list[tuple[Any, Any]]]], int]:
    from labhive.scheduler.sim import runner
    from labhive.scheduler.sim.traces import load_trace

    jobs = load_trace(TRACE).jobs
    end = jobs[0].submit + days * 86400
    week = [dataclasses.replace(j, job_id=str(i + 1)) for i, j in enumerate(jobs) if j.submit < end]
    made = runner.get_policy  # type: ignore[attr-defined]
    recorders: list[Recorder] = []

    def recording(*a: Any, **k: Any) -> Any:
        recorders.append(Recorder(made(*a, **k)))
        return recorders[-1]

    setattr(runner, "get_policy", recording)  # noqa: B010
    try:
        runner.run_policy("hived", config, week, keep_jobs=False)
    finally:
        setattr(runner, "get_policy", made)  # noqa: B010
    passes: list[tuple[float, list[tuple[Any, Any]]]] = []
    for event, out in recorders[0].steps:
        t = float(getattr(event, "time", 0.0))
        step = (as_service(event), [as_service(d) for d in out])
        if passes and passes[-1][0] == t:
            passes[-1][1].append(step)
        else:
            passes.append((t, [step]))
    return passes, len(week)


def main() -> None:
    from sqlalchemy import func, select

    from labhive.scheduler.policies import get_policy
    from labhive.scheduler.service.journal import recorded, table, twin, whatif
    from labhive.scheduler.service.store import Store, database_url

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=7.0)
    args = parser.parse_args()
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.service.journal import vc_quota

    began = time.perf_counter()
    mapping = squeezed_philly()
    config = load_cluster_config(mapping)
    passes, n_jobs = record_week(config, args.days)
    steps = sum(len(s) for _, s in passes)
    print(
        f"SYNTHETIC week: {n_jobs:,} jobs of the first {args.days:g} days, HiveD on "
        f"{config.total_gpus():,} GPUs: {len(passes):,} passes, {steps:,} events "
        f"(simulated in {time.perf_counter() - began:.1f} s)"
    )
    with tempfile.TemporaryDirectory(prefix="labhive-week-") as tmp:
        store = Store(database_url(None, Path(tmp)))
        store.migrate()
        began = time.perf_counter()
        for i in range(0, len(passes), BATCH):
            with store.write() as conn:
                for j, (t, s) in enumerate(passes[i : i + BATCH]):
                    table.write(conn, t, s, {"name": "hived"} if i + j == 0 else None)
        with store.read() as conn:
            size = conn.execute(select(func.sum(func.length(table.journal.c.body)))).scalar()
        assert size is not None, "the journal is empty: nothing was written"
        print(
            f"written in {time.perf_counter() - began:.1f} s: {size / 2**20:.1f} MiB of journal "
            f"bodies ({size / max(n_jobs, 1):,.0f} bytes a job)"
        )

        began = time.perf_counter()
        with store.read() as conn:
            read = list(table.read(conn))
        took = time.perf_counter() - began
        print(f"read:   {took:6.1f} s ({steps / took:,.0f} events/s decoded)")

        make = lambda _recorded: get_policy("hived", config)  # noqa: E731
        report = twin.replay(read, make)
        state = "identical" if report.divergence is None else "DIVERGED"
        print(
            f"twin:   {report.seconds:6.1f} s ({report.rate:,.0f} events/s replayed and "
            f"compared; {report.steps:,} events, {state})"
        )
        if report.divergence is not None:
            print(report.divergence.text()[:2000])

        began = time.perf_counter()
        recording = recorded.recorded_jobs(read)
        vc = sorted(config.vcs)[0]
        base = whatif.Setting("hived", "hived", config)
        bigger = vc_quota.apply(mapping, [vc_quota.QuotaChange(vc, 10)])
        more = whatif.Setting(f"hived, {vc}=+10nodes", "hived", load_cluster_config(bigger))
        result = whatif.whatif(recording, base, more)
        took = time.perf_counter() - began
        print(
            f"whatif: {took:6.1f} s (jobs extracted, two replays of "
            f"{len(result.baseline.result.jobs):,} jobs)"
        )
        store.dispose()


if __name__ == "__main__":
    main()
