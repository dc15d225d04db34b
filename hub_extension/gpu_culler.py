"""The GPU culler: a hub-managed service of ``labhive up`` that reclaims idle GPU servers.

Every ``--every`` seconds it looks at each running notebook server that holds a GPU and asks the
pure rule (``cull_rule.decide``) what to do:

- the hub's API (``GET /users?state=active``): the servers and their ``last_activity``;
- each server's own API (``GET /user/NAME/SERVER/api/kernels``, through the proxy, with the
  culler's hub token and its ``access:servers`` scope): every kernel's ``execution_state``;
- the LabHive service (``GET /jobs?state=RUNNING``, ``GET /jobs/{id}/gpus``, as an admin): the
  server's job, its GPUs and their latest NVML readings (per process where NVML reports the
  job's processes, else per device). On a virtual cluster there are no readings and nothing is
  culled by this rule.

It acts through the service (``POST /jobs/{id}/stop-notice``): a notice first (the job's
``stopping`` field, which the notebook's kernel extension shows and which runs the kernel's
``labhive.on_stop`` callbacks), then, if the server is still idle at the deadline, the stop (the
tasks get SIGTERM and the grace period). Activity during the notice withdraws it.

While a server's kernel is busy or its GPU works, the culler also tells the hub the server is
active (``POST /users/NAME/activity``), so ``jupyterhub-idle-culler``'s long timeout never
stops a server that computes without a browser attached either.

It runs as its own hub-managed service (no root, nothing inside the notebook); its state (when
each GPU went idle, which notices are out) is in memory: after a restart it waits the full idle
time again before noticing anyone, which only ever delays a cull.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from labhive.hub_extension.cull_rule import (
    GPU_IDLE_S,
    NOTICE_S,
    Action,
    Decision,
    Rule,
    ServerView,
    decide,
    gpu_idle_since,
)

log = logging.getLogger("labhive.gpu_culler")

Json = Any
Get = Callable[[str], Json]
Post = Callable[[str, dict[str, Any] | None], Json]


@dataclass(frozen=True, slots=True)
class HubServer:
    """A running server as the hub lists it."""

    user: str
    name: str  # "" for the default server
    url: str  # its path under the hub's public URL, e.g. "/user/alice/"
    last_activity: float | None


@dataclass
class Watch:
    """What the culler remembers about one server between rounds."""

    gpu_idle_since: float | None = None
    gpu_read: bool = False
    noticed_at: float | None = None


def parse_time(text: str | None) -> float | None:
    """The hub's and Jupyter's ISO 8601 times ("2026-11-27T08:00:00.123Z") as epoch seconds."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def servers_from_hub(users: list[dict[str, Any]]) -> list[HubServer]:
    """Running (``ready``) servers from ``GET /hub/api/users?state=active``."""
    out = []
    for user in users:
        for name, server in (user.get("servers") or {}).items():
            if server.get("ready") and server.get("url"):
                activity = parse_time(server.get("last_activity"))
                out.append(HubServer(user["name"], name, server["url"], activity))
    return out


def kernel_view(kernels: list[dict[str, Any]]) -> tuple[tuple[str, ...], float | None]:
    """Kernels' states and their newest activity, from a server's ``GET /api/kernels``."""
    states = tuple(str(k.get("execution_state") or "unknown") for k in kernels)
    times = [t for t in (parse_time(k.get("last_activity")) for k in kernels) if t is not None]
    return states, max(times, default=None)


def job_utilisation(
    current: list[dict[str, Any]], now: float | None = None, max_age_s: float = 120.0
) -> float | None:
    """The job's GPU utilisation now, from ``GET /jobs/{id}/gpus``'s ``current`` readings: its
    own processes' SM utilisation where NVML reports them (a GPU share), else the devices'
    utilisation; None without any reading, or with one older than ``max_age_s`` (a sampler
    that stopped must not keep saying 0 %). A field NVML did not give counts as busy."""
    if not current:
        return None
    if now is not None and any(now - float(g.get("time") or 0) > max_age_s for g in current):
        return None
    busiest = 0.0
    for gpu in current:
        procs = gpu.get("processes") or []
        values = [p.get("sm_util") for p in procs] if procs else [gpu.get("gpu_util")]
        if gpu.get("lost") or any(v is None for v in values):
            return 100.0  # unknown is never "idle"
        busiest = max([busiest, *(float(v) for v in values if v is not None)])
    return busiest


@dataclass
class Culler:
    """One round at a time (``round``); I/O through the ``hub_get``/``hub_post`` and
    ``service_get``/``service_post`` callables (httpx in ``main``)."""

    rule: Rule
    hub_get: Get
    hub_post: Post
    service_get: Get
    service_post: Post
    kernels_of: Callable[[HubServer], list[dict[str, Any]]]
    clock: Callable[[], float] = time.time
    watches: dict[tuple[str, str], Watch] = field(default_factory=dict)

    def round(self) -> dict[tuple[str, str], Decision]:
        """Look at every running server once; return what was decided for each."""
        servers = servers_from_hub(self.hub_get("/users?state=active"))
        jobs = self.service_get("/jobs?state=RUNNING&limit=1000")["jobs"]
        by_name = {(j["user"], j["name"]): j for j in jobs}
        decided = {}
        for server in servers:
            key = (server.user, server.name)
            job = by_name.get((server.user, _job_name(server.user, server.name)))
            if job is None:
                continue  # not a LabHive server job (or it just ended)
            try:
                decided[key] = self._one(server, job)
            except (httpx.HTTPError, KeyError, ValueError) as err:
                log.warning("server %s/%s: skipped this round (%s)", *key, err)
        for gone in set(self.watches) - {(s.user, s.name) for s in servers}:
            del self.watches[gone]
        return decided

    def _one(self, server: HubServer, job: dict[str, Any]) -> Decision:
        now = self.clock()
        watch = self.watches.setdefault((server.user, server.name), Watch())
        if job["gpus"] > 0:
            readings = self.service_get(f"/jobs/{job['id']}/gpus")
            max_age = max(120.0, 5 * float(readings.get("interval_s") or 0))
            # freshness is the sampler's matter, in real time (the rule's clock may be a test's)
            util = job_utilisation(readings.get("current") or [], time.time(), max_age)
            watch.gpu_read = util is not None
            if util is not None:
                watch.gpu_idle_since = gpu_idle_since(watch.gpu_idle_since, now, util)
        states, kernel_activity = kernel_view(self.kernels_of(server))
        activity = max((t for t in (server.last_activity, kernel_activity) if t), default=None)
        view = ServerView(activity, states, job["gpus"], watch.gpu_read, watch.gpu_idle_since,
                          watch.noticed_at)  # fmt: skip
        decision = decide(view, self.rule, now)
        self._act(server, job, watch, decision, busy=_computing(view))
        return decision

    def _act(
        self, server: HubServer, job: dict[str, Any], watch: Watch, d: Decision, busy: bool
    ) -> None:
        path = f"/jobs/{job['id']}/stop-notice"
        if d.action is Action.NOTICE:
            assert d.deadline is not None
            body = {"reason": d.why, "in_s": d.deadline - self.clock(), "culled": True}
            self.service_post(path, body)
            watch.noticed_at = self.clock()
            log.info("server %s/%s: notice (%s)", server.user, server.name, d.why)
        elif d.action is Action.WITHDRAW:
            self.service_post(path + "/withdraw", None)
            watch.noticed_at = None
            log.info("server %s/%s: notice withdrawn (%s)", server.user, server.name, d.why)
        elif d.action is Action.STOP:
            body = {"reason": d.why, "in_s": 0, "culled": True, "gpu_idle_s": d.idle_s}
            self.service_post(path, body)
            log.info("server %s/%s: stopped (%s)", server.user, server.name, d.why)
        if busy:  # keep jupyterhub-idle-culler off a server that computes unattended
            stamp = datetime.fromtimestamp(self.clock(), UTC).isoformat()
            body = {"servers": {server.name: {"last_activity": stamp}}, "last_activity": stamp}
            self.hub_post(f"/users/{server.user}/activity", body)


def _computing(view: ServerView) -> bool:
    kernel_busy = any(state == "busy" for state in view.kernel_states)
    return kernel_busy or (view.gpu_read and view.gpu_idle_since is None)


def _job_name(user: str, server: str) -> str:
    from labhive.hub_extension.spawner import server_job_name

    return server_job_name(user, server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labhive.hub_extension.gpu_culler")
    parser.add_argument("--gpu-idle", type=float, default=GPU_IDLE_S, help="seconds (15 min)")
    parser.add_argument("--notice", type=float, default=NOTICE_S, help="seconds of notice")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between rounds")
    parser.add_argument("--service-url", required=True, help="the LabHive service's API base")
    parser.add_argument("--public-url", required=True, help="the hub's public URL (servers)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gpu-culler %(message)s")
    token = os.environ.get("JUPYTERHUB_API_TOKEN")
    hub_api = os.environ.get("JUPYTERHUB_API_URL")
    if not token or not hub_api:
        print("run me as a JupyterHub service (JUPYTERHUB_API_TOKEN/URL unset)", file=sys.stderr)
        return 2
    headers = {"Authorization": f"token {token}"}
    with httpx.Client(headers=headers, timeout=20) as http:
        service = args.service_url.rstrip("/") + "/api/v1"

        def kernels_of(server: HubServer) -> list[dict[str, Any]]:
            got = http.get(f"{args.public_url.rstrip('/')}{server.url}api/kernels")
            got.raise_for_status()
            return list(got.json())

        culler = Culler(
            Rule(args.gpu_idle, args.notice),
            hub_get=lambda p: _ok(http.get(hub_api + p)),
            hub_post=lambda p, b: _ok(http.post(hub_api + p, json=b)),
            service_get=lambda p: _ok(http.get(service + p)),
            service_post=lambda p, b: _ok(http.post(service + p, json=b)),
            kernels_of=kernels_of,
        )
        rounds = 0
        while True:
            try:
                decided = culler.round()
                rounds += 1
                if rounds == 1:  # proof that its scopes let it read the hub and the service
                    log.info("first round done: %d LabHive server(s) watched", len(decided))
            except httpx.HTTPError as err:
                log.warning("round failed (%s); trying again in %.0f s", err, args.every)
            time.sleep(args.every)


def _ok(response: httpx.Response) -> Any:
    response.raise_for_status()
    return response.json() if response.content else None


if __name__ == "__main__":
    sys.exit(main())
