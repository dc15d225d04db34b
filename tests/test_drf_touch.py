"""Given one 2-GPU node that ann's and bob's jobs fill and a 2-GPU job of ann's that waits,
expect a job that heads a line (joins an empty one, or leaves it at its head) to mark that line
for re-filing before the next pass (``HeadIndex.touch``, the ``dirty`` set's own ``add``, so
that a join or leave runs no Python frame), one that joins behind the head to mark nothing,
and the next pass to file each marked line and only those."""

from __future__ import annotations

import pytest
from test_drf_head_index import check_index, files_asked, one_node

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, Submit
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.queued import from_config


@pytest.mark.sources
def test_a_job_heading_a_line_marks_it_and_the_next_pass_files_it() -> None:
    drf = from_config(DrfPolicy, one_node(2), {})
    index = drf._index
    assert index is not None
    assert index.touch == index.dirty.add  # (bound to the set: no frame of its own)

    def submit(job_id: str, user: str, gpus: int, now: float) -> list[str]:
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        return [d.job_id for d in drf.handle(Submit(job_id, spec, now))]

    # (a0 and b0 started at once, each leaving its line at its head: both marked)
    assert submit("a0", "ann", 1, 0) + submit("b0", "bob", 1, 1) == ["a0", "b0"]
    assert index.dirty == {"ann", "bob"}
    assert drf.handle(Finish("b0", 2)) == []  # (nothing waits: no pass, both still marked)
    assert submit("a1", "ann", 2, 3) == []  # heads ann's line: marked (1 GPU free)
    assert submit("a2", "ann", 1, 4) == []  # behind a1: nothing more marked
    assert index.dirty == {"ann", "bob"}
    filed = files_asked(index)
    # a pass: the marked lines filed (bob's empty), a1 starts, ann's filed again (a2 heads)
    assert [d.job_id for d in drf.handle(Finish("a0", 5))] == ["a1"]
    assert sorted(filed) == ["ann", "ann", "bob"] and not index.dirty
    check_index(drf)
