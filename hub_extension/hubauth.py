"""Who is calling, when the service runs as a JupyterHub-managed service.

The hub, not LabHive, knows users, groups and tokens, so every token is resolved by asking the
hub (``GET {JUPYTERHUB_API_URL}/user`` with the caller's token), over plain HTTP: nothing here
imports JupyterHub, so the service stays free of Jupyter. The answer is cached briefly (scopes
can be revoked; the hub's own HubAuth caches for minutes) and its scopes are checked on every
request against the ones that grant access to this service.

- A user's token (their single-user server's, so a kernel's ``%submit`` acts as its owner; or an
  OAuth token from the browser flow below) becomes that user with their hub groups; the
  service's group grants turn groups into VCs.
- ``custom:labhive:admin`` in the token's scopes (given to instructors by a role) or a group
  whose grant says ``admin`` makes a LabHive admin: sees every job and the whole queue.
- A service's token (the spawner uses the LabHive service's own) is ``service:NAME``; it is an
  admin only with the admin scope.

Browsers carry no token: ``wrap`` puts the service behind the hub's OAuth code flow (redirect to
the hub, callback, an HttpOnly cookie holding the access token for this service's prefix), and
serves the API both under the hub's ``/services/labhive/`` prefix and at its root.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import anyio
import httpx

from labhive.scheduler.service.auth import (
    SERVICE,
    AuthError,
    Forbidden,
    Grant,
    Identity,
    identity_for,
)

ADMIN_SCOPE = "custom:labhive:admin"
TOKEN_COOKIE = "labhive-oauth-token"
STATE_COOKIE = "labhive-oauth-state"
CACHE_S = 30.0


@dataclass(frozen=True)
class HubSettings:
    """What the hub hands a managed service in its environment."""

    api_url: str
    api_token: str
    prefix: str = "/services/labhive/"
    client_id: str = "service-labhive"
    callback_url: str = "/services/labhive/oauth_callback"
    base_url: str = "/"
    access_scopes: frozenset[str] = frozenset(
        {"access:services", "access:services!service=labhive"}
    )
    client_scopes: tuple[str, ...] = ()  # what a browser's OAuth token may carry (admin scope)

    @classmethod
    def from_environment(cls, env: dict[str, str] | None = None) -> HubSettings:
        env = dict(os.environ if env is None else env)
        missing = [k for k in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN") if not env.get(k)]
        if missing:
            from labhive.scheduler.core.errors import UserError

            raise UserError(
                f"--auth hub needs {' and '.join(missing)} in the environment: run the service "
                "as a JupyterHub service (c.JupyterHub.services with a 'command'), as "
                "`labhive up` does"
            )
        name = env.get("JUPYTERHUB_SERVICE_NAME", "labhive")
        prefix = env.get("JUPYTERHUB_SERVICE_PREFIX", f"/services/{name}/")
        scopes = env.get("JUPYTERHUB_OAUTH_ACCESS_SCOPES")
        allowed = env.get("JUPYTERHUB_OAUTH_CLIENT_ALLOWED_SCOPES")
        return cls(
            api_url=env["JUPYTERHUB_API_URL"].rstrip("/"),
            api_token=env["JUPYTERHUB_API_TOKEN"],
            prefix=prefix if prefix.endswith("/") else prefix + "/",
            client_id=env.get("JUPYTERHUB_CLIENT_ID", f"service-{name}"),
            callback_url=env.get("JUPYTERHUB_OAUTH_CALLBACK_URL", f"{prefix}oauth_callback"),
            base_url=env.get("JUPYTERHUB_BASE_URL", "/"),
            access_scopes=frozenset(json.loads(scopes))
            if scopes
            else frozenset({"access:services", f"access:services!service={name}"}),
            client_scopes=tuple(json.loads(allowed)) if allowed else (),
        )


class HubAuthenticator:
    """``Authenticator`` for the service behind JupyterHub (see the module docstring); a
    ``BrowserLogin`` too (``wrap``: the OAuth flow for browsers)."""

    #: A cache miss asks JupyterHub over HTTP: the API calls ``identify`` in a worker thread.
    blocking = True

    def __init__(self, hub: HubSettings, grants: dict[str, Grant]) -> None:
        self.hub = hub
        self.grants = grants
        self._http = httpx.Client(timeout=10)
        self._cache: dict[str, tuple[float, Identity]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls, grants: dict[str, Grant]) -> HubAuthenticator:
        return cls(HubSettings.from_environment(), grants)

    def identify(self, request: Any) -> Identity:
        """The caller behind a request: its bearer token, else the browser's OAuth cookie."""
        authorization = request.headers.get("authorization")
        cookie = request.cookies.get(TOKEN_COOKIE)
        if not authorization and cookie:
            return self.identify_token(cookie)
        return self.identify_token(_token(authorization))

    def identify_token(self, token: str) -> Identity:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(token)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        identity = self._resolve(token)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token] = (now, identity)
        return identity

    def _resolve(self, token: str) -> Identity:
        try:
            response = self._http.get(
                f"{self.hub.api_url}/user", headers={"Authorization": f"Bearer {token}"}
            )
        except httpx.TransportError as err:
            raise AuthError(f"cannot reach JupyterHub to check the token ({err})") from None
        if response.status_code in (401, 403):
            raise AuthError("invalid or expired JupyterHub token; log in to the hub again")
        if response.status_code >= 400:
            raise AuthError(
                f"JupyterHub refused to identify the token (HTTP {response.status_code})"
            )
        model = response.json()
        scopes = set(model.get("scopes") or ())
        admin = ADMIN_SCOPE in scopes
        if not admin and not scopes & self.hub.access_scopes:
            raise Forbidden(
                "this token may not use the LabHive service: it lacks the "
                "'access:services!service=labhive' scope (add it to the 'server' role)"
            )
        if model.get("kind") == "service":
            return Identity(
                f"service:{model['name']}", (), admin, frozenset({"*"} if admin else ()), SERVICE
            )
        groups = tuple(sorted(str(g) for g in model.get("groups") or ()))
        return identity_for(str(model["name"]), groups, self.grants, admin=admin)

    # ---- the browser's OAuth flow -----------------------------------------------------------

    def wrap(self, app: Any) -> Any:
        """The ASGI app the hub's proxy reaches (see ``OAuthGate``)."""
        return OAuthGate(app, self)

    def exchange(self, code: str) -> str:
        """An OAuth code for an access token (the client secret is the service's API token)."""
        response = self._http.post(
            f"{self.hub.api_url}/oauth2/token",
            data={
                "client_id": self.hub.client_id,
                "client_secret": self.hub.api_token,
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": self.hub.callback_url,
            },
        )
        if response.status_code >= 400:
            raise AuthError(f"JupyterHub refused the OAuth code (HTTP {response.status_code})")
        return str(response.json()["access_token"])


def _token(authorization: str | None) -> str:
    if not authorization:
        raise AuthError(
            "missing token: send 'Authorization: Bearer TOKEN' with a JupyterHub API token "
            "(inside your server, JUPYTERHUB_API_TOKEN), or open the page in a logged-in browser"
        )
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() not in ("bearer", "token") or not token:
        raise AuthError("malformed Authorization header: expected 'Bearer TOKEN'")
    return token


class OAuthGate:
    """ASGI wrapper: strips the hub's service prefix, sends a browser without credentials
    through the hub's login, and handles the OAuth callback (whose cookie ``identify`` reads).
    Requests with an ``Authorization`` header pass straight through."""

    def __init__(self, app: Any, auth: HubAuthenticator) -> None:
        self.app = app
        self.auth = auth
        self.prefix = auth.hub.prefix.rstrip("/")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path == self.prefix or path.startswith(self.prefix + "/"):
            scope = {**scope, "path": path[len(self.prefix) :] or "/", "root_path": self.prefix}
        headers = dict(scope.get("headers") or ())
        if scope["path"] == "/oauth_callback":
            await self._callback(scope, headers, send)
            return
        browser = scope["method"] == "GET" and b"text/html" in headers.get(b"accept", b"")
        if browser and b"authorization" not in headers and not await self._cookie_ok(headers):
            await self._login(scope, send)
            return
        await self.app(scope, receive, send)

    async def _cookie_ok(self, headers: dict) -> bool:
        """A browser's cookie still names a valid token (else it logs in again)."""
        token = _cookies(headers).get(TOKEN_COOKIE)
        if not token:
            return False
        try:
            await anyio.to_thread.run_sync(self.auth.identify_token, token)
        except AuthError:
            return False
        except Forbidden:
            return True  # a known user without access: the API answers 403 with the reason
        return True

    async def _login(self, scope: dict, send: Any) -> None:
        state = secrets.token_urlsafe(16)
        back = scope.get("root_path", "") + scope["path"]
        if scope.get("query_string"):
            back += "?" + scope["query_string"].decode("latin-1")
        query = urlencode(
            {
                "client_id": self.auth.hub.client_id,
                "redirect_uri": self.auth.hub.callback_url,
                "response_type": "code",
                "state": state,
                **(
                    {"scope": " ".join(self.auth.hub.client_scopes)}
                    if self.auth.hub.client_scopes
                    else {}
                ),
            }
        )
        target = f"{self.auth.hub.base_url.rstrip('/')}/hub/api/oauth2/authorize?{query}"
        cookie = _cookie(STATE_COOKIE, f"{state}|{quote(back, safe='/?=&')}", self.prefix + "/")
        await _redirect(send, target, cookie)

    async def _callback(self, scope: dict, headers: dict, send: Any) -> None:
        from urllib.parse import parse_qs, unquote

        params = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        expected, _, back = _cookies(headers).get(STATE_COOKIE, "").partition("|")
        code = (params.get("code") or [""])[0]
        if not code or not expected or (params.get("state") or [""])[0] != expected:
            await _plain(send, 400, "OAuth state mismatch: open the LabHive page again")
            return
        try:
            token = await anyio.to_thread.run_sync(self.auth.exchange, code)
        except AuthError as err:
            await _plain(send, 403, str(err))
            return
        path = self.prefix + "/"
        back = unquote(back)
        await _redirect(
            send,
            back if back.startswith(path) else path,  # only ever back into this service
            _cookie(TOKEN_COOKIE, token, path),
            _cookie(STATE_COOKIE, "", path, max_age=0),
        )


def _cookies(headers: dict) -> dict[str, str]:
    out = {}
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            out[name] = value
    return out


def _cookie(name: str, value: str, path: str, max_age: int | None = None) -> bytes:
    text = f"{name}={value}; Path={path}; HttpOnly; SameSite=Lax"
    if max_age is not None:
        text += f"; Max-Age={max_age}"
    return text.encode("latin-1")


async def _redirect(send: Any, location: str, *cookies: bytes) -> None:
    headers = [(b"location", location.encode("latin-1")), (b"content-length", b"0")]
    headers += [(b"set-cookie", c) for c in cookies]
    await send({"type": "http.response.start", "status": 302, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _plain(send: Any, status: int, text: str) -> None:
    body = json.dumps({"detail": text}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
