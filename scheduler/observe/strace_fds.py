"""Which file each descriptor refers to, for logs taken without ``-y``.

Replays the calls that create, copy and close descriptors (open/openat, socket, pipe, dup,
fcntl F_DUPFD, clone...) per task, so that ``ioctl(9, ...)`` can be traced back to the
``openat(..., "/dev/nvidiactl", ...) = 9`` that made fd 9. Threads (``CLONE_FILES``) share one
table; forked children start with a copy of their parent's.
"""

from __future__ import annotations

from labhive.scheduler.observe.strace_args import StraceString, parse_value, split_args
from labhive.scheduler.observe.strace_records import Call

#: Calls whose first argument is a descriptor (the ones worth resolving).
FD_FIRST = frozenset(
    [
        "read",
        "write",
        "pread64",
        "pwrite64",
        "readv",
        "writev",
        "preadv",
        "pwritev",
        "preadv2",
        "pwritev2",
        "close",
        "fstat",
        "newfstatat",
        "ioctl",
        "lseek",
        "fcntl",
        "fsync",
        "fdatasync",
        "ftruncate",
        "fallocate",
        "getdents",
        "getdents64",
        "fstatfs",
        "fchmod",
        "fchown",
        "flock",
        "recvfrom",
        "recvmsg",
        "recvmmsg",
        "sendto",
        "sendmsg",
        "sendmmsg",
        "connect",
        "bind",
        "listen",
        "accept",
        "accept4",
        "getsockopt",
        "setsockopt",
        "getsockname",
        "getpeername",
        "shutdown",
        "epoll_ctl",
        "epoll_wait",
        "epoll_pwait",
        "epoll_pwait2",
        "sendfile",
        "splice",
        "tee",
        "copy_file_range",
        "fadvise64",
        "readahead",
        "sync_file_range",
        "fgetxattr",
        "fsetxattr",
        "flistxattr",
        "fremovexattr",
        "syncfs",
        "fchdir",
        "inotify_add_watch",
        "timerfd_settime",
        "timerfd_gettime",
    ]
)
_OPENERS = {"open": 0, "creat": 0, "openat": 1, "openat2": 1}
_ANON = {
    "eventfd": "anon_inode:[eventfd]",
    "eventfd2": "anon_inode:[eventfd]",
    "epoll_create": "anon_inode:[eventpoll]",
    "epoll_create1": "anon_inode:[eventpoll]",
    "timerfd_create": "anon_inode:[timerfd]",
    "signalfd": "anon_inode:[signalfd]",
    "signalfd4": "anon_inode:[signalfd]",
    "inotify_init": "anon_inode:inotify",
    "inotify_init1": "anon_inode:inotify",
    "memfd_create": "memfd",
    "userfaultfd": "anon_inode:[userfaultfd]",
    "pidfd_open": "anon_inode:[pidfd]",
    "perf_event_open": "anon_inode:[perf_event]",
    "socket": "socket",
    "accept": "socket",
    "accept4": "socket",
}
_DUPS = {"dup", "dup2", "dup3"}
FORKS = {"clone", "clone3", "fork", "vfork"}
_PAIRS = {"pipe": "pipe", "pipe2": "pipe", "socketpair": "socket"}
#: Calls that can change a descriptor table (the only ones :meth:`FdTracker.feed` looks at).
FD_CHANGING = frozenset({*_OPENERS, *_ANON, *_DUPS, *FORKS, *_PAIRS, "close", "fcntl"})


class FdTracker:
    """Descriptor tables per task, fed every call in log order."""

    def __init__(self) -> None:
        self._tables: dict[int | None, dict[int, str]] = {}

    def _table(self, pid: int | None) -> dict[int, str]:
        table = self._tables.get(pid)
        if table is None:
            table = self._tables[pid] = {}
        return table

    def forget(self, pid: int | None) -> None:
        """The task is gone (threads sharing its table keep theirs)."""
        self._tables.pop(pid, None)

    def lookup(self, pid: int | None, fd: int) -> str | None:
        table = self._tables.get(pid)
        return None if table is None else table.get(fd)

    def feed(self, call: Call) -> None:
        """Update the tables from one finished call (failed calls change nothing)."""
        name = call.name
        ret = call.retval
        if ret is None or ret < 0 or call.args is None:
            return
        if name in _OPENERS:
            args = split_args(call.args)
            k = _OPENERS[name]
            if len(args) > k:
                path = parse_value(args[k])
                if isinstance(path, StraceString):
                    self._table(call.pid)[ret] = path.text
        elif name in _ANON:
            self._table(call.pid)[ret] = _ANON[name]
        elif name == "close":
            fd = call.fd
            if fd is not None:
                self._table(call.pid).pop(fd, None)
        elif name in _DUPS or (name == "fcntl" and "F_DUPFD" in call.args):
            fd = call.fd
            table = self._table(call.pid)
            if fd is not None and fd in table:
                table[ret] = table[fd]
        elif name in _PAIRS:
            kind = _PAIRS[name]
            arr = split_args(call.args)
            value = parse_value(arr[-1] if name == "socketpair" else arr[0]) if arr else None
            if isinstance(value, list):
                for item in value:
                    fd = item if isinstance(item, int) else getattr(item, "fd", None)
                    if isinstance(fd, int):
                        self._table(call.pid)[fd] = kind
        elif name in FORKS and ret > 0:
            self._fork(call.pid, ret, "CLONE_FILES" in call.args)

    def _fork(self, parent: int | None, child: int, shared: bool) -> None:
        ptable = self._table(parent)
        early = self._tables.get(child)  # the child may have run before clone returned
        if shared:
            if early:
                ptable.update(early)
            self._tables[child] = ptable
        else:
            table = dict(ptable)
            if early:
                table.update(early)
            self._tables[child] = table
