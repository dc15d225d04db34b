"""Raw (``_preload_content=False``) responses of the Kubernetes API client: their JSON, their
error message, and giving their connection back to the pool (or hanging it up).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException


def _body(resp: Any) -> Any:
    """JSON of a raw (``_preload_content=False``) response; the connection goes back to the pool."""
    try:
        return json.loads(resp.data or b"null")
    finally:
        resp.release_conn()


def _discard_body(resp: Any) -> None:
    """A kept-alive connection goes back to the pool only once its response is read to the end."""
    resp.drain_conn()
    resp.release_conn()


def _hang_up(resp: Any) -> None:
    """For a stream left unfinished: close the connection rather than reuse it mid-response."""
    resp.close()
    resp.release_conn()


def _api_message(err: BaseException) -> str:
    if isinstance(err, ApiException):
        try:
            message = json.loads(err.body or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"{err.status} {message or err.reason}"
    return str(err)
