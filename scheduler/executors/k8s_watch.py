"""The pod watch: one thread keeps the state of LabHive's pods current from a list, then a
watch from its resourceVersion (again from a list after 410 Gone), and reports each tracked
pod's end once. A mixin of ``KubernetesExecutor``, whose state it reads and writes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from labhive.scheduler.executors.base import (
    TaskExit,
    TaskKey,
)
from labhive.scheduler.executors.k8s_http import _api_message, _body, _hang_up
from labhive.scheduler.executors.k8s_objects import (
    MANAGED_SELECTOR,
)
from labhive.scheduler.executors.k8s_status import pod_outcome

# The executor's logger: the watch's messages read as they did before the split.
log = logging.getLogger("labhive.scheduler.executors.kubernetes")


@dataclass(slots=True)
class _Tracked:
    key: TaskKey
    pod: str
    uid: str | None
    seq: int  # registration order: a list started before this cannot have seen the pod
    since: float
    last: Mapping[str, Any] = field(default_factory=dict)
    address: str | None = None  # the pod's IP, once the API reports one


class PodWatch:
    """Pod state from the API for ``KubernetesExecutor`` (the attributes it sets up)."""

    _api: k8s.CoreV1Api
    namespace: str
    _lock: threading.RLock
    _tracked: dict[str, _Tracked]
    _exits: list[TaskExit]
    _addressed: dict[TaskKey, str]
    _seq: int
    _rv: str | None
    _closing: threading.Event
    _watch_resp: Any
    _watch_timeout_s: int
    _pull_grace_s: float
    _clock: Callable[[], float]

    def _delete_pod(self, pod: str, grace_s: float) -> None:
        raise NotImplementedError  # the executor's (``KubernetesExecutor._delete_pod``)

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
