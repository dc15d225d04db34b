"""Given a small real log of a CPU job (threads, a forked child killed by SIGKILL, SIGUSR1,
exit status 3), expect the DataFrames the widget draws and the JSON summary."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from labhive.scheduler.observe.strace import parse_file, summarize_file

FIXTURES = Path(__file__).resolve().parent / "data" / "strace"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"


@pytest.fixture(scope="module")
def trace():
    return parse_file(FIXTURES / "f_tt_T_y.strace")


def test_calls_frame(trace) -> None:
    df = trace.calls_df()
    assert len(df) == len(trace.calls) == 33
    for column in ["line", "pid", "time", "t", "name", "args", "ret", "retval", "errno"]:
        assert column in df.columns
    assert {"duration", "state", "fd_path", "device", "ioctl"} <= set(df.columns)
    assert df["line"].is_monotonic_increasing
    assert df["t"].min() == 0
    assert df.loc[df["retval"].notna(), "duration"].notna().all()  # -T on every finished call
    assert df.loc[df["name"] == "exit_group", "ret"].tolist() == ["?"]
    writes = df[df["name"] == "write"]
    assert set(writes["fd_path"]) == {"/dev/null"}
    assert writes["device"].eq("/dev/null").all()
    main = df["pid"].iloc[0]
    assert df.loc[df["name"] == "exit_group", "pid"].tolist() == [main]


def test_counts(trace) -> None:
    counts = trace.counts().set_index("syscall")
    assert counts["calls"].sum() == 33
    assert counts.loc["write", "calls"] == 5 and counts.loc["kill", "calls"] == 2
    assert counts["share"].sum() == pytest.approx(1.0)
    assert counts["seconds"].sum() > 0


def test_timeline(trace) -> None:
    tl = trace.timeline().set_index("pid")
    main = trace.calls[0].pid
    assert len(tl) == 5
    assert tl.loc[main, "exit_code"] == 3 and tl.loc[main, "signals"] == 2
    child = tl[tl["killed_by"] == "SIGKILL"]
    assert len(child) == 1 and child["parent"].iloc[0] == main
    threads = tl[(tl["parent"] == main) & tl["killed_by"].isna()]
    assert len(threads) == 3 and (threads["exit_code"] == 0).all()
    assert (tl["end"] >= tl["start"]).all()
    assert tl.loc[main, "start"] == 0


def test_transitions(trace) -> None:
    edges = trace.transitions()
    assert list(edges.columns) == ["source", "target", "count"]
    pairs = {(r.source, r.target): r.count for r in edges.itertuples()}
    # SIGUSR1 to itself, the handler returns, the fork, then SIGKILL to the child
    assert pairs[("kill", "rt_sigreturn")] == pairs[("rt_sigreturn", "clone")] == 1
    assert pairs[("clone", "kill")] == 1 and pairs[("kill", "wait4")] == 1
    # an edge only joins calls of the same task: the child's madvise never follows main's calls
    n_edges = edges["count"].sum()
    assert n_edges == len(trace.calls) - trace.timeline()["calls"].gt(0).sum()


def test_activity(trace) -> None:
    act = trace.activity(0.001)
    assert act.to_numpy().sum() == len(trace.calls)
    assert set(act.columns) == set(trace.timeline()["pid"])


def test_summary_json(trace) -> None:
    s = json.loads(trace.to_json())
    assert s["lines"] == {
        "total": 47,
        "parsed": 47,
        "unparsed": 0,
        "kinds": trace.stats.kinds,
    }
    assert s["calls"] == 33 and s["time_mode"] == "clock"
    assert s["signals"] == {"SIGCHLD": 1, "SIGUSR1": 1}
    assert {t["killed_by"] for t in s["tasks"]} == {None, "SIGKILL"}


def test_ioctls_frame_on_the_gpu_log() -> None:
    df = parse_file(SHARED / "nvidia_smi_L_ttt_X_verbose.strace").ioctls()
    row = df.set_index(["device", "request"]).loc[("/dev/nvidiactl", "NV_ESC_RM_CONTROL")]
    assert row["count"] == 22 and row["number"] == "0xc020462a" and row["type_char"] == "F"
    assert row["direction"] == "read|write" and row["nr"] == 0x2A and row["size"] == 32
    assert row["seconds"] > 0
    calls = parse_file(SHARED / "nvidia_smi_L_ttt_X_verbose.strace").calls_df()
    named = calls.dropna(subset=["ioctl"])
    assert len(named) == 40 and named["ioctl"].str.startswith(("NV_ESC", "UVM_")).all()


def test_streaming_summary_equals_the_in_memory_one() -> None:
    path = SHARED / "torch_cuda_workers_sigkill.strace.gz"
    streamed = summarize_file(path)
    in_memory = parse_file(path).summary()
    for key in ("lines", "calls", "errors", "syscalls", "ioctls", "tasks", "signals"):
        assert streamed[key] == in_memory[key], key


def test_a_table_only_log_has_counts_but_no_calls() -> None:
    trace = parse_file(FIXTURES / "c.summary")
    assert trace.calls_df().empty and trace.timeline().empty
    assert not trace.counts().empty
    assert isinstance(trace.activity(), pd.DataFrame)
