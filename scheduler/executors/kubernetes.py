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
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from labhive.scheduler.executors import output
from labhive.scheduler.executors.base import (
    LaunchError,
    Stream,
    TaskExit,
    TaskHandle,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.k8s_objects import (
    CONTAINER,
    DEFAULT_IMAGE,
    GPU_RESOURCE,
    MANAGED_SELECTOR,
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
from labhive.scheduler.model import NodeDown, NodeUp

log = logging.getLogger(__name__)

#: Errors of the transport under the client: the API server is unreachable or hung up.
_TRANSPORT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


class NodeLike(Protocol):
    """A node of the cluster config (the core's ``NodeSpec`` fits)."""

    name: str
    gpus: Any  # a count, or the GPU indices


@dataclass(slots=True)
class _Tracked:
    key: TaskKey
    pod: str
    uid: str | None
    seq: int  # registration order: a list started before this cannot have seen the pod
    since: float
    last: Mapping[str, Any] = field(default_factory=dict)
    address: str | None = None  # the pod's IP, once the API reports one


def _body(resp: Any) -> Any:
    """JSON of a raw (``_preload_content=False``) response; the connection goes back to the pool."""
    try:
        return json.loads(resp.data or b"null")
    finally:
        resp.release_conn()


def _discard_body(resp: Any) -> None:
    """A kept-alive connection goes back to the pool only once its response is read to the end."""
    resp.drain_conn()
    resp.release_conn()


def _hang_up(resp: Any) -> None:
    """For a stream left unfinished: close the connection rather than reuse it mid-response."""
    resp.close()
    resp.release_conn()


def _api_message(err: BaseException) -> str:
    if isinstance(err, ApiException):
        try:
            message = json.loads(err.body or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"{err.status} {message or err.reason}"
    return str(err)


def _gpu_count(gpus: Any) -> int:
    return gpus if isinstance(gpus, int) else len(tuple(gpus))


class KubernetesExecutor:
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
        self._node_health: dict[str, str | None] = {}
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
                problem = node_problem(node, gpus, self._opts.gpu_resource)
                was_known = name in self._node_health
                was_bad = self._node_health.get(name) is not None
                if problem and (not was_known or not was_bad):
                    events.append(NodeDown(name, now, problem))
                elif not problem and was_bad:
                    events.append(NodeUp(name, now))
                self._node_health[name] = problem
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
                if self._node_health.get(h.info.get("config_node", "")):
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

    def _list_pods(self) -> tuple[list[dict[str, Any]], str | None]:
        raw = _body(
            self._api.list_namespaced_pod(
                self.namespace, label_selector=MANAGED_SELECTOR, _preload_content=False
            )
        )
        return raw.get("items") or [], (raw.get("metadata") or {}).get("resourceVersion")

    def _relist(self) -> None:
        with self._lock:
            started = self._seq
        items, rv = self._list_pods()
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["name"])
            self._observe(pod)
        with self._lock:
            for t in list(self._tracked.values()):
                if t.seq <= started and t.pod not in seen:
                    self._ended(t, None, "pod no longer exists (deleted outside LabHive)", True)
            self._rv = rv

    def _watch_loop(self) -> None:
        """Keeps the pod state current until ``close``; never dies of an error, which would
        leave every task's end unreported."""
        pause = 0.5
        while not self._closing.is_set():
            try:
                if self._rv is None:
                    self._relist()
                self._watch_once()
                pause = 0.5
                continue
            except ApiException as err:
                if err.status == 410:
                    log.info("pod watch expired (410 Gone); listing again")
                    self._rv = None
                    continue
                problem = _api_message(err)
            except Exception as err:  # the transport, or a stream closed by close()
                problem = f"{type(err).__name__}: {err}"
            if self._closing.is_set():
                return
            log.warning("pod watch interrupted (%s); retrying in %.1f s", problem, pause)
            self._closing.wait(pause)
            pause = min(pause * 2, 30.0)

    def _watch_once(self) -> None:
        """One watch request from ``self._rv``, read as raw JSON lines.

        Not ``kubernetes.watch.Watch``: it turns every event into client models, and one field
        a model requires but a server leaves out would stall the watch for good.
        """
        resp = self._api.list_namespaced_pod(
            self.namespace,
            label_selector=MANAGED_SELECTOR,
            resource_version=self._rv,
            timeout_seconds=self._watch_timeout_s,
            allow_watch_bookmarks=True,
            watch=True,
            _preload_content=False,
        )
        self._watch_resp = resp
        try:
            for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]  # untyped in the client
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                if event.get("type") == "DELETED":
                    self._gone(obj)
                elif event.get("type") != "BOOKMARK":
                    self._observe(obj)
                self._rv = (obj.get("metadata") or {}).get("resourceVersion") or self._rv
                if self._closing.is_set():
                    return
        finally:
            self._watch_resp = None
            _hang_up(resp)

    def _observe(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        doomed = None
        with self._lock:
            t = self._tracked.get(meta.get("name", ""))
            if t is None or (t.uid and meta.get("uid") != t.uid):
                return
            t.last = pod
            ip = (pod.get("status") or {}).get("podIP")
            if ip and ip != t.address:
                t.address = self._addressed[t.key] = str(ip)
            end = pod_outcome(pod, self._clock() - t.since, self._pull_grace_s)
            if end is not None:
                self._ended(t, end.exit_code, end.reason, end.requeue)
                doomed = t.pod if end.delete else None
        if doomed:
            self._delete_pod(doomed, grace_s=0)

    def _gone(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        with self._lock:
            t = self._tracked.get(meta.get("name", ""))
            if t is None or (t.uid and meta.get("uid") != t.uid):
                return
            end = pod_outcome(pod)
            if end is not None and not end.delete:
                self._ended(t, end.exit_code, end.reason, end.requeue)
            else:
                self._ended(t, None, "pod deleted (node lost, or deleted outside LabHive)", True)

    def _ended(self, t: _Tracked, code: int | None, reason: str, requeue: bool) -> None:
        """Caller holds the lock. Reported once; the pod stays for its logs."""
        self._tracked.pop(t.pod, None)
        self._exits.append(TaskExit(t.key, code, reason, requeue))

    def _recheck_pending(self) -> None:
        """Image pulls that keep failing end by time, which no watch event announces."""
        with self._lock:
            waiting = [
                t.last
                for t in self._tracked.values()
                if (t.last.get("status") or {}).get("phase") == "Pending"
            ]
        for pod in waiting:
            self._observe(pod)

    # ---- logs -------------------------------------------------------------------------------

    def _log_request(self, handle: TaskHandle, stream: Stream, **params: Any) -> Any:
        if self._split_logs:
            params["stream"] = "Stderr" if stream == "stderr" else "Stdout"
        return self._api.read_namespaced_pod_log(
            handle.info["pod"],
            handle.info.get("namespace", self.namespace),
            container=CONTAINER,
            _preload_content=False,
            **params,
        )

    def read_log(self, handle: TaskHandle, stream: Stream, offset: int, limit: int) -> bytes:
        """The pod log API has no offset: ask for ``offset + limit`` bytes, skip ``offset``.

        Without ``split_log_streams`` (a feature gate on older clusters) the kubelet's log
        interleaves both streams; it is served as stdout and stderr reads as empty.

        Capped as the local relay caps a log (``output_cap``, ``output.capped``): the first
        ``output_cap`` bytes, then one line saying the rest was dropped, and nothing after; no
        read asks the API for more than ``output_cap + 1`` bytes, so a pod printing without
        end costs the service no more than that per read.
        """
        if limit <= 0 or (stream == "stderr" and not self._split_logs):
            return b""
        cap = self.output_cap
        want = offset + limit if cap is None else min(offset + limit, cap + 1)
        try:
            resp = self._log_request(handle, stream, limit_bytes=want)
        except ApiException as err:
            if err.status in (400, 404):  # not started yet, or the pod is gone
                return b""
            raise
        try:
            if cap is not None and offset + limit > cap:  # the notice may be in the range
                return output.capped(_read_upto(resp, want), cap, stream)[offset : offset + limit]
            _skip(resp, offset)
            return _read_upto(resp, limit)
        finally:
            _discard_body(resp)  # limit_bytes bounds what is left

    def follow_log(
        self, handle: TaskHandle, stream: Stream = "stdout", offset: int = 0
    ) -> Iterator[bytes]:
        """The log from ``offset`` as it grows, until the container ends (``logs -f``); past
        ``output_cap`` bytes, the notice line, and the stream is hung up."""
        if stream == "stderr" and not self._split_logs:
            return
        try:
            resp = self._log_request(handle, stream, follow=True)
        except ApiException as err:
            if err.status in (400, 404):
                return
            raise
        cap = self.output_cap
        try:
            at, last = 0, b""  # bytes of the log passed on so far, and the last of them
            while chunk := resp.read1(64 * 1024):
                over = cap is not None and at + len(chunk) > cap
                if over:
                    assert cap is not None
                    keep = chunk[: cap - at]
                    chunk = keep + output.cut_notice(keep[-1:] or last, cap, stream)
                if offset < at + len(chunk):
                    yield chunk[max(0, offset - at) :]
                at, last = at + len(chunk), chunk[-1:]
                if over:
                    return
        finally:
            _hang_up(resp)

    def observations(self, handle: TaskHandle) -> list[str]:
        """Observation files live inside the pod; this executor collects none."""
        return []


def _skip(resp: Any, count: int) -> None:
    while count > 0:
        chunk = resp.read(min(count, 64 * 1024))
        if not chunk:
            return
        count -= len(chunk)


def _read_upto(resp: Any, limit: int) -> bytes:
    out = bytearray()
    while len(out) < limit:
        chunk = resp.read(limit - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def connect(
    kubeconfig: str | None = None, *, in_cluster: bool = False, context: str | None = None
) -> k8s.ApiClient:
    """An API client from a kubeconfig file (or ``$KUBECONFIG``) or the pod's service account."""
    import yaml
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    from labhive.scheduler.errors import UserError

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
