"""Given a job and where its tasks were placed, expect the variables OpenPAI and PyTorch scripts
read: identity, ranks in role order, local ranks per node, exactly the task's GPUs."""

from __future__ import annotations

import pytest

from labhive.scheduler.core.jobs import JobSpec, RoleSpec
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.executors.env import free_port, gpu_env, task_env

SPEC = JobSpec(
    name="bert",
    vc="vc1",
    priority=100,
    user="alice",
    roles=(RoleSpec("master", 1, gpu=1), RoleSpec("worker", 3, gpu=2, cpu=4, min_succeeded=1)),
)
PLACED = (
    TaskPlacement("worker", 2, "node1", (2, 3)),
    TaskPlacement("worker", 0, "node0", (1, 2)),
    TaskPlacement("master", 0, "node0", (0,)),
    TaskPlacement("worker", 1, "node1", (0, 1)),
)
IPS = {"node0": "10.0.0.1", "node1": "10.0.0.2"}


def env_of(role: str, index: int, **kw) -> dict[str, str]:
    return task_env("j7", SPEC, PLACED, 2, role, index, master_port=29500, node_ips=IPS, **kw)


def test_ranks_follow_the_roles_order_then_index_and_rank_0_hosts_the_rendezvous():
    ranks = {(r, i): env_of(r, i) for r, i in [("master", 0), ("worker", 0), ("worker", 1)]}
    assert [e["RANK"] for e in ranks.values()] == ["0", "1", "2"]
    assert {e["MASTER_ADDR"] for e in ranks.values()} == {"10.0.0.1"}
    assert {e["MASTER_PORT"] for e in ranks.values()} == {"29500"}
    assert {e["WORLD_SIZE"] for e in ranks.values()} == {"4"}


def test_local_rank_counts_the_tasks_on_the_same_node():
    assert [env_of("worker", i)["LOCAL_RANK"] for i in range(3)] == ["1", "0", "1"]
    assert env_of("worker", 2)["LOCAL_WORLD_SIZE"] == "2"


def test_openpai_variables_describe_the_job_the_role_and_the_task():
    env = env_of("worker", 1)
    assert env["PAI_JOB_NAME"] == "bert" and env["PAI_USER_NAME"] == "alice"
    assert env["PAI_JOB_VC_NAME"] == "vc1"
    assert env["PAI_TASK_ROLE_LIST"] == "master,worker" and env["PAI_JOB_TASK_COUNT"] == "4"
    assert env["PAI_TASK_ROLE_TASK_COUNT_worker"] == "3"
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "1" == env["PAI_TASK_INDEX"]
    assert env["PAI_CURRENT_TASK_ROLE_CPU_COUNT"] == "4"
    assert env["PAI_CONTAINER_HOST_IP"] == "10.0.0.2" == env["PAI_HOST_IP_worker_1"]
    assert env["PAI_HOST_IP_master_0"] == "10.0.0.1"
    assert env["PAI_MIN_SUCCEEDED_TASK_COUNT_worker"] == "1"
    assert (env["LABHIVE_JOB_ID"], env["LABHIVE_ATTEMPT"], env["LABHIVE_NODE"]) == (
        "j7",
        "2",
        "node1",
    )


def test_real_gpus_go_by_uuid_and_virtual_slots_are_labelled():
    real = env_of("worker", 1, gpu_uuids=("GPU-aa", "GPU-bb"))
    assert real["CUDA_VISIBLE_DEVICES"] == "GPU-aa,GPU-bb"
    assert "LABHIVE_VIRTUAL_GPUS" not in real
    virtual = env_of("worker", 1, virtual=True)
    assert virtual["CUDA_VISIBLE_DEVICES"] == "0,1" and virtual["LABHIVE_VIRTUAL_GPUS"] == "1"
    assert gpu_env(())["CUDA_VISIBLE_DEVICES"] == ""  # no GPUs asked, none visible


def test_a_single_task_job_gets_no_rendezvous():
    one = JobSpec(name="solo", vc="default", priority=10, roles=(RoleSpec("main"),))
    env = task_env("j1", one, (TaskPlacement("main", 0, "n", (0,)),), 0, "main", 0, master_port=1)
    assert "MASTER_ADDR" not in env and "RANK" not in env


def test_the_same_inputs_give_the_same_env_and_a_task_without_placement_is_an_error():
    assert env_of("worker", 2) == env_of("worker", 2)
    with pytest.raises(ValueError, match="worker-5 has no placement"):
        env_of("worker", 5)


def test_free_port_is_bindable():
    assert 1024 < free_port() < 65536


def test_the_launch_builder_gives_every_task_its_own_devices_by_uuid():
    from labhive.scheduler.executors.base import TaskKey, TaskLaunch
    from labhive.scheduler.executors.env import with_device_uuids

    def base(job, spec, placements):
        return [
            TaskLaunch(TaskKey(str(job["id"]), job["attempt"], p.role, p.index), spec.name,
                       "true", p.node, p.gpus, env={"CUDA_VISIBLE_DEVICES": "x", "KEEP": "1"})
            for p in placements
        ]  # fmt: skip

    uuids = {"node0": ("GPU-0", "GPU-1", "GPU-2"), "node1": ("GPU-a", "GPU-b")}
    launches = with_device_uuids(base, uuids)({"id": 7, "attempt": 1}, SPEC, PLACED)
    by_task = {(t.key.role, t.key.index): t for t in launches}
    assert by_task["worker", 0].gpu_uuids == ("GPU-1", "GPU-2")
    assert by_task["worker", 0].env["CUDA_VISIBLE_DEVICES"] == "GPU-1,GPU-2"
    assert by_task["worker", 0].env["KEEP"] == "1"
    # node1 lists fewer devices than the placement names: plain indices, never a wrong device
    assert by_task["worker", 2].gpu_uuids == () and by_task["worker", 2].env["KEEP"] == "1"


SERVICE_ENVIRON = {
    "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_TIME": "de_DE.UTF-8", "TZ": "UTC",
    "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
    "PGPASSWORD": "pg-pass", "LABHIVE_DB_URL": "postgresql://u:p@h/d", "AWS_SECRET_ACCESS_KEY": "k",
    "LABHIVE_TOKEN": "t", "JUPYTERHUB_API_TOKEN": "t", "http_proxy": "http://u:p@proxy:3128",
    "LD_PRELOAD": "/tmp/evil.so", "PYTHONPATH": "/srv/x",
}  # fmt: skip


def test_a_process_keeps_only_the_allow_listed_names_of_the_services_environment():
    from labhive.scheduler.executors.env import process_env

    env = process_env({"PAI_JOB_NAME": "bert"}, "/data/jobs/1/work", "alice", SERVICE_ENVIRON)
    assert set(env) == {"PATH", "LANG", "LC_TIME", "TZ", "HOME", "USER", "LOGNAME", "PAI_JOB_NAME"}
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == ("/data/jobs/1/work", "alice", "alice")
    assert env["PATH"].endswith(":/usr/bin:/bin")  # the service's venv first


def test_a_task_run_as_the_service_has_the_services_home_and_name():
    from labhive.scheduler.executors.env import process_env

    env = process_env({"PAI_JOB_NAME": "bert"}, environ=SERVICE_ENVIRON)
    assert (env["HOME"], env["USER"], env["LOGNAME"]) == ("/root", "root", "root")
    assert "PGPASSWORD" not in env and "SHELL" not in env


def test_an_admin_lists_extra_names_a_task_may_keep_and_only_those():
    """A site whose CUDA libraries live on ``LD_LIBRARY_PATH`` lists it in ``LABHIVE_TASK_ENV``;
    the secrets beside it still stay with the service."""
    from labhive.scheduler.executors.env import process_env

    site = {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "OPENBLAS_CORETYPE": "Haswell"}
    environ = {**SERVICE_ENVIRON, **site, "LABHIVE_TASK_ENV": " LD_LIBRARY_PATH, ,"}
    env = process_env({"PAI_JOB_NAME": "bert"}, "/w", "alice", environ)
    assert env["LD_LIBRARY_PATH"] == "/usr/local/cuda/lib64"
    assert env["OPENBLAS_CORETYPE"] == "Haswell"  # the machine's, kept by default
    assert not {"PGPASSWORD", "LD_PRELOAD", "LABHIVE_TASK_ENV", "http_proxy"} & set(env)
