"""Given random clusters of two to four VCs and random submissions, endings, requeues, node
faults and a new cluster config, expect Capacity, whose submission tells that it joined behind
its line's kept head without fetching the line's head (the kept head still waits and its VC's
share has not changed since it was ranked: ``CapacityPass._schedule``), to decide exactly as a
Capacity that fetches the head at every submission (the pass before this cut). A kept head
trusted after a stopped job was requeued ahead of it, or after it started, would leave the
line unranked and show up as a different start or order.

And given a VC whose head waits, kept by a pass, expect a job joining behind it to fetch no
head, and one joining after the VC's share changed to fetch it (and rank the line again)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_capacity_pass import batches, eight_vcs_of_a_node, squeezed, steps
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Reconfigure, Submit, Tick
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.queued import from_config
from labhive.scheduler.policies.queued_job import NOT_WAITING


class CapacityFetchingHeads(CapacityPolicy):
    """Capacity whose submission fetches its line's head (``_head``) and compares it with the
    kept one, as the pass did before the kept head was trusted."""

    def _schedule(self, out: Any, only: Any = None, groups: Any = None) -> None:
        if only is None:
            super()._schedule(out, only, groups)
            return
        group = only.group
        head = self._head(group)
        if head is only and head is not None:
            self._begin_pass()
            self._try(head, out)
        elif head is self._standing.get(group):  # (kept, its share unchanged since ranked)
            self._touched.discard(group)


class CapacityTrustingKept(CapacityPolicy):
    """Capacity that checks, at each submission its pass settles without a fetch, that the
    line's head is the kept one indeed (fetched here on the side: ``_head`` only drops stale
    entries)."""

    def _schedule(self, out: Any, only: Any = None, groups: Any = None) -> None:
        if only is not None and self._line_heads is not None:
            kept = self._standing.get(only.group)
            if kept is not None and kept.group is not NOT_WAITING:
                assert self._head(only.group) is kept
        super()._schedule(out, only, groups)


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), borrow=st.booleans())
def test_a_submission_behind_a_kept_head_decides_as_one_fetching_the_head(
    data: Any, borrow: bool
) -> None:
    configs = [load_cluster_config(data.draw(squeezed())) for _ in range(2)]
    config = configs[0]
    nodes = sorted({n.name for n in config.nodes()})
    trusting = from_config(CapacityTrustingKept, config, {}, borrow=borrow)
    fetching = from_config(CapacityFetchingHeads, config, {}, borrow=borrow)
    drawn = data.draw(steps(len(config.vcs), max(len(n.gpus) for n in config.nodes())))

    def another_config() -> Any:
        configs.reverse()
        return configs[0]

    for batch in batches(trusting, nodes, drawn, another_config):
        if len(batch) == 1:
            assert trusting.handle(batch[0]) == fetching.handle(batch[0]), batch
        else:
            assert trusting.handle_batch(batch) == fetching.handle_batch(batch), batch
        assert trusting.jobs() == fetching.jobs()
        assert trusting._touched == fetching._touched  # the same lines left to rank
        if isinstance(batch[0], Reconfigure):
            nodes = sorted({n.name for n in batch[0].config.nodes()})


@pytest.mark.sources
def test_a_job_joining_behind_a_kept_head_fetches_no_head(monkeypatch: Any) -> None:
    """Eight VCs of one 8-GPU node each, all busy; vc0's 8-GPU head waits, kept by a pass. A
    job joining behind it fetches no head; after vc0's share changes (a stop marks it), the
    next one does, and the line stays to be ranked again."""
    policy = from_config(CapacityPolicy, eight_vcs_of_a_node(), {})

    def submit(job_id: str, vc: str) -> None:
        spec = parse_job({"name": job_id, "vc": vc, "gpus": 8})
        policy.check(spec)
        policy.handle(Submit(job_id, spec, 0.0))

    for v in range(8):
        submit(f"run{v}", f"vc{v}")
    submit("head", "vc0")
    assert policy.handle(Tick(1.0)) == []  # a full pass: vc0's head kept
    fetched: list[Any] = []
    real = policy._head

    def fetching(group: Any) -> Any:
        fetched.append(group)
        return real(group)

    monkeypatch.setattr(policy, "_head", fetching)
    submit("behind", "vc0")
    assert fetched == [] and "vc0" not in policy._touched
    policy._share_changed("vc0")  # (what a stop of one of vc0's jobs marks)
    submit("behind2", "vc0")
    assert fetched == ["vc0"] and "vc0" in policy._touched
