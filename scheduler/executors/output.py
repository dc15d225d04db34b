"""The supervisor's relay of a task's output: pipes in, the capped ``stdout``/``stderr`` files out.

The command never holds the log files: its fd 1 and 2 are the write ends of pipes, and the
supervisor (running as the service) copies what arrives into the 0600 files it inherited from
the executor. So a task cannot seek, truncate or ``ftruncate`` its way around the cap, and
reopening ``/proc/self/fd/1`` only reopens the pipe. Up to ``cap`` bytes of each stream are
kept; past it the log gets one line saying so (``labhive: output past 100 MiB dropped ...``) and
the rest is read and dropped, so the task never blocks on a full pipe. The job goes on unless
the launch asks to stop it (``kill``): then ``on_cap`` is called once.

A write that fails (the data dir's file system full: ENOSPC) drops the rest of that stream too,
and the relay's ``summary`` says so; the exit record carries both streams' summaries.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labhive.scheduler.core.sizes import show_size

_CHUNK = 1 << 16
#: What each of a task's stdout and stderr keeps by default (``labhive serve --output-cap``).
DEFAULT_CAP = 100 * 1024 * 1024
#: The disk-full errors a relay reports as such.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def cap_notice(stream: str, cap: int, kill: bool) -> bytes:
    then = "the task was stopped" if kill else "the task goes on"
    return (
        f"labhive: output past {show_size(cap)} dropped (the cap on a task's {stream}; {then}). "
        "Write large results to files in the work dir; an admin sets the cap with "
        "`labhive serve --output-cap`.\n"
    ).encode()


def capped(head: bytes, cap: int | None, stream: str) -> bytes:
    """What a reader is served of a log whose first bytes are ``head`` (at least ``cap + 1`` of
    them where there are that many): its first ``cap`` bytes and, where it goes on, the line the
    relay writes there. For logs LabHive does not relay itself (Kubernetes pods)."""
    if cap is None or len(head) <= cap:
        return head
    return head[:cap] + cut_notice(head[cap - 1 : cap] if cap else b"", cap, stream)


def cut_notice(last_kept: bytes, cap: int, stream: str) -> bytes:
    """The notice after a log's last kept byte, on a line of its own (as the relay writes it)."""
    lead = b"" if last_kept in (b"", b"\n") else b"\n"
    return lead + cap_notice(stream, cap, False)


@dataclass
class Relay:
    """Copies ``src`` (a pipe's read end) into ``dst`` (the log file) up to ``cap`` bytes."""

    stream: str
    src: int
    dst: int
    cap: int | None
    kill: bool = False
    on_cap: Callable[[str], None] | None = None
    written: int = 0
    dropped: int = 0
    error: str | None = None
    _last: bytes = b"\n"
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"relay-{self.stream}", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        """Wait for the end of the stream; False if a holder of the pipe outlived the wait (a
        descriptor passed to another process can keep a pipe open after every descendant died)."""
        assert self._thread is not None
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def summary(self) -> dict[str, Any]:
        return {
            "bytes": self.written,
            "dropped": self.dropped,
            "cap": self.cap,
            "error": self.error,
        }

    def _run(self) -> None:
        while True:
            try:
                chunk = os.read(self.src, _CHUNK)
            except OSError:
                break
            if not chunk:
                break
            self._take(chunk)
        with contextlib.suppress(OSError):
            os.close(self.src)

    def _take(self, chunk: bytes) -> None:
        if self.error is not None:
            self.dropped += len(chunk)
            return
        room = len(chunk) if self.cap is None else max(self.cap - self.written, 0)
        keep, rest = chunk[:room], chunk[room:]
        if keep:
            self._write(keep)
            self.written += len(keep)
        if rest:
            first = self.dropped == 0
            self.dropped += len(rest)
            if first and self.cap is not None:
                self._over_cap(self.cap)

    def _over_cap(self, cap: int) -> None:
        lead = b"" if self._last.endswith(b"\n") else b"\n"
        self._write(lead + cap_notice(self.stream, cap, self.kill))
        if self.kill and self.on_cap is not None:
            self.on_cap(f"killed: its {self.stream} went past its cap of {show_size(cap)}")

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.dst, view) :]
        except OSError as err:
            self.error = errno.errorcode.get(err.errno or 0, str(err))
            self.dropped += len(view)
            return
        self._last = data[-1:]

    @property
    def disk_full(self) -> bool:
        return self.error in {errno.errorcode[e] for e in DISK_FULL_ERRNOS}


class Pipes:
    """The two pipes between a command and its supervisor: made before the fork, the write
    ends given to the command (``in_child``), the read ends relayed by the supervisor
    (``in_parent``)."""

    def __init__(self) -> None:
        self._ends = {"stdout": os.pipe(), "stderr": os.pipe()}

    def in_child(self) -> None:
        """In the forked child, before exec: fd 1 and 2 become the pipes' write ends."""
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            read, write = self._ends[stream]
            os.dup2(write, fd)
        for read, write in self._ends.values():
            os.close(read)
            os.close(write)

    def in_parent(
        self, cap: int | None, kill: bool, on_cap: Callable[[str], None] | None
    ) -> list[Relay]:
        """In the supervisor after the fork: start relaying into its own fd 1 and 2."""
        relays = []
        for fd, stream in ((1, "stdout"), (2, "stderr")):
            read, write = self._ends[stream]
            os.close(write)
            relay = Relay(stream, read, fd, cap, kill, on_cap)
            relay.start()
            relays.append(relay)
        return relays
