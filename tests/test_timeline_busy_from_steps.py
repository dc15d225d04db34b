"""The GPU time in use, summed from the step series, against the running sum ``advance`` kept.

``Timeline.advance`` no longer adds ``used * dt`` at each instant: ``busy_gpu_seconds`` works it
out from the steps when read (each step's GPUs in use times its length, added in order). Here a
reference timeline keeps the running sum as ``advance`` did. Given random streams of changes
(starts, ends, waits, several changes in one instant, instants of no length, a cluster left
idle, clocks far from zero) read at random moments before the close and after it, expect the
same GPU-seconds to the bit, and every other figure as well."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS
from test_timeline_integrals import Job

from labhive.scheduler.sim.timeline import Timeline


class RunningSumTimeline(Timeline):
    """The reference: ``advance`` adds the step's GPU time to a running total, as it did."""

    def __init__(self, total_gpus: int) -> None:
        super().__init__(total_gpus)
        self.running_sum = 0.0

    def advance(self, t: float) -> None:
        if self.start is not None and t - self.now > 0:
            self.running_sum += self.used * (t - self.now)
        super().advance(t)


def busy_readings(seed: int) -> list[tuple[float, float]]:
    """Drive both timelines through one random stream; (from the steps, running sum) at each
    read, the last after ``close``."""
    rng = random.Random(seed)
    timelines = (Timeline(64), RunningSumTimeline(64))
    readings: list[tuple[float, float]] = []

    def both(method: str, *args: object) -> None:
        for timeline in timelines:
            getattr(timeline, method)(*args)

    def read() -> None:
        readings.append((timelines[0].busy_gpu_seconds, timelines[1].running_sum))

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
            job = Job(rng.choice("ab"), rng.choice([1, 2, 8]))
            both("wait", job, +1)
            waiting.append(job)
        elif move < 0.6 and waiting:
            job = waiting.pop(rng.randrange(len(waiting)))
            both("started", job, job.gpus)
            running.append((job, job.gpus))
        elif move < 0.75:
            job = Job(rng.choice("ab"), rng.choice([1, 4, 16]))
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
    return readings


@PROPERTY_SETTINGS
@given(st.integers(0, 2**32))
def test_gpu_time_in_use_from_the_steps_is_the_running_sum(seed: int) -> None:
    for from_steps, running_sum in busy_readings(seed):
        assert from_steps.hex() == running_sum.hex()


def test_a_timeline_never_advanced_has_used_no_gpu_time() -> None:
    timeline = Timeline(8)
    assert timeline.busy_gpu_seconds == 0.0
    timeline.advance(5.0)  # its start: no step yet
    timeline.run(Job("a", 8), 8)
    assert timeline.busy_gpu_seconds == 0.0
    timeline.close(7.0)  # two seconds, eight GPUs
    assert timeline.busy_gpu_seconds == 16.0
