"""The caller's own identity: ``GET /me``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from labhive.scheduler.service.routing import Who, endpoints

if TYPE_CHECKING:
    from labhive.scheduler.service.context import Service


def register(app: FastAPI, svc: Service) -> None:
    """Add ``GET /me``."""
    get, _ = endpoints(app)

    @get("/me")
    def whoami(me: Who) -> dict[str, Any]:
        """The caller's LabHive identity and the OS uid/gid their tasks run as (the hub's
        spawner gives a server's home and launch file to that uid)."""
        out: dict[str, Any] = {
            "name": me.name, "id": me.id, "admin": me.admin, "vcs": sorted(me.vcs)
        }  # fmt: skip
        if svc.accounts is not None and me.id is not None:
            account = svc.accounts.of_id(me.id)
            out.update(uid=account.uid, gid=account.gid)
        return out
