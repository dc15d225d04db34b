"""Runs tasks as pods, with LabHive as their scheduler (as HiveD is for OpenPAI).

The pods carry ``schedulerName: labhive``, so no other scheduler touches them; LabHive's core has
already chosen node and GPUs, and the executor makes that real through the binding subresource.
A gang's pods are all created first and only then bound, so a gang never half-starts: a bind
that fails deletes the gang's pods and raises ``LaunchError`` (the service requeues the job).

State comes from the API, never from memory alone: a watch (resumed from its resourceVersion,
re-listed on 410 Gone) turns pod phases into ``TaskExit``; after a restart ``adopt`` finds the
pods again by name and ``discover`` rebuilds placements from labels, annotations and
``spec.nodeName``. Node health comes from Node objects (``node_events``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from labhive.scheduler.core.model import NodeDown, NodeUp
from labhive.scheduler.executors import output
from labhive.scheduler.executors.base import (
    LaunchError,
    TaskExit,
    TaskHandle,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.k8s_http import _api_message, _body, _discard_body
from labhive.scheduler.executors.k8s_logs import PodLogs
from labhive.scheduler.executors.k8s_objects import (
    DEFAULT_IMAGE,
    GPU_RESOURCE,
    SCHEDULER_NAME,
    PodOptions,
    binding_manifest,
    event_manifest,
    needs_service,
    pod_manifest,
    pod_name,
    service_manifest,
    service_name,
    task_env,
    task_of,
)
from labhive.scheduler.executors.k8s_status import node_problem, pod_outcome
from labhive.scheduler.executors.k8s_watch import PodWatch, _Tracked
from labhive.scheduler.executors.node_watch import NodeWatch

log = logging.getLogger(__name__)

#: Errors of the transport under the client: the API server is unreachable or hung up.
_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


class NodeLike(Protocol):
    """A node of the cluster config (the core's ``NodeSpec`` fits, as does any frozen record:
    the executor only reads these, hence properties rather than settable attributes)."""

    @property
    def name(self) -> str: ...

    @property
    def gpus(self) -> Any: ...  # a count, or the GPU indices


def _gpu_count(gpus: Any) -> int:
    return gpus if isinstance(gpus, int) else len(tuple(gpus))


class KubernetesExecutor(PodWatch, PodLogs):
    """The executor for ``labhive serve --executor kubernetes``."""

    name = "kubernetes"
    partial_stops = False  # pod names carry no generation: a restarted task's would clash

    def __init__(
        self,
        api_client: k8s.ApiClient,
        namespace: str,
        *,
        nodes: Iterable[NodeLike] = (),
        node_label: str | None = None,
        default_image: str = DEFAULT_IMAGE,
        gpu_resource: str | None = GPU_RESOURCE,
        scheduler_name: str = SCHEDULER_NAME,
        cluster_domain: str = "cluster.local",
        service_account: str | None = None,
        image_pull_secrets: Sequence[str] = (),
        split_log_streams: bool = False,
        pull_grace_s: float = 300.0,
        watch_timeout_s: int = 30,
        stop_slack_s: float = 30.0,
        node_poll_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = k8s.CoreV1Api(api_client)
        self._opts = PodOptions(
            namespace=namespace,
            scheduler_name=scheduler_name,
            default_image=default_image,
            gpu_resource=gpu_resource,
            cluster_domain=cluster_domain,
            service_account=service_account,
            image_pull_secrets=tuple(image_pull_secrets),
        )
        self.namespace = namespace
        self._config_nodes = tuple(nodes)
        self._node_label = node_label
        self._split_logs = split_log_streams
        #: What a read of a pod's log is served of it at most (``read_log``); None: all.
        self.output_cap: int | None = output.DEFAULT_CAP
        self._pull_grace_s = pull_grace_s
        self._watch_timeout_s = watch_timeout_s
        self._stop_slack_s = stop_slack_s
        self._node_poll_s = node_poll_s
        self._nodes_listed_at: float | None = None
        self._clock = clock
        self._lock = threading.RLock()
        self._tracked: dict[str, _Tracked] = {}
        self._exits: list[TaskExit] = []
        self._addressed: dict[TaskKey, str] = {}  # pod IPs learnt since the last call
        self._seq = 0
        self._rv: str | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._watch_resp: Any = None
        self._nodes = NodeWatch()  # what was wrong with each node at the last poll
        self._k8s_names: dict[str, str] = {}

    # ---- lifecycle of the executor itself ---------------------------------------------------

    def close(self) -> None:
        """Ends the watch thread (it stops at its next event or watch timeout)."""
        self._closing.set()
        resp = self._watch_resp
        if resp is not None:
            # Closing a socket does not wake a thread blocked reading it; shutting it down does.
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _ensure_watch(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._closing.clear()
                self._thread = threading.Thread(
                    target=self._watch_loop, name="labhive-k8s-watch", daemon=True
                )
                self._thread.start()

    # ---- nodes ------------------------------------------------------------------------------

    def node_events(self, nodes: Iterable[NodeLike] | None = None) -> list[NodeDown | NodeUp]:
        """Health changes of the config's nodes since the last call, as the core's events.

        The first call reports every node that is bad from the start (the core assumes all
        healthy); later calls report only transitions. The scheduler loop calls this on every
        pass, so the nodes are listed at most every ``node_poll_s``. An unreachable API reports
        nothing: that says nothing about the nodes.
        """
        now = time.monotonic()
        if (
            nodes is None
            and self._nodes_listed_at is not None
            and now - self._nodes_listed_at < self._node_poll_s
        ):
            return []
        self._nodes_listed_at = now
        wanted = tuple(nodes) if nodes is not None else self._config_nodes
        try:
            items = _body(self._api.list_node(_preload_content=False)).get("items") or []
        except (ApiException, *_TRANSPORT_ERRORS) as err:
            log.warning("cannot list nodes: %s", _api_message(err))
            return []
        by_name: dict[str, Mapping[str, Any]] = {}
        for node in items:
            meta = node.get("metadata") or {}
            label = (meta.get("labels") or {}).get(self._node_label) if self._node_label else None
            by_name[label or meta.get("name", "")] = node
        want: dict[str, int] = {}  # a node in two chains is listed once per chain
        for spec in wanted:
            want[spec.name] = want.get(spec.name, 0) + _gpu_count(spec.gpus)
        now = self._clock()
        events: list[NodeDown | NodeUp] = []
        with self._lock:
            for name, gpus in want.items():
                node = by_name.get(name)
                if node is not None:
                    self._k8s_names[name] = node["metadata"]["name"]
                event = self._nodes.saw(
                    name, node_problem(node, gpus, self._opts.gpu_resource), now
                )
                if event is not None:
                    events.append(event)
        return events

    def _k8s_node(self, node: str) -> str:
        """The Node object's name for a config node (they differ when ``node_label`` is used)."""
        with self._lock:
            known = self._k8s_names.get(node)
        if known is None and self._node_label:
            self.node_events()
            with self._lock:
                known = self._k8s_names.get(node)
            if known is None:
                raise LaunchError(f"no Kubernetes node has label {self._node_label}={node}")
        return known or node

    # ---- launch -----------------------------------------------------------------------------

    def launch(self, tasks: Sequence[TaskLaunch]) -> list[TaskHandle]:
        if not tasks:
            return []
        self._ensure_watch()
        first = tasks[0].key
        targets = [self._k8s_node(t.node) for t in tasks]
        service = service_name(first.job_id, first.attempt) if needs_service(tasks) else None
        created: list[tuple[str, str]] = []  # (pod, uid)
        try:
            for t, node in zip(tasks, targets, strict=True):
                body = pod_manifest(
                    t, self._opts, task_env(t, tasks, service), vc=t.vc, service=service
                )
                name = body["metadata"]["name"]
                uid = self._create_pod(body, t.key, node)
                created.append((name, uid))
                self._track(t.key, name, uid)
            if service:
                self._create(
                    self._api.create_namespaced_service,
                    service_manifest(service, self.namespace, first, created),
                )
            for (name, _), node in zip(created, targets, strict=True):
                self._bind(name, node)
        except (ApiException, LaunchError, ValueError, *_TRANSPORT_ERRORS) as err:
            # ValueError: the client's own model check refused a body (or a reply).
            self._discard([name for name, _ in created], service)
            raise LaunchError(
                f"could not start job {first.job_id} on Kubernetes: {_api_message(err)}"
            ) from err
        return [
            TaskHandle(
                t.key,
                {
                    "namespace": self.namespace,
                    "pod": name,
                    "uid": uid,
                    "node": node,
                    "config_node": t.node,
                    "service": service,
                },
            )
            for t, (name, uid), node in zip(tasks, created, targets, strict=True)
        ]

    def _create(self, method: Callable[..., Any], body: Mapping[str, Any]) -> Any:
        """Create an object; one that exists already (a launch repeated after a crash) is fine."""
        try:
            return _body(method(self.namespace, body, _preload_content=False))
        except ApiException as err:
            if err.status != 409:
                raise
            return None

    def _create_pod(self, body: Mapping[str, Any], key: TaskKey, node: str) -> str:
        """Create the pod, or take over the one a crashed launch left with the same name."""
        name = body["metadata"]["name"]
        for _ in range(2):
            made = self._create(self._api.create_namespaced_pod, body)
            if made is not None:
                return str(made["metadata"]["uid"])
            old = self._read_pod(name)
            if old is None:
                continue  # deleted in between: create again
            meta = old.get("metadata") or {}
            same = task_of(meta.get("annotations"))
            bound = (old.get("spec") or {}).get("nodeName")
            reusable = bound in (None, node) and pod_outcome(old) is None
            if same and same.key == key and reusable and not meta.get("deletionTimestamp"):
                return str(meta["uid"])
            # Bound elsewhere or going away: it must be gone before this attempt's pod exists.
            self._delete_pod(name, grace_s=0)
            self._wait_gone({name: str(meta.get("uid"))}, self._stop_slack_s)
        raise LaunchError(f"pod {name} exists and could not be replaced")

    def _bind(self, pod: str, node: str) -> None:
        body = binding_manifest(pod, self.namespace, node)
        try:
            # The API answers 201 with a Status, which the client cannot read as a Binding.
            # The client sends a dict body as it is; its stubs name only V1Binding.
            resp = self._api.create_namespaced_pod_binding(
                pod,
                self.namespace,
                body,  # type: ignore[arg-type]
                _preload_content=False,
            )
            _discard_body(resp)
        except ApiException as err:
            if err.status != 409:
                raise
            bound = ((self._read_pod(pod) or {}).get("spec") or {}).get("nodeName")
            if bound != node:
                raise LaunchError(f"pod {pod} is bound to {bound}, not {node}") from err

    def _discard(self, pods: Sequence[str], service: str | None) -> None:
        """Undo a launch that failed half-way; best effort, the API may be what failed."""
        with self._lock:
            for pod in pods:
                self._tracked.pop(pod, None)
        for pod in pods:
            try:
                self._delete_pod(pod, grace_s=0)
            except (ApiException, *_TRANSPORT_ERRORS) as err:
                log.warning("cannot delete pod %s: %s", pod, _api_message(err))
        if service:
            self._delete_service(service)

    def _track(self, key: TaskKey, pod: str, uid: str | None) -> None:
        with self._lock:
            self._seq += 1
            self._tracked[pod] = _Tracked(key, pod, uid, self._seq, self._clock())

    # ---- stop -------------------------------------------------------------------------------

    def stop(self, handles: Sequence[TaskHandle], grace_s: float, reason: str = "") -> None:
        """Delete the pods with a grace period (force after it), record why, wait until gone.

        A pod on a node known to be down is deleted at once: no kubelet is there to end it
        gracefully, and waiting would hold up the scheduler loop.
        """
        pods: dict[str, str | None] = {}
        lost: set[str] = set()
        with self._lock:
            for h in handles:
                name = h.info.get("pod") or pod_name(h.key)
                pods[name] = h.info.get("uid")
                self._tracked.pop(name, None)
                if self._nodes.problem(h.info.get("config_node", "")):
                    lost.add(name)
        why = reason or "stopped by LabHive (cancelled, preempted or its node is down)"
        for pod, uid in pods.items():
            self._record_event(pod, uid, "Stopped", why)
            self._delete_pod(pod, grace_s=0 if pod in lost else grace_s)
        for service in {h.info.get("service") for h in handles} - {None}:
            self._delete_service(str(service))
        if not self._wait_gone(pods, grace_s + self._stop_slack_s):
            # A pod on a lost node stays Terminating forever; a forced delete lets it go.
            for pod in pods:
                self._delete_pod(pod, grace_s=0)
            self._wait_gone(pods, self._stop_slack_s)

    def _delete_pod(self, pod: str, grace_s: float) -> None:
        try:
            resp = self._api.delete_namespaced_pod(
                pod,
                self.namespace,
                grace_period_seconds=math.ceil(grace_s),
                _preload_content=False,
            )
            _discard_body(resp)
        except ApiException as err:
            if err.status != 404:
                raise

    def _delete_service(self, service: str) -> None:
        try:
            resp = self._api.delete_namespaced_service(
                service, self.namespace, _preload_content=False
            )
            _discard_body(resp)
        except ApiException as err:
            if err.status != 404:
                log.warning("cannot delete service %s: %s", service, _api_message(err))

    def _read_pod(self, pod: str) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] | None = _body(
                self._api.read_namespaced_pod(pod, self.namespace, _preload_content=False)
            )
            return body
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def _wait_gone(self, pods: Mapping[str, str | None], timeout_s: float) -> bool:
        """True once no pod of these names and uids exists (a new pod of the same name may)."""
        deadline = time.monotonic() + timeout_s
        left = dict(pods)
        while left:
            for pod, uid in list(left.items()):
                now = self._read_pod(pod)
                if now is None or (uid and now["metadata"].get("uid") != uid):
                    del left[pod]
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        return not left

    def _record_event(self, pod: str, uid: str | None, reason: str, message: str) -> None:
        """A core/v1 Event on the pod, so ``kubectl describe pod`` says why LabHive ended it."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = event_manifest(
            self.namespace, pod, uid, reason, message, self._opts.scheduler_name, stamp
        )
        try:
            self._create(self._api.create_namespaced_event, body)
        except (ApiException, *_TRANSPORT_ERRORS) as err:
            log.warning("cannot record why pod %s stops: %s", pod, _api_message(err))

    # ---- state from the API -----------------------------------------------------------------

    def poll(self) -> list[TaskExit]:
        self._ensure_watch()
        self._recheck_pending()
        with self._lock:
            exits, self._exits = self._exits, []
        return exits

    def addresses(self) -> dict[TaskKey, str]:
        """Pod IPs learnt since the last call, by task: a pod gets its IP from the cluster's
        network only after ``launch`` has returned, so the address reaches the task's record
        (``GET /jobs/{id}``, where a notebook server on a node is reached) through here."""
        with self._lock:
            learnt, self._addressed = self._addressed, {}
        return learnt

    def adopt(self, handles: Sequence[TaskHandle]) -> list[TaskExit]:
        """Track the recorded pods again; those gone or ended while LabHive was down end now.

        A handle without ``info`` (LabHive died between launch and recording it) still finds
        its pod: names follow from the task key, so no launched pod is left running unseen.
        """
        for h in handles:
            name = h.info.get("pod") or pod_name(h.key)
            uid = h.info.get("uid")
            self._track(h.key, name, uid)  # before the read: later changes reach the watch
            pod = self._read_pod(name)
            if pod is None or (uid and pod["metadata"].get("uid") != uid):
                self._lost(name, "pod gone while LabHive was down")
            elif not (pod.get("spec") or {}).get("nodeName"):
                # Created but never bound (LabHive stopped mid-launch): nothing would ever bind
                # it, so it goes and the job waits again.
                self._delete_pod(name, grace_s=0)
                self._lost(name, "pod was never bound (LabHive stopped during the launch)")
            else:
                self._observe(pod)
        keys = {h.key for h in handles}
        with self._lock:
            ended = [e for e in self._exits if e.key in keys]
            self._exits = [e for e in self._exits if e.key not in keys]
        self._ensure_watch()
        return ended

    def _lost(self, pod: str, reason: str) -> None:
        with self._lock:
            t = self._tracked.get(pod)
            if t is not None:
                self._ended(t, None, reason, True)

    def discover(self) -> list[TaskHandle]:
        """Every live LabHive pod in the namespace as a handle, placement included.

        For a store that lost its handles: ``info`` carries ``config_node`` and ``gpus`` from
        the pod's annotations, enough for the core's ``Adopt`` event.
        """
        items = self._list_pods()[0]
        handles = []
        for pod in items:
            meta = pod["metadata"]
            task = task_of(meta.get("annotations"))
            node = (pod.get("spec") or {}).get("nodeName")
            if task is None or not node or pod_outcome(pod) is not None:
                continue
            info = {
                "namespace": self.namespace,
                "pod": meta["name"],
                "uid": meta.get("uid"),
                "node": node,
                "config_node": task.node,
                "gpus": list(task.gpus),
                "vc": task.vc,
                "service": (pod.get("spec") or {}).get("subdomain"),
            }
            handles.append(TaskHandle(task.key, info))
        return handles


def connect(
    kubeconfig: str | None = None, *, in_cluster: bool = False, context: str | None = None
) -> k8s.ApiClient:
    """An API client from a kubeconfig file (or ``$KUBECONFIG``) or the pod's service account."""
    import yaml
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    from labhive.scheduler.core.errors import UserError

    try:
        if in_cluster:
            conf = k8s.Configuration()
            # the client's config loaders are untyped
            k8s_config.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
            return k8s.ApiClient(conf)
        api: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context
        )
        return api
    except (ConfigException, OSError, yaml.YAMLError, TypeError, AttributeError) as err:
        # a file that is not YAML, or YAML that is not a kubeconfig, is the admin's to fix
        where = (
            "the in-cluster service account"
            if in_cluster
            else (kubeconfig or "$KUBECONFIG or ~/.kube/config")
        )
        raise UserError(
            f"cannot load Kubernetes credentials from {where}: {err}; "
            "pass --kubeconfig PATH, or --in-cluster when LabHive runs in a pod"
        ) from err
