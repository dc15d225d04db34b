"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and many ticks on small clusters, expect LAS's ``next_wakeup``, which asks for the
top waiting queue (``_top_level``) only when it meets a live run below the top queue, to answer
as LAS ranking the waiting heads whenever a run's quantum is pending, with the same runs'
entries kept (``_matured``) after every call. And given a run just started in the top queue
while a gang waits, expect the wake-up to rank no waiting head (issue 34: a contended LAS run
ranked them about once per job arrived, for runs in the top queue, which are below none)."""

from __future__ import annotations

import heapq
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches
from test_las_quiet_passes import steps
from test_las_search_bounds import each, nodes_of, submit
from test_pass_skips import LAS
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import Tick
from labhive.scheduler.policies.las import _EPS, LasPolicy
from labhive.scheduler.policies.queued import from_config


class LasRankingTop(LasPolicy):
    """LAS whose wake-up ranks the waiting heads whenever a run's quantum is pending (the
    plain computation: the top queue asked first, each entry then held to it)."""

    def next_wakeup(self) -> float | None:
        wake = super().next_wakeup() if not self._matured else self._without_matured()
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


OPTIONS = [
    {},
    {"backfill": False},
    {"promote_knob": 2.0},  # waiting jobs go back to the top queue
    {"same_queue": True},
    {"thresholds": (60.0,)},  # demoted at once: runs below the top queue, still young
]


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), options=st.sampled_from(OPTIONS))
def test_a_wakeup_asking_the_top_queue_late_answers_as_one_asking_it_first(
    data: Any, options: dict[str, Any]
) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    late = from_config(LasPolicy, config, dict(options), **LAS)
    first = from_config(LasRankingTop, config, dict(options), **LAS)
    for batch in batches(late, nodes, data.draw(steps())):
        if len(batch) == 1:
            assert late.handle(batch[0]) == first.handle(batch[0]), batch
        else:
            assert late.handle_batch(batch) == first.handle_batch(batch), batch
        assert late.next_wakeup() == first.next_wakeup(), batch
        assert late._matured == first._matured, batch
        assert late.jobs() == first.jobs()


def test_a_run_in_the_top_queue_ranks_no_waiting_head() -> None:
    """Two 8-GPU nodes: an 8-GPU job runs from 0 s and is demoted at 100 s; a 1-GPU job
    starts at 110 s in the top queue (its quantum, 60 s, pending) and a 16-GPU gang waits.
    The wake-up is the 1-GPU job's demotion (60 GPU-seconds, at 170 s); no waiting head is
    ranked for its quantum (it is in the top queue: no waiting job may preempt it), whose
    entry is dropped."""
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
