"""The timeline's per-VC integrals against the plain computation. ``Timeline.run``, ``wait``
and ``started`` add a step to the VC's series at each change, and a VC's served and asked-for
GPU time are summed from its steps when read; here a reference timeline advances each VC's
running integrals through one plain helper before every change, as the timeline once did (and
a waiting job's start is its ``wait(-1)`` then its ``run``, which ``Timeline.started`` fuses).
Given random streams of changes (starts, ends, waits, several changes in one instant, VCs first
seen late), expect every VC's served and asked-for GPU time, and every global figure, to the
bit."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from labhive.scheduler.sim.timeline import Timeline

# White-box throughout: a subclass of the compiled ``Timeline`` (the plain per-change advance).
pytestmark = pytest.mark.sources


@dataclass
class Job:
    vc: str
    gpus: int


class PlainVC:
    """A VC's running integrals, advanced to each change's time before it."""

    def __init__(self, now: float) -> None:
        self.last = now
        self.used = 0
        self.waiting_gpus = 0
        self.served = 0.0
        self.demand = 0.0

    def advance(self, now: float) -> None:
        dt = now - self.last
        if dt > 0:
            self.served += self.used * dt
            self.demand += (self.used + self.waiting_gpus) * dt
        self.last = now


class PlainTimeline(Timeline):
    """The reference: each change first advances its VC through ``_vc``, then changes it."""

    def __init__(self, total_gpus: int) -> None:
        super().__init__(total_gpus)
        self.vcs = {}  # type: ignore[assignment]  # (``PlainVC``s)

    def _vc(self, name: str) -> PlainVC:
        vc: PlainVC | None = self.vcs.get(name)  # type: ignore[assignment]
        if vc is None:
            vc = self.vcs[name] = PlainVC(self.now)  # type: ignore[assignment]
        vc.advance(self.now)
        return vc

    def run(self, job: Job, gpus: int) -> None:
        self.used += gpus
        self._vc(job.vc).used += gpus

    def wait(self, job: Job, sign: int) -> None:
        self.waiting += sign
        sizes = self._wait_sizes
        count = sizes.get(job.gpus, 0) + sign
        if count:
            sizes[job.gpus] = count
        else:
            del sizes[job.gpus]
        self._vc(job.vc).waiting_gpus += sign * job.gpus

    def started(self, job: Job, gpus: int) -> None:
        self.wait(job, -1)
        self.run(job, gpus)


def replay_changes(timeline: Timeline, seed: int) -> tuple[object, ...]:
    """A random stream of waits, starts and ends over a few VCs, the same for every seed."""
    rng = random.Random(seed)
    vcs = ["a", "b", "c", "d"][: rng.randint(1, 4)]
    waiting: list[Job] = []
    running: list[tuple[Job, int]] = []
    now = 0.0
    timeline.advance(now)
    for _ in range(rng.randint(50, 300)):
        if rng.random() < 0.5:  # else: one more change in the same instant
            now += rng.choice([0.0, 0.5, 1.0, rng.uniform(0.0, 100.0)])
            timeline.advance(now)
        move = rng.random()
        if move < 0.4:
            job = Job(rng.choice(vcs), rng.choice([1, 2, 4, 8]))
            timeline.wait(job, +1)
            waiting.append(job)
        elif move < 0.7 and waiting:
            job = waiting.pop(rng.randrange(len(waiting)))
            held = job.gpus * rng.choice([1, 1, 2])
            timeline.started(job, held)
            running.append((job, held))
        elif move < 0.8:  # starts as it arrives: never counted waiting
            job = Job(rng.choice(vcs), rng.choice([1, 2, 4]))
            timeline.run(job, job.gpus)
            running.append((job, job.gpus))
        elif running:
            job, held = running.pop(rng.randrange(len(running)))
            timeline.run(job, -held)
            if rng.random() < 0.3:  # retried: waits again
                timeline.wait(job, +1)
                waiting.append(job)
    timeline.close(now + rng.uniform(0.0, 10.0))
    return (
        {n: (v.served, v.demand, v.used, v.waiting_gpus, v.last) for n, v in timeline.vcs.items()},
        timeline._steps.tolist(),
        (timeline.busy_gpu_seconds, timeline.frag_gpu_seconds, timeline.frag_seconds),
        (timeline.used, timeline.waiting, dict(timeline._wait_sizes)),
    )


def test_each_vcs_integrals_match_the_plain_per_change_advance() -> None:
    for seed in range(200):
        assert replay_changes(Timeline(64), seed) == replay_changes(PlainTimeline(64), seed), seed
