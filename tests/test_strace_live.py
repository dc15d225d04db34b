"""Run the real strace on small CPU jobs and read what it wrote; drive the CLI."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labhive.scheduler.cli import main
from labhive.scheduler.observe.strace import parse_ff, parse_file, run_strace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"
THREADS = (
    "import os, signal, threading\n"
    "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
    "ts = [threading.Thread(target=os.write, args=(1, b'x' * 5)) for _ in range(3)]\n"
    "[t.start() for t in ts]; [t.join() for t in ts]\n"
    "os.kill(os.getpid(), signal.SIGUSR1)\n"
    "open('/nonexistent/file')\n"
)


def test_strace_is_installed() -> None:
    assert shutil.which("strace"), "strace is missing: run bash .ci/deps.sh"


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "labhive.scheduler.cli", "strace", *args],
        input=stdin,
        capture_output=True,
        check=False,
        timeout=120,
    )


def test_run_strace_on_threads_and_a_signal() -> None:
    trace, rc = run_strace([sys.executable, "-S", "-c", THREADS])
    assert rc == 1  # the open() fails
    assert trace.stats.unparsed == 0 and trace.stats.time_mode == "clock"
    tl = trace.timeline()
    main = trace.calls[0].pid
    assert len(tl) == 4 and (tl["parent"] == main).sum() == 3
    assert [s.signal for s in trace.signals] == ["SIGUSR1"]
    failed = trace.calls_df().query("name == 'openat' and errno == 'ENOENT'")
    assert failed["args"].str.contains("/nonexistent/file").any()
    writes = trace.calls_df().query("name == 'write' and retval == 5")
    assert len(writes) == 3 and writes["duration"].notna().all()


def test_c_summary_of_a_live_run(tmp_path: Path) -> None:
    out = tmp_path / "c.summary"
    subprocess.run(
        ["strace", "-c", "-f", "-o", str(out), sys.executable, "-S", "-c", THREADS],
        capture_output=True,
        check=False,
    )
    table = parse_file(out).summary_table().set_index("syscall")
    rows = table.drop(index="total")
    assert table.loc["total", "calls"] == rows["calls"].sum() > 0
    assert rows.loc["openat", "errors"] >= 1


def test_ff_of_a_live_run(tmp_path: Path) -> None:
    prefix = tmp_path / "job"
    subprocess.run(
        ["strace", "-ff", "-o", str(prefix), sys.executable, "-S", "-c", THREADS],
        capture_output=True,
        check=False,
    )
    trace = parse_ff(prefix)
    assert trace.stats.unparsed == 0 and len(trace.timeline()) == 4
    # no -y: the failed open is still there, and writes go to fd 1
    assert (trace.calls_df()["errno"] == "ENOENT").any()


def test_cli_run_prints_json_and_passes_the_exit_status_on() -> None:
    got = cli("run", "--json", "--", sys.executable, "-S", "-c", "import sys; sys.exit(7)")
    assert got.returncode == 7, got.stderr
    summary = json.loads(got.stdout)
    assert summary["exit_status"] == 7 and summary["lines"]["unparsed"] == 0
    assert summary["tasks"][0]["exit_code"] == 7
    assert any(s["name"] == "exit_group" for s in summary["syscalls"])


def test_cli_run_with_a_trace_filter(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "kept.strace"
    code = "open('/etc/hostname').read()"
    args = ["strace", "run", "--json", "--trace", "openat", "--keep", str(log), "--"]
    assert main([*args, sys.executable, "-S", "-c", code]) == 0
    summary = json.loads(capfd.readouterr().out)
    assert {s["name"] for s in summary["syscalls"]} == {"openat"}
    assert (
        summary["source"] == str(log) and parse_file(log).stats.total == summary["lines"]["total"]
    )


def test_cli_run_text_summary_goes_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["strace", "run", "--", sys.executable, "-S", "-c", "print('hello')"]) == 0
    out, err = capfd.readouterr()
    assert out == "hello\n"
    assert "syscalls:" in err and "command exit status: 0" in err


def test_cli_parse_text_names_the_gpu_requests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strace", "parse", str(SHARED / "nvidia_smi.strace")]) == 0
    text = capsys.readouterr().out
    assert "598 = 598 parsed + 0 unparsed" in text
    assert "/dev/nvidiactl  (84)" in text and "NV_ESC_RM_CONTROL" in text
    assert "UVM_MM_INITIALIZE" in text


def test_cli_parse_of_a_c_table_shows_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strace", "parse", "--top", "3", str(SHARED / "torch_cuda_train.summary")]) == 0
    text = capsys.readouterr().out
    assert "-c table: 60 syscalls" in text and "92.65   13.431982       467        4  futex" in text
    assert "total: 68252 calls, 5498 errors" in text


def test_cli_parse_json_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = (SHARED / "nvidia_smi_L_r.strace").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["strace", "parse", "--json", "-"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["lines"]["total"] == 163 and summary["time_mode"] == "relative"
    names = {(i["device"], i["name"]) for i in summary["ioctls"]}
    assert ("/dev/nvidia0", "NV_ESC_REGISTER_FD") in names


def test_cli_user_errors_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["strace", "parse", str(tmp_path / "missing.strace")]) == 2
    assert "no strace log at" in capsys.readouterr().err
    assert main(["strace", "parse", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["strace", "run"]) == 2
    assert "give the command after --" in capsys.readouterr().err
