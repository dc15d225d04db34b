"""The service's ETAs: forecast from the live state after every pass that changed it, and kept
to account.

A thread of its own (never the scheduling pass, whose speed submissions depend on) wakes when the
loop changed the store, reads the policy's jobs and the store's history, runs the pure forecast
(``scheduler/forecast/eta.py``) and publishes the waiting jobs' estimates on the loop, where the
REST handlers read them. Each waiting job's first estimate is stored (``job_etas``); when the job
starts, its error and whether the start fell in the range are stored beside it, for ``/metrics`` and
``labhive eta-report``.

Only grounded estimates are published: a job whose start waits on one with no finite duration
(a notebook server, a job with no limit and no history of jobs like it) gets ``waits_for`` (what
it waits for, in words) instead. The ranges published are calibrated (``eta_calibration``) from
the VC's own outcomes; ``job_etas`` keeps the forecast's raw range, which the calibration
learns from, and scores a start against the range as shown (recomputed from the raw range and
what was known when it was given: the same history gives the same range).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import Scheduler
from labhive.scheduler.forecast.eta import (
    DurationModel,
    Estimate,
    Outlook,
    Past,
    RunningJob,
    WaitingJob,
    blocked_text,
    command_name,
    outlook,
)
from labhive.scheduler.forecast.eta_calibration import Calibrator, Outcome
from labhive.scheduler.forecast.suggest import Suggestion, suggest
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import policy_port as port
from labhive.scheduler.service.store import Store, etas

log = logging.getLogger(__name__)

#: Ended runs the durations are learnt from (the newest).
HISTORY = 2000
#: Waiting jobs forecast, the first in queue order (a flood of submissions must not make each
#: forecast cost grow without bound); the rest get no estimate until they move up.
MAX_WAITING = 500
#: The thread's share of one core at most: after a forecast that took d seconds it waits
#: max(MIN_GAP_S, d / DUTY - d), so a long queue never starves the scheduling pass. At 5% it
#: took 9% of the service's CPU under a submission flood (the service is held to about half a
#: core by the GIL); at 2%, 1.6% over 40 s (``benchmarks/bench_eta_cost.py``).
DUTY = 0.02
MIN_GAP_S = 2.0
#: First estimates the calibration reads: the newest started, and the newest still waiting.
CALIBRATION_ROWS = 4000


@dataclass(frozen=True, slots=True)
class WaitsFor:
    """A waiting job with no estimate: what it waits for, in words (``eta.blocked_text``)."""

    text: str


def eta_fields(found: Estimate | WaitsFor | None) -> dict[str, Any]:
    """A job's (or queue entry's) REST fields from what the forecast published for it."""
    if isinstance(found, Estimate):
        return {"eta": found.eta, "eta_low": found.low, "eta_high": found.high}
    if isinstance(found, WaitsFor):
        return {"waits_for": found.text}
    return {}


class EtaTracker:
    def __init__(
        self,
        store: Store,
        loop: Any,
        make_scheduler: Callable[[], Scheduler],
        load_spec: Callable[[dict[str, Any]], JobSpec],
        *,
        clock: Callable[[], float] = time.time,
        refresh_s: float = 30.0,
        check: Callable[[JobSpec], None] | None = None,
    ) -> None:
        self.store = store
        self.loop = loop
        self.make_scheduler = make_scheduler
        self.check = check  # admission (``policies.admission``), for suggestions' variants
        self.load_spec = load_spec
        self.clock = clock
        self.refresh_s = refresh_s  # recomputed this often even when nothing changed (time runs)
        self._commands: dict[int, tuple[str, float | None]] = {}  # ended jobs' (see _learnt)
        self._thread: threading.Thread | None = None
        #: When the next forecast is due although nothing changed: the soonest low end
        #: published (past it, that job's range is overtaken by time).
        self.due = math.inf
        #: What the thread cost (on /metrics): forecasts run and their CPU seconds.
        self.forecasts = 0
        self.cpu_s = 0.0
        #: Waiting jobs' estimated starts, replaced whole by each forecast (the loop shows them).
        self.estimates: dict[int, Estimate | WaitsFor] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="labhive-eta", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seen, last, gap = -1, 0.0, 0.0
        while not self.loop.stopping:
            with self.loop.changed:
                self.loop.changed.wait(1.0)
            now = self.clock()
            if now - last < gap:
                continue
            if self.loop.passes == seen and now - last < self.refresh_s and now < self.due:
                continue
            seen, last = self.loop.passes, now
            began, cpu = time.perf_counter(), time.thread_time()
            try:
                self.update()
            except Exception as err:  # an estimate is a courtesy: never kill the thread
                log.warning("could not compute ETAs (%s: %s)", type(err).__name__, err)
            took = time.perf_counter() - began
            self.forecasts += 1
            self.cpu_s += time.thread_time() - cpu
            gap = max(MIN_GAP_S, took / DUTY - took)

    def update(self) -> dict[int, Estimate | WaitsFor]:
        """Forecast now, publish on the loop, and record first estimates and start errors."""
        now = self.clock()
        running, waiting, down = self.state(now, MAX_WAITING)
        found = outlook(self.make_scheduler, now, running, waiting, down)
        vcs = {w.job_id: w.spec.vc for w in waiting}
        calibrator = Calibrator(self._outcomes())
        shown: dict[str, Estimate | WaitsFor] = {
            j: calibrator.adjust(vcs[j], now, e) for j, e in found.estimates.items()
        }
        shown.update(_waits(found, running, waiting))
        published = port.by_service_id(shown)
        self.estimates = published
        lows = (e.low for e in shown.values() if isinstance(e, Estimate) and e.low > now)
        self.due = min(lows, default=math.inf)
        self._record(now, port.by_service_id(found.estimates), port.by_service_id(vcs))
        return published

    def state(
        self, now: float, max_waiting: int | None = None
    ) -> tuple[list[RunningJob], list[WaitingJob], dict[str, str]]:
        """The live state as the forecast takes it: running jobs with what is left of their
        runs, the first ``max_waiting`` waiting jobs (in queue order: priority, then arrival)
        with their durations, the nodes down.

        Read from the store, with the policy asked only about the running jobs' placements:
        its views of thousands of waiting jobs (each with a why-text) cost more than the
        forecast itself, under the lock the scheduling pass needs. A job the pass has just
        started but not yet stored counts as waiting at the head of its queue, where the
        forecast starts it at once."""
        with self.store.read() as conn:
            running_rows = etas.running_for_forecast(conn)
            waiting_rows = etas.waiting_for_forecast(conn, max_waiting)
            model = DurationModel.learn(self._history(conn))
        views, specs, down = self.loop.forecast_state(running_rows)
        running: list[RunningJob] = []
        for v in views:
            row, spec = running_rows[v.job_id], specs.get(v.job_id)
            if v.state != lc.RUNNING or spec is None:
                continue  # ended, or sent back to waiting, meanwhile
            elapsed = now - (row.started_at or now)
            left = model.predict(spec, row.user, elapsed)
            running.append(
                dataclasses.replace(
                    port.running_job(v, spec, left),
                    grounded=model.grounded(spec, row.user),
                    soonest=model.soonest(spec, row.user, elapsed),
                )
            )
        waiting: list[WaitingJob] = []
        for row in waiting_rows:
            spec = specs.get(row.id)
            if spec is None:
                continue  # not yet taken in by the pass, or ended meanwhile
            spread, grounded = model.predict(spec, row.user), model.grounded(spec, row.user)
            job = port.waiting_job(row.id, spec, row.submitted_at, spread)
            waiting.append(dataclasses.replace(job, grounded=grounded))
        return running, waiting, down

    def suggest(self, job_id: int, vcs: list[str]) -> list[Suggestion]:
        """What would start this waiting job soon, tried against the live state (on request:
        a handful of forecasts)."""
        now = self.clock()
        running, waiting, down = self.state(now)
        named = port.policy_id(job_id)
        return suggest(
            self.make_scheduler, now, running, waiting, named, vcs, down, check=self.check
        )

    def _outcomes(self) -> list[Outcome]:
        """What the calibration learns from: the newest scored first estimates, and those of
        jobs still waiting (one past its high end is a miss already)."""
        with self.store.read() as conn:
            rows = etas.scored(conn, CALIBRATION_ROWS) + etas.still_waiting(conn, CALIBRATION_ROWS)
        return [outcome(r) for r in rows]

    def _history(self, conn: Any) -> Iterable[Past]:
        """Ended runs: succeeded ones, and those stopped at their limit (which ran that long)."""
        for r in etas.ended_runs(conn, HISTORY):
            if r.finished_at is None:
                continue
            if r.state == lc.FAILED and not str(r.reason).startswith("time limit"):
                continue
            command, limit = self._learnt(r._asdict())
            yield Past(r.user, r.vc, r.gpus, command, r.finished_at - r.started_at, limit)

    def _learnt(self, row: dict[str, Any]) -> tuple[str, float | None]:
        """An ended job's command name and declared limit (cached: they never change)."""
        got = self._commands.get(row["id"])
        if got is None:
            try:
                spec = self.load_spec(row)
                got = (command_name(spec), spec.time_limit)
            except Exception:  # stored before today's checks: nothing to learn from
                got = ("", None)
            self._commands[row["id"]] = got
        return got

    def _record(self, now: float, estimates: dict[int, Estimate], vcs: dict[int, str]) -> None:
        """First estimates of newly waiting jobs; the error of those that started since."""
        with self.store.read() as conn:
            known = etas.estimated(conn, list(estimates))
            started = etas.started_unscored(conn)
        new = [
            etas.EtaRow(j, vcs[j], now, e.eta, e.low, e.high)
            for j, e in estimates.items()
            if j not in known
        ]
        if not new and not started:
            return
        calibrator = Calibrator(self._outcomes()) if started else None
        with self.store.write() as conn:
            etas.add(conn, new)
            for r, began in started:
                assert calibrator is not None
                shown = calibrator.adjust(
                    r.vc, r.predicted_at, Estimate(r.eta, r.eta_low, r.eta_high)
                )
                in_range = bool(shown.low <= began <= shown.high)
                etas.score(conn, r.job_id, began, began - r.eta, in_range)


def outcome(row: etas.EtaRow) -> Outcome:
    """A scored ``job_etas`` row as the calibration takes it."""
    return Outcome(row.vc, row.predicted_at, row.eta_low, row.eta_high, row.started_at)


def _waits(
    found: Outlook, running: list[RunningJob], waiting: list[WaitingJob]
) -> dict[str, WaitsFor]:
    """What each blocked job waits for, in words (no job ids: the queue hides others')."""
    specs = {r.job_id: r.spec for r in running} | {w.job_id: w.spec for w in waiting}
    return {
        job_id: WaitsFor(blocked_text([specs[b] for b in blocked.waits_for]))
        for job_id, blocked in found.blocked.items()
    }


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How good the ETAs were, for one VC (or all): from the jobs that started."""

    vc: str
    starts: int
    median_abs_error_s: float
    p90_abs_error_s: float
    coverage: float  # the share of starts inside the p10-p90 range


def accuracy(rows: Iterable[etas.EtaRow]) -> list[Accuracy]:
    """Per VC, then "all", from ``job_etas`` rows with an error."""
    from labhive.scheduler.forecast.eta import quantile

    by_vc: dict[str, list[tuple[float, bool]]] = {}
    for r in rows:
        if r.error_s is None:
            continue
        by_vc.setdefault(r.vc, []).append((r.error_s, bool(r.in_range)))
        by_vc.setdefault("all", []).append((r.error_s, bool(r.in_range)))
    out = []
    for vc in sorted(by_vc, key=lambda v: (v == "all", v)):
        group = by_vc[vc]
        errors = sorted(abs(error) for error, _ in group)
        inside = sum(1 for _, hit in group if hit)
        out.append(
            Accuracy(
                vc, len(group), quantile(errors, 0.5), quantile(errors, 0.9), inside / len(group)
            )
        )
    return out


def stored_accuracy(store: Store) -> list[Accuracy]:
    with store.read() as conn:
        return accuracy(etas.every_eta(conn))


def render_accuracy(rows: list[Accuracy]) -> str:
    """The ETAs' accuracy in Prometheus' text format: the absolute error at start as a summary
    (p50, p90) and the share of starts inside the p10-p90 range, per VC."""
    lines = [
        "# HELP labhive_eta_error_seconds Absolute error of the ETA given at submit, at start.",
        "# TYPE labhive_eta_error_seconds summary",
    ]
    for a in rows:
        if a.vc == "all":
            continue
        vc = a.vc.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines += [
            f'labhive_eta_error_seconds{{vc="{vc}",quantile="0.5"}} {a.median_abs_error_s:g}',
            f'labhive_eta_error_seconds{{vc="{vc}",quantile="0.9"}} {a.p90_abs_error_s:g}',
            f'labhive_eta_error_seconds_count{{vc="{vc}"}} {a.starts}',
        ]
    lines += [
        "# HELP labhive_eta_range_coverage_ratio Share of starts inside the predicted p10-p90.",
        "# TYPE labhive_eta_range_coverage_ratio gauge",
    ]
    for a in rows:
        if a.vc != "all":
            vc = a.vc.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
            lines.append(f'labhive_eta_range_coverage_ratio{{vc="{vc}"}} {a.coverage:g}')
    return "\n".join(lines) + "\n"


def render_cost(tracker: EtaTracker | None) -> str:
    """What the ETA thread cost, in Prometheus' text format (nothing when ETAs are off)."""
    if tracker is None:
        return ""
    return (
        "# HELP labhive_eta_forecasts_total Forecasts the ETA thread ran.\n"
        "# TYPE labhive_eta_forecasts_total counter\n"
        f"labhive_eta_forecasts_total {tracker.forecasts}\n"
        "# HELP labhive_eta_forecast_cpu_seconds_total CPU time the ETA thread spent on them.\n"
        "# TYPE labhive_eta_forecast_cpu_seconds_total counter\n"
        f"labhive_eta_forecast_cpu_seconds_total {tracker.cpu_s:g}\n"
    )
