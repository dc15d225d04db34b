"""Trace rows become jobs the scheduling core understands.

A trace job asking for G GPUs becomes a gang of G one-GPU tasks (one worker per GPU, as
data-parallel training runs), so the same job can be packed on one node or spread, as the
policy's locality choice or HiveD's topology-aware placement decides. Its duration is the
recorded service time. All trace jobs get one priority (``prod`` unless told otherwise): the
Philly log records none.

VCs: a cluster with a single VC takes every job; otherwise a job keeps its trace VC and a
job whose VC the cluster lacks is not replayed (counted, as Helios drops Philly's small VCs).
Metrics are always reported under the trace's VC.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from labhive.scheduler.core.config import ClusterConfig
from labhive.scheduler.core.frozen_build import frozen_builder
from labhive.scheduler.core.jobs import PRIORITY_CLASSES, JobSpec, RoleSpec
from labhive.scheduler.sim.engine import SimJob, trace_sim_job
from labhive.scheduler.sim.traces import JobStream, TraceJob, trace_row

ROLE = "worker"


def trace_job_spec(tj: TraceJob, vc: str, priority: int = PRIORITY_CLASSES["prod"]) -> JobSpec:
    return _gang_spec(
        tj.job_id, vc, priority, _roles(tj.gpus, tj.cpu, tj.memory_mb), tj.duration, tj.user
    )


#: ``JobSpec(name, vc, priority, roles, duration, user)`` with every other field at its default,
#: the same frozen spec, built without ``__init__`` (``frozen_build``): the dataclass's sets each
#: of its 14 fields through ``object.__setattr__`` (frozen), 1.3 us of a trace job's 16; this 0.25.
_gang_spec: Callable[[str, str, int, tuple[RoleSpec, ...], float, str], JobSpec] = frozen_builder(
    JobSpec,
    gang=True,
    retries=0,
    lazy_preemption=False,
    image=None,
    observe=None,
    time_limit=None,
    cwd=None,
)


@functools.lru_cache(maxsize=1024)
def _role(gpus: int, cpu: float | None, memory_mb: int | None) -> RoleSpec:
    """The gang's one role; shared by every job of one size (a role is immutable, and a
    million-job trace has a few hundred sizes: building one took 6 of 160 us a job)."""
    extra: dict[str, float | int] = {}
    if cpu is not None:
        extra["cpu"] = cpu / gpus
    if memory_mb is not None:
        extra["memory_mb"] = max(1, round(memory_mb / gpus))
    return RoleSpec(ROLE, instances=gpus, gpu=1, **extra)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=1024)
def _roles(gpus: int, cpu: float | None, memory_mb: int | None) -> tuple[RoleSpec, ...]:
    """A gang's roles, ``(_role(...),)``: one tuple for every job of one size, not one a job."""
    return (_role(gpus, cpu, memory_mb),)


def sim_jobs(
    trace_jobs: Iterable[TraceJob],
    config: ClusterConfig,
    *,
    priority: int = PRIORITY_CLASSES["prod"],
    sample: float | None = None,
    seed: int = 0,
) -> tuple[list[SimJob], Counter[str]]:
    """The jobs to replay on ``config``, and how many were left out, by reason.

    ``sample`` keeps each job with that probability, drawn from ``seed``: the same seed gives
    the same jobs.
    """
    left_out: Counter[str] = Counter()
    jobs = list(
        iter_sim_jobs(trace_jobs, config, left_out, priority=priority, sample=sample, seed=seed)
    )
    return jobs, left_out


def iter_sim_jobs(
    trace_jobs: Iterable[TraceJob],
    config: ClusterConfig,
    left_out: Counter[str],
    *,
    priority: int = PRIORITY_CLASSES["prod"],
    sample: float | None = None,
    seed: int = 0,
) -> Iterator[SimJob]:
    """``sim_jobs`` one at a time, as the simulation reaches them (a million-job trace is
    never a list); ``left_out`` counts the jobs not replayed, by reason, as they pass.

    Each job is read as its ``trace_row`` (one unpacking, not a dozen attribute reads): a
    streamed file's rows come as those tuples (``JobStream.rows``: no ``TraceJob`` made a
    job), a list's jobs are made into them in C."""
    rows = trace_jobs.rows() if isinstance(trace_jobs, JobStream) else map(trace_row, trace_jobs)
    known = config.vcs
    vcs = sorted(known)
    single = vcs[0] if len(vcs) == 1 else None
    rng = random.Random(seed)
    seen: set[str] = set()
    for name, submit, trace_vc, user, gpus, duration, status, line, cpu, memory_mb in rows:
        if sample is not None and rng.random() >= sample:
            left_out["not sampled"] += 1
            continue
        vc = single or trace_vc
        if vc not in known:
            left_out["VC not in the cluster"] += 1
            continue
        job_id = name
        if job_id in seen:
            job_id = f"{job_id}@{line}"
        seen.add(job_id)
        # ``trace_job_spec(tj, vc, priority)``, without its call (once a job).
        roles = _roles(gpus, cpu, memory_mb)
        spec = _gang_spec(name, vc, priority, roles, duration, user)
        # With the spec's GPU count known here (its one role's instances): no sum of the roles.
        yield trace_sim_job(job_id, spec, submit, duration, trace_vc, user, status, gpus)
