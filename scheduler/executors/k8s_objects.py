"""The Kubernetes objects LabHive creates, built as plain dicts from a ``TaskLaunch``.

Pure functions, no client and no I/O, so every object can be checked against the official
schemas in tests and read back (``task_of``) after a service restart: a pod's labels select it,
its annotations hold the exact task key and leaf cells (labels are too restricted to carry them
faithfully), and ``spec.nodeName`` says where the kubelet runs it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labhive.scheduler.executors.base import LaunchError, TaskKey, TaskLaunch
from labhive.scheduler.executors.env import task_vars

DOMAIN = "labhive.io"
MANAGED_BY = {"app.kubernetes.io/managed-by": "labhive"}
#: Selects every pod and service LabHive made, in any namespace it runs in.
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=labhive"
L_JOB, L_ROLE, L_INDEX, L_ATTEMPT, L_VC = (
    f"{DOMAIN}/{k}" for k in ("job", "role", "index", "attempt", "vc")
)
A_TASK = f"{DOMAIN}/task"  # JSON: the exact TaskKey, config node name, GPU indices
A_LEAF_CELLS = f"{DOMAIN}/leaf-cells"  # GPU indices on the node, comma-separated
A_STOP_REASON = f"{DOMAIN}/stop-reason"
CONTAINER = "main"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
_PLAIN = re.compile(r"[a-z0-9]+")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def dns_label(text: str, limit: int = 63) -> str:
    """A DNS-1123 label made from ``text``; a hash suffix keeps distinct inputs distinct."""
    clean = _NOT_DNS.sub("-", text.lower()).strip("-") or "x"
    if clean == text and len(clean) <= limit:
        return clean
    head = clean[: limit - 9].rstrip("-")
    return f"{head}-{_short_hash(text)}" if head else _short_hash(text)


def label_value(text: str) -> str:
    """A valid label value for ``text`` (the annotation keeps the exact one)."""
    clean = _NOT_LABEL.sub("-", text).strip("-_.")
    if clean == text and len(clean) <= 63:
        return clean
    head = clean[:54].strip("-_.")
    return f"{head}-{_short_hash(text)}" if head else _short_hash(text)


def pod_name(key: TaskKey) -> str:
    """One name per task attempt, so a repeated create after a crash finds the same pod.

    Where job id or role hold a dash (or anything a DNS label lacks) the split between them
    is ambiguous, so a hash of the exact key keeps the name unique.
    """
    readable = f"lh-{key.job_id}-{key.role}-{key.index}-a{key.attempt}"
    if _PLAIN.fullmatch(key.job_id) and _PLAIN.fullmatch(key.role):
        return dns_label(readable)
    exact = f"{key.job_id}\0{key.role}\0{key.index}\0{key.attempt}"
    return f"{dns_label(readable, 54).rstrip('-')}-{_short_hash(exact)}"


def service_name(job_id: str, attempt: int) -> str:
    """The headless Service giving a gang's pods stable DNS names (must start with a letter)."""
    return dns_label(f"lh-{job_id}-a{attempt}")


def task_hostname(role: str, index: int) -> str:
    """``worker-0`` etc.: the names OpenPAI jobs use in their commands (``-H master-0:4``)."""
    return dns_label(f"{role}-{index}")


def task_labels(key: TaskKey, vc: str | None) -> dict[str, str]:
    labels = {
        **MANAGED_BY,
        L_JOB: label_value(key.job_id),
        L_ROLE: label_value(key.role),
        L_INDEX: str(key.index),
        L_ATTEMPT: str(key.attempt),
    }
    if vc:
        labels[L_VC] = label_value(vc)
    return labels


def _quantity_cpu(cpu: float) -> str:
    milli = max(1, round(cpu * 1000))
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


DEFAULT_IMAGE = "python:3.12-slim"
GPU_RESOURCE = "nvidia.com/gpu"
SCHEDULER_NAME = "labhive"


@dataclass(frozen=True, slots=True)
class PodOptions:
    """Cluster-wide choices for the pods; one value per executor."""

    namespace: str
    scheduler_name: str = SCHEDULER_NAME
    default_image: str = DEFAULT_IMAGE
    gpu_resource: str | None = GPU_RESOURCE  # None: nodes advertise no GPU resource
    cluster_domain: str = "cluster.local"
    grace_s: int = 30
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()


#: Host-side device numbering means nothing inside a container that the device plugin gave
#: its own GPUs (renumbered from 0), and the host's loopback is not the pod's: these never pass
#: into a pod as values (the host IP comes from the downward API instead).
_HOST_ONLY_ENV = frozenset(
    {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "PAI_CONTAINER_HOST_IP"}
)


def needs_service(gang: Sequence[TaskLaunch]) -> bool:
    """Jobs of more than one task rendezvous by name, even when launched a few at a time."""
    total = max((int(t.env.get("PAI_JOB_TASK_COUNT", "1") or 1) for t in gang), default=1)
    return len(gang) > 1 or total > 1


def task_env(launch: TaskLaunch, gang: Sequence[TaskLaunch], service: str | None) -> dict[str, str]:
    """The task's variables (``env.task_vars``, as for a local process) fitted to a pod: a pod
    gets only these, nothing of the service's own environment.

    A gang-mate's address is its DNS name ``<role>-<index>.<service>`` under the headless
    Service, not an IP known in advance, so ``PAI_HOST_IP_<role>_<index>`` and the rendezvous
    host ``MASTER_ADDR`` (the rank-0 task) are those names.
    """
    env = task_vars(launch)
    for name in _HOST_ONLY_ENV:
        env.pop(name, None)
    env["PAI_CONTAINER_ID"] = pod_name(launch.key)
    if launch.user:
        env["PAI_USER_NAME"] = launch.user
    if service:
        for mate in gang:
            host = f"{task_hostname(mate.key.role, mate.key.index)}.{service}"
            env[f"PAI_HOST_IP_{mate.key.role}_{mate.key.index}"] = host
            if mate.env.get("RANK") == "0":
                env["MASTER_ADDR"] = host
    return env


def _env_list(env: Mapping[str, str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in env.items()]
    # Known only once the kubelet runs the pod, so they come from the downward API.
    for name, path in (
        ("PAI_CONTAINER_HOST_IP", "status.hostIP"),
        ("LABHIVE_POD_IP", "status.podIP"),
    ):
        if name not in env:
            items.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return items


def pod_manifest(
    launch: TaskLaunch,
    opts: PodOptions,
    env: Mapping[str, str],
    *,
    vc: str | None = None,
    service: str | None = None,
) -> dict[str, Any]:
    """The pod for one task: unbound (no nodeName), so only LabHive's binding places it."""
    key = launch.key
    # requests are the guarantee (what LabHive's placement counted), limits what is enforced;
    # the same when the job declares no limit (a Guaranteed pod, as before)
    requests: dict[str, str] = {
        "cpu": _quantity_cpu(launch.cpu),
        "memory": f"{max(1, launch.memory_mb)}Mi",
    }
    limits = {
        "cpu": _quantity_cpu(launch.cpu_max),
        "memory": f"{max(1, launch.memory_max_mb)}Mi",
    }
    if opts.gpu_resource and launch.gpus and not launch.virtual:
        requests[opts.gpu_resource] = limits[opts.gpu_resource] = str(len(launch.gpus))
    annotations = {
        A_TASK: json.dumps(
            {
                "job_id": key.job_id,
                "attempt": key.attempt,
                "role": key.role,
                "index": key.index,
                "job_name": launch.job_name,
                "node": launch.node,
                "gpus": list(launch.gpus),
                "vc": vc,
                "user": launch.user,
            },
            sort_keys=True,
        ),
        A_LEAF_CELLS: ",".join(str(g) for g in launch.gpus),
    }
    spec: dict[str, Any] = {
        "schedulerName": opts.scheduler_name,
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        # A user's job gets no credentials for the API that LabHive itself schedules through.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": opts.grace_s,
        "hostname": task_hostname(key.role, key.index),
        "containers": [
            {
                "name": CONTAINER,
                "image": launch.image or opts.default_image,
                "command": ["/bin/sh", "-c", launch.command],
                "env": _env_list(env),
                "resources": {"requests": requests, "limits": limits},
                "securityContext": _container_security(),
            }
        ],
    }
    if launch.uid is not None:
        spec["securityContext"] = _pod_security(launch)
    if service:
        spec["subdomain"] = service
        # Lets a command say ``worker-0`` (OpenPAI's host names) instead of the full DNS name.
        fqdn = f"{service}.{opts.namespace}.svc.{opts.cluster_domain}"
        spec["dnsConfig"] = {"searches": [fqdn]}
    if opts.service_account:
        spec["serviceAccountName"] = opts.service_account
    if opts.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in opts.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(key),
            "namespace": opts.namespace,
            "labels": task_labels(key, vc),
            "annotations": annotations,
        },
        "spec": spec,
    }


def _container_security() -> dict[str, Any]:
    """What every task's container gets, whoever it runs as: no way to gain privileges
    (setuid binaries, file capabilities), no capabilities at all, the runtime's default
    seccomp filter. GPUs reach it only as the device plugin's resource (``nvidia.com/gpu``),
    never as privileged mode or host devices."""
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security(launch: TaskLaunch) -> dict[str, Any]:
    """The task as its LabHive user, as the local executor runs it: that uid and gid for
    every process, volumes group-owned by it (``fsGroup``), and the kubelet refusing to start
    the pod as root (``runAsNonRoot``), whatever the image's USER says."""
    uid = launch.uid
    if not uid:
        raise LaunchError(
            f"user {launch.user!r} has uid 0: a task never runs as root on Kubernetes; give "
            "the user a uid of their own in users.yaml"
        )
    group = uid if launch.gid is None else launch.gid
    return {
        "runAsUser": uid,
        "runAsGroup": group,
        "fsGroup": group,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def binding_manifest(pod: str, namespace: str, node: str) -> dict[str, Any]:
    """What the binding subresource takes: the scheduler's whole decision for one pod."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def service_manifest(
    name: str,
    namespace: str,
    key: TaskKey,
    owners: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """A headless Service over one attempt's pods, owned by them so it goes when they go."""
    selector = {
        **MANAGED_BY,
        L_JOB: label_value(key.job_id),
        L_ATTEMPT: str(key.attempt),
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(selector)}
    if owners:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid} for pod, uid in owners
        ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            # Rendezvous happens while the pods start, before any readiness could be reported.
            "publishNotReadyAddresses": True,
        },
    }


def event_manifest(
    namespace: str, pod: str, uid: str | None, reason: str, message: str, source: str, stamp: str
) -> dict[str, Any]:
    """A core/v1 Event on a pod, so ``kubectl describe pod`` says why LabHive ended it."""
    involved = {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace}
    if uid:
        involved["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{pod}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": source},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


@dataclass(frozen=True, slots=True)
class PodTask:
    """What a LabHive pod says about its task, read back from its annotations."""

    key: TaskKey
    node: str  # the cluster config's node name
    gpus: tuple[int, ...]
    vc: str | None
    job_name: str


def task_of(annotations: Mapping[str, str] | None) -> PodTask | None:
    """The task a pod runs, or None for a pod that LabHive did not make."""
    raw = (annotations or {}).get(A_TASK)
    if not raw:
        return None
    try:
        d = json.loads(raw)
        key = TaskKey(str(d["job_id"]), int(d["attempt"]), str(d["role"]), int(d["index"]))
        gpus = tuple(int(g) for g in d.get("gpus", ()))
    except (ValueError, KeyError, TypeError):
        return None
    return PodTask(key, str(d.get("node", "")), gpus, d.get("vc"), str(d.get("job_name", "")))
