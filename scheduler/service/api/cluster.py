"""The cluster's nodes, GPUs and VCs, and an admin taking nodes down and up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import FastAPI

from labhive.scheduler.core.gpu_share import MILLI
from labhive.scheduler.core.model import ClusterView, NodeDown, NodeUp, NodeView
from labhive.scheduler.service import notices
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api.deps import Jobs, route
from labhive.scheduler.service.auth import Forbidden, Identity
from labhive.scheduler.service.context import Service
from labhive.scheduler.service.job_service import JobService
from labhive.scheduler.service.routing import NotFound, Who

T = TypeVar("T")


def cluster(me: Who, jobs: Jobs) -> s.ClusterOut:
    svc = jobs.svc
    view = svc.loop.cluster()
    shown = _job_shown(jobs, me)
    nodes = [_node_out(svc, n, shown) for n in view.nodes]
    return s.ClusterOut(virtual=view.virtual, policy=svc.policy, nodes=nodes, vcs=vcs_out(svc, me))


def node_down(node: str, me: Who, jobs: Jobs, body: s.NodeDownRequest | None = None) -> s.NodeOut:
    """Take a node out of service (admins): its jobs are stopped and requeued, nothing
    starts there, and it stays down across restarts until ``/nodes/{node}/up``."""
    svc = jobs.svc
    _known_node(svc, node, me)
    if body is not None and body.notice_s > 0:  # service/notices.py
        notices.drain_with_notice(svc, node, body.reason, me.name, body.notice_s)
        (view,) = [n for n in svc.loop.cluster().nodes if n.name == node]
        return _node_out(svc, view)
    return _node_settled(svc, svc.loop.take_down(node, body.reason if body else "", me.name))


def node_up(node: str, me: Who, jobs: Jobs) -> s.NodeOut:
    """Put a node an admin took down back into service (admins)."""
    svc = jobs.svc
    _known_node(svc, node, me)
    notices.cancel_drain(svc.loop, node)  # a drain still in its notice is called off
    return _node_settled(svc, svc.loop.bring_up(node))


def vcs(me: Who, jobs: Jobs) -> s.VCList:
    return s.VCList(vcs=vcs_out(jobs.svc, me))


def gpus(me: Who, jobs: Jobs) -> s.GPUList:
    view = jobs.svc.loop.cluster()
    shown = _job_shown(jobs, me)
    out = [
        s.GPUOut(
            node=n.name,
            index=g,
            sku=n.sku,
            healthy=n.healthy,
            job=shown(n.used[g]) if g in n.used else None,
            virtual=view.virtual,
            **shares_out(n.shares.get(g), shown),
        )
        for n in view.nodes
        for g in n.gpus
    ]
    return s.GPUList(gpus=out)


def register(app: FastAPI) -> None:
    """Add ``/cluster``, ``/nodes/{node}/down|up``, ``/vcs`` and ``/gpus``."""
    route(app, "GET", "/cluster", cluster, response_model=s.ClusterOut)
    route(app, "POST", "/nodes/{node}/down", node_down, response_model=s.NodeOut)
    route(app, "POST", "/nodes/{node}/up", node_up, response_model=s.NodeOut)
    route(app, "GET", "/vcs", vcs, response_model=s.VCList)
    route(app, "GET", "/gpus", gpus, response_model=s.GPUList)


def shares_out(held: dict[int, int] | None, shown: Callable[[int], int | str]) -> dict[str, Any]:
    """A shared GPU's sharers (as ``shown`` lets the caller see them) and what they use of it."""
    if not held:
        return {}
    return {
        "shares": [s.ShareOut(job=shown(j), share=m / MILLI) for j, m in sorted(held.items())],
        "shared_used": sum(held.values()) / MILLI,
    }


#: What a non-admin sees in place of another user's job id on the GPU and cluster views.
FOREIGN_JOB = "another user's job"


def _job_shown(jobs: JobService, me: Identity) -> Callable[[int], int | str]:
    """How a job holding a GPU is shown to ``me``: its id to an admin or its owner, else
    ``FOREIGN_JOB`` (ids of others' jobs tell when they submit and how much they run)."""
    if me.admin:
        return _as_is
    mine = jobs.active_job_ids(me.id)
    return lambda job: job if job in mine else FOREIGN_JOB


def _as_is(job: int) -> int | str:
    return job


def _node_out(
    svc: Service, n: NodeView[int], shown: Callable[[int], int | str] = _as_is
) -> s.NodeOut:
    return s.NodeOut(
        name=n.name,
        sku=n.sku,
        gpus=list(n.gpus),
        healthy=n.healthy,
        reason=n.reason,
        used={str(g): shown(j) for g, j in n.used.items()},
        held=n.name in svc.loop.held,
        shares={str(g): shares_out(held, shown)["shares"] for g, held in n.shares.items() if held},
    )


def _known_node(svc: Service, node: str, me: Identity) -> None:
    if not me.admin:
        raise Forbidden("only an admin may take nodes down or bring them up")
    names = [n.name for n in svc.loop.cluster().nodes]
    if node not in names:
        raise NotFound(f"no node {node!r}; this cluster has {', '.join(names)}")


def _node_settled(svc: Service, event: NodeDown | NodeUp, wait_s: float = 5.0) -> s.NodeOut:
    """The node once the loop has applied ``event`` (as it stands after ``wait_s`` at most)."""
    want = (True, "") if isinstance(event, NodeUp) else (False, event.reason or "down")

    def look() -> tuple[bool, s.NodeOut]:
        (view,) = [n for n in svc.loop.cluster().nodes if n.name == event.node]
        return (view.healthy, view.reason) == want, _node_out(svc, view)

    return _settled(svc, wait_s, look)


def _settled(svc: Service, wait_s: float, look: Callable[[], tuple[bool, T]]) -> T:
    """``look()`` gives (done, answer); ask again after each scheduler pass until it is done or
    ``wait_s`` has passed, and return the last answer."""
    deadline = time.monotonic() + wait_s
    while True:
        done, answer = look()
        left = deadline - time.monotonic()
        if done or left <= 0:
            return answer
        with svc.loop.changed:
            svc.loop.changed.wait(min(left, 0.2))


def vcs_out(svc: Service, me: Identity, view: ClusterView[int] | None = None) -> dict[str, s.VCOut]:
    """Every VC's quota and use, as of ``view`` (the policy's now when None)."""
    view = view if view is not None else svc.loop.cluster()
    return {
        name: s.VCOut(
            name=name,
            guaranteed_gpus=v.guaranteed_gpus,
            used_gpus=v.used_gpus,
            opportunistic_gpus=v.opportunistic_gpus,
            waiting=v.waiting,
            may_submit=me.may_submit_to(name),
        )
        for name, v in view.vcs.items()
    }
