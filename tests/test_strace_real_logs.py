"""Given the real strace logs of a PyTorch job and of nvidia-smi on an NVIDIA H100
(../shared/data/strace, see its README), expect every line accounted for and the NVIDIA
requests named as the README's independent counter named them."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from labhive.scheduler.observe.strace import parse_ff, parse_file

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"
LOGS = sorted(
    p
    for p in DATA.glob("**/*")
    if p.is_file() and (".strace" in p.name or p.suffix == ".summary" or p.parent.name == "ff")
)

# README: torch_cuda_train_10steps (and the SIGKILL run, the same CUDA start-up).
TORCH_NVIDIA = {
    "/dev/nvidia-uvm": {
        "UVM_CREATE_EXTERNAL_RANGE": 50,
        "UVM_MAP_EXTERNAL_ALLOCATION": 50,
        "UVM_CREATE_RANGE_GROUP": 41,
        "UVM_REGISTER_CHANNEL": 20,
        "UVM_INITIALIZE": 2,
        "UVM_MM_INITIALIZE": 2,
        "UVM_PAGEABLE_MEM_ACCESS": 1,
        "UVM_REGISTER_GPU": 1,
        "UVM_REGISTER_GPU_VASPACE": 1,
        "UVM_ALLOC_SEMAPHORE_POOL": 1,
        "UVM_VALIDATE_VA_RANGE": 1,
        "UVM_MAP_DYNAMIC_PARALLELISM_REGION": 1,
        "UVM_FREE": 1,
        "UVM_DESTROY_RANGE_GROUP": 1,
    },
    "/dev/nvidia0": {
        "NV_ESC_REGISTER_FD": 13,
        "NV_ESC_ALLOC_OS_EVENT": 9,
        "NV_ESC_RM_ALLOC": 8,
        "NV_ESC_RM_ALLOC_MEMORY": 7,
        "NV_ESC_NUMA_INFO": 2,
        "NV_ESC_WAIT_OPEN_COMPLETE": 1,
    },
    "/dev/nvidiactl": {
        "NV_ESC_RM_CONTROL": 253,
        "NV_ESC_RM_ALLOC": 136,
        "NV_ESC_RM_MAP_MEMORY": 30,
        "NV_ESC_SYS_PARAMS": 3,
        "NV_ESC_CARD_INFO": 3,
        "NV_ESC_RM_FREE": 3,
        "NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO": 2,
        "NV_ESC_CHECK_VERSION_STR": 1,
    },
}
# README: nvidia-smi -L (the -r, -ttt -X verbose and -ff captures make the same requests).
SMI_L_NVIDIA = {
    "/dev/nvidia-uvm": {"UVM_INITIALIZE": 1, "UVM_MM_INITIALIZE": 1, "UVM_DEINITIALIZE": 1},
    "/dev/nvidia0": {
        "NV_ESC_REGISTER_FD": 2,
        "NV_ESC_WAIT_OPEN_COMPLETE": 1,
        "NV_ESC_NUMA_INFO": 1,
    },
    "/dev/nvidiactl": {
        "NV_ESC_RM_CONTROL": 22,
        "NV_ESC_RM_ALLOC": 5,
        "NV_ESC_RM_FREE": 3,
        "NV_ESC_CHECK_VERSION_STR": 1,
        "NV_ESC_SYS_PARAMS": 1,
        "NV_ESC_CARD_INFO": 1,
    },
}


@cache
def load(path: Path):
    """Each real log is parsed once for all the tests that read it."""
    return parse_file(path)


def nvidia_requests(trace) -> dict[str, dict[str, int]]:
    df = trace.ioctls()
    df = df[df["family"].isin(["nvidia", "nvidia-uvm"])]
    out: dict[str, dict[str, int]] = {}
    for row in df.itertuples():
        out.setdefault(row.device, {})[row.request] = row.count
    return out


def device_counts(trace) -> dict[str, int]:
    return trace.ioctls().groupby("device")["count"].sum().to_dict()


def test_the_shared_logs_are_there() -> None:
    assert len(LOGS) >= 14, f"expected the strace logs in {DATA}"


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(DATA)))
def test_every_line_of_every_real_log_is_accounted_for(path: Path) -> None:
    trace = load(path)
    st = trace.stats
    assert st.parsed + st.unparsed == st.total > 0
    assert st.unparsed == 0 == len(trace.unparsed), trace.unparsed[:3]
    assert sum(st.kinds.values()) == st.total


def test_torch_training_log_matches_the_independent_count() -> None:
    trace = load(DATA / "torch_cuda_train_10steps.strace.gz")
    assert trace.stats.total == 68_375
    assert len(trace.calls) == 68_026
    assert trace.stats.kinds["unfinished"] == trace.stats.kinds["resumed"] == 330
    assert Counter(c.state for c in trace.calls) == {"complete": 67_696, "joined": 330}
    assert len(trace.counts()) == 62
    assert len(trace.exits) == 19 and all(e.code == 0 for e in trace.exits)
    assert trace.timeline()["pid"].nunique() == 19
    assert device_counts(trace) == {
        "regular file": 1998,
        "/dev/nvidiactl": 431,
        "/dev/nvidia-uvm": 173,
        "/dev/nvidia0": 40,
        "/dev/null": 2,
    }
    assert nvidia_requests(trace) == TORCH_NVIDIA
    files = trace.ioctls().query("device == 'regular file'").set_index("request")["count"]
    assert files.to_dict() == {"TCGETS": 1994, "TIOCGWINSZ": 3, "FIOCLEX": 1}


def test_sigkill_log_with_dataloader_workers() -> None:
    trace = load(DATA / "torch_cuda_workers_sigkill.strace.gz")
    assert (trace.stats.total, len(trace.calls)) == (6683, 6044)
    assert Counter(s.signal for s in trace.signals) == {"SIGCHLD": 90, "SIGALRM": 1}
    assert sum(e.signal == "SIGKILL" for e in trace.exits) == 13
    timeline = trace.timeline()
    assert len(timeline) == 404
    assert timeline["killed_by"].eq("SIGKILL").sum() == 13
    assert device_counts(trace)["socket"] == 1616
    assert nvidia_requests(trace) == TORCH_NVIDIA
    # the children of the timeout process know their parent from clone's return value
    python = timeline.set_index("pid").loc[696]
    assert python["parent"] == 695 and python["killed_by"] == "SIGKILL"


def test_nvidia_smi_log() -> None:
    trace = load(DATA / "nvidia_smi.strace")
    assert (trace.stats.total, len(trace.calls)) == (598, 579)
    assert device_counts(trace) == {"/dev/nvidiactl": 84, "/dev/nvidia0": 4, "/dev/nvidia-uvm": 3}
    got = nvidia_requests(trace)
    assert got["/dev/nvidiactl"] == {
        "NV_ESC_RM_CONTROL": 67,
        "NV_ESC_RM_ALLOC": 9,
        "NV_ESC_RM_FREE": 4,
        "NV_ESC_CHECK_VERSION_STR": 1,
        "NV_ESC_SYS_PARAMS": 1,
        "NV_ESC_CARD_INFO": 1,
        "NV_ESC_RM_MAP_MEMORY": 1,
    }
    assert got["/dev/nvidia0"] == SMI_L_NVIDIA["/dev/nvidia0"]
    assert got["/dev/nvidia-uvm"] == SMI_L_NVIDIA["/dev/nvidia-uvm"]


@pytest.mark.parametrize("name", ["nvidia_smi_L_r.strace", "nvidia_smi_L_ttt_X_verbose.strace"])
def test_nvidia_smi_L_requests_in_other_forms(name: str) -> None:
    assert nvidia_requests(load(DATA / name)) == SMI_L_NVIDIA


def test_without_y_the_device_comes_from_the_openat_that_made_the_fd() -> None:
    """-ff files have no -y paths: ioctl(9, ...) is traced back to openat(...) = 9."""
    trace = parse_ff(DATA / "ff" / "nvidia_smi_L")
    assert trace.stats.total == 451 + 12
    assert set(trace.timeline()["pid"]) == {604, 605}
    assert nvidia_requests(trace) == SMI_L_NVIDIA


def test_stderr_form_with_attach_messages() -> None:
    trace = load(DATA / "torch_cuda_init_stderr.strace.gz")
    assert (trace.stats.total, len(trace.calls)) == (5753, 5718)
    assert len(trace.messages) == 17 and all(m.event == "attached" for m in trace.messages)
    got = nvidia_requests(trace)
    assert got["/dev/nvidiactl"]["NV_ESC_RM_CONTROL"] == 210
    assert got["/dev/nvidia-uvm"]["UVM_CREATE_EXTERNAL_RANGE"] == 31


def test_summary_tables() -> None:
    trace = load(DATA / "torch_cuda_train.summary")
    table = trace.summary_table().set_index("syscall")
    assert len(table) == 61  # 60 syscalls + total
    assert table.loc["total", "calls"] == 68_252 and table.loc["total", "errors"] == 5_498
    assert table.loc["ioctl", "calls"] == 2_644 and table.loc["ioctl", "errors"] == 1_999
    assert table.loc["futex", "percent_time"] == 92.65
    assert table.loc["mmap", "errors"] == 0  # blank column
    assert trace.counts().iloc[0]["syscall"] == "newfstatat"  # counts() reads the table
    wall = load(DATA / "nvidia_smi_c_w.summary").summary_table().set_index("syscall")
    assert wall.loc["total", "calls"] == 564 and wall.loc["stat", "errors"] == 16


def test_trace_lines_then_a_table_in_one_file() -> None:
    trace = load(DATA / "nvidia_smi_C.strace")
    assert len(trace.calls) == 462
    total = trace.summary_table().set_index("syscall").loc["total"]
    assert total["calls"] == 460 and total["errors"] == 32


def test_k_stack_frames_belong_to_their_call() -> None:
    trace = load(DATA / "nvidia_smi_L_k.strace")
    assert len(trace.calls) == 101
    assert trace.stats.kinds["stack"] == 1584
    first = trace.calls[0]
    assert first.name == "openat" and len(first.stack) == 11
    assert first.stack[0].startswith("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2(")
