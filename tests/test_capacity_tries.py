"""Given random clusters of two to four VCs (and, as the contended one, fragmented 8-GPU nodes
with wide borrowers refused by free counts) and random submissions, endings, requeues, node
faults and a new cluster config, expect Capacity, whose pass tries a head by placing it
(``CapacityPass._tried``: no ``_hopeless`` test, no ``_refused`` for a guaranteed head) and
takes the head of a line it changed from what the change left (``_kept_jobs_of``: a start's
next head, a preempted victim's return), to decide exactly as the Capacity that weighed each
head as hopeless and asked ``_refused`` before placing it, and fetched each changed line's
head again (the pass before this cut). A try that searched, blocked or spent a search where
the weighing would have skipped the head, or a stale head taken for a changed line, shows up
as a different start, preemption or order (and the head tried is checked to head its line)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_capacity_pass import _node_gpus, batches, squeezed, steps
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import Decision, Preempt, Reconfigure
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.queued import from_config
from labhive.scheduler.policies.queued_job import NOT_WAITING, QueuedJob


class CapacityWeighingFirst(CapacityPolicy):
    """Capacity whose pass weighs each head it tries as hopeless, asking ``_refused`` of it,
    before placing it, and fetches a changed line's head again (``_kept_jobs_of`` never
    kept), as the pass did before this cut."""

    def _next_head(self, heads: Any, out: list[Decision]) -> None:
        self._kept_jobs_of = {}  # (the changed lines' heads: none kept, each fetched)
        super()._next_head(heads, out)

    def _tried(self, head: QueuedJob, opp: bool, out: list[Decision]) -> bool:
        blocked, shape = self._blocked, head.gang.shape
        found = blocked is not None and blocked.group is not NOT_WAITING
        no_room = self._refused(head.gang) or shape in self._no_room
        if (
            found
            and no_room
            and not (
                self._searches > 0
                and self.pool.free_gpus + self.victim_gpus(head, False) >= head.gpus
            )
        ):
            return False  # hopeless: no room, and no search may run for it
        tasks = None
        if not no_room:
            tasks = self.pool.place(head.job_id, head.gang)
            if tasks is None:
                self._no_room.add(shape)
        return self._start_or_search(head, tasks, opp, out)


class CapacityTryingAtOnce(CapacityPolicy):
    """Capacity (this cut) checking that each head its pass tries heads its line now (fetched
    on the side: ``_head`` only drops stale entries); counts its tries and preemptions."""

    tries = preempted = 0

    def _tried(self, head: QueuedJob, opp: bool, out: list[Decision]) -> bool:
        assert self._head(head.group) is head, head.job_id
        self.tries += 1
        before = len(out)
        tried = super()._tried(head, opp, out)
        self.preempted += sum(isinstance(d, Preempt) for d in out[before:])
        return tried


def replay(config: Any, drawn: Any, borrow: bool, other: Any, searches: int = 2) -> Any:
    nodes = sorted({n.name for n in config.nodes()})
    trying = from_config(CapacityTryingAtOnce, config, {}, borrow=borrow)
    weighing = from_config(CapacityWeighingFirst, config, {}, borrow=borrow)
    trying.SEARCHES_PER_PASS = weighing.SEARCHES_PER_PASS = searches
    for batch in batches(trying, nodes, drawn, other):
        if len(batch) == 1:
            assert trying.handle(batch[0]) == weighing.handle(batch[0]), batch
        else:
            assert trying.handle_batch(batch) == weighing.handle_batch(batch), batch
        assert trying.jobs() == weighing.jobs()
        if isinstance(batch[0], Reconfigure):
            nodes = sorted({n.name for n in batch[0].config.nodes()})
    return trying


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), borrow=st.booleans(), searches=st.sampled_from([1, 2]))
def test_a_pass_placing_each_head_at_once_decides_as_one_weighing_it_first(
    data: Any, borrow: bool, searches: int
) -> None:
    configs = [load_cluster_config(data.draw(squeezed())) for _ in range(2)]
    drawn = data.draw(steps(len(configs[0].vcs), max(len(n.gpus) for n in configs[0].nodes())))

    def another_config() -> Any:
        configs.reverse()
        return configs[0]

    replay(configs[0], drawn, borrow, another_config, searches)


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), searches=st.sampled_from([1, 2]))
def test_fragmented_8_gpu_nodes_place_at_once_as_one_weighing_first(
    data: Any, searches: int
) -> None:
    """The contended cluster's shape: jobs of 3 to 7 GPUs on a node or two, wide borrowers
    refused by free counts, guaranteed heads reclaiming borrowed GPUs."""
    config = load_cluster_config(data.draw(squeezed().filter(lambda c: _node_gpus(c) == 8)))
    drawn = data.draw(steps(len(config.vcs), 8, [1, 3, 5, 6, 7, 8], most=150))
    replay(config, drawn, True, lambda: config, searches)


def test_the_fragmented_replays_try_heads_and_preempt() -> None:
    """(The properties above are not vacuous: a fixed draw of the second tries heads in
    passes and preempts borrowed jobs for guaranteed heads.)"""
    raw = squeezed().filter(lambda c: _node_gpus(c) == 8)
    seen = [0, 0]

    @settings(max_examples=40, deadline=None, derandomize=True)
    @given(data=st.data())
    def run(data: Any) -> None:
        config = load_cluster_config(data.draw(raw))
        drawn = data.draw(steps(len(config.vcs), 8, [1, 3, 5, 6, 7, 8], most=150))
        policy = replay(config, drawn, True, lambda: config, 2)
        seen[0] += policy.tries
        seen[1] += policy.preempted

    run()
    assert seen[0] > 0 and seen[1] > 0
