"""One simulation run per policy: load once, replay the same jobs under each policy."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sized
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.jobs import PRIORITY_CLASSES
from labhive.scheduler.drivers.replay import scenario_action
from labhive.scheduler.drivers.scenario import Scenario
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimResult, Simulation
from labhive.scheduler.sim.metrics import summarize
from labhive.scheduler.sim.traces import TraceJob
from labhive.scheduler.sim.workload import iter_sim_jobs


def parse_policy(text: str) -> tuple[str, dict[str, str]]:
    """``NAME`` or ``NAME:key=value,key=value`` (as ``--policy`` takes it)."""
    name, _, rest = text.partition(":")
    options: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UserError(f"policy option {item!r} in {text!r} should be key=value")
        options[key.strip()] = value.strip()
    return name.strip(), options


@dataclass
class PolicyRun:
    label: str
    result: SimResult
    summary: dict[str, Any]
    left_out: Counter[str] = field(default_factory=Counter)


def run_policy(
    policy: str,
    config: ClusterConfig,
    trace_jobs: Iterable[TraceJob],
    *,
    locality: str | None = None,
    checkpoint: float | None = None,
    restart_cost: float = 0.0,
    priority: int = PRIORITY_CLASSES["prod"],
    sample: float | None = None,
    seed: int = 0,
    progress: bool = False,
    observe: Callable[..., None] | None = None,
    keep_jobs: bool = True,
) -> PolicyRun:
    """Replay ``trace_jobs`` (a list or a stream, in submit order) under ``policy``.
    ``keep_jobs=False`` keeps only each job's figures, not the job (``result.jobs`` is empty):
    what a million-job run needs, when no per-job output is asked for."""
    name, options = parse_policy(policy)
    if locality is not None and name != "hived":
        options.setdefault("locality", locality)
    scheduler = get_policy(name, config, **options)
    left_out: Counter[str] = Counter()  # filled as the jobs stream in
    jobs = iter_sim_jobs(trace_jobs, config, left_out, priority=priority, sample=sample, seed=seed)
    total = len(trace_jobs) if isinstance(trace_jobs, Sized) else None
    report = ProgressReport(total, policy, quiet=not progress)
    sim = Simulation(
        scheduler,
        jobs,
        total_gpus=config.total_gpus(),
        checkpoint=checkpoint,
        restart_cost=restart_cost,
        progress=report.update if report.bar is not None else None,  # (no bar: no counting)
        observe=observe,
        keep_jobs=keep_jobs,
    )
    started = time.perf_counter()
    try:
        result = sim.run()
    finally:
        report.total = len(sim.table)  # the jobs replayed (the bar counted the trace's)
        report.close(time.perf_counter() - started)
    summary = summarize(result)
    summary["policy"] = policy
    return PolicyRun(policy, result, summary, left_out)


def run_scenario(
    policy: str,
    scenario: Scenario,
    *,
    checkpoint: float | None = None,
    observe: Callable[..., None] | None = None,
) -> PolicyRun:
    """A scenario file's events, on the simulator: the same actions ``labhive replay`` takes,
    scheduled on the simulator's clock (one core, two drivers, the same placements)."""
    name, options = parse_policy(policy)
    scheduler = get_policy(name, scenario.cluster, **options)
    sim = Simulation(
        scheduler,
        [],
        total_gpus=scenario.cluster.total_gpus(),
        checkpoint=checkpoint,
        observe=observe,
    )
    for event in scenario.events:
        sim.at(event.at, scenario_action(sim, event))
    result = sim.run()
    summary = summarize(result)
    summary["policy"] = policy
    return PolicyRun(policy, result, summary)


class ProgressReport:
    """Progress of one policy's run: a tqdm bar on a terminal, else one line when it ends
    (never both, nothing with ``quiet``), on stderr so stdout stays the result."""

    def __init__(self, total: int | None, label: str, *, quiet: bool = False) -> None:
        self.total = total
        self.label = label
        self.quiet = quiet
        self.bar: Any = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="job", file=sys.stderr, leave=False)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self, seconds: float) -> None:
        if self.bar is not None:
            self.bar.close()
        if not self.quiet:
            print(
                f"simulate: {self.label}: {self.total or 0:,} jobs in {seconds:.1f} s",
                file=sys.stderr,
                flush=True,
            )


def progress_reporter(total: int, label: str, *, quiet: bool = False) -> ProgressReport:
    return ProgressReport(total, label, quiet=quiet)
