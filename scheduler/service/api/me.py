"""The caller's own identity and fair-share standing: ``GET /me``, ``GET /me/standing``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from labhive.scheduler.hived.standing import VCStanding, sentence
from labhive.scheduler.service import schemas as s
from labhive.scheduler.service.api.deps import Jobs, route
from labhive.scheduler.service.auth import Forbidden, Identity
from labhive.scheduler.service.routing import Who

#: What ``/me/standing`` says when the cluster has no fair share.
NO_FAIR_SHARE = (
    "fair share is off: each VC serves its waiting jobs by priority, then first come, first "
    "served (turn it on with fairShare in the cluster config or labhive serve --fair-share)"
)


def whoami(me: Who, jobs: Jobs) -> dict[str, Any]:
    """The caller's LabHive identity and the OS uid/gid their tasks run as (the hub's
    spawner gives a server's home and launch file to that uid)."""
    out: dict[str, Any] = {
        "name": me.name, "id": me.id, "admin": me.admin, "vcs": sorted(me.vcs)
    }  # fmt: skip
    accounts = jobs.svc.accounts
    if accounts is not None and me.id is not None:
        account = accounts.of_id(me.id)
        out.update(uid=account.uid, gid=account.gid)
    return out


def standing(me: Who, jobs: Jobs, user: str | None = None) -> s.StandingList:
    """Your fair-share standing in each VC you may submit to: decayed GPU-hours, share,
    rank among the VC's users, jobs ahead of your next one. ``user``: an admin asks for
    someone else's (the hub's spawn page does, with its service token)."""
    name = me.name
    if user is not None and user != me.name:
        if not me.admin:
            raise Forbidden("only an admin may see another user's standing")
        name = user
    assert jobs.svc.pass_views is not None  # set by Service.__post_init__
    found = jobs.svc.pass_views.get().standings
    if found is None:
        return s.StandingList(fair_share=False, user=name, note=NO_FAIR_SHARE)
    shown = found if me.admin and user is None else _granted(found, me)
    return s.StandingList(fair_share=True, user=name, vcs=standing_out(shown, name))


def register(app: FastAPI) -> None:
    """Add ``GET /me`` and ``GET /me/standing``."""
    route(app, "GET", "/me", whoami)
    route(app, "GET", "/me/standing", standing, response_model=s.StandingList)


def _granted(found: dict[str, VCStanding], me: Identity) -> dict[str, VCStanding]:
    """The VCs the caller may submit to (an admin asking for a user: every VC)."""
    return {vc: v for vc, v in found.items() if me.may_submit_to(vc)}


def standing_out(found: dict[str, VCStanding], user: str) -> dict[str, s.StandingOut]:
    """``user``'s standing in each VC of ``found``, as the API shows it."""
    out = {}
    for vc, standing in found.items():
        mine = standing.of(user)
        out[vc] = s.StandingOut(
            vc=vc,
            usage_gpu_hours=round(mine.usage_gpu_s / 3600, 4),
            running_gpus=mine.running_gpus,
            share=mine.share,
            share_of_vc=round(mine.share_of_vc, 6),
            users=mine.users,
            rank=mine.rank,
            waiting=mine.waiting,
            position=mine.position,
            ahead=mine.ahead,
            ahead_less_used=mine.ahead_less_used,
            half_life_s=standing.half_life_s,
            text=sentence(mine, standing.half_life_s),
        )
    return out
