"""Issue 18 item 3: on a cluster without skuTypes a task that asks for no GPU takes no GPU cell;
it is placed by nodes' CPUs and memory, shows what it holds, and never blocks GPU jobs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import HIVED, Cluster

from labhive.scheduler.core.config import load_cluster_config, virtual_cluster
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import (
    Adopt,
    NodeDown,
    Reconfigure,
    SpecRejected,
    Stop,
    TaskPlacement,
)
from labhive.scheduler.hived.cpu_pool import default_capacity


def small_nodes(cpu: float = 2, memory_mb: int = 8192) -> Cluster:
    config = virtual_cluster()  # 2 nodes x 4 GPU slots, VCs default and vc1
    resources = {n.name: (cpu, memory_mb) for n in config.nodes()}
    return Cluster(replace(config, node_resources=resources))


def test_cpu_only_jobs_hold_no_gpu_and_never_block_gpu_jobs():
    c = Cluster(virtual_cluster())
    for i in range(5):
        c.submit(f"nb{i}", vc="default", priority="prod", gpus=0, cpu=1, memory_mb=2048)
        assert c.state(f"nb{i}") == "RUNNING"
    assert all(t.gpus == () for i in range(5) for t in c.sched.job(f"nb{i}").tasks)
    usage = c.sched.cluster().vcs["default"]
    assert (usage.used_gpus, usage.opportunistic_gpus) == (0, 0)
    c.submit("train", vc="default", priority="prod", gpus=4)
    assert c.state("train") == "RUNNING" and c.started() == ["train"]
    nodes = {n.name: n for n in c.sched.cluster().nodes}
    assert sum(n.cpu_used for n in nodes.values()) == 5
    assert sum(n.memory_used_mb for n in nodes.values()) == 5 * 2048
    assert all(n.cpu == default_capacity(4)[0] for n in nodes.values())
    assert c.why("nb0") == "CPU-only: holds 1 CPUs and 2048 MB memory on vnode-0, no GPU"


def test_cpu_only_jobs_wait_for_cpus_in_queue_order_and_say_why():
    c = small_nodes(cpu=2)
    for i in range(4):
        c.submit(f"j{i}", vc="vc1", priority="test", gpus=0, cpu=1)
    c.submit("late", vc="vc1", priority="test", gpus=0, cpu=1)
    c.submit("urgent", vc="default", priority="prod", gpus=0, cpu=1)
    assert c.state("late") == c.state("urgent") == "WAITING"
    assert c.why("urgent") == (
        "no healthy node has 1 CPUs and 1024 MB memory free for this CPU-only task (at most 0 "
        "CPUs and 6144 MB free on one node; it takes no GPU); position 1 of 2 among CPU-only "
        "jobs"
    )
    c.finish("j0")
    assert c.started() == ["urgent"]  # priority first, then submit order
    c.submit("gpu", vc="vc1", priority="test", gpus=4)  # CPUs are full, GPUs are not
    assert c.state("gpu") == "RUNNING"


def test_a_cpu_only_gang_starts_whole_and_a_node_failure_moves_it():
    c = small_nodes(cpu=2)
    c.submit("gang", vc="default", priority="prod", gpus=0, cpu=2, tasks=2)
    assert c.nodes("gang") == ["vnode-0", "vnode-1"]
    c.submit("more", vc="default", priority="prod", gpus=0, cpu=1)
    assert c.state("more") == "WAITING"
    decisions = c.handle(NodeDown("vnode-1"))
    assert decisions[0] == Stop("gang", "node vnode-1 went down")
    assert c.state("gang") == "WAITING"  # one healthy node cannot hold both tasks
    assert c.started() == ["more"]  # ... but holds the one-CPU job now


def test_adopt_and_reconfigure_restore_what_cpu_only_jobs_hold():
    c = small_nodes(cpu=2)
    spec = parse_job({"name": "nb", "vc": "default", "gpus": 0, "cpu": 2})
    c.handle(Adopt("nb", spec, (TaskPlacement("main", 0, "vnode-1", ()),)))
    assert c.nodes("nb") == ["vnode-1"]
    c.submit("other", vc="default", priority="prod", gpus=0, cpu=2)
    assert c.nodes("other") == ["vnode-0"]
    c.handle(Reconfigure(c.sched.config))
    assert c.nodes("nb") == ["vnode-1"] and c.nodes("other") == ["vnode-0"]
    nodes = {n.name: n.cpu_used for n in c.sched.cluster().nodes}
    assert nodes == {"vnode-0": 2, "vnode-1": 2}


def test_a_cpu_only_task_larger_than_any_node_is_rejected():
    c = small_nodes(cpu=2, memory_mb=8192)
    with pytest.raises(SpecRejected) as err:
        c.sched.check(parse_job({"name": "x", "vc": "default", "gpus": 0, "cpu": 4}))
    assert str(err.value) == (
        "task role main asks for 4 CPUs and 1024 MB memory, but the largest node has 2 CPUs "
        "and 8192 MB; ask for at most that per task"
    )


def test_with_sku_types_a_task_without_gpus_still_takes_a_leaf_cell():
    c = Cluster(load_cluster_config(HIVED / "hived-config-2.yaml"))
    c.submit("cpu", vc="default", priority="prod", gpus=0, cpu=8, memory_mb=1024)
    assert sum(len(t.gpus) for t in c.sched.job("cpu").tasks) == 2  # 8 CPUs / 4 per K80
