"""The host-wide registry of uid ranges: two services on one machine never hand one uid to two
different users.

Each service allocates its users' uids from a range of its own (``--first-uid``,
``--uid-count``; ``accounts.py``). Two services with the same range (a department running one
per course, a lab starting its own) would each give uid 200000 to their first user, and each
such user could then read the other's files and signal the other's tasks. So a service that
runs tasks as its users' uids claims its range here before it launches anything, and refuses
to start while another live claim overlaps it, naming that service's data dir and a free
``--first-uid``.

The registry is one JSON file (``uid-ranges.json``) in ``/var/lib/labhive/`` (``$LABHIVE_STATE_DIR``
elsewhere: tests), read and rewritten under an exclusive ``fcntl`` lock on a file beside it, so
two services starting at once see each other. Claims are keyed by the service's data dir, which
holds the store that records the uids handed out: the same data dir claiming again (a restart)
replaces its own claim; a claim whose data dir no longer exists is stale and dropped (removing a
service's data dir releases its range; its users' uids are gone with its store).

A claim also holds the uids its users file names (``users: {alice: {uid: 1001}}``): those are
handed out as surely as allocated ones, so one that falls in another service's range, or that
another service's users file gives to a different user name, is refused the same way, naming
both claimants. The same name with the same uid in two users files is allowed: an admin naming
a uid states an OS identity (a site's LDAP uid), which two services may well share.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError

STATE_DIR_ENV = "LABHIVE_STATE_DIR"
DEFAULT_STATE_DIR = Path("/var/lib/labhive")
REGISTRY = "uid-ranges.json"
LOCK = "uid-ranges.lock"


@dataclass(frozen=True, slots=True)
class Claim:
    """uids ``first``..``last`` (both included), held by the service of ``data_dir``."""

    data_dir: str
    first: int
    last: int
    #: The uids its users file names, by user name (``accounts.load_configured``).
    users: tuple[tuple[str, int], ...] = ()

    def overlaps(self, other: Claim) -> bool:
        return self.first <= other.last and other.first <= self.last

    def holds(self, uid: int) -> bool:
        return self.first <= uid <= self.last

    def describe(self) -> str:
        return f"uids {self.first}-{self.last} (the service of data dir {self.data_dir})"


def state_dir() -> Path:
    """Where the registry lives: ``$LABHIVE_STATE_DIR``, else ``/var/lib/labhive``."""
    return Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)


def claim(
    data_dir: Path,
    first: int,
    last: int,
    where: Path | None = None,
    users: Mapping[str, int] | None = None,
) -> Claim:
    """Claim ``first``..``last`` and the uids the users file names (``users``: name -> uid)
    for the service of ``data_dir``; ``UserError`` naming the other service (and a free
    ``--first-uid``, or the user to renumber) when a live claim of another data dir clashes."""
    named = tuple(sorted((users or {}).items()))
    mine = Claim(str(Path(data_dir).resolve()), first, last, named)
    folder = where or state_dir()
    with _locked(folder):
        claims = [c for c in _read(folder / REGISTRY) if _live(c) and c.data_dir != mine.data_dir]
        clash = next((c for c in claims if c.overlaps(mine)), None)
        if clash is not None:
            raise UserError(_refusal(mine, clash, claims, folder))
        for other in claims:
            why = _named_clash(mine, other)
            if why:
                raise UserError(f"{why}, registered in {folder / REGISTRY}: {_NAMED_FIX}")
        _write(folder / REGISTRY, [*claims, mine])
    return mine


_NAMED_FIX = (
    "two services would give different users the same uid, and each could read the other's "
    "files. Give the user in this service's users file a uid outside every other service's "
    "range and users, or start this service (or the other) with another --first-uid; if that "
    "service is gone for good, remove its data dir to release its uids"
)


def _named_clash(mine: Claim, other: Claim) -> str:
    """Why a uid one of the two users files names is the other service's too ('' if none)."""
    for a, b in ((mine, other), (other, mine)):
        for user, uid in a.users:
            if b.holds(uid):
                return (
                    f"uid {uid} of user {user!r} in the users file of the service of data dir "
                    f"{a.data_dir} lies in {b.describe()}"
                )
    theirs = dict(other.users)
    for user, uid in mine.users:
        holder = next((u for u, n in theirs.items() if n == uid and u != user), None)
        if holder is not None:
            return (
                f"uid {uid} is user {user!r} in the users file of this service (data dir "
                f"{mine.data_dir}) and user {holder!r} in that of the service of data dir "
                f"{other.data_dir}"
            )
    return ""


def live_claims(where: Path | None = None) -> list[Claim]:
    """The live claims, for a look (``labhive serve`` errors, tests)."""
    folder = where or state_dir()
    return [c for c in _read(folder / REGISTRY) if _live(c)]


def free_first(count: int, claims: list[Claim], above: int) -> int:
    """The lowest start at or above ``above`` of a range of ``count`` uids no claim overlaps."""
    start = above
    for c in sorted(claims, key=lambda c: c.first):
        if c.last >= start and c.first <= start + count - 1:
            start = c.last + 1
    return start


def _refusal(mine: Claim, clash: Claim, claims: list[Claim], folder: Path) -> str:
    count = mine.last - mine.first + 1
    free = free_first(count, claims, mine.first)
    return (
        f"the uid range {mine.first}-{mine.last} of this service (data dir {mine.data_dir}) "
        f"overlaps {clash.describe()}, registered in {folder / REGISTRY}: two services would give "
        f"different users the same uid, and each could read the other's files. Start with "
        f"--first-uid {free} (with --uid-count {count}), or choose a smaller --uid-count; if "
        f"that service is gone for good, remove its data dir {clash.data_dir} to release its range"
    )


def _live(c: Claim) -> bool:
    """A claim holds while its data dir (the store of the uids it handed out) exists."""
    return Path(c.data_dir).is_dir()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(
            f"cannot open the host's uid registry in {folder} ({err.strerror}): run the service "
            f"as root, or point ${STATE_DIR_ENV} at a directory it may write"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _read(path: Path) -> list[Claim]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        raise UserError(
            f"the host's uid registry {path} cannot be read ({err}): fix or remove it; every "
            "service re-registers its range at its next start"
        ) from None
    return [_claim(entry, path) for entry in _entries(doc, path)]


def _entries(doc: Any, path: Path) -> list[Any]:
    entries = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise UserError(f"the host's uid registry {path} has no 'claims' list: fix or remove it")
    return entries


def _claim(entry: Any, path: Path) -> Claim:
    try:
        named = tuple(sorted((str(u), int(n)) for u, n in (entry.get("users") or {}).items()))
        return Claim(str(entry["data_dir"]), int(entry["first"]), int(entry["last"]), named)
    except (TypeError, KeyError, ValueError, AttributeError):
        raise UserError(
            f"the host's uid registry {path} holds a malformed claim {entry!r}: fix or remove it"
        ) from None


def _write(path: Path, claims: list[Claim]) -> None:
    """Atomically: a crash mid-write leaves the old registry, never half of a new one."""
    doc = {
        "claims": [
            {"data_dir": c.data_dir, "first": c.first, "last": c.last, "users": dict(c.users)}
            for c in sorted(claims, key=lambda c: c.first)
        ],
        "written_at": time.time(),
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with open(tmp, "w") as out:
        json.dump(doc, out, indent=1)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
