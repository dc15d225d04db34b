"""Helios' cluster model: each VC owns its own nodes (``vc_nodes=true``; ``--model helios``).

In Helios (Hu et al., SC '21) a VC is a set of whole nodes: its jobs run on those nodes only,
and another VC's idle GPUs are out of reach. ``per_vc=true`` only caps a VC's GPU count on a
shared pool, so a VC's jobs may still be placed on any node; with whole nodes per VC a gang
must fit the VC's own nodes, and fragmentation inside a VC is the VC's own (measured in issue
34: FIFO 33% and SJF 12% off Helios' figures with the GPU-count cap).

``VcNodes`` is one queue policy per VC, each built on a pool of the VC's nodes, and routes
every event to the VC's policy: VCs are independent, as they are in Helios' simulator. Which
nodes a VC owns: ``owned_nodes`` hands out each chain's nodes in order, VC by VC in the
config's order, as many as the VC's virtual cells hold GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.model import (
    Adopt,
    Cancel,
    ClusterView,
    Decision,
    Event,
    Finish,
    JobView,
    NodeDown,
    NodeUp,
    Reconfigure,
    Requeue,
    SpecRejected,
    Submit,
    TasksEnded,
    Tick,
    handle_together,
)
from labhive.scheduler.policies.node_pool import NodePool, PoolNode
from labhive.scheduler.policies.queued import QueuedPolicy, from_config, policy_options

if TYPE_CHECKING:
    from labhive.scheduler.core.config import ClusterConfig, NodeSpec
    from labhive.scheduler.core.jobs import JobSpec

Q = TypeVar("Q", bound=QueuedPolicy)


def per_vc_from_config(
    cls: type[Q], config: ClusterConfig, options: dict[str, Any], **defaults: Any
) -> Q | VcNodes:
    """``from_config`` for the policies with per-VC modes (FIFO, SJF, LAS): ``per_vc=true``
    caps each VC's GPUs on the shared pool, ``vc_nodes=true`` gives each VC its own nodes."""
    options = dict(options)
    raw = options.pop("vc_nodes", False)
    if not policy_options({"vc_nodes": raw}, vc_nodes=False)["vc_nodes"]:
        return from_config(cls, config, options, **defaults)
    opts = policy_options(options, locality="consolidated", backfill=cls.BACKFILL, **defaults)
    if opts.pop("per_vc"):
        raise UserError(
            "per_vc (a GPU cap per VC on a shared pool) and vc_nodes (each VC on its own nodes) "
            "are two models of VCs; give one"
        )
    locality = opts.pop("locality")
    return VcNodes(config, lambda pool, gpus: cls(pool, gpus, **opts), locality)


def owned_nodes(config: ClusterConfig) -> dict[str, list[NodeSpec]]:
    """VC -> the whole nodes it owns. A VC's virtual cells in a chain come to some number of
    GPUs; it takes that many GPUs' worth of the chain's nodes, in the chain's order."""
    by_chain: dict[str, list[NodeSpec]] = {}
    for node in config.nodes():
        by_chain.setdefault(node.chain, []).append(node)
    taken = dict.fromkeys(by_chain, 0)
    out: dict[str, list[NodeSpec]] = {}
    for name, vc in config.vcs.items():
        mine = out.setdefault(name, [])
        for cell in vc.cells:
            nodes = by_chain.get(cell.chain, [])
            want = cell.number * _leaves(config, cell.cell_type)
            per_node = len(nodes[0].gpus) if nodes else 0
            if per_node == 0 or want % per_node:
                raise UserError(
                    f"VC {name}: {cell.number} x {'.'.join(cell.path)} is not a whole number of "
                    f"{per_node}-GPU nodes; the VC-owns-its-nodes model (vc_nodes, --model "
                    "helios) needs node-level virtual cells (a machine list with --vcs gives them)"
                )
            start = taken[cell.chain]
            taken[cell.chain] = start + want // per_node
            mine.extend(nodes[start : taken[cell.chain]])
    return out


def _leaves(config: ClusterConfig, cell_type: str) -> int:
    ctype = config.cell_types[cell_type]
    return 1 if ctype.child is None else ctype.child_number * _leaves(config, ctype.child)


def _pool(config: ClusterConfig, nodes: list[NodeSpec], locality: Any) -> NodePool:
    pool_nodes = []
    for spec in nodes:
        sku = config.sku(spec.sku) if spec.sku else None
        n = len(spec.gpus)
        cpu = sku.cpu * n if sku is not None and sku.cpu > 0 else math.inf
        mem = sku.memory_mb * n if sku is not None and sku.memory_mb > 0 else math.inf
        pool_nodes.append(PoolNode(spec.name, spec.sku, spec.gpus, cpu=cpu, memory_mb=mem))
    return NodePool(pool_nodes, locality)


class VcNodes:
    """A queue policy per VC, each on the VC's own nodes (see the module's docstring)."""

    def __init__(
        self,
        config: ClusterConfig,
        build: Callable[[NodePool, dict[str, int]], QueuedPolicy],
        locality: Any = "consolidated",
    ) -> None:
        self._subs: dict[str, QueuedPolicy] = {}
        self._node_vc: dict[str, str] = {}
        for vc, nodes in owned_nodes(config).items():
            if not nodes:
                continue  # a VC without whole nodes runs nothing: its jobs are rejected
            gpus = sum(len(n.gpus) for n in nodes)
            self._subs[vc] = build(_pool(config, nodes, locality), {vc: gpus})
            self._node_vc.update((n.name, vc) for n in nodes)
        self._job_vc: dict[str, str] = {}
        first = next(iter(self._subs.values()), None)
        self.name = first.name if first is not None else "vc_nodes"
        self.preemptive = bool(first is not None and first.preemptive)

    def check(self, spec: JobSpec) -> None:
        self._sub_for(spec).check(spec)

    def _sub_for(self, spec: JobSpec) -> QueuedPolicy:
        sub = self._subs.get(spec.vc)
        if sub is None:
            raise SpecRejected(
                f"VC {spec.vc!r} owns no whole node here (VCs with nodes: "
                f"{', '.join(sorted(self._subs)) or 'none'}); give it nodes in the cluster "
                "config or --vcs"
            )
        return sub

    def handle(self, event: Event) -> list[Decision]:
        return self.handle_batch([event])

    def handle_batch(self, events: Sequence[Event]) -> list[Decision]:
        """Each VC's events to its policy, together (ticks to every VC); decisions in VC
        order, so a run is deterministic."""
        routed: dict[str, list[Event]] = {}
        for event in events:
            for vc in self._route(event):
                routed.setdefault(vc, []).append(event)
        out: list[Decision] = []
        for vc, sub in self._subs.items():
            if vc in routed:
                out.extend(handle_together(sub, routed[vc]))
        return out

    def _route(self, event: Event) -> Sequence[str]:
        if isinstance(event, (Submit, Adopt)):
            self._sub_for(event.spec)
            self._job_vc[str(event.job_id)] = event.spec.vc
            return (event.spec.vc,)
        if isinstance(event, (Finish, Cancel, Requeue, TasksEnded)):
            job_id = str(event.job_id)
            vc = self._job_vc.get(job_id)
            if isinstance(event, (Finish, Cancel)):
                self._job_vc.pop(job_id, None)
            return (vc,) if vc is not None else ()
        if isinstance(event, (NodeDown, NodeUp)):
            owner = self._node_vc.get(event.node)
            return (owner,) if owner is not None else ()
        if isinstance(event, Tick):
            return tuple(self._subs)
        if isinstance(event, Reconfigure):
            raise UserError(
                "the VC-owns-its-nodes model (vc_nodes) does not take a new cluster config "
                "while it runs; start a new run on the new config"
            )
        return ()

    def job(self, job_id: str) -> JobView | None:
        vc = self._job_vc.get(job_id)
        return self._subs[vc].job(job_id) if vc is not None else None

    def jobs(self) -> list[JobView]:
        return [view for sub in self._subs.values() for view in sub.jobs()]

    def cluster(self) -> ClusterView:
        views = [sub.cluster() for sub in self._subs.values()]
        return ClusterView(
            nodes=tuple(n for v in views for n in v.nodes),
            vcs={name: vc for v in views for name, vc in v.vcs.items()},
        )

    def next_wakeup(self) -> float | None:
        times = [t for sub in self._subs.values() if (t := sub.next_wakeup()) is not None]
        return min(times) if times else None
