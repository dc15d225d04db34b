"""Given the Alibaba trace's files (or small ones in their format) on the command line, expect
the sharing model's table, JSON and files; and the CLI's slicing, progress and idle notes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sim_helpers import DATA, PHILLY

from labhive.scheduler.cli import main

ALIBABA = DATA / "alibaba-gpu-v2023"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def files(tmp_path: Path) -> tuple[Path, Path]:
    pods = tmp_path / "pods.csv"
    pods.write_text(
        POD_HEADER + "p0,4000,8192,1,500,,LS,Running,0,100,0\n"
        "p1,4000,8192,1,500,,LS,Running,0,100,0\n"
        "p2,4000,8192,1,500,,BE,Running,0,10,0\n"
        "p3,4000,8192,1,1000,P100,BE,Running,5,20,5\n"
        "p4,4000,8192,1,1000,,BE,Pending,5,,\n"
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,1,T4\n")
    return pods, nodes


def test_the_sharing_table_shows_waits_rejections_and_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods, nodes = files(tmp_path)
    args = ["simulate", "--trace", str(pods), "--cluster", str(nodes), "--policy", "fifo"]
    assert main([*args, "--policy", "fgd"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "4 pods to replay (3 share a GPU, 0 CPU-only)" in out
    assert "1 (never scheduled (no scheduled_time))" in out
    assert re.search(r"rejected \(fit on no node\)\s+1\s+1", out)  # p3 wants a P100
    assert re.search(r"pods that waited\s+1\s+1", out)  # p2 waits for a half GPU
    assert "simulate: fifo: 4 jobs in" in captured.err  # not a terminal: a line per policy
    assert main([*args, "--json", "--out", str(tmp_path / "out")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"][0]["avg_wait_s"] == pytest.approx(100 / 3, abs=0.1)
    assert (tmp_path / "out" / "fifo.series.csv").is_file()


def test_policies_that_do_not_apply_to_gpu_sharing_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods, nodes = files(tmp_path)
    assert main(["simulate", "--trace", str(pods), "--cluster", str(nodes), "--policy", "drf"]) == 2
    assert "does not apply to the Alibaba trace" in capsys.readouterr().err


def test_flags_that_do_not_apply_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods, nodes = files(tmp_path)
    args = ["simulate", "--trace", str(pods), "--cluster", str(nodes), "--policy", "fifo"]
    assert main([*args, "--per-vc", "--checkpoint", "60"]) == 2
    assert "--per-vc, --checkpoint do(es) not apply" in capsys.readouterr().err
    generic = tmp_path / "t.csv"
    generic.write_text("submit_time,vc,user,gpus,duration\n0,default,a,1,10\n")
    args = ["simulate", "--trace", str(generic), "--cluster", str(nodes), "--policy", "fifo"]
    assert main(args) == 2
    assert "goes with its pod list" in capsys.readouterr().err


def test_an_idle_cluster_is_called_idle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time,vc,user,gpus,duration\n0,default,a,1,10\n100,default,b,1,10\n")
    machines = tmp_path / "m.csv"
    machines.write_text("machineId,number of GPUs\nm0,2\nm1,2\nm2,4\n")
    args = ["simulate", "--trace", str(trace), "--cluster", str(machines), "--quiet"]
    assert main([*args, "--policy", "fifo", "--machines", "1"]) == 0
    out = capsys.readouterr().out
    assert "no job ever queued under any policy" in out
    assert "2 GPUs" in out and "the first 1 machines (--machines)" in out


@pytest.mark.skipif(not ALIBABA.is_dir(), reason=f"the Alibaba trace is not at {ALIBABA}")
def test_the_real_trace_fills_a_slice(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--trace", str(ALIBABA / "openb_pod_list_multigpu50.csv"), "--quiet"]
    args += ["--cluster", str(ALIBABA / "openb_node_list_gpu_node.csv"), "--machines", "40"]
    assert main([*args, "--policy", "fgd"]) == 2
    assert "add --fill" in capsys.readouterr().err
    assert main([*args, "--policy", "fgd", "--fill"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"GPU capacity unallocated at arrived load\s+50%", out)
    assert re.search(r"^fgd\s+\d", out, re.M)


def test_machines_slices_only_a_machine_list(capsys: pytest.CaptureFixture[str]) -> None:
    trace = PHILLY / "synthetic" / "synthetic_jobs_sample1000.csv"
    if not trace.is_file():
        pytest.skip(f"no synthetic sample at {trace}")
    args = ["simulate", "--trace", str(trace), "--cluster", str(PHILLY / "cluster_machine_list")]
    assert main([*args, "--policy", "fifo", "--machines", "0"]) == 2
    assert "--machines must be at least 1" in capsys.readouterr().err
