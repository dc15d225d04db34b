"""What a job asks for, as HiveD sizes it: leaf cells per task (by the SKU of the chain, or of
its VC), the chains it may run in, and the units placed whole (a gang, an affinity group, a task).

Both the queue (a class's least need) and the search (each chain's task needs) ask this, on every
attempt, so the answers are cached on the scheduler until the config changes (``_load``).
"""

from __future__ import annotations

from collections.abc import Sequence

from labhive.scheduler.core.jobs import RoleSpec
from labhive.scheduler.hived.base import HivedBase, roles_id
from labhive.scheduler.hived.job import Job, leaves_needed
from labhive.scheduler.hived.placement import TaskNeed, TaskNeeds

NO_SKUS: frozenset[str | None] = frozenset()
#: Job sizes whose task needs are remembered (``_whole_needs``) before they are forgotten.
NEEDS_CACHE = 4096


class Sizing(HivedBase):
    """Leaf cells, chains and units of a job (cached)."""

    def _leaves(self, role: RoleSpec, leaf_type: str, vc: str | None = None) -> int:
        """Leaf cells a task of ``role`` takes on ``leaf_type``. A role without a skuType
        in ``vc`` is sized, as OpenPAI does, by the VC's smallest SKU (the one it needs the
        most leaf cells of), whatever chain it lands in."""
        if vc is not None and role.sku is None and self.config.skus:
            types = self._vc_types.get(vc)
            if types is None:
                types = self._vc_types[vc] = self._sizing_types(vc)
            if types:
                return max(self._leaves(role, t) for t in types)
        # Keyed by the only fields ``leaves_needed`` reads: hashing plain numbers is several
        # times cheaper than hashing the whole (dataclass) role, and this runs per task.
        key = (role.gpu, role.cpu, role.memory_mb, leaf_type)
        n = self._leaves_cache.get(key)
        if n is None:
            n = self._leaves_cache[key] = leaves_needed(role, self.config, leaf_type)
        return n

    def _sizing_types(self, vc_name: str) -> tuple[str, ...]:
        """The leaf types of a VC's cells, pinned ones included (none: unknown VC)."""
        vc = self.vcs.by_name.get(vc_name)
        if vc is None:
            return ()
        chains = [*vc.quota, *(c.chain for c in vc.pinned)]
        return tuple(sorted({self.tree.chains[c].leaf_type for c in chains}))

    def _chains(self, job: Job, roles: list[RoleSpec]) -> list[str]:
        """The chains a job may run in, in config order (cached: asked on every attempt)."""
        if len(roles) == 1 and not roles[0].sku:  # the usual job (no generator for it)
            skus: frozenset[str | None] = NO_SKUS
        else:
            skus = frozenset(r.sku for r in roles if r.sku)
        pin = job.pinned if not job.grouped else pin_of(roles)
        key = (job.vc, job.opportunistic, pin, skus)
        chains = self._chains_cache.get(key)
        if chains is None:
            chains = self._chains_cache[key] = self._find_chains(job, skus, pin)
        return chains

    def _find_chains(self, job: Job, skus: frozenset[str | None], pin: str | None) -> list[str]:
        if pin is not None and not job.opportunistic:
            cell = self.tree.pinned.get(pin)
            return [cell.chain] if cell is not None else []
        if job.opportunistic:
            names = list(self.tree.chains)
        else:
            vc = self.vcs.by_name.get(job.vc)
            if vc is None:
                return []
            names = list(dict.fromkeys([*vc.quota, *(c.chain for c in vc.pinned)]))
        return [c for c in names if not skus or self.tree.chains[c].leaf_type in skus]

    @staticmethod
    def _units(job: Job) -> list[list[tuple[RoleSpec, int]]]:
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

    def _whole_needs(self, job: Job, chains: list[str]) -> dict[str, TaskNeeds]:
        """A whole job's task needs per chain, shared by every job with the same roles in the
        same VC (they depend on nothing else until the cluster changes); a trace's jobs come
        in a few hundred sizes, and sizing each job afresh was a few percent of a HiveD run."""
        roles = job.spec.roles
        key = (roles_id(roles), job.vc)
        entry = self._needs_cache.get(key)
        if entry is None or not covers(entry[1], chains):
            if len(self._needs_cache) >= NEEDS_CACHE:
                self._needs_cache.clear()
            entry = (roles, {chain: self._needs(job.tasks, chain, job.vc) for chain in chains})
            self._needs_cache[key] = entry
        return entry[1]

    def _needs(
        self, unit: list[tuple[RoleSpec, int]], chain: str, vc: str | None = None
    ) -> TaskNeeds:
        leaf = self.tree.chains[chain].leaf_type
        out = TaskNeeds()
        role, leaves = None, 0
        for r, i in unit:
            if r is not role:  # a role's tasks come in a row: size each role once
                role, leaves = r, self._leaves(r, leaf, vc)
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
