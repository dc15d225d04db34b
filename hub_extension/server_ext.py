"""Jupyter server extension: the LabHive service under the server's own ``/labhive/api/``.

The browser (JupyterLab front-end code) and anything else holding the server's credentials
reach the service at ``{base_url}labhive/api/v1/...`` with the server owner's identity: the
server authenticates the request as usual, then forwards it with the server's own LabHive
credentials (inside a hub, the server's hub token, which the ``server`` role lets call the
service). At start it also sets ``LABHIVE_URL`` in its environment, so every kernel it starts
finds the service for ``%submit``. Outside a hub it works the same against a standalone
``labhive serve`` (configure ``LabHiveServerExt.service_url``/``service_token``, or set
``LABHIVE_URL``/``LABHIVE_TOKEN``).
"""

from __future__ import annotations

import os

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.application import ExtensionApp
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web
from traitlets import Unicode

from labhive.scheduler.client import API, find_token, service_url
from labhive.scheduler.client.lean_httpx import httpx, verify_for

_FORWARDED = ("content-type",)


class ServiceProxy:
    """Forwards requests to the service with this server's credentials.

    The HTTP client is made at the first request, not at the server's start: an httpx client
    loads the CA bundle (~0.1 CPU s), and most students' servers never forward a request (their
    kernels reach the service directly), while a class starts 50 servers on a few cores."""

    def __init__(self, url: str, token: str | None) -> None:
        self.root = url[: -len(API)] if url.endswith(API) else url
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http: httpx.AsyncClient | None = None

    async def forward(
        self, method: str, path: str, query: str, body: bytes | None, ctype: str | None
    ) -> httpx.Response:
        if self.http is None:
            self.http = httpx.AsyncClient(
                base_url=self.root, headers=self.headers, timeout=60, verify=verify_for(self.root)
            )
        headers = {"content-type": ctype} if ctype else {}
        url = f"/api/{path}" + (f"?{query}" if query else "")
        return await self.http.request(method, url, content=body or None, headers=headers)

    async def close(self) -> None:
        if self.http is not None:
            await self.http.aclose()


class ProxyHandler(ExtensionHandlerMixin, APIHandler):
    """``/labhive/api/(.*)`` -> the service's ``/api/\\1``."""

    async def _forward(self, path: str) -> None:
        proxy: ServiceProxy = self.settings["labhive_proxy"]
        body = self.request.body if self.request.method == "POST" else None
        try:
            response = await proxy.forward(
                self.request.method or "GET",
                path,
                self.request.query,
                body,
                self.request.headers.get("Content-Type"),
            )
        except httpx.TransportError as err:
            self.set_status(502)
            self.finish(
                {"detail": f"cannot reach the LabHive service at {proxy.root} ({err}); is it up?"}
            )
            return
        self.set_status(response.status_code)
        for name in _FORWARDED:
            if name in response.headers:
                self.set_header(name, response.headers[name])
        self.finish(response.content)

    @web.authenticated
    async def get(self, path: str) -> None:
        await self._forward(path)

    @web.authenticated
    async def post(self, path: str) -> None:
        await self._forward(path)


class LabHiveServerExt(ExtensionApp):
    """Serves ``/labhive/api/...`` and points kernels at the service (see module docstring)."""

    name = "labhive"
    default_url = "/labhive/api/v1/health"
    load_other_extensions = True

    service_url = Unicode(
        "",
        help="""The LabHive service, e.g. http://127.0.0.1:8765. Default: $LABHIVE_URL; inside
        a hub the spawner sets that; else http://127.0.0.1:8765.""",
    ).tag(config=True)

    service_token = Unicode(
        "",
        help="""Token for the service. Default: $LABHIVE_TOKEN, $LABHIVE_TOKEN_FILE, the
        server's JUPYTERHUB_API_TOKEN inside a hub, ~/.config/labhive/token.""",
    ).tag(config=True)

    def initialize_settings(self) -> None:
        url = service_url(self.service_url or None)
        os.environ["LABHIVE_URL"] = url  # kernels inherit the server's environment
        self.settings["labhive_proxy"] = ServiceProxy(url, find_token(self.service_token or None))
        base = self.serverapp.base_url if self.serverapp else "/"
        self.log.info("LabHive: service %s, proxied at %slabhive/api/", url, base)

    def initialize_handlers(self) -> None:
        self.handlers.append((r"/labhive/api/(.*)", ProxyHandler))

    async def stop_extension(self) -> None:
        proxy: ServiceProxy | None = self.settings.get("labhive_proxy")
        if proxy is not None:
            await proxy.close()
