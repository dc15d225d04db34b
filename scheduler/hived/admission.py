"""Admission: a spec that can never run on this cluster is refused at submit, with a message
saying what would fit (DESIGN.md "Job lifecycle"). One that could run under some state of the
cluster is accepted and, if it cannot start, waits with a why-text instead (``why.py``).

Whether a job can ever run depends on the config alone, never on who uses which cells now: so
``Admission.of`` reads the numbers it needs from a ``ClusterConfig`` once (each VC's chains,
quota and pinned cells, each leaf type's SKU, largest node and total), and
``reject_if_never_runs`` is a pure function of that record and a spec. The scheduler builds the
record with its state (``HivedScheduler._load``, again on a reconfigure); the service builds it
once and checks every submission with it, in any thread, without a policy instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from labhive.scheduler.core.config import ClusterConfig, PhysicalCell, SkuType
from labhive.scheduler.core.jobs import (
    MAX_GUARANTEED,
    MIN_GUARANTEED,
    OPPORTUNISTIC,
    JobSpec,
    RoleSpec,
)
from labhive.scheduler.core.model import SpecRejected
from labhive.scheduler.hived.cells import Chain
from labhive.scheduler.hived.cpu_pool import default_capacity
from labhive.scheduler.hived.job import leaves_on


@dataclass(frozen=True, slots=True)
class PinnedFacts:
    """A VC's pinned cell: its id, its chain and its leaf cells."""

    id: str
    chain: str
    leaves: int


@dataclass(frozen=True, slots=True)
class VCFacts:
    """What admission knows of one VC."""

    name: str
    #: chain -> level -> cells of its quota (pinned cells excluded; a chain it has only pinned
    #: cells in maps to nothing), in config order.
    quota: Mapping[str, Mapping[int, int]]
    pinned: tuple[PinnedFacts, ...]
    types: frozenset[str]  # leaf types of its chains, pinned ones included
    free_types: frozenset[str]  # leaf types of the chains it has a quota in
    sizing_types: tuple[str, ...]  # ``types`` sorted: what sizes a role without a skuType
    leaves: int  # its guaranteed leaf cells in all, pinned ones included
    cells: str  # its cells in a phrase: '4 K80 + 4 M60 GPUs'
    user_max_gpus: int | None = None  # ``userLimits.maxRunningGpus``: one user's most at once

    @property
    def pinned_ids(self) -> frozenset[str]:
        return frozenset(p.id for p in self.pinned)

    def pinned_list(self) -> str:
        """Its pinned cells' ids, sorted and comma-separated ('' when none)."""
        return ", ".join(sorted(p.id for p in self.pinned))


@dataclass(frozen=True, slots=True)
class Admission:
    """The numbers admission reads, derived once from a config (``of``)."""

    vcs: Mapping[str, VCFacts]
    skus: Mapping[str, SkuType]  # leaf type -> what one of its leaf cells offers
    has_skus: bool  # the config declares ``skuTypes`` (else a leaf cell is one GPU)
    max_node: Mapping[str, int]  # leaf type -> leaf cells of its largest node
    type_leaves: Mapping[str, int]  # leaf type -> leaf cells of that type in the cluster
    largest_node: tuple[float, int]  # the most CPUs and memory (MB) of one node

    @classmethod
    def of(cls, config: ClusterConfig) -> Admission:
        """One walk of the config's cells; no cell tree is built (for the full Philly cluster,
        2,490 GPUs, well under a millisecond)."""
        chains: dict[str, Chain] = {}
        type_leaves: dict[str, int] = {}
        node_gpus: dict[str, int] = {}  # a node in two chains: all its GPUs (as ``CpuPool``)
        for top in config.physical_cells:
            chain = chains.get(top.chain)
            if chain is None:
                chain = chains[top.chain] = Chain(config, top.chain)
            type_leaves[chain.leaf_type] = type_leaves.get(chain.leaf_type, 0) + _leaves(top)
            _count_node_gpus(config, top, node_gpus)
        max_node = {
            leaf: max(c.node_leaves for c in chains.values() if c.leaf_type == leaf)
            for leaf in {c.leaf_type for c in chains.values()}
        }
        return cls(
            vcs=MappingProxyType({name: _vc_facts(config, chains, name) for name in config.vcs}),
            skus=MappingProxyType({t: config.sku(t) for t in max_node}),
            has_skus=bool(config.skus),
            max_node=MappingProxyType(max_node),
            type_leaves=MappingProxyType(type_leaves),
            largest_node=_largest_node(config, node_gpus),
        )

    @property
    def leaf_types(self) -> list[str]:
        return sorted(self.max_node)

    def leaves(self, role: RoleSpec, leaf_type: str, vc: str | None = None) -> int:
        """Leaf cells a task of ``role`` takes on ``leaf_type``; a role without a skuType in
        ``vc`` is sized by the VC's smallest SKU, as the scheduler sizes it (``sizing``)."""
        if vc is not None and role.sku is None and self.has_skus:
            facts = self.vcs.get(vc)
            if facts is not None and facts.sizing_types:
                return max(self.leaves(role, t) for t in facts.sizing_types)
        return leaves_on(role, self.skus[leaf_type])

    def cpu_only(self, spec: JobSpec) -> bool:
        """As ``cpu_pool.cpu_only``: no skuTypes, and no role asks for a GPU."""
        return not self.has_skus and all(r.gpu == 0 for r in spec.roles)


def _leaves(cell: PhysicalCell) -> int:
    """Leaf cells under ``cell``, counted as ``CellTree`` counts them."""
    if not cell.children:
        return 1
    return sum(_leaves(c) for c in cell.children)


def _count_node_gpus(config: ClusterConfig, cell: PhysicalCell, out: dict[str, int]) -> None:
    if config.cell_types[cell.cell_type].is_node_level:
        name = cell.node or ""
        out[name] = out.get(name, 0) + _leaves(cell)
        return
    for child in cell.children:
        _count_node_gpus(config, child, out)


def _largest_node(config: ClusterConfig, node_gpus: Mapping[str, int]) -> tuple[float, int]:
    """The most CPUs and memory of one node, as ``CpuPool.largest`` (without the pool)."""
    rooms = [config.node_resources.get(n) or default_capacity(g) for n, g in node_gpus.items()]
    return (
        max((float(cpu) for cpu, _ in rooms), default=0.0),
        max((int(memory) for _, memory in rooms), default=0),
    )


def _vc_facts(config: ClusterConfig, chains: Mapping[str, Chain], name: str) -> VCFacts:
    spec = config.vcs[name]
    quota: dict[str, dict[int, int]] = {}
    for want in spec.cells:
        level = config.cell_types[want.cell_type].level
        levels = quota.setdefault(want.chain, {})
        levels[level] = levels.get(level, 0) + want.number
    pinned = []
    for pid in spec.pinned:
        cell = config.pinned[pid]
        pinned.append(PinnedFacts(pid, cell.chain, _leaves(cell)))
        quota.setdefault(cell.chain, {})

    def leaves_in(chain: str | None) -> int:
        total = 0
        for c, levels in quota.items():
            if chain is None or c == chain:
                total += sum(chains[c].level_leaves[lv] * n for lv, n in levels.items())
        return total + sum(p.leaves for p in pinned if chain is None or p.chain == chain)

    types = frozenset(chains[c].leaf_type for c in quota)
    parts = [f"{n} {chains[c].leaf_type}" for c in quota if (n := leaves_in(c))]
    return VCFacts(
        name=name,
        quota=MappingProxyType({c: MappingProxyType(levels) for c, levels in quota.items()}),
        pinned=tuple(pinned),
        types=types,
        free_types=frozenset(chains[c].leaf_type for c in quota if quota[c]),
        sizing_types=tuple(sorted(types)),
        leaves=leaves_in(None),
        cells=" + ".join(parts) + " GPUs" if parts else "no cells",
        user_max_gpus=spec.user_max_running_gpus,
    )


def _reject_over_cap(spec: JobSpec, vc: VCFacts) -> None:
    """A job whose first start alone passes the VC's per-user cap would wait forever."""
    cap = vc.user_max_gpus
    if cap is None:
        return
    need = spec.total_gpus if spec.gang else max(r.gpu for r in spec.roles)
    if need > cap:
        what = "this gang needs" if spec.gang and spec.task_count > 1 else "a task needs"
        raise SpecRejected(
            f"{what} {need} GPUs at once, but {vc.name} lets one user run at most {cap} "
            f"(userLimits.maxRunningGpus); ask for at most {cap} GPUs"
            + (" or set gang: false to start tasks one by one" if spec.gang else "")
        )


def reject_if_never_runs(admission: Admission, spec: JobSpec) -> None:
    """Raise ``SpecRejected`` with what would fit when ``spec`` can never run here."""
    leaf_types = admission.leaf_types
    if spec.priority != OPPORTUNISTIC and not MIN_GUARANTEED <= spec.priority <= MAX_GUARANTEED:
        raise SpecRejected(
            f"priority {spec.priority} is outside HiveD's range; use {OPPORTUNISTIC} "
            f"(opportunistic) or {MIN_GUARANTEED}..{MAX_GUARANTEED} (guaranteed)"
        )
    vc = admission.vcs.get(spec.vc)
    if vc is None:
        raise SpecRejected(
            f"unknown VC {spec.vc!r}; this cluster has {', '.join(sorted(admission.vcs))}"
        )
    if admission.cpu_only(spec):
        _reject_cpu_only(admission, spec)
        return
    skus = {r.sku for r in spec.roles if r.sku is not None}
    for sku in sorted(skus):
        if sku not in admission.max_node:
            raise SpecRejected(f"unknown skuType {sku!r}; this cluster has {', '.join(leaf_types)}")
    groups = affinity_groups(spec)
    _reject_split_groups(spec, groups)
    _reject_pins(spec, vc, groups)
    _reject_types(spec, vc, groups, skus)
    _reject_big_tasks(admission, spec, vc)
    _reject_over_cap(spec, vc)
    if not spec.gang:
        return
    for group in groups:
        _reject_big_gang(admission, spec, vc, group, "this gang" if len(groups) == 1 else "a group")


def affinity_groups(spec: JobSpec) -> list[tuple[RoleSpec, ...]]:
    """A gang's roles by OpenPAI's ``affinityGroupName`` (each group placed whole, apart from
    the others); one group when no role names one. An incremental job: all its roles."""
    if not spec.gang:
        return [spec.roles]
    groups: dict[str | None, list[RoleSpec]] = {}
    for role in spec.roles:
        groups.setdefault(role.affinity_group, []).append(role)
    return [tuple(g) for g in groups.values()]


def _unit(groups: list[tuple[RoleSpec, ...]]) -> str:
    return "an affinity group" if len(groups) > 1 else "a gang"


def _reject_split_groups(spec: JobSpec, groups: list[tuple[RoleSpec, ...]]) -> None:
    """A gang (or each affinity group) runs in one chain, so on one leaf type."""
    for group in groups:
        group_skus = {r.sku for r in group if r.sku is not None}
        if spec.gang and len(group_skus) > 1:
            raise SpecRejected(
                f"{_unit(groups)} stays within one chain, but its roles ask for "
                f"{', '.join(sorted(group_skus))}; give every role the same skuType or set "
                "gangAllocation: false"
            )


def _reject_pins(spec: JobSpec, vc: VCFacts, groups: list[tuple[RoleSpec, ...]]) -> None:
    """A pinned cell must be the VC's, one per gang, and guaranteed jobs' only."""
    pins = {r.pinned_cell for r in spec.roles if r.pinned_cell}
    for role in spec.roles:
        if role.pinned_cell and role.sku is not None:
            # OpenPAI's rest server refuses it ("only one is allowed"): the pinned cell
            # fixes the leaf type, and a skuType that disagreed would never place.
            raise SpecRejected(
                f"task role {role.name} names both skuType {role.sku} and pinnedCellId "
                f"{role.pinned_cell}; OpenPAI allows only one (a pinned cell has one leaf "
                "type): drop skuType"
            )
    for pin in sorted(pins):
        if pin not in vc.pinned_ids:
            have = vc.pinned_list() or "none"
            raise SpecRejected(
                f"pinnedCellId {pin} is not pinned to {vc.name}; its pinned cells: {have}"
            )
    for group in groups:
        if spec.gang and len({r.pinned_cell for r in group if r.pinned_cell}) > 1:
            raise SpecRejected(
                f"{_unit(groups)} runs in one pinned cell; give every role the same one"
            )
    if spec.opportunistic and pins:
        raise SpecRejected(
            f"an opportunistic job cannot run in pinned cell {min(pins)} (HiveD gives pinned "
            "cells to their VC's guaranteed jobs only); give it a guaranteed priority or "
            "drop pinnedCellId"
        )


def _reject_types(
    spec: JobSpec, vc: VCFacts, groups: list[tuple[RoleSpec, ...]], skus: set[str]
) -> None:
    """A guaranteed job asks for leaf types its VC has (outside its pinned cells, unless it
    names one)."""
    for group in groups:
        if spec.opportunistic or any(r.pinned_cell for r in group):
            continue
        group_skus = {r.sku for r in group if r.sku is not None}
        for sku in sorted(group_skus & vc.types - vc.free_types):
            raise SpecRejected(
                f"{vc.name} has {sku} cells only in its pinned cells ({vc.pinned_list()}); name "
                "one with pinnedCellId, or ask for a skuType of its other cells"
            )
    if not spec.opportunistic:
        for sku in sorted(skus - vc.types):
            raise SpecRejected(
                f"{vc.name} has no {sku} cells; it has {vc.cells}. "
                "Ask for one of those, or submit as priority oppo to use idle cells"
            )


def _reject_big_tasks(admission: Admission, spec: JobSpec, vc: VCFacts) -> None:
    """Every task fits one node (of the VC's leaf types, for a guaranteed job)."""
    leaf_types = admission.leaf_types
    own = sorted(vc.types) if not spec.opportunistic and vc.types else leaf_types
    for role in spec.roles:
        types = [role.sku] if role.sku else own
        fits = [t for t in types if admission.leaves(role, t, vc.name) <= admission.max_node[t]]
        if not fits:
            biggest = max(admission.max_node[t] for t in types)
            need = admission.leaves(role, types[0], vc.name)
            # A CPU- or memory-heavy task takes more leaf cells than it asks GPUs for.
            unit = "GPUs" if need == role.gpu else "leaf cells"
            mine = f"of {vc.name} " if types is own and own != leaf_types else ""
            raise SpecRejected(
                f"task role {role.name} needs {need} {unit} in one task, but the largest "
                f"{'/'.join(types)} node {mine}has {biggest}; split it into tasks of at most "
                f"{biggest} {unit}"
            )


def _reject_big_gang(
    admission: Admission, spec: JobSpec, vc: VCFacts, group: tuple[RoleSpec, ...], name: str
) -> None:
    skus = {r.sku for r in group if r.sku is not None}
    types = sorted(skus) or admission.leaf_types
    need = min(sum(admission.leaves(r, t, spec.vc) * r.instances for r in group) for t in types)
    cluster = sum(admission.type_leaves[t] for t in types)
    gpus = sum(r.gpu * r.instances for r in group)
    what = f"{name} needs {need} {'GPUs' if need == gpus else 'leaf cells'}"
    if need > cluster:
        raise SpecRejected(
            f"{what}, more than the cluster's {cluster}; ask for at most {cluster} or set "
            "gang: false (gangAllocation: false) to start tasks as cells free up"
        )
    if not spec.opportunistic and need > vc.leaves:
        raise SpecRejected(
            f"{what}, more than {vc.name} has in all ({vc.cells}); ask for at "
            f"most {vc.leaves} or set gang: false (gangAllocation: false)"
        )


def _reject_cpu_only(admission: Admission, spec: JobSpec) -> None:
    """A task that asks for no GPU must fit one node's CPUs and memory."""
    cpu, memory = admission.largest_node
    for role in spec.roles:
        if role.cpu > cpu or role.memory_mb > memory:
            raise SpecRejected(
                f"task role {role.name} asks for {role.cpu:g} CPUs and {role.memory_mb} MB "
                f"memory, but the largest node has {cpu:g} CPUs and {memory} MB; ask for at "
                "most that per task"
            )
