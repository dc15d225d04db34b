"""The timeline's integrals, summed from the step series, against the running sums ``advance``
kept.

``Timeline.advance`` no longer adds to the GPU time in use and the fragmentation's two sums at
each instant: ``busy_gpu_seconds``, ``frag_gpu_seconds`` and ``frag_seconds`` work them out from
the steps when read (each step's length times its GPUs in use, or its idle GPUs where a waiting
job would fit them by count, added in order), and ``advance`` only notes the steps in which the
idle GPUs were too few for every waiting job. Here a reference timeline keeps the running sums
as ``advance`` did. Given random streams of changes (starts, ends, waits of small and wide jobs,
several changes in one instant, instants of no length, a cluster left idle or full, clocks far
from zero) read at random moments before the close and after it, expect the same sums to the
bit, and the same steps."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS
from test_timeline_integrals import Job

from labhive.scheduler.sim.timeline import Timeline


class RunningSumTimeline(Timeline):
    """The reference: ``advance`` adds each step to running totals, as it did."""

    def __init__(self, total_gpus: int) -> None:
        super().__init__(total_gpus)
        self.sums = (0.0, 0.0, 0.0)  # GPU time in use, fragmented GPU time, fragmented time

    def advance(self, t: float) -> None:
        dt = t - self.now
        if self.start is not None and dt > 0:
            busy, frag_gpus, frag = self.sums
            busy += self.used * dt
            if self.waiting:
                idle = self.total_gpus - self.used
                if idle > 0 and min(self._wait_sizes) <= idle:
                    frag_gpus += idle * dt
                    frag += dt
            self.sums = (busy, frag_gpus, frag)
        super().advance(t)


def sums(timeline: Timeline) -> tuple[str, str, str]:
    """The three integrals from the steps, exactly (as hex)."""
    got = (timeline.busy_gpu_seconds, timeline.frag_gpu_seconds, timeline.frag_seconds)
    return (got[0].hex(), got[1].hex(), got[2].hex())


def readings(seed: int) -> list[tuple[object, object]]:
    """Drive both timelines through one random stream; (from the steps, running sums) at
    each read, the last after ``close``."""
    rng = random.Random(seed)
    timelines = (Timeline(64), RunningSumTimeline(64))
    found: list[tuple[object, object]] = []

    def both(method: str, *args: object) -> None:
        for timeline in timelines:
            getattr(timeline, method)(*args)

    def read() -> None:
        found.append((sums(timelines[0]), tuple(x.hex() for x in timelines[1].sums)))

    running: list[tuple[Job, int]] = []
    waiting: list[Job] = []
    now = rng.choice([0.0, 1.5e9, rng.uniform(0.0, 1e6)])
    read()  # never advanced: nothing in use yet
    both("advance", now)
    for _ in range(rng.randint(0, 200)):
        if rng.random() < 0.6:  # else: another change in the same instant
            now += rng.choice([0.0, 0.1, 1.0, rng.uniform(0.0, 1e5)])
            both("advance", now)
        move = rng.random()
        if move < 0.35:
            job = Job(rng.choice("ab"), rng.choice([1, 2, 8, 24, 40]))
            both("wait", job, +1)
            waiting.append(job)
        elif move < 0.6 and waiting:
            job = waiting.pop(rng.randrange(len(waiting)))
            both("started", job, job.gpus)
            running.append((job, job.gpus))
        elif move < 0.75:
            job = Job(rng.choice("ab"), rng.choice([1, 4, 16, 32]))
            both("run", job, job.gpus)
            running.append((job, job.gpus))
        elif running:
            job, held = running.pop(rng.randrange(len(running)))
            both("run", job, -held)
        if rng.random() < 0.1:
            read()
    both("close", now + rng.choice([0.0, rng.uniform(0.0, 50.0)]))
    read()
    steps = [timeline._steps.tolist() for timeline in timelines]
    assert steps[0] == steps[1]
    return found


@pytest.mark.sources
@PROPERTY_SETTINGS
@given(st.integers(0, 2**32))
def test_the_integrals_from_the_steps_are_the_running_sums(seed: int) -> None:
    for from_steps, running_sums in readings(seed):
        assert from_steps == running_sums


def test_a_timeline_never_advanced_has_used_no_gpu_time() -> None:
    timeline = Timeline(8)
    assert timeline.busy_gpu_seconds == 0.0
    timeline.advance(5.0)  # its start: no step yet
    timeline.run(Job("a", 8), 8)
    assert timeline.busy_gpu_seconds == 0.0
    timeline.close(7.0)  # two seconds, eight GPUs
    assert timeline.busy_gpu_seconds == 16.0


def test_idle_gpus_too_few_for_every_waiting_job_are_not_fragmentation() -> None:
    """Given 8 GPUs, 6 in use and a 4-GPU job waiting for 10 s, then a 2-GPU job waiting too
    for 5 s: expect the first 10 s not fragmented and the last 5 s fragmented (2 idle GPUs)."""
    timeline = Timeline(8)
    timeline.advance(0.0)
    timeline.run(Job("a", 6), 6)
    timeline.wait(Job("a", 4), +1)
    timeline.advance(10.0)
    timeline.wait(Job("b", 2), +1)
    timeline.close(15.0)
    assert (timeline.frag_seconds, timeline.frag_gpu_seconds) == (5.0, 10.0)
    assert timeline.busy_gpu_seconds == 90.0
