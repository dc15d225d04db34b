"""When will a waiting job start? A forward simulation of the live state, in virtual time.

Pure, like the policies it drives: a fresh policy (the live one's kind and cluster) learns the
live state (nodes down, running jobs adopted where they run, the queue) and is then fed the
``Finish`` events the durations predict, exactly as the simulator feeds it, until every waiting
job has started. It runs three times, with the low, middle and high duration of every job
(p10, p50, p90 of its history, or its declared time limit), which gives each waiting job an
estimated start and a range. Durations come from ``DurationModel``: that user's history of
similar jobs (same GPU count and command name), else the VC's, else the cluster's; a job that
declares a time limit, the share of their limits such jobs used.

An estimate needs grounds: a job with no limit and no history of similar jobs ending (a
notebook server: it ends when its user stops it) has no finite duration to forecast with. Such
a job runs for ever in the forecast; a waiting job that could start only after one of them ends
gets no estimate but the name of what it waits for (``Blocked``), never a guessed time.
"""

from __future__ import annotations

import heapq
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import (
    Adopt,
    Decision,
    Event,
    Finish,
    NodeDown,
    Preempt,
    Scheduler,
    Start,
    Stop,
    Submit,
    TaskPlacement,
    Tick,
    handle_together,
)

#: (low, middle, high) seconds: p10, p50, p90.
Spread = tuple[float, float, float]
#: With no history at all: a guess wide enough to be honest about it (10 min, 1 h, 4 h).
NO_HISTORY: Spread = (600.0, 3600.0, 14400.0)
#: Samples a level of history needs before it is trusted over the next, wider one.
MIN_SAMPLES = 3
#: With a limit but no history of how much of their limits jobs use: any share from a tenth
#: to all of it, evenly (a limit is an upper bound; taken as the run's length it made every
#: range a point at the latest start, which real starts almost always beat: 0% coverage).
PRIOR_SHARES = tuple(i / 10 for i in range(1, 11))
#: Words that run the real program named next ("python train.py" is "train.py").
RUNNERS = frozenset(
    {"python", "python3", "bash", "sh", "srun", "mpirun", "torchrun", "env", "exec"}
)
#: What a running job has left at least, in the forecast: a job still running has not ended
#: now, so nothing behind it starts "now" (a run past its every similar one included).
MIN_LEFT_S = 1.0
#: What a notebook server's command holds (the hub's launcher, as a module or a script, or
#: JupyterHub's own single-user server), for the words only.
SERVER_MARKS = ("hub_extension.launch", "hub_extension/launch.py", "jupyterhub-singleuser")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True, slots=True)
class Estimate:
    """An estimated start (virtual seconds, the live clock's) and its p10-p90 range.

    ``earliest``: the soonest it could start, when it waits for running jobs: its start in a
    run where every running job ends at its shortest (a widened range never reaches below it).
    Not the first of them to end: a whole GPU held by four quarter shares is free only when
    the last of the four ends."""

    eta: float
    low: float
    high: float
    earliest: float = field(default=-math.inf, compare=False)


@dataclass(frozen=True, slots=True)
class Blocked:
    """No estimate: the job starts only after a job with no finite duration ends."""

    waits_for: tuple[str, ...]  # those jobs' ids, the likeliest first


@dataclass(frozen=True, slots=True)
class Outlook:
    """A forecast's answers: estimates where it has grounds, what the others wait for."""

    estimates: dict[str, Estimate]
    blocked: dict[str, Blocked]


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str
    spec: JobSpec
    tasks: tuple[TaskPlacement, ...]
    remaining: Spread  # seconds left, low/middle/high
    opportunistic: bool = False
    downgraded: tuple[tuple[str, int, str], ...] = ()  # tasks opportunistic on their own
    ended: tuple[tuple[str, int], ...] = ()  # tasks of its attempt done already
    grounded: bool = True  # False: no limit, no history (``DurationModel.grounded``)
    soonest: float | None = None  # the least it has left (``DurationModel.soonest``; None: p10)


@dataclass(frozen=True, slots=True)
class WaitingJob:
    job_id: str
    spec: JobSpec
    submitted: float
    duration: Spread
    grounded: bool = True


@dataclass(frozen=True, slots=True)
class Past:
    """One ended run the durations are learnt from."""

    user: str
    vc: str
    gpus: int
    command: str
    seconds: float
    limit: float | None = None  # its declared time limit, if any


def command_name(spec: JobSpec) -> str:
    """The program a job runs, for "similar jobs": the first word, or the script a runner
    (python, bash, torchrun ...) is given."""
    for role in spec.roles:
        for line in role.commands:
            for word in line.replace(";", " ").split():
                name = os.path.basename(word)
                if name in RUNNERS or name.startswith("-") or _ASSIGNMENT.match(word):
                    continue
                return name[:128]
    return ""


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values``, linearly interpolated."""
    pos = (len(values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def spread_of(samples: Iterable[float]) -> Spread:
    values = sorted(samples)
    return (quantile(values, 0.1), quantile(values, 0.5), quantile(values, 0.9))


@dataclass
class DurationModel:
    """Durations of past runs by (GPUs, command) for each user, each VC and the cluster."""

    by_user: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)
    by_vc: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)
    cluster: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    everything: list[float] = field(default_factory=list)
    #: Of jobs that declared a limit: the share of it they ran, by user, by VC, overall.
    used_by_user: dict[str, list[float]] = field(default_factory=dict)
    used_by_vc: dict[str, list[float]] = field(default_factory=dict)
    used: list[float] = field(default_factory=list)

    @classmethod
    def learn(cls, history: Iterable[Past]) -> DurationModel:
        model = cls()
        for p in history:
            model.add(p)
        return model

    def add(self, p: Past) -> None:
        self.by_user.setdefault((p.user, p.gpus, p.command), []).append(p.seconds)
        self.by_vc.setdefault((p.vc, p.gpus, p.command), []).append(p.seconds)
        self.cluster.setdefault((p.gpus, p.command), []).append(p.seconds)
        self.everything.append(p.seconds)
        if p.limit:
            share = min(1.0, p.seconds / p.limit)
            self.used_by_user.setdefault(p.user, []).append(share)
            self.used_by_vc.setdefault(p.vc, []).append(share)
            self.used.append(share)

    def predict(self, spec: JobSpec, user: str, elapsed: float = 0.0) -> Spread:
        """Seconds left of a run ``elapsed`` seconds in (0: not started), low/middle/high.

        A job with a declared limit runs the share of its limit that jobs with limits used
        (that user's, else the VC's, else everyone's; the limit itself with no such history):
        users overestimate, each by their own habit. Without a limit: the durations of similar
        jobs, else ``NO_HISTORY``. A run already ``elapsed`` in is predicted from the runs that
        lasted longer (durations are heavy-tailed: a long run is likely to run longer still)."""
        left = self._left(spec, user, elapsed)
        return left if isinstance(left, tuple) else spread_of(left)

    def soonest(self, spec: JobSpec, user: str, elapsed: float = 0.0) -> float:
        """The least a run ``elapsed`` seconds in has left, by the same history as
        ``predict``: the shortest of the similar runs that lasted longer (else its low)."""
        left = self._left(spec, user, elapsed)
        return left[0] if isinstance(left, tuple) else min(left)

    def _left(self, spec: JobSpec, user: str, elapsed: float) -> list[float] | Spread:
        """What similar runs had left at ``elapsed`` (samples), or a spread where there are
        too few (``NO_HISTORY``, or a run that outlived them)."""
        limit = spec.time_limit
        if limit is not None:
            shares = _first_enough(
                (self.used_by_user.get(user), self.used_by_vc.get(spec.vc), self.used)
            )
            samples = [limit * x for x in (PRIOR_SHARES if shares is None else shares)]
        else:
            key = (spec.total_gpus, command_name(spec))
            levels = (
                self.by_user.get((user, *key)),
                self.by_vc.get((spec.vc, *key)),
                self.cluster.get(key),
                self.everything,
            )
            found = _first_enough(levels)
            if found is None:  # a guess, not samples: shifted, never re-quantiled
                low, mid, high = (x - elapsed for x in NO_HISTORY)
                return (low, mid, high) if low > 0 else _outlived(elapsed, None)
            samples = found
        left = [x - elapsed for x in samples if x > elapsed]
        if left and (len(left) >= MIN_SAMPLES or elapsed <= 0):
            return left
        return _outlived(elapsed, limit)

    def grounded(self, spec: JobSpec, user: str) -> bool:
        """Whether the job's duration has grounds: a declared limit (an upper bound), or the
        history of similar jobs (same GPUs and program: the user's, the VC's, the cluster's).
        The durations of all jobs together are no grounds for a job unlike any that ended:
        a notebook server's "about an hour, like the jobs" was a guess shown as a forecast."""
        if spec.time_limit is not None:
            return True
        key = (spec.total_gpus, command_name(spec))
        levels = (
            self.by_user.get((user, *key)),
            self.by_vc.get((spec.vc, *key)),
            self.cluster.get(key),
        )
        return _first_enough(levels) is not None


def is_server(spec: JobSpec) -> bool:
    """A notebook server (by its program), for the words of what a job waits for."""
    return any(
        mark in line for role in spec.roles for line in role.commands for mark in SERVER_MARKS
    )


def _outlived(elapsed: float, limit: float | None) -> Spread:
    """A run past every similar one: up to its limit when it has one, else as long again."""
    if limit is not None:
        rest = max(limit - elapsed, 1.0)
        return (0.1 * rest, 0.5 * rest, rest)
    return (0.1 * elapsed, elapsed, 3 * elapsed)


def _first_enough(levels: Iterable[list[float] | None]) -> list[float] | None:
    """The narrowest level of history with enough samples to trust."""
    for samples in levels:
        if samples and len(samples) >= MIN_SAMPLES:
            return samples
    return None


def forecast(
    make_scheduler: Callable[[], Scheduler],
    now: float,
    running: Sequence[RunningJob],
    waiting: Sequence[WaitingJob],
    down: dict[str, str] | None = None,
    max_steps: int = 100_000,
) -> dict[str, Estimate]:
    """Each waiting job's estimated start where the forecast has grounds; jobs that never
    start in it, or only once a job with no finite duration ended, are left out (``outlook``
    says what the latter wait for; the why-text why the former cannot run)."""
    return outlook(make_scheduler, now, running, waiting, down, max_steps).estimates


def outlook(
    make_scheduler: Callable[[], Scheduler],
    now: float,
    running: Sequence[RunningJob],
    waiting: Sequence[WaitingJob],
    down: dict[str, str] | None = None,
    max_steps: int = 100_000,
) -> Outlook:
    """Three forward runs (every duration at its p10, p50, p90) in which the jobs without
    grounds never end, and one in which the running jobs end at their shortest (only when that
    is shorter than their p10: the earliest starts); a job that does not start in the middle
    one waits for one of them, named from a further run in which they end at their guessed
    durations (only when some job is left)."""
    down = down or {}
    runs = [
        _starts(make_scheduler, now, running, waiting, down, which, max_steps)[0]
        for which in range(3)
    ]
    first_end = now + min(
        (max(MIN_LEFT_S, _soonest(r)) for r in running if r.grounded), default=math.inf
    )
    soonest_run = runs[0]  # (that run, when no running job can end before its p10)
    if any(r.grounded and _soonest(r) < r.remaining[0] for r in running):
        soonest_run, _ = _starts(
            make_scheduler, now, running, waiting, down, 0, max_steps, soon=True
        )
    estimates: dict[str, Estimate] = {}
    left: list[WaitingJob] = []
    for w in waiting:
        times = [r.get(w.job_id) for r in runs]
        if times[1] is None:
            left.append(w)
            continue
        known = [t for t in times if t is not None]
        low = min(known)
        floor = now
        if low > now:  # the job's own start when every running job ends at its soonest
            floor = min(low, max(first_end, soonest_run.get(w.job_id, first_end)))
        estimates[w.job_id] = Estimate(times[1], low, max(known), floor)
    blocked: dict[str, Blocked] = {}
    unfounded = {r.job_id for r in running if not r.grounded}
    unfounded |= {w.job_id for w in waiting if not w.grounded}
    if left and unfounded:
        starts, ended = _starts(make_scheduler, now, running, waiting, down, 1, max_steps, True)
        vcs = {r.job_id: r.spec.vc for r in running} | {w.job_id: w.spec.vc for w in waiting}
        for w in left:
            if (start := starts.get(w.job_id)) is not None:
                blockers = _blockers(w, start, ended, unfounded, vcs)
                if blockers:
                    blocked[w.job_id] = Blocked(blockers)
    return Outlook(estimates, blocked)


def _soonest(r: RunningJob) -> float:
    """The least a running job has left: its ``soonest``, else its low (p10)."""
    return r.remaining[0] if r.soonest is None else r.soonest


def _blockers(
    job: WaitingJob,
    start: float,
    ended: list[tuple[float, str]],
    unfounded: set[str],
    vcs: dict[str, str],
) -> tuple[str, ...]:
    """The jobs without grounds that ended before ``job`` started when they were given
    guessed durations: those of its own VC first, then the last to end (the likeliest to
    have freed what it needed) first."""
    found = [(t, j) for t, j in ended if t <= start and j in unfounded and j != job.job_id]
    found.sort(key=lambda x: (vcs.get(x[1]) != job.spec.vc, -x[0]))
    return tuple(dict.fromkeys(j for _, j in found))


def _starts(
    make_scheduler: Callable[[], Scheduler],
    now: float,
    running: Sequence[RunningJob],
    waiting: Sequence[WaitingJob],
    down: dict[str, str],
    which: int,
    max_steps: int,
    guess: bool = False,
    soon: bool = False,
) -> tuple[dict[str, float], list[tuple[float, str]]]:
    """One forward run with every duration at its ``which`` quantile: job -> first start,
    and the ends in order. A job without grounds never ends, unless ``guess``; with ``soon``
    every running job ends at the least it has left (``RunningJob.soonest``)."""
    sched = make_scheduler()
    durations = {
        r.job_id: max(MIN_LEFT_S, _soonest(r) if soon else r.remaining[which])
        if r.grounded or guess
        else math.inf
        for r in running
    }
    durations.update(
        (w.job_id, w.duration[which] if w.grounded or guess else math.inf) for w in waiting
    )
    ends: list[tuple[float, int, str]] = []  # (end, run number, job)
    runs: dict[str, int] = {}  # job -> its run number, while it runs
    started: dict[str, float] = {}
    ended: list[tuple[float, str]] = []
    pending = {w.job_id for w in waiting}
    count = 0

    def apply(decisions: list[Decision], t: float) -> None:
        nonlocal count
        for d in decisions:
            if isinstance(d, Start) and d.job_id not in runs:  # (not an incremental job growing)
                count += 1
                runs[d.job_id] = count
                if d.job_id in pending:
                    started[d.job_id] = t
                    pending.discard(d.job_id)
                heapq.heappush(ends, (t + durations[d.job_id], count, d.job_id))
            elif isinstance(d, Preempt | Stop):
                runs.pop(d.job_id, None)  # back in the queue; its next start runs it whole

    first: list[Event] = []
    for r in running:
        first.append(Adopt(r.job_id, r.spec, r.tasks, r.opportunistic, now, r.downgraded, r.ended))
        count += 1
        runs[r.job_id] = count
        heapq.heappush(ends, (now + durations[r.job_id], count, r.job_id))
    first += [NodeDown(node, now, why) for node, why in down.items()]
    # Waiting jobs were checked when they were submitted, against this same cluster.
    first += [Submit(w.job_id, w.spec, min(w.submitted, now), admitted=True) for w in waiting]
    apply(_handle(sched, first), now)
    last = now
    for _ in range(max_steps):
        if not pending:
            break
        t = ends[0][0] if ends else math.inf
        wake = sched.next_wakeup()
        ticks = wake is not None and last < wake <= t
        if ticks:
            t = wake  # type: ignore[assignment]
        if math.isinf(t):
            break  # nothing ends and nothing wakes: the rest never start
        batch: list[Event] = []
        while ends and ends[0][0] <= t:
            _, run, job_id = heapq.heappop(ends)
            if runs.get(job_id) == run:
                del runs[job_id]
                batch.append(Finish(job_id, t))
                ended.append((t, job_id))
        if ticks:
            batch.append(Tick(t))
        apply(_handle(sched, batch), t)
        last = t
    return started, ended


def _handle(sched: Scheduler, events: list[Event]) -> list[Decision]:
    """Adopts one by one (they place nothing), the rest as one instant."""
    out: list[Decision] = []
    rest: list[Event] = []
    for ev in events:
        if isinstance(ev, Adopt | NodeDown):
            out += sched.handle(ev)
        else:
            rest.append(ev)
    if rest:
        out += handle_together(sched, rest)
    return out


def blocked_text(blockers: Sequence[JobSpec]) -> str:
    """What a job with no estimate waits for, in words: "a notebook server in VC default to
    stop" (``blockers``: the ``Blocked`` jobs' specs, the likeliest first)."""
    first = blockers[0]
    what = (
        f"a notebook server in VC {first.vc} to stop"
        if is_server(first)
        else f"a job in VC {first.vc} with no time limit and no history of jobs like it to end"
    )
    others = len(blockers) - 1
    return what + (f" (or {others} other{'s' if others > 1 else ''} like it)" if others else "")
