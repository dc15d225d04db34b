"""Given random clusters of two to four VCs and random submissions, endings, cancels,
requeues, node faults and a new cluster config, expect Capacity's pass, which starts a head
whose line is untouched since it was ranked as ``admit`` said then (kept in ``_live``), to
find at every such head the answer ``admit`` gives now, with one or two searches a pass and
borrowing on and off; and so to decide as the Capacity ranking every head afresh. A kept
answer left standing after its VC's use changed (a start, a stop, a preemption within the
pass) shows up as a head started as guaranteed that must borrow, or the reverse."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_capacity_pass import CapacityRankingAfresh, batches, squeezed, steps
from test_properties import PROPERTY_SETTINGS

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import Reconfigure
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.queued import from_config


class CapacityCheckingAdmits(CapacityPolicy):
    """Capacity whose pass checks, before each head it reaches, that the kept answers of the
    untouched lines are ``admit``'s now."""

    reached = 0

    def _next_head(self, heads: Any, out: Any) -> None:
        for _, _, group in heads:
            if group not in self._touched and group in self._live:
                head = self._kept_jobs[group]
                assert self.admit(head) == (True, self._live[group]), group
                self.reached += 1
        super()._next_head(heads, out)


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), borrow=st.booleans(), searches=st.sampled_from([1, 2]))
def test_a_kept_admit_is_admits_answer_now(data: Any, borrow: bool, searches: int) -> None:
    configs = [load_cluster_config(data.draw(squeezed())) for _ in range(2)]
    config = configs[0]
    nodes = sorted({n.name for n in config.nodes()})
    checking = from_config(CapacityCheckingAdmits, config, {}, borrow=borrow)
    afresh = from_config(CapacityRankingAfresh, config, {}, borrow=borrow)
    checking.SEARCHES_PER_PASS = afresh.SEARCHES_PER_PASS = searches
    drawn = data.draw(steps(len(config.vcs), max(len(n.gpus) for n in config.nodes())))

    def another_config() -> Any:
        configs.reverse()
        return configs[0]

    for batch in batches(checking, nodes, drawn, another_config):
        assert checking.handle_batch(batch) == afresh.handle_batch(batch), batch
        assert checking.jobs() == afresh.jobs()
        if isinstance(batch[0], Reconfigure):
            nodes = sorted({n.name for n in batch[0].config.nodes()})
