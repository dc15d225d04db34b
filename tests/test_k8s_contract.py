"""Contract tests: the real ``kubernetes`` client, driven by the executor, against a loopback
server that replays API responses (tests/data/k8s/gang.json).

Given the responses a v1.30 API server gives for a 2-pod gang, expect the requests the client
makes for LabHive (paths, verbs, query parameters, bodies) in the order a gang needs them: nodes,
pods, the headless Service, then the bindings; the 201 Status of a binding and a 409 "already
assigned" accepted; exits read from the watch; the log read with ``limitBytes``; a stop that
records an Event, deletes with the grace period and waits for 404.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client as k8s
from waiting import wait_until

from labhive.scheduler.core.model import NodeDown
from labhive.scheduler.executors.base import TaskExit, TaskKey, TaskLaunch
from labhive.scheduler.executors.k8s_objects import (
    MANAGED_SELECTOR,
    PodOptions,
    binding_manifest,
    pod_manifest,
    service_manifest,
    service_name,
    task_env,
)
from labhive.scheduler.executors.kubernetes import KubernetesExecutor

DATA = Path(__file__).resolve().parent / "data" / "k8s"
NS = "research"
pytestmark = [pytest.mark.timeout(30), pytest.mark.k8s]


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int


TASKS = [
    TaskLaunch(
        TaskKey("42", 0, "worker", i),
        "mnist",
        "python train.py",
        "gpu-node-1",
        (2 * i, 2 * i + 1),
        cpu=4,
        memory_mb=16384,
        vc="vc1",
        image="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
    )
    for i in range(2)
]


class Replay:
    """Answers each request with the next recorded exchange; lists and watches at any time."""

    def __init__(self, recording: dict[str, Any]) -> None:
        self.exchanges = list(recording["exchanges"])
        self.standing = recording.get("standing", {})
        self.seen: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.watches: list[tuple[dict[str, list[str]], bool]] = []  # (query, got the events)
        self.served = False
        self.mismatches: list[str] = []
        self.lock = threading.Lock()
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _answer(self, method: str) -> None:
                url = urlparse(self.path)
                q = parse_qs(url.query)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if method == "GET" and url.path == f"/api/v1/namespaces/{NS}/pods":
                    self._standing(q)
                    return
                with replay.lock:
                    replay.seen.append((method, url.path, q, body))
                    want = replay.exchanges.pop(0) if replay.exchanges else None
                if want is None or (want["method"], want["path"]) != (method, url.path):
                    replay.mismatches.append(f"{method} {url.path}, recorded {want}")
                    self._send(599, b'{"message": "not in the recording"}')
                    return
                data = want["body"]
                if isinstance(data, str) and data.startswith("@"):
                    data = json.loads((DATA / data[1:]).read_text())
                raw = data.encode() if isinstance(data, str) else json.dumps(data).encode()
                ctype = "text/plain" if isinstance(data, str) else "application/json"
                self._send(want["status"], raw, ctype)

            def _standing(self, q: dict[str, list[str]]) -> None:
                if q.get("watch") != ["true"]:
                    self._send(200, json.dumps(replay.standing["list"]).encode())
                    return
                with replay.lock:
                    done = len(replay.seen) >= replay.standing["watch_after"]
                    events = replay.standing["watch"] if done and not replay.served else []
                    replay.served = replay.served or bool(events)
                    replay.watches.append((q, bool(events)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in events:
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                time.sleep(0.3)  # a quiet watch that times out
                self.wfile.write(b"0\r\n\r\n")

            def _send(self, code: int, raw: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def do_DELETE(self) -> None:
                self._answer("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.client = k8s.ApiClient(
            k8s.Configuration(host=f"http://127.0.0.1:{self.httpd.server_address[1]}")
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def replay() -> Any:
    r = Replay(json.loads((DATA / "gang.json").read_text()))
    yield r
    r.close()


def test_a_gang_through_the_real_client_makes_the_recorded_requests(replay: Replay) -> None:
    lh = KubernetesExecutor(
        replay.client, NS, nodes=(Node("gpu-node-1", 8), Node("gpu-node-2", 8)), watch_timeout_s=5
    )
    try:
        (down,) = lh.node_events()
        assert (type(down), down.node) == (NodeDown, "gpu-node-2")
        assert isinstance(down, NodeDown)
        assert down.reason == "not Ready: Kubelet stopped posting node status."

        handles = lh.launch(TASKS)
        assert [h.info["node"] for h in handles] == ["gpu-node-1", "gpu-node-1"]
        got: list[TaskExit] = []

        def exits() -> list[TaskExit]:
            got.extend(lh.poll())
            return got

        wait_until(exits, what="the exit from the watch")
        assert [(e.key.index, e.exit_code, e.requeue) for e in got] == [(0, 0, False)]

        served = next(i for i, (_, events) in enumerate(replay.watches) if events)
        wait_until(lambda: len(replay.watches) > served + 1, what="the watch resumed")
        assert lh.read_log(handles[0], "stdout", 8, 8) == b"loss 0.4"
        lh.stop([handles[1]], grace_s=30, reason="preempted by job 43 (prod)")
    finally:
        lh.close()

    assert replay.mismatches == []
    assert replay.exchanges == []
    opts = PodOptions(namespace=NS)
    svc = service_name("42", 0)
    pods = [pod_manifest(t, opts, task_env(t, TASKS, svc), vc="vc1", service=svc) for t in TASKS]
    names = [p["metadata"]["name"] for p in pods]
    uids = ["0d9b1f8e-6a0c-4e43-9f1e-2f6c1b7e5a10", "7a3c2e91-55d4-4b0f-a1c8-93e0d4f6b222"]
    bodies = [body for _, _, _, body in replay.seen]
    assert bodies[1:6] == [
        *pods,
        service_manifest(svc, NS, TASKS[0].key, list(zip(names, uids, strict=True))),
        binding_manifest(names[0], NS, "gpu-node-1"),
        binding_manifest(names[1], NS, "gpu-node-1"),
    ]
    queries = {(m, p): q for m, p, q, _ in replay.seen}
    assert queries[("GET", f"/api/v1/namespaces/{NS}/pods/{names[0]}/log")] == {
        "container": ["main"],
        "limitBytes": ["16"],
    }
    assert queries[("DELETE", f"/api/v1/namespaces/{NS}/pods/{names[1]}")] == {
        "gracePeriodSeconds": ["30"]
    }
    event = bodies[8]
    assert (event["reason"], event["involvedObject"]["uid"]) == ("Stopped", uids[1])
    first_watch = replay.watches[0][0]
    assert first_watch == {
        "allowWatchBookmarks": ["true"],
        "labelSelector": [MANAGED_SELECTOR],
        "resourceVersion": ["50006"],
        "timeoutSeconds": ["5"],
        "watch": ["true"],
    }
    # After the BOOKMARK and the last event, the watch resumes from the newest version seen.
    assert replay.watches[served + 1][0]["resourceVersion"] == ["50031"]


def test_the_binding_201_is_a_status_the_client_cannot_read_as_a_binding() -> None:
    """Why the executor binds with ``_preload_content=False``: the client's known quirk."""
    recording = json.loads((DATA / "gang.json").read_text())
    bind = next(e for e in recording["exchanges"] if e["path"].endswith("/binding"))
    r = Replay({"exchanges": [bind, bind]})
    try:
        api = k8s.CoreV1Api(r.client)
        name = bind["path"].split("/")[-2]
        body = binding_manifest(name, NS, "gpu-node-1")
        # A dict body is sent as it is, as the executor sends it; the stubs name only V1Binding.
        with pytest.raises(ValueError, match="target"):
            api.create_namespaced_pod_binding(name, NS, body)  # type: ignore[arg-type]
        # Unread, the answer is urllib3's response, which the stubs do not say either.
        bind_pod = api.create_namespaced_pod_binding
        raw: Any = bind_pod(name, NS, body, _preload_content=False)  # type: ignore[arg-type]
        assert (raw.status, json.loads(raw.data)["status"]) == (201, "Success")
    finally:
        r.close()
