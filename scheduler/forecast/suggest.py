"""What would start a waiting job now? Changes to the job, each tried against the live state.

Pure, on top of the ETA forecast (``eta.py``): each variant of the job (fewer GPUs per task,
fewer tasks, another VC the user may use, opportunistic priority, a shorter time limit) takes
the job's place in the queue and the forecast says when it would start. The variants that
would start within the horizon come first, smallest change first. A change is offered only if
it starts the job sooner than it starts unchanged, by a margin (``SOONER_BY_S``, or a tenth of
the wait): "--gpus 1 to start it now" with the job's own ETA was advice that changed nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from labhive.scheduler.core.gpu_share import MILLI, SHARES_MILLI
from labhive.scheduler.core.jobs import OPPORTUNISTIC, JobSpec
from labhive.scheduler.core.model import Scheduler
from labhive.scheduler.core.time_limits import show_duration
from labhive.scheduler.forecast.eta import Estimate, RunningJob, Spread, WaitingJob, forecast

#: "Starts now" means within this many seconds.
HORIZON_S = 300.0
#: A change must start the job at least this much sooner (or a tenth of its wait, if more)
#: than it starts unchanged: a forecast's start is no finer than that.
SOONER_BY_S = 60.0
SOONER_SHARE = 0.1
#: Time limits tried, longest first (the smallest change): a queue policy with backfill lets a
#: job past the blocked head of its line only when its limit ends before the head could start.
LIMIT_STEPS_S = (7200.0, 3600.0, 1800.0, 600.0)
LIMIT_RISK = "the job is stopped when it reaches the limit"
SHARE_RISK = (
    "the job shares its GPU with other jobs: time-sliced, and its memory is not divided unless "
    "the admin turned on CUDA MPS"
)


@dataclass(frozen=True, slots=True)
class Suggestion:
    change: str  # in words: "ask for 2 GPUs per task instead of 4"
    flags: str  # the submit flags that make it: "--gpus 2"
    eta: float
    eta_low: float
    eta_high: float
    soon: bool  # starts within the horizon
    risk: str = ""  # what the change costs ("preemptible ...")


def variants(spec: JobSpec, vcs: Iterable[str]) -> list[tuple[str, str, str, JobSpec]]:
    """(change, flags, risk, variant) for one-role jobs, smallest change first."""
    if len(spec.roles) != 1:
        return []
    role = spec.roles[0]
    out = []
    gpus = role.gpu // 2
    while gpus >= 1:
        smaller = dataclasses.replace(spec, roles=(dataclasses.replace(role, gpu=gpus),))
        out.append((f"ask for {gpus} GPUs per task instead of {role.gpu}", f"--gpus {gpus}", "",
                    smaller))  # fmt: skip
        gpus //= 2
    tasks = role.instances // 2
    while tasks >= 1:
        fewer = dataclasses.replace(spec, roles=(dataclasses.replace(role, instances=tasks),))
        out.append((f"run {tasks} tasks instead of {role.instances}", f"--tasks {tasks}", "",
                    fewer))  # fmt: skip
        tasks //= 2
    out.extend(share_variants(spec))
    for vc in sorted(set(vcs) - {spec.vc}):
        out.append((f"submit to VC {vc}", f"--vc {vc}", "", dataclasses.replace(spec, vc=vc)))
    if spec.priority != OPPORTUNISTIC:
        out.append((
            "run it opportunistically, on any VC's idle GPUs", "--priority oppo",
            "preemptible: a guaranteed job that needs those GPUs stops it (it is requeued)",
            dataclasses.replace(spec, priority=OPPORTUNISTIC),
        ))  # fmt: skip
    return out


def share_variants(spec: JobSpec) -> list[tuple[str, str, str, JobSpec]]:
    """A one-task job of one whole GPU as a half, quarter or eighth of one: a share joins a
    GPU that other shares of its VC hold, where a whole GPU waits for the last of them to end
    (``gpu_share``; a policy that places no shares refuses the variant at its check)."""
    role = spec.roles[0]
    if spec.task_count != 1 or role.gpu != 1 or role.share_milli or spec.lazy_preemption:
        return []
    out = []
    for milli in SHARES_MILLI:
        amount = f"{milli / MILLI:g}"
        share = dataclasses.replace(role, share_milli=milli)
        out.append((f"ask for a share of {amount} GPU instead of a whole GPU", f"--gpus {amount}",
                    SHARE_RISK, dataclasses.replace(spec, roles=(share,))))  # fmt: skip
    return out


def shorter_limits(spec: JobSpec) -> list[tuple[str, str, str, JobSpec]]:
    """(change, flags, risk, variant) with a declared limit shorter than today's (or any)."""
    out = []
    for seconds in LIMIT_STEPS_S:
        if spec.time_limit is not None and seconds >= spec.time_limit:
            continue
        shown = show_duration(seconds)
        change = (
            f"declare a time limit of {shown}"
            if spec.time_limit is None
            else f"shorten its time limit to {shown} (from {show_duration(spec.time_limit)})"
        )
        flag = f"{seconds / 3600:g}h" if seconds % 3600 == 0 else f"{seconds / 60:g}m"
        variant = dataclasses.replace(spec, time_limit=seconds)
        out.append((change, f"--time {flag}", LIMIT_RISK, variant))
    return out


def suggest(
    make_scheduler: Callable[[], Scheduler],
    now: float,
    running: Sequence[RunningJob],
    waiting: Sequence[WaitingJob],
    job_id: str,
    vcs: Iterable[str],
    down: dict[str, str] | None = None,
    horizon_s: float = HORIZON_S,
    check: Callable[[JobSpec], None] | None = None,
) -> list[Suggestion]:
    """The job's variants that the policy accepts (``check``: its admission, by default a
    fresh policy's check) and that start it sooner than it starts unchanged (``sooner``),
    each with its forecast start; those that start within ``horizon_s`` first (in the order of
    ``variants``), then the rest by start."""
    target = next((w for w in waiting if w.job_id == job_id), None)
    if target is None:
        return []
    check = check or make_scheduler().check
    own = forecast(make_scheduler, now, running, waiting, down).get(job_id)
    out = []
    for change, flags, risk, spec in variants(target.spec, vcs):
        try:
            check(spec)
        except ValueError:
            continue  # can never run on this cluster: no suggestion
        found = _start_of(make_scheduler, now, running, waiting, target, spec, down)
        if found is None or not sooner(found, own, now):
            continue
        soon = found.eta - now <= horizon_s
        out.append(Suggestion(change, flags, found.eta, found.low, found.high, soon, risk))
    limits = _limit_suggestions(make_scheduler, now, running, waiting, target, down, horizon_s)
    out.extend(s for s in limits if sooner(Estimate(s.eta, s.eta_low, s.eta_high), own, now))
    first = [s for s in out if s.soon]
    return first + sorted((s for s in out if not s.soon), key=lambda s: s.eta)


def sooner(variant: Estimate, own: Estimate | None, now: float) -> bool:
    """Whether a variant starts the job sooner than it starts unchanged (``own``; None: no
    estimate, so any estimated start is sooner), by ``SOONER_BY_S`` or a tenth of the wait."""
    if own is None:
        return True
    margin = max(SOONER_BY_S, SOONER_SHARE * (own.eta - now))
    return variant.eta <= own.eta - margin


def _limit_suggestions(
    make_scheduler: Callable[[], Scheduler],
    now: float,
    running: Sequence[RunningJob],
    waiting: Sequence[WaitingJob],
    target: WaitingJob,
    down: dict[str, str] | None,
    horizon_s: float,
) -> list[Suggestion]:
    """The longest shorter limit that starts the job within the horizon (a limit that does
    not start it sooner is no help, so only one that does is offered). The job then runs at
    most that long, so its forecast durations are capped there."""
    for change, flags, risk, spec in shorter_limits(target.spec):
        low, mid, high = (min(d, spec.time_limit or d) for d in target.duration)
        found = _start_of(
            make_scheduler, now, running, waiting, target, spec, down, (low, mid, high), True
        )
        if found is not None and found.eta - now <= horizon_s:
            return [Suggestion(change, flags, found.eta, found.low, found.high, True, risk)]
    return []


def _start_of(
    make_scheduler: Callable[[], Scheduler],
    now: float,
    running: Sequence[RunningJob],
    waiting: Sequence[WaitingJob],
    target: WaitingJob,
    spec: JobSpec,
    down: dict[str, str] | None,
    duration: Spread | None = None,
    limited: bool = False,
) -> Estimate | None:
    """The forecast start of ``target`` if it were ``spec`` (and ran ``duration``; with a
    limit, ``limited``, it has grounds), in its place in the queue; None when it never starts
    in the forecast."""
    variant = dataclasses.replace(
        target,
        spec=spec,
        duration=duration or target.duration,
        grounded=target.grounded or limited,
    )
    queue = [variant if w is target else w for w in waiting]
    return forecast(make_scheduler, now, running, queue, down).get(target.job_id)


def splits(spec: JobSpec) -> list[tuple[str, str, str, JobSpec]]:
    """The same GPUs in more, smaller tasks (a one-role job): 16 GPUs x 1 task -> 8 x 2, ..."""
    if len(spec.roles) != 1:
        return []
    role = spec.roles[0]
    out = []
    parts = 2
    while parts <= role.gpu:
        if role.gpu % parts == 0:
            gpus, tasks = role.gpu // parts, role.instances * parts
            split = dataclasses.replace(role, gpu=gpus, instances=tasks)
            out.append((f"ask for {gpus} GPUs per task and {tasks} tasks",
                        f"--gpus {gpus} --tasks {tasks}", "",
                        dataclasses.replace(spec, roles=(split,))))  # fmt: skip
        parts *= 2
    return out


def runnable(
    spec: JobSpec, vcs: Iterable[str], check: Callable[[JobSpec], None]
) -> tuple[str, str, str] | None:
    """The smallest change (change, flags, risk) that makes a job ``check`` refuses as never
    runnable one it accepts: the same GPUs split into more tasks first (nothing lost), then the
    changes ``variants`` tries; None when none does (or the job has several roles)."""
    for change, flags, risk, variant in (*splits(spec), *variants(spec, vcs)):
        try:
            check(variant)
        except ValueError:
            continue
        return change, flags, risk
    return None


def with_remedy(
    message: str, spec: JobSpec, vcs: Iterable[str], check: Callable[[JobSpec], None]
) -> str:
    """A refusal's message followed by what would make the job runnable, when something does."""
    found = runnable(spec, vcs, check)
    if found is None:
        return message
    change, flags, risk = found
    return f"{message.rstrip('.')}. It would run if you {change} ({flags})" + (
        f"; {risk}" if risk else ""
    )
