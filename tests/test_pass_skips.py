"""Given random submissions (1 to 8 GPUs in one or two tasks), finishes, cancels, requeues,
node faults and ticks on small clusters, expect LAS, Capacity and DRF (with and without
backfill) to decide exactly as they do when every waiting line's head is tried at every pass:
a pass may skip a head only where trying it would fail and change nothing (``_hopeless``:
placement would refuse it, as it refused a one-node gang asking no more in this pass, or it
needs more GPUs than are free, and no preemption search may run for it). And given scattered
free GPUs and lines of 2 to 8 GPUs waiting, expect a pass to ask placement once, not once per
line (issue 34: contended LAS tried 7 heads a pass, DRF 6, nearly all refused)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, Submit
from labhive.scheduler.policies.capacity import CapacityPolicy
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import Gang, NodePool
from labhive.scheduler.policies.queued import QueuedJob, QueuedPolicy, from_config

# LAS with levels that change within a run (its options are known to ``from_config`` as its
# defaults: the ones ``las.create`` gives)
LAS = {"thresholds": (120.0, 600.0), "promote_knob": 0.0, "quantum": 60.0, "same_queue": False}


class TryEveryHead:
    """A policy whose pass tries every head it ranks, as before the skips."""

    def _hopeless(self, head: QueuedJob) -> bool:
        return False

    def _asks_no_less(self, gpus: int, cpu: float, mem: float) -> bool:
        return False


class LasTryingAll(TryEveryHead, LasPolicy):
    pass


class CapacityTryingAll(TryEveryHead, CapacityPolicy):
    pass


class DrfTryingAll(TryEveryHead, DrfPolicy):
    pass


Pair = tuple[type[QueuedPolicy], type[QueuedPolicy], dict[str, Any], dict[str, Any]]
PAIRS: list[Pair] = [  # (skipping, trying all, options, defaults)
    (LasPolicy, LasTryingAll, {}, LAS),
    (LasPolicy, LasTryingAll, {"backfill": False}, LAS),
    (CapacityPolicy, CapacityTryingAll, {"backfill": True}, {"borrow": True}),
    (DrfPolicy, DrfTryingAll, {}, {}),
    (DrfPolicy, DrfTryingAll, {"backfill": True}, {}),
]


@settings(PROPERTY_SETTINGS)
@given(data=st.data(), pair=st.sampled_from(PAIRS))
def test_a_pass_that_skips_hopeless_heads_decides_as_one_trying_every_head(
    data: Any, pair: Pair
) -> None:
    skipping_cls, trying_cls, options, defaults = pair
    config = load_cluster_config(data.draw(clusters()))
    nodes = sorted({n.name for n in config.nodes()})
    skipping = from_config(skipping_cls, config, dict(options), **defaults)
    trying = from_config(trying_cls, config, dict(options), **defaults)
    for batch in batches(skipping, nodes, data.draw(ops(gpus=[1, 1, 2, 3, 4, 6, 8]))):
        if len(batch) == 1:
            assert skipping.handle(batch[0]) == trying.handle(batch[0]), batch
        else:
            assert skipping.handle_batch(batch) == trying.handle_batch(batch), batch
        assert skipping.jobs() == trying.jobs()


class CountingPool(NodePool):
    """The real pool, counting the placements asked of it."""

    asked = 0

    def place(self, job_id: str, gang: Gang) -> Any:
        self.asked += 1
        return super().place(job_id, gang)


def eight_nodes_of_eight() -> Any:
    node = {"childCellType": "GPU", "childCellNumber": 8, "isNodeLevel": True}
    return load_cluster_config(
        {
            "physicalCluster": {
                "cellTypes": {"NODE": node},
                "physicalCells": [{"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(8)],
            },
            "virtualClusters": {"vc0": {"virtualCells": [{"cellType": "NODE", "cellNumber": 8}]}},
        }
    )


def scattered(cls: type[QueuedPolicy], options: dict[str, Any]) -> tuple[QueuedPolicy, int]:
    """Eight 8-GPU nodes, each running a 7-GPU job of its own user (so one GPU free on each);
    users waiting with jobs of 2 to 8 GPUs. Returns the policy and how many placements a
    pass asked for once a 1-GPU job ends (which frees a GPU no waiting job can use)."""
    config = eight_nodes_of_eight()
    policy = from_config(cls, config, dict(options), **(LAS if cls.name == "las" else {}))
    pool = CountingPool(policy.pool.nodes.values(), policy.pool.locality)
    policy.pool = pool
    now = 0.0

    def submit(job_id: str, user: str, gpus: int) -> None:
        nonlocal now
        now += 1.0
        spec = parse_job({"name": job_id, "vc": "vc0", "user": user, "gpus": gpus})
        policy.check(spec)
        policy.handle(Submit(job_id, spec, now))

    for i in range(8):
        submit(f"big{i}", f"u{i}", 7)
    submit("one", "u8", 1)
    for gpus in range(2, 9):
        submit(f"w{gpus}", f"w{gpus}", gpus)
    assert [v.job_id for v in policy.jobs() if v.state == "WAITING"] == [
        f"w{g}" for g in range(2, 9)
    ]
    pool.asked = 0
    assert policy.handle(Finish("one", now + 1.0)) == []  # 1 GPU free on each node
    return policy, pool.asked


def test_a_pass_asks_placement_once_for_lines_that_ask_more_than_a_refused_one() -> None:
    """DRF and LAS ask for the 2-GPU head and no more (LAS still spends its two preemption
    searches of the pass on the first two heads: there is nothing to preempt, but only a
    search finds that out). Trying every head asks 7 times."""
    trying_all = {"drf": DrfTryingAll, "las": LasTryingAll}
    for cls, options, expected in [
        (DrfPolicy, {}, 1),
        (DrfPolicy, {"backfill": True}, 1),
        (LasPolicy, {}, 1),
    ]:
        assert scattered(cls, options)[1] == expected, (cls.name, options)
        assert scattered(trying_all[cls.name], options)[1] == 7, (cls.name, options)
