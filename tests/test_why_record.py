"""The wait reason comes from the search that failed: the record its job's class keeps, built
with the search's own regions, usable leaves and binding (``hived.failures``). Given any cluster
and events, the record a waiting job shows equals a full count of the cells as they are (the
shortcuts a failed one-task search allows included); and the why-text is formatted from the
record, not counted again."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import Cluster
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY_SETTINGS, clusters, events, operations

from labhive.scheduler.core.config import load_cluster_config, virtual_cluster
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.hived.shortfall import ChainRoom, NoRoom


def check_records(sched: HivedScheduler) -> None:
    for job in sched._jobs.values():
        if not job.waiting_tasks or job.cpu_only:
            continue
        assert sched.failure_of(job) == sched.failures.count(job), job.job_id
    for cls in sched.queue.classes.values():
        last = cls.failed
        if last is None or last.moves != sched.tree.moves:
            continue  # cells changed since: the view counts again
        failed = sched._jobs.get(last.job_id)
        if failed is not None and len(failed.waiting_tasks) == last.waiting:
            assert last.record == sched.failures.count(failed), failed.job_id


@pytest.mark.parametrize("cells", [{}, {"gpu_cells": True}, {"sockets": True}])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_a_failed_search_records_what_a_full_count_finds(cells: dict[str, bool], data: Any):
    config = load_cluster_config(data.draw(clusters(**cells)))
    sched = HivedScheduler(config)
    nodes = sorted({n.name for n in config.nodes()})
    for event in events(sched, nodes, data.draw(operations(len(config.vcs)))):
        sched.handle(event)
        check_records(sched)


def test_the_why_text_formats_the_failed_search_record(monkeypatch: pytest.MonkeyPatch):
    c = Cluster(virtual_cluster(nodes=2, gpus_per_node=4, vcs=("a",)))
    c.submit("busy0", vc="a", priority="prod", gpus=3)
    c.submit("busy1", vc="a", priority="prod", gpus=3)
    c.submit("pair", vc="a", priority="prod", gpus=2)  # 2 GPUs free, one on each node
    job = c.sched._jobs["pair"]
    last = c.sched.queue.classes[job.queued_key].failed
    assert last is not None and last.moves == c.sched.tree.moves
    assert last.record == NoRoom(1, (ChainRoom("VGPU-POOL", 2, 2, 0, 0, 0),))

    def counted_again(*_: Any, **__: Any) -> None:
        raise AssertionError("counted again")

    monkeypatch.setattr(c.sched.failures, "count", counted_again)
    assert c.why("pair") == (
        "a has room for 0 of the 1 task of 2 GPUs this job needs; position 1 of 1 in a"
    )


def test_a_job_no_search_tried_yet_is_counted_the_same_way():
    c = Cluster(virtual_cluster(nodes=1, gpus_per_node=4, vcs=("a",)))
    c.submit("busy", vc="a", priority="prod", gpus=2)
    c.submit("gang", vc="a", priority="test", tasks=2, gpus=2)
    job = c.sched._jobs["gang"]
    assert c.sched.queue.classes[job.queued_key].failed is None  # the cheap bound blocked it
    # Counted in tasks, as the gang needs them: one of 2 GPUs fits beside busy's (the text
    # said "0 free of the 2 node-level cells" before, counting whole 4-GPU cells against a
    # need counted in tasks); a task smaller than the cells is named as a task.
    assert c.why("gang") == (
        "a has room for 1 of the 2 tasks of 2 GPUs this gang needs; position 1 of 1 in a"
    )
