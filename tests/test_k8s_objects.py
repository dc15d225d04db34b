"""Every object LabHive sends to Kubernetes validates against the official schemas.

Given the tasks of real OpenPAI jobs (and odd names no label allows), expect Pods, Bindings,
Services and Events that ``kubernetes-validate`` accepts in strict mode (no unknown field) for the
oldest and newest Kubernetes versions LabHive supports, names that are valid DNS labels, and
annotations that give back the exact task.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import TaskPlacement
from labhive.scheduler.executors.base import LaunchError, TaskKey, TaskLaunch
from labhive.scheduler.executors.env import task_env as env_for
from labhive.scheduler.executors.k8s_objects import (
    PodOptions,
    binding_manifest,
    event_manifest,
    label_value,
    pod_manifest,
    pod_name,
    service_manifest,
    service_name,
    task_env,
    task_hostname,
    task_of,
)

pytestmark = pytest.mark.k8s

JOBS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "openpai-jobs"
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


def valid(obj: dict[str, Any]) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def openpai_tasks(file: str) -> list[TaskLaunch]:
    """The tasks of an OpenPAI v2 job file as the service launches them: parsed by LabHive,
    each task on its own node, with the env the service computes."""
    spec = parse_job(yaml.safe_load((JOBS / file).read_text()), default_vc="default")
    tasks = [(r, i) for r in spec.roles for i in range(r.instances)]
    placements = tuple(
        TaskPlacement(r.name, i, f"node-{n}", tuple(range(r.gpu))) for n, (r, i) in enumerate(tasks)
    )
    return [
        TaskLaunch(
            TaskKey("7", 1, p.role, p.index),
            spec.name,
            "\n".join(r.commands),
            p.node,
            p.gpus,
            cpu=r.cpu,
            memory_mb=r.memory_mb,
            env=env_for("7", spec, placements, 1, p.role, p.index, master_port=29500),
            image=spec.image,
            vc=spec.vc,
        )
        for (r, _), p in zip(tasks, placements, strict=True)
    ]


@pytest.mark.parametrize(
    "file",
    ["hello-world-job.yaml", "horovod-pytorch-synthetic-benchmark.yaml", "tensorflow-cifar10.yaml"],
)
def test_pods_binding_and_service_of_openpai_jobs_validate(file: str) -> None:
    tasks = openpai_tasks(file)
    opts = PodOptions(
        namespace="labhive", service_account="labhive-task", image_pull_secrets=("r",)
    )
    svc = service_name(tasks[0].key.job_id, 0) if len(tasks) > 1 else None
    pods = [pod_manifest(t, opts, task_env(t, tasks, svc), vc=t.vc, service=svc) for t in tasks]
    for pod, task in zip(pods, tasks, strict=True):
        valid(pod)
        valid(binding_manifest(pod["metadata"]["name"], "labhive", task.node))
        assert pod["spec"]["containers"][0]["image"] == task.image
    if svc:
        owners = [(p["metadata"]["name"], f"uid-{i}") for i, p in enumerate(pods)]
        valid(service_manifest(svc, "labhive", tasks[0].key, owners))
    valid(
        event_manifest(
            "labhive", "p", "u", "Stopped", "preempted", "labhive", "2024-01-01T00:00:00Z"
        )
    )


def test_horovod_hosts_resolve_as_the_job_names_them() -> None:
    """The job runs ``mpirun -H master-0:4,worker-0:4``: the pods' host names must be those."""
    tasks = openpai_tasks("horovod-pytorch-synthetic-benchmark.yaml")
    svc = service_name(tasks[0].key.job_id, 0)
    opts = PodOptions(namespace="labhive")
    pods = [pod_manifest(t, opts, task_env(t, tasks, svc), service=svc) for t in tasks]
    assert [p["spec"]["hostname"] for p in pods] == ["master-0", "worker-0"]
    assert {p["spec"]["subdomain"] for p in pods} == {svc}
    assert pods[0]["spec"]["dnsConfig"]["searches"] == [f"{svc}.labhive.svc.cluster.local"]
    env = {e["name"]: e.get("value") for e in pods[1]["spec"]["containers"][0]["env"]}
    assert env["PAI_HOST_IP_worker_0"] == f"worker-0.{svc}"
    assert (env["MASTER_ADDR"], env["RANK"], env["WORLD_SIZE"]) == (f"master-0.{svc}", "1", "2")
    assert pods[1]["spec"]["containers"][0]["image"].startswith("horovod/horovod:0.16.4")
    limits = pods[0]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "16", "memory": "16384Mi", "nvidia.com/gpu": "4"}


def test_virtual_gpus_request_no_device_and_host_numbering_stays_outside() -> None:
    t = TaskLaunch(
        TaskKey("j", 0, "r", 0),
        "j",
        "true",
        "n",
        (1,),
        virtual=True,
        cpu=0.5,
        env={"CUDA_VISIBLE_DEVICES": "1", "A": "b"},
    )
    pod = pod_manifest(t, PodOptions(namespace="x"), task_env(t, [t], None))
    valid(pod)
    main = pod["spec"]["containers"][0]
    assert main["resources"]["limits"] == {"cpu": "500m", "memory": "1024Mi"}
    names = [e["name"] for e in main["env"]]
    assert "CUDA_VISIBLE_DEVICES" not in names and "A" in names
    assert "subdomain" not in pod["spec"]


def test_a_pod_gets_the_tasks_variables_and_nothing_of_the_services(monkeypatch) -> None:
    """The service's environment (PGPASSWORD, an admin's secret, its PATH) stays out of pods:
    a pod's variables are the task's, as for a local process, and the downward API's."""
    monkeypatch.setenv("PGPASSWORD", "pg-pass")
    monkeypatch.setenv("ADMIN_CLOUD_SECRET", "cloud-key")
    tasks = openpai_tasks("horovod-pytorch-synthetic-benchmark.yaml")
    for t in tasks:
        pod = pod_manifest(t, PodOptions(namespace="x"), task_env(t, tasks, "svc"), service="svc")
        names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert not {"PGPASSWORD", "ADMIN_CLOUD_SECRET", "PATH", "HOME"} & names
        assert names <= set(t.env) | {"PAI_CONTAINER_ID", "LABHIVE_JOB_ID", "LABHIVE_ATTEMPT",
                                      "LABHIVE_NODE", "LABHIVE_GPUS", "LABHIVE_POD_IP"}  # fmt: skip


texts = st.text(min_size=1, max_size=120)


@given(job=texts, role=texts, index=st.integers(0, 10_000), attempt=st.integers(0, 99))
def test_any_task_key_gives_valid_names_and_reads_back(
    job: str, role: str, index: int, attempt: int
) -> None:
    key = TaskKey(job, attempt, role, index)
    assert DNS_LABEL.match(pod_name(key))
    assert pod_name(key) != pod_name(TaskKey(job + "-x", attempt, role, index))
    assert pod_name(key) != pod_name(TaskKey(job, attempt, "x-" + role, index))
    assert DNS_LABEL.match(service_name(job, attempt)) and service_name(job, attempt)[0].isalpha()
    assert DNS_LABEL.match(task_hostname(role, index))
    assert LABEL_VALUE.match(label_value(job)) and len(label_value(job)) <= 63
    t = TaskLaunch(key, job, "true", "node-a", (0, 3))
    pod = pod_manifest(t, PodOptions(namespace="x"), {})
    back = task_of(pod["metadata"]["annotations"])
    assert back is not None and (back.key, back.node, back.gpus) == (key, "node-a", (0, 3))


def test_distinct_keys_that_clean_up_alike_keep_distinct_names() -> None:
    a, b = TaskKey("job_1", 0, "w", 0), TaskKey("job.1", 0, "w", 0)
    assert pod_name(a) != pod_name(b)
    assert pod_name(TaskKey("a-b", 0, "c", 0)) != pod_name(TaskKey("a", 0, "b-c", 0))
    assert pod_name(TaskKey("42", 1, "worker", 3)) == "lh-42-worker-3-a1"
    assert label_value("a/b") != label_value("a:b")


def test_a_pod_that_labhive_did_not_make_reads_as_no_task() -> None:
    assert task_of({}) is None
    assert task_of({"labhive.io/task": "{not json"}) is None


DEPLOY = Path(__file__).resolve().parents[1] / "docs" / "kubernetes"


def test_the_deployment_manifests_validate_and_their_flags_and_config_load() -> None:
    from labhive.scheduler.cli import build_parser
    from labhive.scheduler.core.config import load_cluster_config

    docs = [
        d for f in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d
    ]
    assert {d["kind"] for d in docs} >= {
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "Deployment",
        "PersistentVolumeClaim",
        "Service",
        "ConfigMap",
    }
    for doc in docs:
        valid(doc)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    parsed = build_parser().parse_args(args)
    assert (parsed.executor, parsed.in_cluster, parsed.namespace) == ("kubernetes", True, "labhive")
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    names = {
        n.name
        for n in load_cluster_config(yaml.safe_load(config_map["data"]["cluster.yaml"])).nodes()
    }
    assert names == {"gpu-node-1", "gpu-node-2"}
    role = next(d for d in docs if d["kind"] == "Role")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("pods/binding", "create"), ("pods/log", "get"), ("pods", "watch")} <= granted


def test_a_task_with_a_limit_requests_its_guarantee_and_is_limited_to_its_limit() -> None:
    """A notebook server's size: the scheduler (and kube's) counts the request, the kubelet
    enforces the limit; without a limit both are the guarantee (a Guaranteed pod, as before)."""
    t = TaskLaunch(
        TaskKey("j", 0, "server", 0), "j", "true", "n", (), cpu=0.1, memory_mb=512,
        cpu_limit=2.0, memory_limit_mb=4096,
    )  # fmt: skip
    pod = pod_manifest(t, PodOptions(namespace="x"), task_env(t, [t], None))
    valid(pod)
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "100m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "4096Mi"},
    }


def test_a_pod_runs_as_its_user_without_privileges_and_gets_gpus_only_as_the_resource() -> None:
    """Given alice's task (uid 23456, gid 23457) with 2 GPUs and a job env that tries to see
    every GPU (NVIDIA_VISIBLE_DEVICES=all), expect a valid pod that runs as her uid and gid,
    refuses root, cannot gain privileges, holds no capability, and whose GPUs come only from
    the device plugin's resource: no privileged mode, no host devices, no host paths."""
    t = TaskLaunch(
        TaskKey("j", 0, "train", 0), "j", "nvidia-smi", "n", (0, 1), user="alice",
        uid=23456, gid=23457, env={"NVIDIA_VISIBLE_DEVICES": "all", "A": "b"},
    )  # fmt: skip
    pod = pod_manifest(t, PodOptions(namespace="x"), task_env(t, [t], None))
    valid(pod)
    assert pod["spec"]["securityContext"] == {
        "runAsUser": 23456, "runAsGroup": 23457, "fsGroup": 23457, "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    main = pod["spec"]["containers"][0]
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    assert main["securityContext"]["privileged"] is False
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "NVIDIA_VISIBLE_DEVICES" not in [e["name"] for e in main["env"]]
    assert "volumes" not in pod["spec"] and "hostPID" not in pod["spec"]


def test_a_task_without_an_identity_still_gets_no_privileges_and_root_is_refused() -> None:
    """Tasks the service runs as its own user (no uid) keep the image's user but still lose
    every capability; a user whose uid is 0 is refused at launch with what to change."""
    t = TaskLaunch(TaskKey("j", 0, "r", 0), "j", "true", "n", (), user="root-ish")
    pod = pod_manifest(t, PodOptions(namespace="x"), task_env(t, [t], None))
    valid(pod)
    assert "securityContext" not in pod["spec"]
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    with pytest.raises(LaunchError, match=r"uid 0: a task never runs as root.*users\.yaml"):
        pod_manifest(replace(t, uid=0, gid=0), PodOptions(namespace="x"), {})
