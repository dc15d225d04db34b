"""How good are the ETAs? Replay a trace through the simulator and, at each submission of a job
that has to wait, forecast its start from the state at that moment, as the service would; then
compare with when it really started in the replay.

The forecast knows only what the service knows: running jobs' elapsed time, the queue, and the
durations of the jobs that already ended (the history it learns from, as it goes); never a
job's real duration. With ``limits``, every job declares a time limit of its real duration
times a random overestimate (users overestimate), which caps the predicted durations.

Each range is scored twice: as the forecast gave it (raw) and as the service shows it, widened
or narrowed by the split-conformal margin learnt from the starts seen so far
(``eta_calibration``); jobs whose start depends on a job with no grounds get no estimate and
are counted apart (``blocked``).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Scheduler
from labhive.scheduler.core.states import JobState
from labhive.scheduler.forecast.eta import (
    DurationModel,
    Estimate,
    Past,
    RunningJob,
    WaitingJob,
    command_name,
    outlook,
    quantile,
)
from labhive.scheduler.forecast.eta_calibration import Calibrator, Outcome
from labhive.scheduler.policies import get_policy
from labhive.scheduler.sim.engine import SimJob, Simulation

#: Users' overestimate of their jobs' durations: limit = duration x uniform(low, high).
OVERESTIMATE = (1.0, 3.0)


@dataclass(frozen=True, slots=True)
class EtaScore:
    """Accuracy over the jobs that waited and then started."""

    jobs: int
    median_abs_error_s: float
    p90_abs_error_s: float
    coverage: float  # share of starts inside the predicted p10-p90 range
    median_width_s: float = 0.0  # the ranges' median width (high - low)
    blocked: int = 0  # waiting jobs given no estimate: they waited for a job with no grounds


def with_limits(
    jobs: Sequence[SimJob], seed: int = 0, factor: tuple[float, float] = OVERESTIMATE
) -> list[SimJob]:
    """Fresh jobs that declare limits: duration x a random overestimate (at least a second)."""
    rng = random.Random(seed)
    out = []
    for j in jobs:
        limit = max(1.0, j.duration * rng.uniform(*factor))
        spec = dataclasses.replace(j.spec, time_limit=limit)
        out.append(fresh(j, spec))
    return out


def fresh(j: SimJob, spec: JobSpec | None = None) -> SimJob:
    """A SimJob records one run: a copy to replay again."""
    return SimJob(j.job_id, spec or j.spec, j.submit, j.duration, j.vc, j.user, j.status)


@dataclass(frozen=True, slots=True)
class Replayed:
    """A replay's ETAs: each estimated job's raw and shown (calibrated) estimate and start."""

    raw: EtaScore
    calibrated: EtaScore
    pairs: dict[str, tuple[Estimate, float]]  # raw
    shown: dict[str, tuple[Estimate, float]]  # calibrated


def replay_etas(
    policy: str, config: ClusterConfig, jobs: Sequence[SimJob]
) -> tuple[EtaScore, dict[str, tuple[Estimate, float]]]:
    """Replay ``jobs`` under ``policy``; each waiting job's raw estimate at submit and start."""
    got = replay(policy, config, jobs)
    return got.raw, got.pairs


def replay(policy: str, config: ClusterConfig, jobs: Sequence[SimJob]) -> Replayed:
    """Replay ``jobs`` under ``policy``, forecasting each waiting job's start at its submit
    (raw, and calibrated from the starts of the jobs estimated before it)."""
    make: Callable[[], Scheduler] = lambda: get_policy(policy, config)  # noqa: E731
    by_name = {j.spec.name: j for j in jobs}
    model = DurationModel()
    given: dict[str, tuple[float, Estimate, Estimate]] = {}  # at, raw, shown
    blocked: set[str] = set()

    def outcomes(sim: Simulation) -> list[Outcome]:
        """The first estimates given so far, with the starts known by now."""
        out = []
        for job_id, (at, raw, _) in given.items():
            j = sim.sim_jobs[job_id]
            start = (
                j.first_start if j.first_start is not None and j.first_start <= sim.now else None
            )
            out.append(Outcome(j.spec.vc, at, raw.low, raw.high, start))
        return out

    def observe(sim: Simulation, label: str) -> None:
        name, _, what = label.rpartition(" ")
        if what in ("finished", "failed") and name in by_name:
            j = by_name[name]
            if j.end is not None and j.first_start is not None:
                model.add(
                    Past(
                        j.user,
                        j.spec.vc,
                        j.gpus,
                        command_name(j.spec),
                        j.duration,
                        j.spec.time_limit,
                    )
                )
        if label.endswith(" submitted"):
            waiting = by_name.get(label.removesuffix(" submitted"))
            if waiting is not None and waiting.state == JobState.WAITING:
                found = outlook(make, sim.now, *_state(sim, model))
                raw = found.estimates.get(waiting.job_id)
                if raw is not None:
                    shown = Calibrator(outcomes(sim)).adjust(waiting.spec.vc, sim.now, raw)
                    given[waiting.job_id] = (sim.now, raw, shown)
                elif waiting.job_id in found.blocked:
                    blocked.add(waiting.job_id)

    sim = Simulation(make(), sorted(jobs, key=lambda j: j.submit), total_gpus=config.total_gpus())
    sim.observe = observe
    result = sim.run()
    started = {j.job_id: j.first_start for j in result.jobs if j.first_start is not None}
    raw = {k: (e, started[k]) for k, (_, e, _) in given.items() if k in started}
    shown = {k: (e, started[k]) for k, (_, _, e) in given.items() if k in started}
    stuck = len(blocked & set(started))
    return Replayed(
        dataclasses.replace(score(raw.values()), blocked=stuck),
        dataclasses.replace(score(shown.values()), blocked=stuck),
        raw,
        shown,
    )


def _state(sim: Simulation, model: DurationModel) -> tuple[list[RunningJob], list[WaitingJob]]:
    running, waiting = [], []
    for v in sim.scheduler.jobs():
        j = sim.sim_jobs[v.job_id]
        if v.state == JobState.RUNNING:
            left = model.predict(j.spec, j.user, sim.now - j.run_start)
            grounded = model.grounded(j.spec, j.user)
            soonest = model.soonest(j.spec, j.user, sim.now - j.run_start)
            running.append(
                RunningJob(
                    *(v.job_id, j.spec, v.tasks, left, v.opportunistic, v.downgraded, ()),
                    grounded,
                    soonest,
                )
            )
        else:
            spread, grounded = model.predict(j.spec, j.user), model.grounded(j.spec, j.user)
            waiting.append(WaitingJob(v.job_id, j.spec, j.submit, spread, grounded))
    return running, waiting


def score(pairs: Iterable[tuple[Estimate, float]]) -> EtaScore:
    items = list(pairs)
    if not items:
        return EtaScore(0, 0.0, 0.0, 0.0)
    errors = sorted(abs(start - e.eta) for e, start in items)
    inside = sum(1 for e, start in items if e.low - 1e-6 <= start <= e.high + 1e-6)
    widths = sorted(e.high - e.low for e, _ in items)
    return EtaScore(
        len(items),
        quantile(errors, 0.5),
        quantile(errors, 0.9),
        inside / len(items),
        quantile(widths, 0.5),
    )
