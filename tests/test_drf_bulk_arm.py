"""Given DRF with backfill (a line per user and GPU count) and random submissions by several
users, finishes, cancels, requeues and node faults, expect a pass to begin by marking ``lazy``
exactly the lines of each user whose share moved since the last pass began, each armed with
the user's share then (``DrfPolicy._arm``, two bulk updates), as the plain loop over those
users does, and to decide exactly as DRF arming them so; and ``HeadIndex.best`` (which reads
the index's sets where it meets a kind, not once a call) to answer as before on the same
decisions (``test_drf_head_index.py`` holds it to the scan)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches, check_index, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.head_index import HeadIndex
from labhive.scheduler.policies.queued import from_config


class LoopArmDrf(DrfPolicy):
    """DRF arming each risen user's lines in a plain loop, one user at a time."""

    def _arm(self, index: HeadIndex) -> None:
        for user in self._risen:
            self._armed[user] = self._share[user]
            index.lazy.update(self._split.get(user, ()))
        self._risen.clear()


class Arms:
    """What each pass's ``_arm`` left: the lazy lines and the armed shares."""

    def __init__(self, drf: DrfPolicy) -> None:
        self.seen: list[tuple[frozenset[Any], dict[str, float]]] = []
        arm = drf._arm

        def recorded(index: HeadIndex) -> None:
            arm(index)
            self.seen.append((frozenset(index.lazy), dict(drf._armed)))

        drf._arm = recorded  # type: ignore[method-assign]


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_a_pass_arms_the_risen_users_lines_as_the_plain_loop(data: Any) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    bulk = from_config(DrfPolicy, config, {"backfill": True})
    loop = from_config(LoopArmDrf, config, {"backfill": True})
    arms, loop_arms = Arms(bulk), Arms(loop)
    for batch in batches(bulk, nodes, data.draw(ops([1, 1, 2, 3, 4]))):
        assert bulk.handle_batch(batch) == loop.handle_batch(batch), batch
        assert bulk.jobs() == loop.jobs()
        assert arms.seen == loop_arms.seen
        check_index(bulk)
