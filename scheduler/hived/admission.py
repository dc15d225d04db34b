"""Admission: a spec that can never run on this cluster is refused at submit, with a message
saying what would fit (DESIGN.md "Job lifecycle"). One that could run under some state of the
cluster is accepted and, if it cannot start, waits with a why-text instead (``why.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labhive.scheduler.hived.cells import CellTree
from labhive.scheduler.hived.cpu_pool import cpu_only
from labhive.scheduler.hived.vc import VC
from labhive.scheduler.jobs import MAX_GUARANTEED, MIN_GUARANTEED, OPPORTUNISTIC, JobSpec, RoleSpec
from labhive.scheduler.model import SpecRejected

if TYPE_CHECKING:
    from labhive.scheduler.hived.state import HivedState


def reject_if_never_runs(sched: HivedState[Any], spec: JobSpec) -> None:
    """Raise ``SpecRejected`` with what would fit when ``spec`` can never run here."""
    leaf_types = sorted(sched._max_node)
    if spec.priority != OPPORTUNISTIC and not MIN_GUARANTEED <= spec.priority <= MAX_GUARANTEED:
        raise SpecRejected(
            f"priority {spec.priority} is outside HiveD's range; use {OPPORTUNISTIC} "
            f"(opportunistic) or {MIN_GUARANTEED}..{MAX_GUARANTEED} (guaranteed)"
        )
    vc = sched.vcs.by_name.get(spec.vc)
    if vc is None:
        raise SpecRejected(
            f"unknown VC {spec.vc!r}; this cluster has {', '.join(sorted(sched.vcs.by_name))}"
        )
    if cpu_only(sched.config, spec):
        _reject_cpu_only(sched, spec)
        return
    skus = {r.sku for r in spec.roles if r.sku is not None}
    for sku in sorted(skus):
        if sku not in sched._max_node:
            raise SpecRejected(f"unknown skuType {sku!r}; this cluster has {', '.join(leaf_types)}")
    groups = affinity_groups(spec)
    unit = "an affinity group" if len(groups) > 1 else "a gang"
    for group in groups:
        group_skus = {r.sku for r in group if r.sku is not None}
        if spec.gang and len(group_skus) > 1:
            raise SpecRejected(
                f"{unit} stays within one chain, but its roles ask for "
                f"{', '.join(sorted(group_skus))}; give every role the same skuType or set "
                "gangAllocation: false"
            )
    vc_types = {sched.tree.chains[c].leaf_type for c in vc.quota}
    vc_types |= {sched.tree.chains[c.chain].leaf_type for c in vc.pinned}
    pins = {r.pinned_cell for r in spec.roles if r.pinned_cell}
    for pin in sorted(pins):
        if pin not in {c.pinned_id for c in vc.pinned}:
            have = ", ".join(sorted(c.pinned_id or "" for c in vc.pinned)) or "none"
            raise SpecRejected(
                f"pinnedCellId {pin} is not pinned to {vc.name}; its pinned cells: {have}"
            )
    for group in groups:
        if spec.gang and len({r.pinned_cell for r in group if r.pinned_cell}) > 1:
            raise SpecRejected(f"{unit} runs in one pinned cell; give every role the same one")
    if spec.opportunistic and pins:
        raise SpecRejected(
            f"an opportunistic job cannot run in pinned cell {min(pins)} (HiveD gives pinned "
            "cells to their VC's guaranteed jobs only); give it a guaranteed priority or "
            "drop pinnedCellId"
        )
    free_types = {sched.tree.chains[c].leaf_type for c in vc.quota if vc.quota[c]}
    for group in groups:
        if spec.opportunistic or any(r.pinned_cell for r in group):
            continue
        group_skus = {r.sku for r in group if r.sku is not None}
        for sku in sorted(group_skus & vc_types - free_types):
            have = ", ".join(sorted(c.pinned_id or "" for c in vc.pinned))
            raise SpecRejected(
                f"{vc.name} has {sku} cells only in its pinned cells ({have}); name one with "
                "pinnedCellId, or ask for a skuType of its other cells"
            )
    if not spec.opportunistic:
        for sku in sorted(skus - vc_types):
            raise SpecRejected(
                f"{vc.name} has no {sku} cells; it has {describe(sched.tree, vc)}. "
                "Ask for one of those, or submit as priority oppo to use idle cells"
            )
    own = sorted(vc_types) if not spec.opportunistic and vc_types else leaf_types
    for role in spec.roles:
        types = [role.sku] if role.sku else own
        fits = [t for t in types if sched._leaves(role, t, vc.name) <= sched._max_node[t]]
        if not fits:
            biggest = max(sched._max_node[t] for t in types)
            need = sched._leaves(role, types[0], vc.name)
            # A CPU- or memory-heavy task takes more leaf cells than it asks GPUs for.
            unit = "GPUs" if need == role.gpu else "leaf cells"
            mine = f"of {vc.name} " if types is own and own != leaf_types else ""
            raise SpecRejected(
                f"task role {role.name} needs {need} {unit} in one task, but the largest "
                f"{'/'.join(types)} node {mine}has {biggest}; split it into tasks of at most "
                f"{biggest} {unit}"
            )
    if not spec.gang:
        return
    for group in groups:
        _reject_big_gang(sched, spec, vc, group, "this gang" if len(groups) == 1 else "a group")


def affinity_groups(spec: JobSpec) -> list[tuple[RoleSpec, ...]]:
    """A gang's roles by OpenPAI's ``affinityGroupName`` (each group placed whole, apart from
    the others); one group when no role names one. An incremental job: all its roles."""
    if not spec.gang:
        return [spec.roles]
    groups: dict[str | None, list[RoleSpec]] = {}
    for role in spec.roles:
        groups.setdefault(role.affinity_group, []).append(role)
    return [tuple(g) for g in groups.values()]


def _reject_big_gang(
    sched: HivedState[Any], spec: JobSpec, vc: VC, group: tuple[RoleSpec, ...], name: str
) -> None:
    leaf_types = sorted(sched._max_node)
    skus = {r.sku for r in group if r.sku is not None}
    types = sorted(skus) or leaf_types
    need = min(sum(sched._leaves(r, t, spec.vc) * r.instances for r in group) for t in types)
    cluster = sum(sched._type_leaves[t] for t in types)
    gpus = sum(r.gpu * r.instances for r in group)
    what = f"{name} needs {need} {'GPUs' if need == gpus else 'leaf cells'}"
    if need > cluster:
        raise SpecRejected(
            f"{what}, more than the cluster's {cluster}; ask for at most {cluster} or set "
            "gang: false (gangAllocation: false) to start tasks as cells free up"
        )
    if not spec.opportunistic and need > vc.leaves(sched.tree):
        have = vc.leaves(sched.tree)
        raise SpecRejected(
            f"{what}, more than {vc.name} has in all ({describe(sched.tree, vc)}); ask for at "
            f"most {have} or set gang: false (gangAllocation: false)"
        )


def _reject_cpu_only(sched: HivedState[Any], spec: JobSpec) -> None:
    """A task that asks for no GPU must fit one node's CPUs and memory."""
    cpu, memory = sched.cpu.largest()
    for role in spec.roles:
        if role.cpu > cpu or role.memory_mb > memory:
            raise SpecRejected(
                f"task role {role.name} asks for {role.cpu:g} CPUs and {role.memory_mb} MB "
                f"memory, but the largest node has {cpu:g} CPUs and {memory} MB; ask for at "
                "most that per task"
            )


def describe(tree: CellTree, vc: VC) -> str:
    """A VC's cells in a phrase: '4 K80 + 4 M60 GPUs'."""
    parts = []
    for chain in vc.chains() or [c.chain for c in vc.pinned]:
        n = vc.leaves(tree, chain)
        if n:
            parts.append(f"{n} {tree.chains[chain].leaf_type}")
    return " + ".join(parts) + " GPUs" if parts else "no cells"
