"""What a job asks for, as HiveD sizes it: leaf cells per task (by the SKU of the chain, or of
its VC), the chains it may run in, and the units placed whole (a gang, an affinity group, a task).

Both the queue (a class's least need) and the search (each chain's task needs) ask this, on every
attempt, so the answers are cached by the part (``HivedScheduler.sizing``) until the config
changes (``base._load`` makes the part anew).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.hived.cells import CellTree
from labhive.scheduler.hived.job import Job, leaves_needed
from labhive.scheduler.hived.placement import TaskNeed, TaskNeeds
from labhive.scheduler.hived.vc import VCs

NO_SKUS: frozenset[str | None] = frozenset()
#: Job sizes whose task needs are remembered (``whole_needs``) before they are forgotten.
NEEDS_CACHE = 4096


class Sizing:
    """Leaf cells, chains and units of a job, cached per config.

    A part ``core.HivedScheduler`` holds (``self.sizing``), not a base it inherits: the queue
    (a class's least need), the search (each chain's task needs) and the failure records ask
    it. Its answers depend on the config alone, so ``base._load`` makes it anew for each
    config (whoever asks it reads ``sched.sizing`` then, never a copy of it)."""

    def __init__(self, config: ClusterConfig, tree: CellTree, vcs: VCs) -> None:
        #: The config whose SKUs and cell types size a role.
        self.config = config
        #: The physical cells of that config: each chain's leaf type, pinned cells.
        self.tree = tree
        #: Its VCs: the chains and pinned cells each may run in.
        self.vcs = vcs
        #: Leaf cells a task takes, by the only role fields ``leaves_needed`` reads and the
        #: leaf type (``leaves``: hashing numbers is cheaper than hashing the role).
        self.leaves_cache: dict[tuple[int, float, int, str], int] = {}
        #: A VC's leaf types (its own cells' and its pinned cells'), sorted (``leaves``).
        self.vc_types: dict[str, tuple[str, ...]] = {}
        #: The chains a job may run in, by (VC, opportunistic, pinned cell, SKUs): ``chains``.
        self.chains_cache: dict[Hashable, list[str]] = {}
        #: A whole job's task needs per chain, by (roles, VC): ``whole_needs`` (at most
        #: ``NEEDS_CACHE`` sizes, then forgotten).
        self.needs_cache: dict[Hashable, tuple[tuple[RoleSpec, ...], dict[str, TaskNeeds]]] = {}

    def leaves(self, role: RoleSpec, leaf_type: str, vc: str | None = None) -> int:
        """Leaf cells a task of ``role`` takes on ``leaf_type``. A role without a skuType
        in ``vc`` is sized, as OpenPAI does, by the VC's smallest SKU (the one it needs the
        most leaf cells of), whatever chain it lands in."""
        if vc is not None and role.sku is None and self.config.skus:
            types = self.vc_types.get(vc)
            if types is None:
                types = self.vc_types[vc] = self._sizing_types(vc)
            if types:
                return max(self.leaves(role, t) for t in types)
        # Keyed by the only fields ``leaves_needed`` reads: hashing plain numbers is several
        # times cheaper than hashing the whole (dataclass) role, and this runs per task.
        key = (role.gpu, role.cpu, role.memory_mb, leaf_type)
        n = self.leaves_cache.get(key)
        if n is None:
            n = self.leaves_cache[key] = leaves_needed(role, self.config, leaf_type)
        return n

    def _sizing_types(self, vc_name: str) -> tuple[str, ...]:
        """The leaf types of a VC's cells, pinned ones included (none: unknown VC)."""
        vc = self.vcs.by_name.get(vc_name)
        if vc is None:
            return ()
        chains = [*vc.quota, *(c.chain for c in vc.pinned)]
        return tuple(sorted({self.tree.chains[c].leaf_type for c in chains}))

    def chains(self, job: Job, roles: list[RoleSpec]) -> list[str]:
        """The chains a job may run in, in config order (cached: asked on every attempt)."""
        if len(roles) == 1 and not roles[0].sku:  # the usual job (no generator for it)
            skus: frozenset[str | None] = NO_SKUS
        else:
            skus = frozenset(r.sku for r in roles if r.sku)
        pin = job.pinned if not job.grouped else pin_of(roles)
        key = (job.vc, job.opportunistic, pin, skus)
        chains = self.chains_cache.get(key)
        if chains is None:
            chains = self.chains_cache[key] = self._find_chains(job, skus, pin)
        return chains

    def _find_chains(self, job: Job, skus: frozenset[str | None], pin: str | None) -> list[str]:
        tree, vcs = self.tree, self.vcs
        if pin is not None and not job.opportunistic:
            cell = tree.pinned.get(pin)
            return [cell.chain] if cell is not None else []
        if job.opportunistic:
            names = list(tree.chains)
        else:
            vc = vcs.by_name.get(job.vc)
            if vc is None:
                return []
            names = list(dict.fromkeys([*vc.quota, *(c.chain for c in vc.pinned)]))
        return [c for c in names if not skus or tree.chains[c].leaf_type in skus]

    @staticmethod
    def units(job: Job) -> list[list[tuple[RoleSpec, int]]]:
        """What is placed whole: the gang, each of its affinity groups (OpenPAI's
        ``affinityGroupName``: placed apart, each in its own chain), or each task of an
        incremental job."""
        waiting = job.waiting_tasks
        if not job.spec.gang:
            return [[t] for t in waiting]
        if not job.grouped:
            return [waiting]
        groups: dict[str | None, list[tuple[RoleSpec, int]]] = {}
        for task in waiting:
            groups.setdefault(task[0].affinity_group, []).append(task)
        return list(groups.values())

    def whole_needs(self, job: Job, chains: list[str]) -> dict[str, TaskNeeds]:
        """A whole job's task needs per chain, shared by every job with the same roles in the
        same VC (they depend on nothing else until the cluster changes); a trace's jobs come
        in a few hundred sizes, and sizing each job afresh was a few percent of a HiveD run."""
        roles = job.spec.roles
        key = (roles_id(roles), job.vc)
        entry = self.needs_cache.get(key)
        if entry is None or not covers(entry[1], chains):
            if len(self.needs_cache) >= NEEDS_CACHE:
                self.needs_cache.clear()
            entry = (roles, {chain: self.needs(job.tasks, chain, job.vc) for chain in chains})
            self.needs_cache[key] = entry
        return entry[1]

    def needs(
        self, unit: list[tuple[RoleSpec, int]], chain: str, vc: str | None = None
    ) -> TaskNeeds:
        leaf = self.tree.chains[chain].leaf_type
        out = TaskNeeds()
        role, leaves = None, 0
        for r, i in unit:
            if r is not role:  # a role's tasks come in a row: size each role once
                role, leaves = r, self.leaves(r, leaf, vc)
            out.add(TaskNeed(r.name, i, leaves))
        return out


def covers(needs: dict[str, TaskNeeds], chains: list[str]) -> bool:
    """Whether ``needs`` holds every one of ``chains`` (a loop: no generator per attempt)."""
    for chain in chains:  # noqa: SIM110 (``all`` would take a generator)
        if chain not in needs:
            return False
    return True


def pin_of(roles: Sequence[RoleSpec]) -> str | None:
    return next((r.pinned_cell for r in roles if r.pinned_cell), None)


def roles_id(roles: tuple[RoleSpec, ...]) -> Hashable:
    """A key for a job's roles by identity, for a cache asked once per job: hashing the
    (dataclass) roles cost more than the rest of the look-up, and a trace's jobs share their
    role objects. An entry must keep the roles it was made for (so no other object takes their
    ids while it lives); equal roles in other objects only miss."""
    if len(roles) == 1:
        return id(roles[0])
    return tuple(map(id, roles))
