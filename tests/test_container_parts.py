"""Given a host's cgroup hierarchy and tools, expect the container runtime that works there (runc
on cgroup v1/hybrid, crun on v2 where installed), a containers.conf without podman's default
ulimits, and GPU device arguments for the task's own GPUs only. Pure parts; no podman needed."""

from __future__ import annotations

import shutil
from pathlib import Path

from labhive.scheduler.executors import container
from labhive.scheduler.executors.base import TaskKey, TaskLaunch


def launch(gpus: tuple[int, ...] = (1, 3), **kw) -> TaskLaunch:
    return TaskLaunch(TaskKey("7", 2, "work er", 1), "j", "true", "n0", gpus, **kw)


def test_a_v1_or_hybrid_host_runs_runc(tmp_path: Path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "unified").mkdir()
    support = container.detect(tmp_path)
    assert (support.runtime, support.cgroup_v1) == ("runc", True)


def test_a_v2_host_runs_crun_where_installed(tmp_path: Path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    support = container.detect(tmp_path)
    assert support.runtime == ("crun" if shutil.which("crun") else "runc")
    assert support.cgroup_v1 is False


def test_the_conf_drops_default_ulimits_and_names_the_runtime(tmp_path: Path):
    conf = container.write_conf(tmp_path, container.Support("/usr/bin/podman", "runc", True))
    text = conf.read_text()
    assert "default_ulimits = []" in text and 'runtime = "runc"' in text
    assert conf == tmp_path / "containers.conf"


def test_names_and_labels_find_the_task_again_and_tell_services_apart():
    key = launch().key
    assert container.container_name(key, "d0123") == "labhive-d0123-7-2-work_er-1"
    assert container.labels(key, "d0123") == {
        "labhive.service": "d0123", "labhive.job": "7", "labhive.attempt": "2",
        "labhive.role": "work er", "labhive.index": "1",
    }  # fmt: skip


def test_gpus_map_to_cdi_names_where_a_cdi_spec_exists(tmp_path: Path):
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    assert container.gpu_devices(launch(), cdi_dirs=[tmp_path]) == [
        "nvidia.com/gpu=1",
        "nvidia.com/gpu=3",
    ]


def test_virtual_gpus_and_slots_without_devices_map_to_nothing(tmp_path: Path):
    assert container.gpu_devices(launch(virtual=True), cdi_dirs=[tmp_path]) == []
    assert container.gpu_devices(launch(gpus=()), cdi_dirs=[tmp_path]) == []
    if not Path("/dev/nvidia1").exists():  # no driver here: the slots are not devices
        assert container.gpu_devices(launch(), cdi_dirs=[tmp_path]) == []
