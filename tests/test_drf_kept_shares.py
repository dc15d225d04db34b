"""Given a cluster whose GPUs may come with CPU and memory (a SKU), users whose jobs ask for
GPUs, CPU and memory, and a reconfiguration that gives the GPUs other sizes or none, expect the
shares DRF keeps (worked out at each start and stop over the pool's sizes, the GPUs' share
inline where CPU and memory have no size, all again as a reconfigured cluster's pool is made:
``DrfPolicy._add``, ``_reshare``) to be each user's dominant share computed plainly from their
running jobs over the pool as it is, and DRF (with and without backfill) to decide exactly as
one ranking every line's head by such plain shares at every pass."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_drf_head_index import batches, check_index, ops
from test_properties import PROPERTY_SETTINGS, clusters

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.model import Reconfigure
from labhive.scheduler.policies.drf import DrfPolicy
from labhive.scheduler.policies.queued import QueuedJob, from_config


def plain_share(drf: DrfPolicy, user: str) -> float:
    """The user's dominant share from their running jobs, over the pool's sizes now (CPU or
    memory without a size left out)."""
    pool = drf.pool
    running = [j for j in drf._jobs.values() if j.running and j.user == user]
    used = (
        (sum(j.gpus for j in running), pool.total_gpus),
        (sum(j.gang.cpu for j in running), pool.total_cpu),
        (sum(j.gang.memory_mb for j in running), pool.total_memory),
    )
    return max([0.0] + [n / size for n, size in used if 0 < size < float("inf")])


class PlainShareDrf(DrfPolicy):
    """DRF ranking every line's head afresh at each pass, by shares computed plainly."""

    HEAD_INDEX = False

    def group_priority(self, head: QueuedJob) -> Any:
        return (plain_share(self, head.user), head.seq)


def with_sku(cluster: dict[str, Any], sku: tuple[int, int] | None) -> Any:
    """``clusters()``'s cluster, its GPUs given ``sku``'s CPU and memory (MiB) each."""
    if sku is not None:
        cpu, memory = sku
        skus = {"GPU": {"gpu": 1, "cpu": cpu, "memory": f"{memory}Mi"}}
        cluster = {**cluster, "physicalCluster": {**cluster["physicalCluster"], "skuTypes": skus}}
    return load_cluster_config(cluster)


SKUS = st.sampled_from([None, (2, 4096), (4, 2048), (8, 16384)])


@settings(PROPERTY_SETTINGS)
@given(data=st.data())
def test_kept_shares_are_the_plain_shares_through_a_reconfiguration(data: Any) -> None:
    cluster = data.draw(clusters())
    before, after = with_sku(cluster, data.draw(SKUS)), with_sku(cluster, data.draw(SKUS))
    options = {"backfill": data.draw(st.booleans())}
    drf = from_config(DrfPolicy, before, options)
    plain = from_config(PlainShareDrf, before, options)
    steps = data.draw(ops([1, 1, 2, 4]))
    demands = data.draw(
        st.lists(
            st.tuples(st.sampled_from([1, 2, 3, 8]), st.sampled_from([512, 1024, 8192])),
            min_size=len(steps),
            max_size=len(steps),
        )
    )
    steps = [
        ((kind, {**arg, "cpu": cpu, "memory_mb": mem}) if kind == "submit" else (kind, arg), same)
        for ((kind, arg), same), (cpu, mem) in zip(steps, demands, strict=True)
    ]
    at = data.draw(st.integers(0, len(steps)))
    nodes = sorted({n.name for n in before.nodes()})
    for i, batch in enumerate(batches(drf, nodes, steps)):
        assert drf.handle_batch(batch) == plain.handle_batch(batch), batch
        if i == at:  # (after the batch: the next one is built, and checked, on the new cluster)
            event = Reconfigure(after, batch[-1].time)
            assert drf.handle(event) == plain.handle(event)
        assert drf.jobs() == plain.jobs()
        for job in drf._jobs.values():
            assert drf.group_priority(job)[0] == plain_share(drf, job.user)
        check_index(drf)
