"""httpx as the client uses it: without its command-line client loaded, and without a CA
bundle read where no TLS is spoken.

Every student's kernel imports the client at ``%load_ext labhive.kernel_ext`` and makes one at
its first ``%submit``, and a class of 50 starts 50 kernels on two cores (docs/hub.md, "A class
of 50"). Two costs there were httpx's, not the client's:

- ``import httpx`` imports its command-line client (``httpx._main``: ``click``, ``rich``,
  ``pygments``) whenever those are installed, ~0.07 CPU s. ``lean()`` puts a stand-in for
  ``httpx._main`` in ``sys.modules`` before httpx is first imported; its ``main`` loads the real
  command-line client when called, so ``httpx.main`` (the ``httpx`` command) still works.
- ``httpx.Client()`` loads certifi's CA bundle into an SSL context (~0.05-0.08 CPU s) even for
  an ``http://`` URL, where no TLS is spoken. ``verify_for`` gives such a client a context that
  verifies (hostname checked, certificate required) against no CA at all: should TLS ever be
  spoken through it, it fails closed. ``https://`` URLs, and any URL when a proxy is set in the
  environment (the proxy may speak TLS), keep httpx's default verification.
"""

from __future__ import annotations

import importlib
import os
import ssl
import sys
import types

#: The environment variables httpx reads its proxies from (``trust_env``).
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def lean() -> None:
    """Stand in for ``httpx._main`` unless httpx is imported already (then it is too late)."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    stand_in = types.ModuleType("httpx._main", "httpx's command-line client, loaded when run")

    def main() -> None:
        sys.modules.pop("httpx._main", None)
        importlib.import_module("httpx._main").main()

    stand_in.__dict__["main"] = main
    sys.modules["httpx._main"] = stand_in


lean()

import httpx as httpx  # noqa: E402  (after lean(): the point of this module)


def verify_for(url: str) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for a client of ``url``: ``True`` (certifi's CAs) where TLS may be
    spoken, else a verifying context that trusts nothing (see the module docstring)."""
    if url.lower().startswith("https:") or any(os.environ.get(v) for v in PROXY_VARS):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname, no CAs
