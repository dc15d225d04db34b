"""Small clusters and hand-written jobs for the simulator tests."""

from __future__ import annotations

from pathlib import Path

from labhive.scheduler.core.config import ClusterConfig, load_cluster_config
from labhive.scheduler.policies import get_policy
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.sim.engine import SimJob, Simulation
from labhive.scheduler.sim.machines import Machine, cluster_dict
from labhive.scheduler.sim.traces import TraceJob
from labhive.scheduler.sim.workload import trace_job_spec

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
PHILLY = DATA / "philly"
#: One GPU on ``localhost`` in one VC (vc1): GPU-share tests' cluster file.
ONE_GPU = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 1, isNodeLevel: true}
  physicalCells:
  - {cellType: NODE, cellAddress: localhost}
virtualClusters:
  vc1: {virtualCells: [{cellType: NODE, cellNumber: 1}]}
"""


def cluster(gpus_per_node: list[int], vcs: dict[str, int] | None = None) -> ClusterConfig:
    """Nodes n0, n1, ... with these GPU counts; VCs weighted by node share (or one VC)."""
    machines = [Machine(f"n{i}", g) for i, g in enumerate(gpus_per_node)]
    return load_cluster_config(cluster_dict(machines, vcs))


def las(config: ClusterConfig, **options: str) -> LasPolicy:
    """LAS for a cluster of one VC: one queue, whose levels and knobs a test can read."""
    policy = get_policy("las", config, **options)
    assert isinstance(policy, LasPolicy), "LAS over several VCs is one queue per VC"
    return policy


def job(name: str, submit: float, gpus: int, duration: float, vc: str = "default") -> SimJob:
    tj = TraceJob(name, submit, vc, "u-" + vc, gpus, duration)
    return SimJob(job_id=name, spec=trace_job_spec(tj, vc), submit=submit, duration=duration)


def simulate(
    policy: str,
    config: ClusterConfig,
    jobs: list[SimJob],
    checkpoint: float | None = None,
    **options: object,
) -> dict[str, SimJob]:
    sched = get_policy(policy, config, **options)
    sim = Simulation(
        sched,
        sorted(jobs, key=lambda j: j.submit),
        total_gpus=config.total_gpus(),
        checkpoint=checkpoint,
    )
    result = sim.run()
    return {j.job_id: j for j in result.jobs}


def spans(jobs: dict[str, SimJob]) -> dict[str, tuple[float | None, float | None]]:
    """Each job's (first start, end)."""
    return {name: (j.first_start, j.end) for name, j in jobs.items()}
