"""Given a student's notebook server started as the spawner starts it (the launcher, the
spawner's launch document, ``jupyterhub-singleuser`` against a hub API), expect it to boot
without running ``node`` at all, and the kernels and terminals it starts to get the PATH the
spawner gave it, ``node``'s folder included.

Importing JupyterLab ran ``node yarn.js config --json`` (~0.5 CPU s of each server's start,
docs/hub.md "A class of 50"); ``labhive.hub_extension.serverboot`` imports it with ``node``'s
folders left off PATH and then puts PATH back. The plain script, started the same way, is
seen to run that ``node`` here, so the trace would show it if a JupyterLab release ran it
another way."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import file_modules
import httpx
import psutil
import pytest

from labhive.hub_extension.serverboot import MODULE, server_command, without_node

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_server_start.py"
NODE = shutil.which("node")
pytestmark = [
    pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace"),
    pytest.mark.skipif(NODE is None, reason="needs node on PATH (JupyterLab runs it)"),
]


@functools.cache
def bench() -> ModuleType:
    """The server-start benchmark as a module: its stub hub and launch doc."""
    return file_modules.load("bench_server_start", BENCH)


@pytest.fixture(scope="module")
def hub_api() -> Iterator[str]:
    with bench().stub_hub() as url:
        yield url


def node_runs(trace: Path) -> list[str]:
    """The ``node`` (or ``nodejs``) programs started, from an ``strace -f -e execve`` log."""
    return [
        line
        for line in trace.read_text().splitlines()
        if "execve(" in line
        and "ENOENT" not in line
        and re.search(r'execve\("[^"]*/(node|nodejs)"', line)
    ]


def strace(trace: Path) -> list[str]:
    return ["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace)]


def path_of(pid: int) -> str:
    """The PATH a process was started with (its exec-time environment)."""
    for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if item.startswith(b"PATH="):
            return item[5:].decode()
    raise AssertionError(f"process {pid} has no PATH")


def new_child(server: psutil.Process, before: set[int], program: str) -> psutil.Process:
    """The server's process started since ``before`` that runs ``program`` (``argv[0]``'s or
    ``-m``'s name)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for child in server.children(recursive=True):
            argv = child.cmdline()
            if child.pid not in before and program in (os.path.basename(argv[0]), *argv[1:3]):
                return child
        time.sleep(0.2)
    raise AssertionError(f"no new {program} under the server")


def test_a_students_server_boots_without_node_and_its_kernel_and_terminal_keep_the_path(
    tmp_path: Path, hub_api: str
) -> None:
    trace = tmp_path / "strace.log"
    with bench().started_server("boot", tmp_path, hub_api, wrap=strace(trace)) as server:
        assert server.doc["cmd"][1:4] == ["-P", "-m", MODULE]  # the spawner's command
        assert os.path.basename(server.doc["cmd"][4]) == "jupyterhub-singleuser"  # ps shows it
        assert node_runs(trace) == [], "the server ran node while it started"
        given = server.doc["env"]["PATH"]
        assert NODE is not None and os.path.dirname(NODE) in given.split(os.pathsep)

        (booted,) = [p for p in psutil.Process(server.proc.pid).children(recursive=True)
                     if MODULE in p.cmdline()]  # fmt: skip
        assert path_of(booted.pid) == given  # and the server itself was given it
        before = {p.pid for p in booted.children(recursive=True)}
        token = {"Authorization": f"token {bench().TOKEN}"}
        http = httpx.Client(base_url=server.url, headers=token, timeout=60)
        kernel = http.post("api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        assert path_of(new_child(booted, before, "ipykernel_launcher").pid) == given
        terminal = http.post("api/terminals")
        assert terminal.status_code == 200, terminal.text
        shell = os.path.basename(os.environ.get("SHELL") or "sh")
        assert path_of(new_child(booted, before, shell).pid) == given
    assert node_runs(trace) == []  # nor since: kernels and terminals run no node either


def test_the_plain_script_started_the_same_way_runs_node(tmp_path: Path, hub_api: str) -> None:
    """What the test above would see if the import ran ``node`` again."""
    trace = tmp_path / "strace.log"
    with bench().started_server("exec", tmp_path, hub_api, wrap=strace(trace)) as server:
        assert MODULE not in server.doc["cmd"]
        runs = node_runs(trace)
    assert len(runs) == 1 and '"config", "--json"' in runs[0], runs


@pytest.mark.parametrize("path", ["given", "unset"])
def test_the_import_runs_no_node_and_leaves_path_as_it_was(tmp_path: Path, path: str) -> None:
    env = dict(os.environ)
    if path == "unset":
        env.pop("PATH")  # os.defpath then: /bin:/usr/bin, where Debian's node is
    script = (
        "import os\n"
        "from labhive.hub_extension.serverboot import import_lab_without_node\n"
        "before = os.environ.get('PATH')\n"
        "import_lab_without_node()\n"
        "import jupyterlab.labapp\n"
        "assert os.environ.get('PATH') == before, (before, os.environ.get('PATH'))\n"
        "print('ok')\n"
    )
    trace = tmp_path / "strace.log"
    done = subprocess.run([*strace(trace), sys.executable, "-c", script], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr
    assert node_runs(trace) == []


def test_only_the_hubs_own_singleuser_script_is_started_through_serverboot(
    tmp_path: Path,
) -> None:
    single = str(Path(sys.executable).parent / "jupyterhub-singleuser")
    assert server_command([single, "--x"]) == [sys.executable, "-P", "-m", MODULE, single, "--x"]
    assert server_command([single, "--x"], quick_boot=False) == [single, "--x"]
    assert server_command(["/usr/bin/jupyter-lab", "--x"]) == ["/usr/bin/jupyter-lab", "--x"]
    other = tmp_path / "jupyterhub-singleuser"  # another environment's script
    other.write_text("#!/usr/bin/python3\nimport sys\n")
    assert server_command([str(other)]) == [str(other)]


def test_serverboot_run_without_the_script_says_how_to_run_it() -> None:
    done = subprocess.run([sys.executable, "-P", "-m", MODULE, "--ServerApp.port=1"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "jupyterhub-singleuser [server options]" in done.stderr


def test_path_without_node_keeps_every_other_folder(tmp_path: Path) -> None:
    with_node = tmp_path / "a"
    with_node.mkdir()
    (with_node / "node").write_text("#!/bin/sh\n")
    (with_node / "node").chmod(0o755)
    plain = tmp_path / "b"
    plain.mkdir()
    assert without_node(f"{with_node}:{plain}:/nonexistent") == f"{plain}:/nonexistent"
    assert without_node(str(with_node)) == os.devnull  # never empty: that means os.defpath
