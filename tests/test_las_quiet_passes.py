"""Given a contended cluster where a wide gang waits and its preemption search fails, expect a
tick that changes nothing the search reads (no job started, stopped or joined a line, the same
victims) to run no pass, and a tick that matures the victims that make room to run one and
preempt them. And given random submissions (gangs wider than a node among them), finishes,
cancels, requeues, node faults and many ticks (demotions, runs' quanta ending) on small
clusters, expect LAS skipping such passes (``LasPolicy._quiet``) to decide exactly as LAS
running every pass, with the same pool after every event, the order of its buckets, nodes'
``used`` and jobs included (issue 34: a contended LAS run gets a tick about once per job
arrived, and each ran a full pass with two preemption searches that started nothing 99 times
in 100)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches
from test_pass_skips import LAS
from test_preempt_probe import contended, pool_state
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, Submit, Tick
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import NodePool
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config


class LasEveryPass(LasPolicy):
    """LAS running every full pass, as before ``_quiet``."""

    def _may_keep(self, pool: NodePool) -> bool:
        return False


def steps() -> Any:
    """Submissions without time limits (a limit turns the skip off: backfill weighs it
    against the clock), of 1 to 8 GPUs in one or two tasks, and many ticks (``batches``
    makes a tick of a ``node_up`` while no node is down)."""
    submit = st.fixed_dictionaries(
        {"tasks": st.integers(1, 2), "gpus": st.sampled_from([1, 1, 2, 3, 4, 6, 8])}
    ).map(lambda d: ("submit", d))
    other = st.tuples(
        st.sampled_from(["finish"] * 3 + ["node_up"] * 5 + ["cancel", "requeue", "node_down"]),
        st.integers(0, 1000),
    )
    return st.lists(st.tuples(st.one_of(submit, other), st.booleans()), min_size=30, max_size=90)


OPTIONS = [
    {},
    {"backfill": False},
    {"promote_knob": 2.0},
    {"locality": "anywhere"},
    {"quantum": 0.0},
]


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), options=st.sampled_from(OPTIONS))
def test_a_las_skipping_quiet_passes_decides_and_leaves_the_pool_as_one_running_all(
    data: Any, options: dict[str, Any]
) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    skipping = from_config(LasPolicy, config, dict(options), **LAS)
    every = from_config(LasEveryPass, config, dict(options), **LAS)
    for batch in batches(skipping, nodes, data.draw(steps())):
        if len(batch) == 1:
            assert skipping.handle(batch[0]) == every.handle(batch[0]), batch
        else:
            assert skipping.handle_batch(batch) == every.handle_batch(batch), batch
        assert pool_state(skipping.pool) == pool_state(every.pool)
        assert skipping.jobs() == every.jobs()


def searches_of(policy: QueuedPolicy) -> list[str]:
    """The jobs ``policy``'s preemption searches are for, from now on, in order."""
    asked: list[str] = []
    real = policy._fails_on_paper

    def counted(job: QueuedJob, opp: bool) -> bool:
        asked.append(job.job_id)
        return bool(real(job, opp))

    policy._fails_on_paper = counted  # type: ignore[method-assign]
    return asked


@pytest.mark.sources
def test_a_tick_that_changes_nothing_a_search_reads_runs_no_pass() -> None:
    """``contended``: eight 8-GPU nodes, each with a demoted 1-GPU job and a 7-GPU job
    started at 50 s (its 60 s quantum ends at 110 s), and a 16-GPU gang that arrived at 100 s
    and could not preempt (the 1-GPU jobs alone free no whole node). A tick at 104 s runs a
    full pass (its search fails again) and keeps it as quiet; one at 106 s changes nothing a
    search reads: no pass, no search (LAS running every pass searches again, and fails).
    At 110 s the 7-GPU jobs' quanta end: the victims change, a pass runs and preempts two
    nodes' jobs for the gang, as LAS running every pass does."""
    skipping, _ = contended(LasPolicy)
    every, _ = contended(LasEveryPass)
    asked, asked_every = searches_of(skipping), searches_of(every)
    for at in (104.0, 106.0):
        assert skipping.handle(Tick(at)) == every.handle(Tick(at)) == []
        assert pool_state(skipping.pool) == pool_state(every.pool)
    assert asked == ["wide"] and asked_every == ["wide", "wide"]
    decided = skipping.handle(Tick(110.0))
    assert decided == every.handle(Tick(110.0))
    assert [d.job_id for d in decided][-1] == "wide" and len(decided) > 1
    assert pool_state(skipping.pool) == pool_state(every.pool)


@pytest.mark.sources
def test_a_finish_after_a_quiet_pass_runs_one() -> None:
    """``contended`` again, and a 4-GPU job at 102 s that cannot preempt either (the 1-GPU
    jobs free one GPU per node). The tick at 104 s runs a pass that searches for both and
    changes nothing (kept as quiet). A 7-GPU job finishing at 105 s changes neither search's
    victims, yet its node now has room: a pass runs and starts the 4-GPU job there (kept
    quiet across the finish, it did not: the pass is not skipped after a start or stop)."""
    skipping, _ = contended(LasPolicy)
    every, _ = contended(LasEveryPass)
    spec = parse_job({"name": "four", "vc": "vc0", "gpus": 4})
    for policy in (skipping, every):
        policy.check(spec)
        assert policy.handle(Submit("four", spec, 102.0)) == []
        assert policy.handle(Tick(104.0)) == []
    assert isinstance(skipping, LasPolicy) and skipping._quiet is not None  # kept
    started = skipping.handle(Finish("new0", 105.0))
    assert started == every.handle(Finish("new0", 105.0))
    assert [d.job_id for d in started] == ["four"]
    assert pool_state(skipping.pool) == pool_state(every.pool)
