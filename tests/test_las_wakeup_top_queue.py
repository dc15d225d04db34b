"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and many ticks on small clusters, expect LAS's ``next_wakeup``, which asks for the
top waiting queue (``_top_level``) only when it meets a live run below the top queue, and whose
runs' quantum ends (``_matured``) are filed for a run in the top queue only at its demotion,
to answer as LAS filing every run at its start and ranking the waiting heads whenever a run's
quantum is pending, with the same live entries below the top queue kept after every call. And
given a run just started in the top queue while a gang waits, expect the wake-up to rank no
waiting head (issue 34: a contended LAS run ranked them about once per job arrived, for runs
in the top queue, which are below none, and filed and dropped an entry per start)."""

from __future__ import annotations

import heapq
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches
from test_las_search_bounds import each, nodes_of, submit
from test_pass_skips import LAS
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import Tick
from labhive.scheduler.policies.las import _EPS, LasPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config


class LasPlainWakeup(LasPolicy):
    """LAS filing every run's quantum end at its start and ranking the waiting heads whenever
    one is pending (the plain computation: the top queue asked first, each entry then held to
    it)."""

    def on_started(self, job: QueuedJob) -> None:
        """LAS's ``on_started`` as it was: every run's quantum end filed."""
        self._last_walk = ()
        self._running[job.level][job.job_id] = job
        self._level_gpus[job.level] += job.gpus
        self._plan_demotion(job)
        if self.quantum > 0:
            heapq.heappush(self._matured, (self._now + self.quantum, job.token, job.job_id))

    def next_wakeup(self) -> float | None:
        wake = self._without_matured()
        heap = self._matured
        now = self._now + _EPS
        while heap and heap[0][0] <= now:
            heapq.heappop(heap)
        if heap:
            top = self._top_level()
            while top is not None and heap:
                when, token, job_id = heap[0]
                job = self._jobs.get(job_id)
                if job is not None and job.running and job.token == token and job.level > top:
                    return when if wake is None or when < wake else wake
                heapq.heappop(heap)
        return wake

    def _without_matured(self) -> float | None:
        """The next demotion or promotion (``next_wakeup`` with no quantum pending)."""
        kept, self._matured = self._matured, []
        try:
            return super().next_wakeup()
        finally:
            self._matured = kept


def below_top(las: LasPolicy) -> set[tuple[float, int, str]]:
    """The kept quantum ends of live runs below the top queue (the entries a wake-up reads)."""
    jobs = las._jobs
    return {
        (when, token, job_id)
        for when, token, job_id in las._matured
        if (job := jobs.get(job_id)) is not None
        and job.running
        and job.token == token
        and job.level > 0
    }


def steps() -> Any:
    """Submissions of 1 to 8 GPUs in one or two tasks, many ticks (``batches`` makes a tick of
    a ``node_up`` while no node is down) and many requeues: a run requeued after its
    demotion waits and starts again below the top queue, young (its quantum's end filed at
    its start), where jobs of the top queue may wait."""
    submit = st.fixed_dictionaries(
        {"tasks": st.integers(1, 2), "gpus": st.sampled_from([1, 1, 2, 3, 4, 6, 8])}
    ).map(lambda d: ("submit", d))
    other = st.tuples(
        st.sampled_from(["finish"] * 2 + ["requeue"] * 3 + ["node_up"] * 4 + ["cancel"]),
        st.integers(0, 1000),
    )
    return st.lists(st.tuples(st.one_of(submit, other), st.booleans()), min_size=30, max_size=90)


OPTIONS = [
    {},
    {"backfill": False},
    {"promote_knob": 2.0},  # waiting jobs go back to the top queue
    {"same_queue": True},
    {"thresholds": (60.0,)},  # demoted at once: runs below the top queue, still young
    {"thresholds": (30.0,), "quantum": 1.0},  # requeued runs start again below it, young
]


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), options=st.sampled_from(OPTIONS))
def test_a_wakeup_asking_the_top_queue_late_answers_as_one_asking_it_first_of_every_run(
    data: Any, options: dict[str, Any]
) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    late = from_config(LasPolicy, config, dict(options), **LAS)
    first = from_config(LasPlainWakeup, config, dict(options), **LAS)
    for batch in batches(late, nodes, data.draw(steps())):
        if len(batch) == 1:
            assert late.handle(batch[0]) == first.handle(batch[0]), batch
        else:
            assert late.handle_batch(batch) == first.handle_batch(batch), batch
        # the ticks asked for before the next instant (``batches`` moves 60 s), as the
        # simulator gives them: each wake-up read and compared, then the demotions and
        # quantum ends it was for made on time
        at, ticks = batch[0].time, 0
        while (wake := late.next_wakeup()) == first.next_wakeup() and ticks < 4:
            assert below_top(late) == below_top(first), batch
            if wake is None or not at <= wake < batch[0].time + 60.0:
                break
            at, ticks = wake, ticks + 1
            assert late.handle(Tick(at)) == first.handle(Tick(at)), at
        assert late.next_wakeup() == first.next_wakeup(), batch
        assert late.jobs() == first.jobs()


def test_a_run_in_the_top_queue_ranks_no_waiting_head() -> None:
    """Two 8-GPU nodes: an 8-GPU job runs from 0 s and is demoted at 100 s; a 1-GPU job
    starts at 110 s in the top queue (its quantum, 60 s, pending) and a 16-GPU gang waits.
    The wake-up is the 1-GPU job's demotion (60 GPU-seconds, at 170 s); its quantum's end is
    not filed and no waiting head is ranked for it (it is in the top queue: no waiting job may
    preempt it)."""
    las = from_config(LasPolicy, nodes_of(2, 8), {}, **{**LAS, "thresholds": (60.0, 6000.0)})
    submit([las], "big", 0.0, 8)
    each([las], Tick(100.0))
    assert submit([las], "one", 110.0, 1)[0][0].job_id == "one"
    assert submit([las], "gang", 111.0, 8, tasks=2) == [[]]
    ranked: list[int] = []
    top = las._top_level

    def counted() -> int | None:
        ranked.append(1)
        return top()

    las._top_level = counted  # type: ignore[method-assign]
    assert las.next_wakeup() == 170.0
    assert ranked == [] and las._matured == []
