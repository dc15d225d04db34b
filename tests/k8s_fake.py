"""A small in-memory Kubernetes API server, and a fake kubelet, for the executor's tests.

It speaks HTTP on loopback so the real ``kubernetes`` client talks to it unchanged. It keeps
only what the executor relies on, with the real server's rules: 409 on a second create or a
second bind, 404 for a missing object, deletion with a grace period (an unbound pod goes at once,
a bound one when its kubelet has stopped it), resourceVersions, watch streams, and 410 Gone for
a watch from a version older than what it still keeps. The fake kubelet moves bound pods
Pending -> Running -> Succeeded/Failed in test time, running a tiny language in the pod's
command: ``echo WORDS`` writes a log line, ``exit N`` ends, ``sleep`` runs until a test ends it.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from copy import deepcopy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

GPU = "nvidia.com/gpu"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _matches(labels: dict[str, str], selector: str | None) -> bool:
    for term in (selector or "").split(","):
        if term:
            k, _, v = term.partition("=")
            if labels.get(k) != v:
                return False
    return True


class FakeApi:
    """The API server's state: nodes, pods, services, events, and the change history."""

    def __init__(self, nodes: dict[str, int], history: int = 1000) -> None:
        self.cond = threading.Condition()
        self.rv = 100
        self.history: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, pod)
        self.keep = history
        self.nodes = {n: self._node(n, g) for n, g in nodes.items()}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.logs: dict[str, bytearray] = {}  # pod uid -> its log
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.fail_binding: set[str] = set()  # pod names whose bind answers 500
        self.generation = 0  # bumped to end every open watch, as an API server restart does
        self.gone_sent = 0  # 410 answers given

    @staticmethod
    def _node(name: str, gpus: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", GPU: str(gpus), "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }

    # -- what tests do to the cluster ---------------------------------------------------------

    def set_ready(self, node: str, ready: bool) -> None:
        with self.cond:
            cond = self.nodes[node]["status"]["conditions"][0]
            cond["status"] = "True" if ready else "Unknown"
            cond["reason"] = "KubeletReady" if ready else "NodeStatusUnknown"
            cond["message"] = "" if ready else "Kubelet stopped posting node status."

    def compact(self) -> None:
        """Forget the history and end open watches (etcd compaction, then an API server
        restart): a watch resumed from an older resourceVersion gets 410 Gone."""
        with self.cond:
            self.history.clear()
            self.rv += 1
            self.generation += 1
            self.cond.notify_all()

    def pod(self, name: str, ns: str = "labhive") -> dict[str, Any] | None:
        with self.cond:
            p = self.pods.get((ns, name))
            return deepcopy(p) if p else None

    def change(self, pod: dict[str, Any], kind: str = "MODIFIED") -> None:
        """Record a pod change (the caller holds ``cond``) and wake the watches."""
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if kind == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        self.history.append((self.rv, kind, deepcopy(pod)))
        del self.history[: -self.keep]
        self.cond.notify_all()

    # -- the API's rules ----------------------------------------------------------------------

    def create_pod(self, ns: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            name = body.get("metadata", {}).get("name", "")
            if (ns, name) in self.pods:
                return 409, _status(409, "AlreadyExists", f'pods "{name}" already exists')
            pod = deepcopy(body)
            meta = pod["metadata"]
            meta.update(
                namespace=ns, uid=str(uuid.uuid4()), creationTimestamp="2026-01-01T00:00:00Z"
            )
            pod["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
            self.logs[meta["uid"]] = bytearray()
            self.change(pod, "ADDED")
            return 201, deepcopy(pod)

    def bind(self, ns: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if name in self.fail_binding:
                return 500, _status(500, "InternalError", "etcdserver: request timed out")
            if body.get("kind") != "Binding" or body["target"].get("kind") != "Node":
                return 400, _status(400, "BadRequest", "expected a Binding to a Node")
            if pod["spec"].get("nodeName"):
                msg = f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                msg += f"already assigned to node {pod['spec']['nodeName']!r}"
                return 409, _status(409, "Conflict", msg)
            pod["spec"]["nodeName"] = body["target"]["name"]
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            self.change(pod)
            return 201, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            }

    def delete_pod(self, ns: str, name: str, grace: int | None) -> tuple[int, dict[str, Any]]:
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if grace == 0 or not pod["spec"].get("nodeName"):
                self.change(pod, "DELETED")
            elif not pod["metadata"].get("deletionTimestamp"):
                pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                pod["metadata"]["deletionGracePeriodSeconds"] = grace
                self.change(pod)
            return 200, deepcopy(pod)

    def list_pods(self, ns: str, selector: str | None) -> dict[str, Any]:
        with self.cond:
            items = [
                deepcopy(p)
                for (pns, _), p in sorted(self.pods.items())
                if pns == ns and _matches(p["metadata"].get("labels", {}), selector)
            ]
            return {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }

    def watch(
        self, ns: str, selector: str | None, since: int, timeout: float, send: Callable
    ) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            oldest = self.history[0][0] if self.history else self.rv + 1
            if since + 1 < oldest and since < self.rv:
                msg = f"too old resource version: {since} ({oldest - 1})"
                self.gone_sent += 1
                send({"type": "ERROR", "object": _status(410, "Expired", msg)})
                return
            generation = self.generation
            while generation == self.generation:
                start = bisect.bisect_right(self.history, since, key=lambda h: h[0])
                for rv, kind, pod in self.history[start:]:
                    since = rv
                    if pod["metadata"]["namespace"] == ns and _matches(
                        pod["metadata"].get("labels", {}), selector
                    ):
                        send({"type": kind, "object": pod})
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cond.wait(min(left, 0.2))


class Kubelet:
    """Runs bound pods on the fake nodes, one state change per pod and step."""

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.finish: dict[str, int] = {}  # pod name -> exit code, for "sleep" pods
        self.evict: set[str] = set()
        self.started: list[str] = []  # pod names in the order they started running
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval: float = 0.02) -> Kubelet:
        def loop() -> None:
            while not self._stop.wait(interval):
                self.step()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def pod_ip(self, node: str, n: int) -> str:
        """The n-th pod's IP on ``node``: a /24 of 10.244.0.0/16 per node, as a CNI hands out."""
        return f"10.244.{list(self.api.nodes).index(node)}.{n % 250 + 2}"

    def _gpus_in_use(self, node: str, but: str) -> int:
        return sum(
            int(p["spec"]["containers"][0]["resources"].get("limits", {}).get(GPU, "0"))
            for p in self.api.pods.values()
            if p["spec"].get("nodeName") == node
            and p["metadata"]["name"] != but
            and p["status"]["phase"] in ("Pending", "Running")
            and p["status"].get("startTime")
        )

    def step(self) -> None:
        with self.api.cond:
            live = [
                deepcopy(p)
                for p in self.api.pods.values()
                if p["spec"].get("nodeName")
                and (
                    p["status"]["phase"] in ("Pending", "Running")
                    or p["metadata"].get("deletionTimestamp")
                )
            ]
            for pod in live:
                node = pod["spec"].get("nodeName")
                if (
                    node
                    and self.api.nodes.get(node, {})
                    .get("status", {})
                    .get("conditions", [{}])[0]
                    .get("status")
                    == "True"
                ):
                    self._advance(pod, node)

    def _advance(self, pod: dict[str, Any], node: str) -> None:
        name, status = pod["metadata"]["name"], pod["status"]
        if pod["metadata"].get("deletionTimestamp"):
            self.api.change(pod, "DELETED")
            return
        if status["phase"] not in ("Pending", "Running"):
            return
        if name in self.evict:
            status.update(phase="Failed", reason="Evicted", message="The node was low on memory.")
            self.api.change(pod)
            return
        container = pod["spec"]["containers"][0]
        script = container["command"][-1]
        log = self.api.logs[pod["metadata"]["uid"]]
        if status["phase"] == "Pending":
            if not status.get("startTime"):
                want = int(container["resources"].get("limits", {}).get(GPU, "0"))
                free = int(self.api.nodes[node]["status"]["allocatable"][GPU])
                if want + self._gpus_in_use(node, name) > free:
                    msg = f"Node didn't have enough resource: {GPU}"
                    status.update(phase="Failed", reason=f"OutOf{GPU}", message=msg)
                    self.api.change(pod)
                    return
                status["startTime"] = "2026-01-01T00:00:01Z"
            if container["image"].startswith("bad/"):
                waiting = {"reason": "InvalidImageName", "message": "invalid reference format"}
                status["containerStatuses"] = [_cs(container, {"waiting": waiting})]
                self.api.change(pod)
                return
            status["phase"] = "Running"
            status["containerStatuses"] = [_cs(container, {"running": {}})]
            status["podIP"] = self.pod_ip(node, len(self.started))  # from the pod network
            self.started.append(name)
            for word in re.findall(r"echo ([^;]*)", script):
                log += (word.strip() + "\n").encode()
            self.api.change(pod)
            return
        code = self.finish.pop(name, None)
        if code is None:
            if "sleep" in script:
                return
            found = re.search(r"exit (\d+)", script)
            code = int(found.group(1)) if found else 0
        ended = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        status["containerStatuses"] = [_cs(container, ended)]
        self.api.change(pod)


def _cs(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container["image"],
        "imageID": "" if "waiting" in state else f"docker.io/{container['image']}@sha256:0",
        "state": state,
        "ready": "running" in state,
        "restartCount": 0,
        "started": "running" in state,
    }


class _Handler(BaseHTTPRequestHandler):
    api: FakeApi
    protocol_version = "HTTP/1.1"  # watches and followed logs come chunked, as from a real one

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        # As Go's servers do; without it, headers and body as two writes wait on delayed ACKs.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _reply(self, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        q = parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = json.loads(self.rfile.read(length)) if length else None
        self.api.requests.append((method, url.path, q, raw))
        if method == "POST" and not isinstance(raw, dict):
            # Every POST the API takes is one JSON object, as the real API server insists.
            self._reply(400, _status(400, "BadRequest", "the request body must be a JSON object"))
            return
        body: dict[str, Any] = raw if isinstance(raw, dict) else {}
        parts = url.path.strip("/").split("/")
        one = {k: v[0] for k, v in q.items()}
        api = self.api
        match (method, parts):
            case ("GET", ["api", "v1", "nodes"]):
                with api.cond:
                    items = deepcopy(list(api.nodes.values()))
                self._reply(200, {"kind": "NodeList", "apiVersion": "v1", "items": items})
            case ("GET", ["api", "v1", "namespaces", ns, "pods"]) if one.get("watch") == "true":
                self._watch(ns, one)
            case ("GET", ["api", "v1", "namespaces", ns, "pods"]):
                self._reply(200, api.list_pods(ns, one.get("labelSelector")))
            case ("POST", ["api", "v1", "namespaces", ns, "pods"]):
                self._reply(*api.create_pod(ns, body))
            case ("GET", ["api", "v1", "namespaces", ns, "pods", name]):
                pod = api.pod(name, ns)
                if pod is None:
                    self._reply(404, _status(404, "NotFound", f'pods "{name}" not found'))
                else:
                    self._reply(200, pod)
            case ("DELETE", ["api", "v1", "namespaces", ns, "pods", name]):
                grace = one.get("gracePeriodSeconds")
                self._reply(*api.delete_pod(ns, name, None if grace is None else int(grace)))
            case ("POST", ["api", "v1", "namespaces", ns, "pods", name, "binding"]):
                self._reply(*api.bind(ns, name, body))
            case ("GET", ["api", "v1", "namespaces", ns, "pods", name, "log"]):
                self._log(ns, name, one)
            case ("POST", ["api", "v1", "namespaces", ns, "services"]):
                self._create_service(ns, body)
            case ("DELETE", ["api", "v1", "namespaces", ns, "services", name]):
                with api.cond:
                    gone = api.services.pop((ns, name), None)
                if gone is None:
                    self._reply(404, _status(404, "NotFound", f'services "{name}" not found'))
                else:
                    self._reply(200, gone)
            case ("POST", ["api", "v1", "namespaces", ns, "events"]):
                with api.cond:
                    api.events.append(body)
                self._reply(201, body)
            case _:
                self._reply(404, _status(404, "NotFound", f"no route {method} {url.path}"))

    def _create_service(self, ns: str, body: dict[str, Any]) -> None:
        with self.api.cond:
            name = body["metadata"]["name"]
            if (ns, name) in self.api.services:
                self._reply(409, _status(409, "AlreadyExists", f'services "{name}" exists'))
                return
            self.api.services[(ns, name)] = body
        self._reply(201, body)

    def _start_stream(self, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, ns: str, q: dict[str, str]) -> None:
        self._start_stream("application/json")
        since = int(q.get("resourceVersion") or self.api.rv)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.api.watch(
                ns,
                q.get("labelSelector"),
                since,
                float(q.get("timeoutSeconds", 5)),
                lambda event: self._chunk(json.dumps(event).encode() + b"\n"),
            )
            self._chunk(b"")

    def _log(self, ns: str, name: str, q: dict[str, str]) -> None:
        pod = self.api.pod(name, ns)
        if pod is None:
            self._reply(404, _status(404, "NotFound", f'pods "{name}" not found'))
            return
        if pod["status"]["phase"] == "Pending":
            msg = f'container "main" in pod "{name}" is waiting to start: ContainerCreating'
            self._reply(400, _status(400, "BadRequest", msg))
            return
        log = self.api.logs[pod["metadata"]["uid"]]
        if q.get("follow") != "true":
            data = bytes(log)
            if "limitBytes" in q:
                data = data[: int(q["limitBytes"])]
            self._reply(200, data, "text/plain")
            return
        self._start_stream("text/plain")
        sent = 0
        while True:
            with self.api.cond:
                data = bytes(log[sent:])
                current = self.api.pods.get((ns, name))
                done = current is None or current["status"]["phase"] in ("Succeeded", "Failed")
                if not data and not done:
                    self.api.cond.wait(0.2)
                    continue
            if data:
                self._chunk(data)
                sent += len(data)
            elif done:
                self._chunk(b"")
                return

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")


class FakeServer:
    """``FakeApi`` served on 127.0.0.1 for the real client; use as a context manager."""

    def __init__(self, nodes: dict[str, int], history: int = 1000) -> None:
        self.api = FakeApi(nodes, history)
        handler = type("Handler", (_Handler,), {"api": self.api})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def paths(self, method: str | None = None) -> list[str]:
        return [p for m, p, _, _ in self.api.requests if method in (None, m)]


def names(items: Iterable[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]
