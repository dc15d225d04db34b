"""``labhive whatif``: the journal's submissions replayed with their real run times under a
changed setting (another cluster, policy or VC quota), beside the same replay unchanged.

Both runs are the simulator's (``sim/engine.py``: the policy the service runs, fed in virtual
time) on the same jobs: each recorded submission at its recorded time (relative to the span's
first event), with its spec as the policy saw it (VC, priority, roles, time limit) and its real
service time (``recorded.py``: its runs summed). A job cancelled while it waited is cancelled
at the same time in both (it may run until then if the setting starts it sooner). So the
baseline is not the live history itself (the live loop's drains, restarts and held starts are
not simulated): the differences between the two runs are the setting's alone.

Left out, counted: jobs still waiting when the recording ends (their run time is unknown).
Jobs still running at the end replay the time they had run (a lower bound).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.policies import get_policy
from labhive.scheduler.service.journal.recorded import CANCELLED, Recording
from labhive.scheduler.sim.engine import SimJob, SimResult, Simulation
from labhive.scheduler.sim.metrics import summarize
from labhive.scheduler.sim.runner import parse_policy

#: How many jobs the report lists as the ones whose wait changed most.
TOP_CHANGED = 10


@dataclass(frozen=True)
class Setting:
    label: str  # what it is, for the report ("hived on cluster.yaml with vc1=+1nodes")
    policy: str  # NAME or NAME:key=value,...
    config: ClusterConfig


@dataclass
class Outcome:
    setting: Setting
    result: SimResult
    summary: dict[str, Any]
    quota_gpus: dict[str, int]  # each VC's guaranteed GPUs in this setting


@dataclass
class WhatIf:
    recording: Recording
    baseline: Outcome
    changed: Outcome
    left_out: Counter[str] = field(default_factory=Counter)

    def per_vc(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per VC, its figures in each run: ``{vc: {"baseline": {...}, "whatif": {...}}}``."""
        vcs = sorted(set(self.baseline.summary["per_vc"]) | set(self.changed.summary["per_vc"]))
        return {
            vc: {
                "baseline": _vc_figures(self.baseline, vc),
                "whatif": _vc_figures(self.changed, vc),
            }
            for vc in vcs
        }

    def changed_most(self, n: int = TOP_CHANGED) -> list[dict[str, Any]]:
        """The jobs whose wait (first start - submit) differs most between the two runs; a job
        that never started in one run counts as waiting to the end of that run; one that
        started in neither (given up while it waited) has no wait to compare."""
        before = {j.job_id: j for j in self.baseline.result.jobs}
        rows: list[dict[str, Any]] = []
        for job in self.changed.result.jobs:
            base = before.get(job.job_id)
            if base is None or (base.first_start is None and job.first_start is None):
                continue
            was, now = _wait(base, self.baseline), _wait(job, self.changed)
            rows.append(
                {
                    "job_id": int(job.job_id),
                    "name": job.spec.name,
                    "vc": job.vc,
                    "user": job.user,
                    "gpus": job.gpus,
                    "baseline_wait_s": round(was, 3),
                    "whatif_wait_s": round(now, 3),
                    "change_s": round(now - was, 3),
                    "started": {
                        "baseline": base.first_start is not None,
                        "whatif": job.first_start is not None,
                    },
                }
            )
        rows.sort(key=lambda r: (-abs(r["change_s"]), r["job_id"]))
        return [r for r in rows if r["change_s"] != 0][:n]

    def to_json(self) -> dict[str, Any]:
        rec = self.recording
        return {
            "span": {"begin": rec.begin, "end": rec.end, "seconds": rec.end - rec.begin},
            "jobs": len(self.baseline.result.jobs),
            "left_out": dict(self.left_out),
            "baseline": _setting_json(self.baseline),
            "whatif": _setting_json(self.changed),
            "per_vc": self.per_vc(),
            "changed_most": self.changed_most(),
        }


def _wait(job: SimJob, outcome: Outcome) -> float:
    start = job.first_start if job.first_start is not None else outcome.result.end_time
    return max(0.0, start - job.submit)


def _vc_figures(outcome: Outcome, vc: str) -> dict[str, Any]:
    s = outcome.summary["per_vc"].get(vc)
    if s is None:
        return {"jobs": 0}
    span = outcome.result.timeline.span
    quota = outcome.quota_gpus.get(vc, 0)
    held = s["gpu_hours"] * 3600.0
    return {
        "jobs": s["jobs"],
        "wait_p50_s": s["queue_delay_median"],
        "wait_p95_s": s["queue_delay_p95"],
        "quota_gpus": quota,
        "gpu_hours": s["gpu_hours"],
        "utilisation_of_quota": held / (quota * span) if quota and span else None,
        "wasted_gpu_hours": s["wasted_gpu_hours"],
        "refused": s["rejected"],
        "unfinished": s["unfinished"],
        "preemptions": s["preemptions"],
    }


def _setting_json(outcome: Outcome) -> dict[str, Any]:
    overall = outcome.summary["overall"]
    return {
        "label": outcome.setting.label,
        "policy": outcome.setting.policy,
        "gpus": outcome.setting.config.total_gpus(),
        "utilisation": overall["utilization"],
        "wait_p50_s": overall["queue_delay_median"],
        "wait_p95_s": overall["queue_delay_p95"],
        "wasted_gpu_hours": overall["wasted_gpu_hours"],
        "refused": overall["rejected"],
    }


def whatif(recording: Recording, baseline: Setting, changed: Setting) -> WhatIf:
    left_out: Counter[str] = Counter(recording.skipped)
    for job in recording.jobs:
        if not job.ran and job.how != CANCELLED:
            left_out["still waiting at the end (run time unknown)"] += 1
    return WhatIf(recording, replay(recording, baseline), replay(recording, changed), +left_out)


def replay(recording: Recording, setting: Setting) -> Outcome:
    """The recorded jobs under ``setting``, in the simulator."""
    name, options = parse_policy(setting.policy)
    scheduler = get_policy(name, setting.config, **options)
    quota = {vc: v.guaranteed_gpus for vc, v in scheduler.cluster().vcs.items()}
    t0 = recording.begin
    jobs: list[SimJob] = []
    cancels: list[tuple[float, str]] = []
    for job in recording.jobs:
        if not job.ran and job.how != CANCELLED:
            continue  # still waiting: left out (``whatif`` counts them)
        job_id = str(job.job_id)
        duration = job.run_seconds if job.ran else math.inf  # (cancelled before it ran)
        status = "Killed" if job.how == CANCELLED and job.ran else "Pass"
        jobs.append(SimJob(job_id, job.spec, job.submit - t0, duration, status=status))
        if not job.ran and job.left is not None:
            # A job cancelled in the pass it was submitted in may be recorded as leaving at
            # (or, by the clocks' rounding, before) its submission; the driver runs timed
            # actions before arrivals due at the same time, so its cancel goes just after.
            arrives = job.submit - t0
            cancels.append((max(job.left - t0, math.nextafter(arrives, math.inf)), job_id))
    sim = Simulation(scheduler, jobs, total_gpus=setting.config.total_gpus())
    for at, job_id in cancels:
        sim.at(at, _canceller(sim, job_id))
    result = sim.run()
    return Outcome(setting, result, summarize(result), quota)


def _canceller(sim: Simulation, job_id: str) -> Any:
    def cancel() -> str:
        sim.cancel(job_id)
        return f"{job_id} cancelled"

    return cancel
