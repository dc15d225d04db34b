"""The queue as each caller may see it (a page of their own jobs, others' as counts per VC),
and how accurate the ETAs have been."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import FastAPI, Query

from labhive.scheduler.core.gpu_share import MILLI
from labhive.scheduler.core.model import JobView
from labhive.scheduler.hived.standing import VCStanding
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api.cluster import vcs_out
from labhive.scheduler.service.api.deps import Jobs, route
from labhive.scheduler.service.api.me import standing_out
from labhive.scheduler.service.auth import Identity
from labhive.scheduler.service.eta import eta_fields
from labhive.scheduler.service.routing import MAX_INT, Who
from labhive.scheduler.service.store import queries as q

#: Rows in a page of ``GET /queue`` unless the caller asks for fewer or more (up to MAX_PAGE).
PAGE, MAX_PAGE = 100, 1000


def eta_accuracy(me: Who, jobs: Jobs) -> dict[str, Any]:
    """How close the ETAs given at submit came to the real starts, per VC."""
    return {"vcs": [dataclasses.asdict(a) for a in jobs.eta_accuracy()]}


def queue(
    me: Who,
    jobs: Jobs,
    vc: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = PAGE,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
) -> s.QueueOut:
    """A page of the caller's active jobs (an admin's: everyone's) with their positions,
    and others' as counts per VC. Rows come a page at a time from the store, each with the
    loop's view of it alone: listing every job's view (why-texts included) to show a page
    cost 1.6 s and 2 MB with 10,000 waiting, and showed anyone everyone's jobs."""
    svc = jobs.svc
    # a user's rows are their account's alone (no account yet: none of them)
    owner = None if me.admin else (me.id if me.id is not None else -1)
    want = q.QueueFilter(owner_id=owner, vc=vc, limit=limit, offset=offset)
    assert svc.pass_views is not None  # set by Service.__post_init__
    seen = svc.pass_views.get()  # once per pass, not a walk of every job per request
    vcs = vcs_out(svc, me, seen.cluster)
    rows, total, mine, running_counts = jobs.queue_page(want, others_of=not me.admin)
    others = {} if me.admin else _others(mine, running_counts, vc, vcs)
    running: list[s.QueueEntry] = []
    waiting: list[s.QueueEntry] = []
    views = svc.pass_views.jobs([row["id"] for row in rows])
    for row in rows:
        view = views[row["id"]]
        if view is None:  # ended since the store was read
            continue
        entry = _entry(row, view)
        for field, value in eta_fields(svc.loop.estimates.get(row["id"])).items():
            setattr(entry, field, value)
        (waiting if view.state == lc.WAITING else running).append(entry)
    more = offset + limit < total
    return s.QueueOut(
        vcs=vcs,
        running=running,
        waiting=waiting,
        others=others,
        total=total,
        offset=offset,
        limit=limit,
        next_offset=offset + limit if more else None,
        standing=_standing(seen.standings, me, vc),
    )


def register(app: FastAPI) -> None:
    """Add ``GET /eta/accuracy`` and ``GET /queue``."""
    route(app, "GET", "/eta/accuracy", eta_accuracy)
    route(app, "GET", "/queue", queue, response_model=s.QueueOut)


def _standing(
    found: dict[str, VCStanding] | None, me: Identity, vc: str | None
) -> dict[str, s.StandingOut]:
    """The caller's fair-share standing in the VCs they may submit to (or ``vc``)."""
    if found is None:
        return {}
    mine = {n: v for n, v in found.items() if me.may_submit_to(n) and vc in (None, n)}
    return standing_out(mine, me.name)


def _entry(row: q.QueueRow, view: JobView[int]) -> s.QueueEntry:
    return s.QueueEntry(
        position=view.queue_position,
        vc=view.vc,
        state=view.state,
        gpus=view.share_milli / MILLI if view.share_milli else row["gpus"],
        tasks=row["task_count"],
        priority=view.priority,
        opportunistic=view.opportunistic,
        mine=True,
        id=row["id"],
        name=row["name"],
        user=row["user"],
        why=view.why,
    )


def _others(
    mine: dict[str, int],
    running: list[q.RunningCount],
    vc: str | None,
    vcs: dict[str, s.VCOut],
) -> dict[str, s.OthersOut]:
    """Others' jobs per VC, without reading the waiting ones' rows: how many wait is the VC's
    count (the loop's) less the caller's own (``mine``), their running jobs are few."""
    out = {
        name: s.OthersOut(waiting=max(0, v.waiting - mine.get(name, 0)))
        for name, v in vcs.items()
        if vc is None or name == vc
    }
    for c in running:
        entry = out.setdefault(c["vc"], s.OthersOut())
        entry.running, entry.running_gpus = c["jobs"], c["gpus"]
    return {name: o for name, o in out.items() if o.running or o.waiting}
