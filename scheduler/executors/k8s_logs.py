"""Pod logs for ``KubernetesExecutor``: ranges and follows of the log API, capped as the
local relay caps a log (``output.capped``). A mixin; it reads the executor's API and options.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from labhive.scheduler.executors import output
from labhive.scheduler.executors.base import (
    Stream,
    TaskHandle,
)
from labhive.scheduler.executors.k8s_http import _discard_body, _hang_up
from labhive.scheduler.executors.k8s_objects import (
    CONTAINER,
)


class PodLogs:
    """``read_log``/``follow_log``/``observations`` of ``KubernetesExecutor``."""

    _api: k8s.CoreV1Api
    namespace: str
    _split_logs: bool
    output_cap: int | None

    def _log_request(self, handle: TaskHandle, stream: Stream, **params: Any) -> Any:
        if self._split_logs:
            params["stream"] = "Stderr" if stream == "stderr" else "Stdout"
        return self._api.read_namespaced_pod_log(
            handle.info["pod"],
            handle.info.get("namespace", self.namespace),
            container=CONTAINER,
            _preload_content=False,
            **params,
        )

    def read_log(self, handle: TaskHandle, stream: Stream, offset: int, limit: int) -> bytes:
        """The pod log API has no offset: ask for ``offset + limit`` bytes, skip ``offset``.

        Without ``split_log_streams`` (a feature gate on older clusters) the kubelet's log
        interleaves both streams; it is served as stdout and stderr reads as empty.

        Capped as the local relay caps a log (``output_cap``, ``output.capped``): the first
        ``output_cap`` bytes, then one line saying the rest was dropped, and nothing after; no
        read asks the API for more than ``output_cap + 1`` bytes, so a pod printing without
        end costs the service no more than that per read.
        """
        if limit <= 0 or (stream == "stderr" and not self._split_logs):
            return b""
        cap = self.output_cap
        want = offset + limit if cap is None else min(offset + limit, cap + 1)
        try:
            resp = self._log_request(handle, stream, limit_bytes=want)
        except ApiException as err:
            if err.status in (400, 404):  # not started yet, or the pod is gone
                return b""
            raise
        try:
            if cap is not None and offset + limit > cap:  # the notice may be in the range
                return output.capped(_read_upto(resp, want), cap, stream)[offset : offset + limit]
            _skip(resp, offset)
            return _read_upto(resp, limit)
        finally:
            _discard_body(resp)  # limit_bytes bounds what is left

    def follow_log(
        self, handle: TaskHandle, stream: Stream = "stdout", offset: int = 0
    ) -> Iterator[bytes]:
        """The log from ``offset`` as it grows, until the container ends (``logs -f``); past
        ``output_cap`` bytes, the notice line, and the stream is hung up."""
        if stream == "stderr" and not self._split_logs:
            return
        try:
            resp = self._log_request(handle, stream, follow=True)
        except ApiException as err:
            if err.status in (400, 404):
                return
            raise
        cap = self.output_cap
        try:
            at, last = 0, b""  # bytes of the log passed on so far, and the last of them
            while chunk := resp.read1(64 * 1024):
                over = cap is not None and at + len(chunk) > cap
                if over:
                    assert cap is not None
                    keep = chunk[: cap - at]
                    chunk = keep + output.cut_notice(keep[-1:] or last, cap, stream)
                if offset < at + len(chunk):
                    yield chunk[max(0, offset - at) :]
                at, last = at + len(chunk), chunk[-1:]
                if over:
                    return
        finally:
            _hang_up(resp)

    def observations(self, handle: TaskHandle) -> list[str]:
        """Observation files live inside the pod; this executor collects none."""
        return []


def _skip(resp: Any, count: int) -> None:
    while count > 0:
        chunk = resp.read(min(count, 64 * 1024))
        if not chunk:
            return
        count -= len(chunk)


def _read_upto(resp: Any, limit: int) -> bytes:
    out = bytearray()
    while len(out) < limit:
        chunk = resp.read(limit - len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)
