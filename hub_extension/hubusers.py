"""``labhive hub adduser``: a student's own login on the hub ``labhive up`` runs, from the
instructor's terminal.

It talks to the running hub over its REST API as the admin (the token ``labhive up`` wrote to
``DATA/admin.token``): the password goes to the native authenticator's account API
(``hub_extension/accounts.py``), which checks and hashes it; then the hub user and their groups.
Groups must grant VCs in the hub's grants file, or the student could log in but submit nowhere.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

import httpx

from labhive.hub_extension.hubconfig import ACCOUNTS_API, HubPlan
from labhive.scheduler.core.errors import UserError


def generated_password() -> str:
    return secrets.token_urlsafe(12)  # 16 characters


class RunningHub:
    """The hub of a ``labhive up`` data directory, as its admin."""

    def __init__(self, data_dir: Path) -> None:
        plan_file, token_file = data_dir / "hub" / "plan.json", data_dir / "admin.token"
        if not plan_file.exists() or not token_file.exists():
            raise UserError(
                f"{data_dir} holds no hub started by `labhive up` ({plan_file}, {token_file}): "
                "start it first, or give its --data-dir"
            )
        self.plan = HubPlan.load(plan_file)
        self.hub = f"{self.plan.public_url}/hub"
        self.headers = {"Authorization": f"token {token_file.read_text().strip()}"}

    def call(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            return httpx.request(
                method, self.hub + path, json=body, headers=self.headers, timeout=60
            )
        except httpx.TransportError as err:
            raise UserError(
                f"the hub at {self.plan.public_url} does not answer ({err}): is `labhive up` "
                "running?"
            ) from None

    def grant_groups(self) -> set[str]:
        from labhive.scheduler.service.auth import load_grants

        return set(load_grants(Path(self.plan.grants) if self.plan.grants else None))


def add_user(
    hub: RunningHub, name: str, password: str, *, groups: list[str], reset: bool = False
) -> bool:
    """NAME logs in with ``password`` (unless their approved account keeps its own: see
    ``reset``) and belongs to ``groups``; False when an approved account kept its own."""
    known = hub.grant_groups()
    unknown = sorted(set(groups) - known)
    if unknown:
        raise UserError(
            f"group(s) {', '.join(unknown)} grant no VC in {hub.plan.grants}: add them there "
            f"(`NAME: {{vcs: [VC]}}`) and restart labhive up, or use one of: "
            f"{', '.join(sorted(known - {'*'})) or 'none'}"
        )
    account = hub.call("PUT", f"{ACCOUNTS_API}/{name}", {"password": password, "reset": reset})
    if account.status_code == 404:
        raise UserError(
            "this hub does not use native logins (labhive up --authenticator native): "
            f"add the user at {hub.plan.public_url}/hub/admin instead"
        )
    _check(account, f"setting {name}'s password")
    name = account.json()["name"]  # as the hub spells it (lower case)
    _check(hub.call("POST", f"/api/users/{name}"), f"adding hub user {name}", ok=(201, 409))
    for group in groups:
        _check(hub.call("POST", f"/api/groups/{group}"), f"making group {group}", ok=(201, 409))
        _check(
            hub.call("POST", f"/api/groups/{group}/users", {"users": [name]}),
            f"adding {name} to group {group}",
        )
    return not account.json()["kept"]


def _check(answer: httpx.Response, what: str, ok: tuple[int, ...] = (200, 201)) -> None:
    if answer.status_code in ok:
        return
    try:
        message = answer.json().get("message") or answer.text
    except ValueError:
        message = answer.text[:300]
    if answer.status_code == 403:
        message += " (is DATA/admin.token still the admin's token? restart labhive up)"
    raise UserError(f"{what}: the hub answered {answer.status_code}: {message}")


def adduser_command(
    data_dir: Path, name: str, *, groups: list[str], password_file: Path | None, reset: bool
) -> int:
    hub = RunningHub(data_dir)
    if not groups and hub.plan.default_group:
        groups = [hub.plan.default_group]
    if password_file is None:
        password = generated_password()
    elif str(password_file) == "-":
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = password_file.read_text().rstrip("\n")
    set_ = add_user(hub, name, password, groups=groups, reset=reset)
    where = f" in {', '.join(groups)}" if groups else ""
    if not set_:
        print(f"{name}{where}: approved account kept its own password (--reset to set one)")
    elif password_file is None:
        print(f"{name}{where}: password {password}  (shown once: give it to {name})")
    else:
        print(f"{name}{where}: password set from {password_file}")
    print(f"  logs in at {hub.plan.public_url}/hub/login")
    return 0
