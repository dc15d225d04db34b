"""Given random submissions by several users (some with time limits), finishes, cancels,
requeues and node faults on a drawn cluster, expect DRF with its start and stop hooks bound
once for its mode (``DrfPolicy._bind_hooks``: a start without backfill is the usage sum alone,
a stop re-files only the user's line that waits, a pass without backfill arms nothing) to
decide exactly as DRF with the general hooks, which re-file every waiting line of a user
whose share moved at once (``priority_changed``), with and without backfill, and to keep the
same shares and index."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches, check_index, nodes_of_eight, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.queued import QueuedPolicy, from_config


class GeneralHooksDrf(DrfPolicy):
    """DRF whose starts and stops run the general hooks: the usage sum, then every waiting
    line of the user touched (re-filed before the next pass by the share now)."""

    def _bind_hooks(self) -> None:
        pass


@pytest.mark.sources
@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_drf_with_hooks_bound_for_its_mode_decides_as_the_general_hooks(data: Any) -> None:
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    options = {"backfill": data.draw(st.booleans())}
    bound = from_config(DrfPolicy, config, options)
    general = from_config(GeneralHooksDrf, config, options)
    assert "on_started" in vars(bound) and "on_started" not in vars(general)
    for batch in batches(bound, nodes, data.draw(ops([1, 1, 2, 3, 4]))):
        assert bound.handle_batch(batch) == general.handle_batch(batch), batch
        assert bound.jobs() == general.jobs()
        assert bound._share == general._share
        check_index(bound)


@pytest.mark.sources
def test_a_pass_without_backfill_arms_nothing() -> None:
    """Without backfill no user's lines are re-filed when met: the pass is the queue's own."""
    config = nodes_of_eight(1)
    plain = from_config(DrfPolicy, config, {})
    backfill = from_config(DrfPolicy, config, {"backfill": True})
    assert plain._indexed_pass.func is QueuedPolicy._indexed_pass  # type: ignore[attr-defined]
    assert "_indexed_pass" not in vars(backfill)
