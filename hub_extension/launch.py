"""Start a single-user server in its LabHive task: ``python -m labhive.hub_extension.launch F``.

The spawner writes FILE (mode 0600) with the server's command and the hub's environment for
it, the server's token included, so no secret is ever stored in the job store. The task's own
variables (``LABHIVE_*``, ``PAI_*``, ``CUDA_VISIBLE_DEVICES``) are kept; any ``JUPYTERHUB_*``
inherited from the service (which is itself a hub service) is dropped first, so the server
sees exactly its own. With ``LABHIVE_COURSE_DIR`` in that environment, the course's new files
are first copied into the server's folder (``labhive.hub_extension.course``).

Where the server's node is not the hub's machine (Slurm), the hub's filesystem is not the
node's: ``launch --handoff PORT DOC`` then takes the server's command and its non-secret
environment from DOC (base64 JSON, in the job's command) and the one-time handoff key from
stdin, binds PORT on its node (so the port is checked where the server will listen: a port in
use fails the job at once, saying so) and waits for the hub to connect and hand over the
secrets (``handoff``). Both sides prove they know the key before any secret moves, so
another user on the node who listens on, or connects to, that port learns nothing, and only
token-shaped ``JUPYTERHUB_*`` variables are accepted (a forged handoff cannot set
``LD_PRELOAD``). The listener is closed just before the server binds the same port.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import Any

USAGE = "usage: python -m labhive.hub_extension.launch (LAUNCH_FILE | --handoff PORT DOC)"
#: How long a launcher waits for the hub to hand over the secrets.
HANDOFF_WAIT_S = 600.0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--handoff":
        return _handoff_main(argv[1], argv[2])
    if len(argv) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            doc = json.load(f)
    except (OSError, ValueError) as err:
        print(
            f"labhive launch: cannot read {argv[0]}: {err}; start the server again from the hub",
            file=sys.stderr,
        )
        return 2
    return _exec_server(doc)


def _handoff_main(port_text: str, doc_text: str) -> int:
    """Bind PORT, take the secrets from the hub, then start the server on that port."""
    try:
        port = int(port_text)
        doc = json.loads(base64.b64decode(doc_text))
    except ValueError as err:
        print(f"labhive launch: bad handoff arguments: {err}\n{USAGE}", file=sys.stderr)
        return 2
    key = sys.stdin.readline().strip()
    problem = home_problem(doc.get("cwd"))
    if problem:  # before the port and the secrets: the job ends at once, saying why
        print(f"labhive launch: {problem}", file=sys.stderr)
        return 2
    if not key:
        print(
            "labhive launch: no handoff key on stdin; start the server from the hub",
            file=sys.stderr,
        )
        return 2
    try:
        listener = socket.create_server(("0.0.0.0", port))
    except OSError as err:
        print(
            f"labhive launch: port {port} is in use on this node ({err}); start the server "
            "again from the hub (it picks another port)",
            file=sys.stderr,
        )
        return 2
    with listener:
        got = receive_secrets(listener, key, time.monotonic() + HANDOFF_WAIT_S)
    if got is None:
        print(
            f"labhive launch: the hub did not hand over the server's secrets within "
            f"{HANDOFF_WAIT_S:.0f} s; start the server again from the hub",
            file=sys.stderr,
        )
        return 2
    doc["env"] = {**doc["env"], **got}
    return _exec_server(doc)


def home_problem(home: str | None) -> str:
    """Make the server's folder on this node when it is missing (0700, this uid's), or say why
    it cannot be the server's: "" when it is fine.

    Here the launcher runs as the user, on their node. A home made where nodes share the hub's
    file system (the spawner makes it there) or by the site (pam_mkhomedir, a Slurm prolog:
    docs/slurm.md) is used as it is; one that another uid owns is refused, for a server there
    would write its files, tokens included, into someone else's folder."""
    if not home:
        return ""
    where = f"on node {socket.gethostname()} as uid {os.getuid()}"
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
        st = os.stat(home)
    except OSError as err:
        return (
            f"cannot make your server's folder {home} {where}: {err.strerror}; the site "
            "makes users' homes on the nodes (pam_mkhomedir, a Slurm prolog: docs/slurm.md, "
            "or a file system the nodes share with the hub, which then makes them), or the "
            "hub's admin sets a notebook_dir users may create"
        )
    if not os.path.isdir(home):
        return f"your server's folder {home} {where} is not a folder; ask the hub's admin"
    if os.getuid() != 0 and st.st_uid != os.getuid():
        return (
            f"your server's folder {home} {where} belongs to uid {st.st_uid}, not to you: "
            "ask the site's admin to give it to your account"
        )
    return ""


def _exec_server(doc: dict[str, Any]) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "JPY_"))}
    env.update({str(k): str(v) for k, v in doc["env"].items()})
    cwd = doc.get("cwd")
    if cwd:
        os.makedirs(cwd, exist_ok=True)
        os.chdir(cwd)
    if env.get("LABHIVE_COURSE_DIR"):
        _course(env["LABHIVE_COURSE_DIR"], os.getcwd())
    cmd = [str(c) for c in doc["cmd"]]
    os.execvpe(cmd[0], cmd, env)
    return 1  # pragma: no cover - exec does not return


def _course(course: str, home: str) -> None:
    """The instructor's course files into the home (see ``course``); a missing course folder
    is said in the server's log and does not stop the server."""
    from labhive.hub_extension.course import deliver

    try:
        copied = deliver(Path(course), Path(home))
    except OSError as err:
        print(f"labhive launch: course files not copied: {err}", file=sys.stderr)
        return
    if copied:
        print(f"labhive launch: {len(copied)} course file(s) copied into {home}", file=sys.stderr)


# ---- the handoff: both ends (standard library only: the launcher may run outside the venv) ----


def is_secret(name: str) -> bool:
    """The variables that travel by handoff, never in the job's command: the hub's tokens."""
    return name.startswith(("JUPYTERHUB_", "JPY_")) and ("TOKEN" in name or "SECRET" in name)


def proof(key: str, who: str, challenge: str) -> str:
    return hmac.new(key.encode(), f"{who}:{challenge}".encode(), hashlib.sha256).hexdigest()


def _send(conn: socket.socket, msg: dict[str, Any]) -> None:
    conn.sendall(json.dumps(msg).encode() + b"\n")


def _receive(conn: socket.socket) -> dict[str, Any]:
    """One JSON line (at most 64 KiB); ValueError for anything else."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk or len(data) > 65536:
            raise ValueError("connection closed or line too long")
        data += chunk
    msg = json.loads(data)
    if not isinstance(msg, dict):
        raise ValueError("not a JSON object")
    return msg


def receive_secrets(listener: socket.socket, key: str, deadline: float) -> dict[str, str] | None:
    """The launcher's end: accept connections until one proves the key and hands over the
    secrets (returned), or the deadline passes (None). Others are dropped unanswered."""
    while (left := deadline - time.monotonic()) > 0:
        listener.settimeout(left)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            return None
        with conn:
            conn.settimeout(10)
            try:
                hub = _receive(conn)
                mine = secrets.token_hex(16)
                _send(
                    conn,
                    {"proof": proof(key, "launcher", str(hub["challenge"])), "challenge": mine},
                )
                handed = _receive(conn)
                if not hmac.compare_digest(str(handed.get("proof")), proof(key, "hub", mine)):
                    continue
                env = handed.get("env")
                if not isinstance(env, dict) or not all(map(is_secret, env)):
                    _send(conn, {"error": "only the hub's JUPYTERHUB_* tokens are handed over"})
                    continue
                _send(conn, {"ok": True})
                return {str(k): str(v) for k, v in env.items()}
            except (OSError, ValueError, KeyError):
                continue
    return None


class HandoffRefused(Exception):
    """The other end is not our launcher (wrong proof) or refused the secrets."""


def hand_over(
    address: str, port: int, key: str, env: dict[str, str], timeout_s: float = 10
) -> None:
    """The hub's end: prove the key, check the launcher's proof, then send ``env``. Raises
    OSError while nothing listens yet, HandoffRefused when what listens is not the launcher."""
    with socket.create_connection((address, port), timeout=timeout_s) as conn:
        mine = secrets.token_hex(16)
        _send(conn, {"challenge": mine})
        try:
            launcher = _receive(conn)
        except ValueError as err:
            raise HandoffRefused(f"no launcher answered at {address}:{port}: {err}") from None
        if not hmac.compare_digest(str(launcher.get("proof")), proof(key, "launcher", mine)):
            raise HandoffRefused(f"what listens at {address}:{port} is not this server's launcher")
        _send(conn, {"proof": proof(key, "hub", str(launcher.get("challenge"))), "env": env})
        try:
            answer = _receive(conn)
        except ValueError as err:
            raise HandoffRefused(
                f"the launcher at {address}:{port} did not confirm: {err}"
            ) from None
        if not answer.get("ok"):
            raise HandoffRefused(f"the launcher refused the secrets: {answer.get('error')}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
