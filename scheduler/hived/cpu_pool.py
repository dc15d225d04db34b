"""Tasks that ask for no GPU, on a cluster without ``skuTypes``: placed by a node's CPUs and
memory, holding no GPU cell (issue 18).

Without ``skuTypes`` one GPU is one leaf cell and a leaf cell says nothing of CPUs, so a
CPU-only task (a notebook server, a ``--gpus 0`` job) has no cell to take; giving it one would
hold a GPU slot it never uses. It takes a share of a node's CPUs and memory instead, outside
every VC's quota, so it never blocks a GPU job and never preempts or is preempted. (With
``skuTypes`` OpenPAI's rule stays: CPU and memory count in leaf cells, and such a task takes
at least one.)

A node's capacity comes from ``ClusterConfig.node_resources`` (the default cluster fills it
from this machine), else ``default_capacity``. A job's tasks are placed together or not at
all (a gang) or one by one (``gang: false``); waiting jobs start in queue order (priority,
then submit order), a job that does not fit letting later ones try.
"""

from __future__ import annotations

from dataclasses import dataclass

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.jobs import JobSpec, RoleSpec

#: Per GPU of a node (at least one GPU's worth): CPUs and memory (MB) assumed when the
#: config does not say. A typical GPU server offers about 8 cores and 32 GiB per GPU.
CPU_PER_GPU, MEMORY_MB_PER_GPU = 8.0, 32 * 1024


def default_capacity(gpus: int) -> tuple[float, int]:
    """The CPUs and memory (MB) of a node with ``gpus`` GPUs when the config does not say."""
    n = max(gpus, 1)
    return CPU_PER_GPU * n, MEMORY_MB_PER_GPU * n


def cpu_only(config: ClusterConfig, spec: JobSpec) -> bool:
    """Whether the job takes no GPU cell: no skuTypes, and no role asks for a GPU."""
    return not config.skus and all(r.gpu == 0 for r in spec.roles)


@dataclass(slots=True)
class NodeRoom:
    name: str
    cpu: float
    memory_mb: int
    cpu_used: float = 0.0
    memory_used_mb: int = 0
    healthy: bool = True

    def fits(self, role: RoleSpec, cpu: float = 0.0, memory_mb: int = 0) -> bool:
        """Whether one more task of ``role`` fits, beside ``cpu``/``memory_mb`` planned."""
        return (
            self.healthy
            and self.cpu_used + cpu + role.cpu <= self.cpu + 1e-9
            and self.memory_used_mb + memory_mb + role.memory_mb <= self.memory_mb
        )


class CpuPool:
    """Every node's CPUs and memory, and which CPU-only tasks hold how much of them."""

    def __init__(self, config: ClusterConfig) -> None:
        gpus: dict[str, int] = {}
        for node in config.nodes():  # a node in two chains appears twice: count all its GPUs
            gpus[node.name] = gpus.get(node.name, 0) + len(node.gpus)
        self.nodes: dict[str, NodeRoom] = {}
        for name, count in gpus.items():
            cpu, memory = config.node_resources.get(name) or default_capacity(count)
            self.nodes[name] = NodeRoom(name, float(cpu), int(memory))

    def largest(self) -> tuple[float, int]:
        """The most CPUs and memory any one node has (what admission compares a task to)."""
        return (
            max((n.cpu for n in self.nodes.values()), default=0.0),
            max((n.memory_mb for n in self.nodes.values()), default=0),
        )

    def plan(self, tasks: list[tuple[RoleSpec, int]]) -> list[str] | None:
        """A node for every task (all or nothing), best fit: the node with the least CPU left
        that holds the task, so large nodes stay open for large tasks."""
        cpu: dict[str, float] = {}
        memory: dict[str, int] = {}
        out = []
        for role, _ in tasks:
            best = None
            for room in self.nodes.values():
                if not room.fits(role, cpu.get(room.name, 0.0), memory.get(room.name, 0)):
                    continue
                left = room.cpu - room.cpu_used - cpu.get(room.name, 0.0)
                if best is None or left < best[0]:
                    best = (left, room.name)
            if best is None:
                return None
            name = best[1]
            cpu[name] = cpu.get(name, 0.0) + role.cpu
            memory[name] = memory.get(name, 0) + role.memory_mb
            out.append(name)
        return out

    def hold(self, node: str, role: RoleSpec) -> None:
        room = self.nodes[node]
        room.cpu_used += role.cpu
        room.memory_used_mb += role.memory_mb

    def release(self, node: str, role: RoleSpec) -> None:
        room = self.nodes.get(node)
        if room is not None:
            room.cpu_used = max(0.0, room.cpu_used - role.cpu)
            room.memory_used_mb = max(0, room.memory_used_mb - role.memory_mb)

    def free(self) -> tuple[float, int]:
        """The most CPUs and memory free on one healthy node."""
        healthy = [n for n in self.nodes.values() if n.healthy]
        return (
            max((n.cpu - n.cpu_used for n in healthy), default=0.0),
            max((n.memory_mb - n.memory_used_mb for n in healthy), default=0),
        )
