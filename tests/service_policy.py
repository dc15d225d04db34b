"""A first-fit FIFO policy over a ``ClusterConfig``'s nodes, for the service tests.

It implements the ``Scheduler`` contract plainly (gangs whole or not at all, FIFO per cluster,
priority-ordered, preempting strictly lower priority when a job cannot fit otherwise) so the
service's loop, store and API can be exercised before and independently of HiveD's algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labhive.scheduler.config import ClusterConfig
from labhive.scheduler.jobs import JobSpec
from labhive.scheduler.model import (
    Adopt,
    Cancel,
    ClusterView,
    Decision,
    Event,
    Finish,
    JobView,
    NodeView,
    Preempt,
    Requeue,
    SpecRejected,
    Start,
    Submit,
    TaskPlacement,
    VCView,
)


@dataclass
class _Job:
    job_id: str
    spec: JobSpec
    order: int
    tasks: tuple[TaskPlacement, ...] = ()


@dataclass
class FirstFit:
    config: ClusterConfig
    name: str = "firstfit"
    jobs_: dict[str, _Job] = field(default_factory=dict)
    counter: int = 0

    def __post_init__(self) -> None:
        self.nodes = {n.name: n.gpus for n in self.config.nodes()}
        self.quota = {
            name: sum(c.number * self._gpus(c.cell_type) for c in vc.cells)
            for name, vc in self.config.vcs.items()
        }

    def _gpus(self, cell_type: str) -> int:
        t = self.config.cell_types[cell_type]
        return 1 if t.child is None else t.child_number * self._gpus(t.child)

    def check(self, spec: JobSpec) -> None:
        if spec.vc not in self.config.vcs:
            raise SpecRejected(f"unknown VC {spec.vc!r}; VCs: {', '.join(self.config.vcs)}")
        biggest = max(len(g) for g in self.nodes.values())
        for role in spec.roles:
            if role.gpu > biggest:
                raise SpecRejected(f"{role.gpu} GPUs in one task; the largest node has {biggest}")
        total = sum(len(g) for g in self.nodes.values())
        if spec.total_gpus > total:
            raise SpecRejected(f"{spec.total_gpus} GPUs; the cluster has {total}")

    def handle(self, event: Event) -> list[Decision]:
        if isinstance(event, Submit):
            self.counter += 1
            self.jobs_[event.job_id] = _Job(event.job_id, event.spec, self.counter)
        elif isinstance(event, Adopt):
            self.counter += 1
            self.jobs_[event.job_id] = _Job(event.job_id, event.spec, self.counter, event.tasks)
        elif isinstance(event, Finish | Cancel):
            self.jobs_.pop(event.job_id, None)
        elif isinstance(event, Requeue) and event.job_id in self.jobs_:
            self.jobs_[event.job_id].tasks = ()
        return self._place()

    def _used(self) -> dict[tuple[str, int], str]:
        return {(t.node, g): j.job_id for j in self.jobs_.values() for t in j.tasks for g in t.gpus}

    def _place(self) -> list[Decision]:
        out: list[Decision] = []
        waiting = sorted(
            (j for j in self.jobs_.values() if not j.tasks),
            key=lambda j: (-j.spec.priority, j.order),
        )
        for job in waiting:
            if job.spec.total_gpus > self.quota[job.spec.vc] - self._vc_used(job.spec.vc):
                continue  # over its VC's quota for now
            placement = self._fit(job, self._used())
            if placement is None:
                victims = self._victims(job)
                if victims is None:
                    break  # FIFO: nobody overtakes the head of the queue
                for v in victims:
                    out.append(Preempt(v.job_id, job.job_id, f"priority {job.spec.priority}"))
                    v.tasks = ()
                placement = self._fit(job, self._used())
                assert placement is not None
            job.tasks = placement
            out.append(Start(job.job_id, placement))
        return out

    def _vc_used(self, vc: str) -> int:
        return sum(len(t.gpus) for j in self.jobs_.values() if j.spec.vc == vc for t in j.tasks)

    def _victims(self, job: _Job) -> list[_Job] | None:
        lower = sorted(
            (j for j in self.jobs_.values() if j.tasks and j.spec.priority < job.spec.priority),
            key=lambda j: (j.spec.priority, -j.order),
        )
        used = self._used()
        chosen: list[_Job] = []
        for victim in lower:
            chosen.append(victim)
            freed = {k: v for k, v in used.items() if v not in {c.job_id for c in chosen}}
            if self._fit(job, freed) is not None:
                return chosen
        return None

    def _fit(self, job: _Job, used: dict[tuple[str, int], str]) -> tuple[TaskPlacement, ...] | None:
        free = {n: [g for g in gpus if (n, g) not in used] for n, gpus in self.nodes.items()}
        out = []
        for role in job.spec.roles:
            for index in range(role.instances):
                node = next((n for n, g in free.items() if len(g) >= role.gpu), None)
                if node is None:
                    return None
                gpus, free[node] = free[node][: role.gpu], free[node][role.gpu :]
                out.append(TaskPlacement(role.name, index, node, tuple(gpus)))
        return tuple(out)

    def job(self, job_id: str) -> JobView | None:
        return next((v for v in self.jobs() if v.job_id == job_id), None)

    def jobs(self) -> list[JobView]:
        running = [j for j in self.jobs_.values() if j.tasks]
        waiting = sorted(
            (j for j in self.jobs_.values() if not j.tasks),
            key=lambda j: (-j.spec.priority, j.order),
        )
        views = [self._view(j, None, None) for j in sorted(running, key=lambda j: j.order)]
        for pos, j in enumerate(waiting, 1):
            views.append(self._view(j, pos, len(waiting)))
        return views

    def _view(self, j: _Job, pos: int | None, length: int | None) -> JobView:
        why = None if pos is None else f"position {pos} of {length}: not enough free GPUs"
        return JobView(
            j.job_id,
            j.spec.name,
            j.spec.vc,
            j.spec.priority,
            "RUNNING" if j.tasks else "WAITING",
            j.tasks,
            queue_position=pos,
            queue_length=length,
            why=why,
        )

    def cluster(self) -> ClusterView:
        used = self._used()
        nodes = tuple(
            NodeView(n, None, gpus, used={g: used[(n, g)] for g in gpus if (n, g) in used})
            for n, gpus in self.nodes.items()
        )
        vcs = {
            name: VCView(
                name,
                self.quota[name],
                self._vc_used(name),
                0,
                sum(1 for j in self.jobs_.values() if j.spec.vc == name and not j.tasks),
            )
            for name in self.config.vcs
        }
        return ClusterView(nodes, vcs, self.config.virtual)

    def next_wakeup(self) -> float | None:
        return None
