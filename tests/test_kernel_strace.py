"""The strace view and ``%strace`` on real logs recorded on a GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.testing import globalipapp

from labhive.kernel_ext.strace_view import KILLED, StraceView, sections, timeline_svg
from labhive.scheduler.observe.strace import parse_file

STRACE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "strace"
NVIDIA_SMI = STRACE / "nvidia_smi.strace"


@pytest.fixture(scope="module")
def nvidia_smi():
    return parse_file(NVIDIA_SMI)


def test_report_text_names_the_top_syscalls_and_nvidia_requests(nvidia_smi) -> None:
    text = StraceView(nvidia_smi, "nvidia-smi", live=False).text()
    head, _, rest = text.partition("\n")
    assert head == "nvidia-smi: 579 calls, 33 errors, 2 tasks, 41 syscalls"
    top = rest.split("ioctls by device:")[0].split()
    assert top.index("ioctl") < top.index("read") < top.index("close")
    assert "/dev/nvidiactl         NV_ESC_RM_CONTROL     67" in text


def test_ioctl_tab_groups_decoded_requests_by_device(nvidia_smi) -> None:
    tabs = dict(sections(nvidia_smi))
    assert list(tabs) == ["syscalls", "ioctls", "timeline", "transitions"]
    ioctls = tabs["ioctls"]
    assert "NV_ESC_RM_CONTROL" in ioctls and "UVM_INITIALIZE" in ioctls
    # busiest device first, each device's rows together
    assert ioctls.index("/dev/nvidiactl") < ioctls.index("/dev/nvidia0")
    assert ioctls.index("/dev/nvidia0") < ioctls.index("/dev/nvidia-uvm")
    assert ioctls.rindex("/dev/nvidiactl") < ioctls.index("/dev/nvidia0")


def test_pictures_draw_tasks_and_the_busiest_transitions(nvidia_smi) -> None:
    tabs = dict(sections(nvidia_smi, top=5))
    # no timestamps in this log: the tasks are drawn over log lines
    assert "tasks over the log (no timestamps: by line)" in tabs["timeline"]
    assert tabs["timeline"].count("<rect") == 2 and "pid 519" in tabs["timeline"]
    graph = tabs["transitions"]
    assert "top 5 call transitions" in graph
    assert "ioctl -&gt; ioctl: 46" in graph and "read -&gt; close: 42" in graph
    assert graph.count("<title>") == 5
    # every edge has its arrow and its count; ioctl -> ioctl is a loop (a curve), not a circle
    assert graph.count('marker-end="url(#labhive-arrow)"') == 5
    assert graph.count('class="labhive-edge-count"') == 5
    assert 'class="labhive-edge-count">46</text>' in graph
    assert "<circle" not in graph and graph.count(" C ") >= 1


def test_killed_workers_are_marked_and_a_crowd_is_cut_to_the_busiest() -> None:
    trace = parse_file(STRACE / "torch_cuda_workers_sigkill.strace.gz")
    svg = timeline_svg(trace)
    assert "tasks over time (s)" in svg
    assert "364 quieter tasks not drawn" in svg
    assert "killed by SIGKILL" in svg and svg.count(f'fill="{KILLED}"') < 40


def test_an_empty_log_says_so_in_every_section(tmp_path) -> None:
    (tmp_path / "empty.strace").write_text("")
    view = StraceView(parse_file(tmp_path / "empty.strace"), "empty", live=False)
    assert view.text() == "empty: 0 calls, 0 errors, 0 tasks, 0 syscalls"
    assert "<p>no tasks</p>" in view.html() and "<p>no transitions</p>" in view.html()


def test_live_view_is_a_tab_widget_with_the_snapshot_beside_it(nvidia_smi) -> None:
    view = StraceView(nvidia_smi, "nvidia-smi", live=True)
    bundle = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"].startswith("nvidia-smi: 579 calls")
    head, tabs = view.widget.children
    assert "579 calls" in head.value
    assert tabs.titles == ("syscalls", "ioctls", "timeline", "transitions")
    assert "NV_ESC_RM_CONTROL" in tabs.children[1].value
    view.close()


# ---- the magic in a real IPython shell ----------------------------------------------------


@pytest.fixture(scope="module")
def shell():
    globalipapp.start_ipython()  # once per process: the second caller of it gets None
    ip = globalipapp.get_ipython()
    ip.run_line_magic("load_ext", "labhive.kernel_ext")
    return ip


def test_strace_magic_shows_a_local_log(shell, capsys) -> None:
    shell.user_ns["log"] = str(NVIDIA_SMI)
    (view,) = shell.run_line_magic("strace", "--top 5 $log")
    assert view.title == str(NVIDIA_SMI)
    assert "NV_ESC_RM_CONTROL" in view.text()
    assert "top 5 call transitions" in view.html()


def test_strace_magic_help_and_usage_errors(shell, tmp_path) -> None:
    assert "%strace [--task ROLE-I] [--top N] source" in shell.find_line_magic("strace").__doc__
    with pytest.raises(UsageError, match=r"^%strace: no strace log at .*missing\.strace"):
        shell.run_line_magic("strace", str(tmp_path / "missing.strace"))
    with pytest.raises(UsageError, match="usage: %strace"):
        shell.run_line_magic("strace", "--top many x.strace")


def test_strace_magic_and_job_strace_show_a_jobs_observation(shell, tmp_path) -> None:
    """A job submitted with --observe strace to a real service with the local executor."""
    from service_fixtures import live_service

    magics = shell.magics_manager.registry["LabHiveMagics"]
    with live_service(tmp_path / "data") as service:
        client = service.client("alice-token-123")
        job = client.submit(command="ls /", vc="vc1", gpus=1, name="obs", observe="strace")
        job.wait(30, 0.05)
        plain = client.submit(command="true", vc="vc1", gpus=1, name="plain").wait(30, 0.05)
        magics._client = client
        try:
            (view,) = shell.run_line_magic("strace", f"{job.id}")
            with pytest.raises(UsageError, match="has no strace log; submit it with --observe"):
                shell.run_line_magic("strace", f"{plain.id}")
            with pytest.raises(UsageError, match="no strace log for task worker-3"):
                shell.run_line_magic("strace", f"--task worker-3 {job.id}")
            with pytest.raises(UsageError, match=r"^no job 999999"):
                shell.run_line_magic("strace", "999999")
        finally:
            magics._client = None
        (again,) = job.strace(task="main-0")
    assert view.title == f"job {job.id} main-0 attempt 1"
    assert view.text().startswith(f"job {job.id} main-0 attempt 1: ")
    assert ", 1 task, " in view.text() and "openat" in view.text()
    assert again.text() == view.text()
