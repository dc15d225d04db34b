"""What a notebook server may reach when it runs as its user's uid (the service is root):
its own home and its own launch file, nothing of anyone else's.

- ``<notebook_dir parent>/`` (``DATA/home/`` under ``labhive up``) is 0711: a server passes
  through to its own home but cannot list who else has one;
- ``<notebook_dir>`` (``DATA/home/<user>/``) is 0700 and owned by the user's uid/gid;
- the spawner's launch file (the server's hub token) is 0600 and owned by the user's uid, in a
  0711 directory, so the server can read its own and no other.

The uid comes from the LabHive service (``GET /me``: configured in the users/grants file, or
allocated and kept in its store). Without one (the service runs tasks as its own user), files
stay the hub's own, 0600 in a 0700 directory, as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Owner:
    uid: int
    gid: int


def owner_from(me: dict[str, object]) -> Owner | None:
    """The uid/gid the user's server will run as, when this process can hand files to it."""
    uid, gid = me.get("uid"), me.get("gid")
    if not isinstance(uid, int) or not isinstance(gid, int) or os.geteuid() != 0:
        return None
    return Owner(uid, gid)


def make_home(home: Path, owner: Owner | None) -> None:
    """The user's notebook home: 0700 and theirs; its parent traversable, not listable."""
    home.parent.mkdir(parents=True, exist_ok=True)
    if owner is None:
        home.mkdir(exist_ok=True)
        return
    os.chmod(home.parent, 0o711)
    home.mkdir(mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    os.chown(home, owner.uid, owner.gid)


def launch_folder(folder: Path, owner: Owner | None) -> Path:
    """The launch files' directory: 0700, or 0711 when servers run as their users (each
    reads its own 0600 file by name)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o711 if owner else 0o700)
    return folder


def open_launch_file(path: Path, owner: Owner | None) -> int:
    """A 0600 file descriptor for the launch file, owned by the server's uid when it has one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    if owner is not None:
        os.fchown(fd, owner.uid, owner.gid)
    return fd
