"""The handoff of a notebook server's tokens from the hub to its launcher on another node.

Given a launcher listening with a one-time key, expect the hub (knowing the key) to hand over
its tokens, a listener without the key to get nothing from the hub, a connection without the
key to set nothing in the launcher, and a launcher whose port is taken to fail at once saying
so. Real sockets and a real launcher process throughout.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from waiting import wait_until

from labhive.hub_extension.launch import (
    HandoffRefused,
    _receive,
    _send,
    hand_over,
    is_secret,
    receive_secrets,
)

KEY = "k" * 43
TOKENS = {"JUPYTERHUB_API_TOKEN": "t0k3n", "JPY_API_TOKEN": "t0k3n"}


@pytest.fixture
def launcher() -> Iterator[tuple[int, dict[str, object]]]:
    """A launcher's end on a free port, waiting in a thread; what it received lands in the dict."""
    listener = socket.create_server(("127.0.0.1", 0))
    got: dict[str, object] = {}

    def run() -> None:
        got["env"] = receive_secrets(listener, KEY, time.monotonic() + 30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield listener.getsockname()[1], got
    thread.join(35)
    listener.close()


def test_the_hub_hands_its_tokens_to_the_launcher(launcher: tuple[int, dict[str, object]]) -> None:
    port, got = launcher
    hand_over("127.0.0.1", port, KEY, TOKENS)
    wait_until(lambda: "env" in got, timeout=10)
    assert got["env"] == TOKENS


def test_a_connection_without_the_key_sets_nothing_and_the_hub_still_gets_through(
    launcher: tuple[int, dict[str, object]],
) -> None:
    port, got = launcher
    with pytest.raises(HandoffRefused, match="not this server's launcher"):
        hand_over("127.0.0.1", port, "a guessed key", {"JUPYTERHUB_API_TOKEN": "forged"})
    assert "env" not in got
    hand_over("127.0.0.1", port, KEY, TOKENS)
    wait_until(lambda: "env" in got, timeout=10)
    assert got["env"] == TOKENS


def test_only_token_variables_are_accepted(launcher: tuple[int, dict[str, object]]) -> None:
    port, got = launcher
    with pytest.raises(HandoffRefused, match="only the hub's JUPYTERHUB_"):
        hand_over("127.0.0.1", port, KEY, {**TOKENS, "LD_PRELOAD": "/tmp/evil.so"})
    assert "env" not in got
    assert is_secret("JUPYTERHUB_API_TOKEN") and not is_secret("JUPYTERHUB_USER")
    hand_over("127.0.0.1", port, KEY, TOKENS)  # the launcher still waits for the real hub
    wait_until(lambda: "env" in got, timeout=10)


def test_a_listener_without_the_key_gets_no_token() -> None:
    """Another user's process on the server's port: the hub checks its proof first."""
    impostor = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def answer() -> None:
        conn, _ = impostor.accept()
        with conn:
            hub = _receive(conn)
            heard.append(json.dumps(hub).encode())
            _send(conn, {"proof": "0" * 64, "challenge": "c"})
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                heard.append(conn.recv(65536))

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    with impostor, pytest.raises(HandoffRefused, match="not this server's launcher"):
        hand_over("127.0.0.1", impostor.getsockname()[1], KEY, TOKENS)
    thread.join(5)
    assert heard and not any(b"t0k3n" in h for h in heard)


def test_a_launcher_whose_port_is_taken_fails_at_once_saying_so() -> None:
    with socket.create_server(("0.0.0.0", 0)) as taken:
        port = taken.getsockname()[1]
        doc = base64.b64encode(json.dumps({"env": {}, "cmd": ["true"]}).encode()).decode()
        run = subprocess.run(
            [sys.executable, "-m", "labhive.hub_extension.launch", "--handoff", str(port), doc],
            input=KEY + "\n", capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert run.returncode == 2
    assert f"port {port} is in use on this node" in run.stderr
    assert "start the server again from the hub" in run.stderr


def test_a_launcher_starts_its_server_with_the_tokens_it_was_handed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The whole launcher: bind, take the tokens, close, exec the server with them."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "env.json"
    show = f"import json,os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"
    doc = {"env": {"JUPYTERHUB_USER": "alice"}, "cmd": [sys.executable, "-c", show], "cwd": None}
    packed = base64.b64encode(json.dumps(doc).encode()).decode()
    proc = subprocess.Popen(
        [sys.executable, "-m", "labhive.hub_extension.launch", "--handoff", str(port), packed],
        stdin=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(KEY + "\n")
    proc.stdin.close()

    def handed() -> bool:
        try:
            hand_over("127.0.0.1", port, KEY, TOKENS)
        except OSError:
            return False
        return True

    wait_until(handed, timeout=30)
    assert proc.wait(timeout=30) == 0
    env = json.loads(out.read_text())
    assert env["JUPYTERHUB_API_TOKEN"] == "t0k3n" and env["JUPYTERHUB_USER"] == "alice"
    assert KEY not in " ".join(proc.args)  # type: ignore[arg-type]
