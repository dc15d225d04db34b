"""What drivers show: a job's state, place in its queue and why it waits; nodes; VC usage.

Built on demand from the core's state, never on the scheduling path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labhive.scheduler.core.config import levels_name
from labhive.scheduler.core.gpu_share import MILLI
from labhive.scheduler.core.model import JobView, NodeView, VCView
from labhive.scheduler.hived.why import why_waiting

if TYPE_CHECKING:
    from labhive.scheduler.hived.state import HivedJob, HivedState


def job_view(sched: HivedState[Any], job: HivedJob) -> JobView:
    tasks = tuple(sorted((p for p, _ in job.placed.values()), key=lambda p: (p.role, p.index)))
    position = length = None
    why = None
    queue = sched.queue.queues.get(job.vc)
    if not job.placed and queue is not None:
        ledger = sched._ledger
        if ledger is not None and ledger.fair is not None:
            position = sched.fair_position(job)
        else:
            position = queue.position(job.spec.priority, job.seq, job.job_id)
        length = len(queue.order)
    if job.cpu_only:
        position = length = None
        why = _why_cpu(sched, job) if job.waiting_tasks else _holds(job)
    elif job.share and job.waiting_tasks:
        book = sched.shares.book
        position, length = book.position(job.job_id), len(book.waiting)
        why = _why_share(sched, job, position, length)
    elif job.waiting_tasks:
        why = why_waiting(sched, job, position, length)
    elif job.downgraded_by is not None:
        by = sched._jobs.get(job.downgraded_by)
        name = by.spec.name if by else job.downgraded_by
        why = f"downgraded to opportunistic by {name}; preempted first if its GPUs are needed"
    elif job.opportunistic:
        why = "running opportunistically on idle cells; preempted first if they are needed"
    elif job.downgraded:  # lazy preemption of some tasks (a task or an affinity group)
        names = ", ".join(f"{role}-{index}" for role, index in sorted(job.downgraded))
        who = {sched._jobs[b].spec.name if b in sched._jobs else b for b in job.downgraded.values()}
        why = (
            f"task {names} downgraded to opportunistic by {', '.join(sorted(who))}; preempted "
            "first if its GPUs are needed (the other tasks stay guaranteed)"
        )
    return JobView(
        job.job_id,
        job.spec.name,
        job.vc,
        job.spec.priority,
        "RUNNING" if job.placed else "WAITING",
        tasks,
        job.opportunistic,
        position,
        length,
        why,
        tuple(sorted((role, index, by) for (role, index), by in job.downgraded.items())),
        tuple(sorted(job.done)),
        job.share,
    )


def _holds(job: HivedJob) -> str:
    """What a running CPU-only job holds: CPUs and memory, no GPU cell."""
    roles = {r.name: r for r in job.spec.roles}
    cpu = sum(roles[p.role].cpu for p, _ in job.placed.values())
    memory = sum(roles[p.role].memory_mb for p, _ in job.placed.values())
    nodes = ", ".join(sorted({p.node for p, _ in job.placed.values()}))
    return f"CPU-only: holds {cpu:g} CPUs and {memory} MB memory on {nodes}, no GPU"


def _why_cpu(sched: HivedState[Any], job: HivedJob) -> str:
    role = max((r for r, _ in job.waiting_tasks), key=lambda r: (r.cpu, r.memory_mb))
    cpu, memory = sched.cpu.free()
    ahead = next(i for i, e in enumerate(sched.queue.cpu_waiting) if e[2] == job.job_id)
    return (
        f"no healthy node has {role.cpu:g} CPUs and {role.memory_mb} MB memory free for this "
        f"CPU-only task (at most {cpu:g} CPUs and {memory} MB free on one node; it takes no "
        f"GPU); position {ahead + 1} of {len(sched.queue.cpu_waiting)} among CPU-only jobs"
    )


def _why_share(
    sched: HivedState[Any], job: HivedJob, position: int | None, length: int | None
) -> str:
    """Why a GPU share waits: no GPU of its kind hosting shares has room, and no GPU it may
    take is free (its VC's for a guaranteed share, any idle one for an opportunistic share)."""
    share = f"{job.share / MILLI:g} GPU"
    tail = f"; position {position} of {length} among waiting GPU shares" if position else ""
    hold = sched.shares.hold(None if job.opportunistic else job.vc, job.spec.priority)
    if hold is not None and job.seq > hold.after:
        return (
            f"waits for {share}: job {hold.holder}, queued ahead of it, needs whole GPUs, so "
            "shares queued after it take no GPU it waits for (a stream of shares would keep a "
            f"GPU shared for ever){tail}"
        )
    if job.opportunistic:
        return (
            f"waits for {share} opportunistically: no idle GPU, and the GPUs that hold "
            f"opportunistic shares have less than {share} left{tail}"
        )
    return (
        f"waits for {share} in {job.vc}: the GPUs {job.vc} shares at priority "
        f"{job.spec.priority} have less than {share} left, and no GPU of {job.vc} is free for "
        f"a new one (shares take only their VC's GPUs){tail}"
    )


def node_views(sched: HivedState[Any]) -> tuple[NodeView, ...]:
    """One view per node name; a node in two chains shows all its GPUs."""
    out = []
    for name, cells in sched.tree.nodes.items():
        leaves = [leaf for cell in cells for leaf in cell.leaf_cells()]
        healthy = all(c.bad == 0 for c in cells)
        out.append(
            NodeView(
                name,
                sched.tree.chains[cells[0].chain].leaf_type,
                tuple(sorted(leaf.gpu or 0 for leaf in leaves)),
                healthy,
                {leaf.gpu or 0: leaf.job for leaf in leaves if leaf.job},
                "" if healthy else sched.down_reasons.get(name) or "down",
                *_cpu_use(sched, name),
                _shares(sched, leaves),
            )
        )
    return tuple(out)


def _shares(sched: HivedState[Any], leaves: list[Any]) -> dict[int, dict[str, int]]:
    """GPU index -> who holds how much of it (thousandths), for GPUs that host shares."""
    book = sched.shares.book
    if not book.hosts:
        return {}
    return {leaf.gpu or 0: book.shares_on(leaf) for leaf in leaves if leaf in book.hosts}


def vc_views(sched: HivedState[Any]) -> dict[str, VCView]:
    """GPUs used per VC, a share counted as its fraction (four quarters: one GPU)."""
    used: dict[str, float] = {}
    oppo: dict[str, float] = {}
    waiting: dict[str, int] = {}
    for job in sched._jobs.values():
        n: float = sum(len(leaves) for _, leaves in job.placed.values())
        down: float
        if job.share and n:  # a share is one task that never downgrades on its own
            n = job.share / MILLI
            down = n if job.opportunistic else 0
        elif job.opportunistic:
            down = n
        else:  # tasks downgraded on their own (per-unit lazy preemption) hold no VC cell
            down = sum(len(job.placed[key][1]) for key in job.downgraded if key in job.placed)
        if down:
            oppo[job.vc] = oppo.get(job.vc, 0) + down
        if n - down:
            used[job.vc] = used.get(job.vc, 0) + n - down
        if not job.placed:
            waiting[job.vc] = waiting.get(job.vc, 0) + 1
    return {
        name: VCView(
            name,
            vc.leaves(sched.tree),
            used.get(name, 0),
            oppo.get(name, 0),
            waiting.get(name, 0),
        )
        for name, vc in sched.vcs.by_name.items()
    }


def vc_cells(sched: HivedState[Any]) -> dict[str, dict[str, Any]]:
    """Per VC, its virtual cells bound to physical ones (by chain and level, in cell order)
    and how many of its cells are free per level: bound cells no guaranteed job uses plus
    cells not bound yet (lazy binding). What a comparison with HiveD's own bindings needs."""
    types = sched.config.cell_types
    out: dict[str, dict[str, Any]] = {}
    for name, vc in sched.vcs.by_name.items():
        bound = []
        free: dict[str, int] = {}
        for chain, levels in vc.quota.items():
            for level in levels:
                free[levels_name(types, chain, level)] = vc.unbound[chain].get(level, 0)
        cells = sorted(
            (c for cells in vc.bound.values() for c in cells.values()),
            key=lambda c: (c.chain, -c.level, c.order),
        )
        index: dict[str, int] = {}
        for cell in cells:
            kind = levels_name(types, cell.chain, cell.level)
            if cell.pinned:
                virtual = cell.pinned_id or kind
            else:
                index[kind] = index.get(kind, -1) + 1
                virtual = f"{name}/{kind}/{index[kind]}"
                if cell.guaranteed == 0:
                    free[kind] = free.get(kind, 0) + 1
            bound.append(
                {
                    "chain": cell.chain,
                    "level": kind,
                    "virtual": virtual,
                    "physical": cell.id,
                    "nodes": sorted({n.node or "" for n in cell.nodes()}),
                    "pinned": cell.pinned,
                    "used": cell.leaves - cell.free - cell.bad,
                }
            )
        out[name] = {"bound": bound, "free_cells": free}
    return out


def free_list(sched: HivedState[Any]) -> dict[str, dict[str, int]]:
    """The physical cells no VC has bound, counted per chain and level (the buddy free list)."""
    types = sched.config.cell_types
    return {
        chain: {
            levels_name(types, chain, level): len(cells) for level, cells in levels.items() if cells
        }
        for chain, levels in sched.tree.free_list.items()
    }


def _cpu_use(sched: HivedState[Any], node: str) -> tuple[float, float, int, int]:
    """A node's CPUs and memory, and what CPU-only tasks hold of them."""
    room = sched.cpu.nodes.get(node)
    if room is None:
        return 0.0, 0.0, 0, 0
    return room.cpu, room.cpu_used, room.memory_mb, room.memory_used_mb
