"""Given job files in Tiresias' and Helios' own formats, written as their repositories
describe them, expect ``labhive simulate`` to read them as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labhive.scheduler.cli import main
from labhive.scheduler.sim.traces import load_trace

#: Tiresias' simulator/*_job.csv (github.com/SymbioticLab/Tiresias, simulator/README.md)
TIRESIAS = """job_id,num_gpu,submit_time,iterations,model_name,duration,interval
0,1,0,606,vgg19,164,30
1,8,30,133,vgg11,147,23
2,0,40,10,vgg11,5,1
3,2,53,157,inception4,127,26
"""

#: Helios' cluster_log.csv (github.com/S-Lab-System-Group/HeliosData, README's schema)
HELIOS = "\n".join(
    [
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue",
        "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,"
        "2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0",
        "1425512,uVMrF,vchbv,4,16,1,FAILED,"
        "2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0",
        "1425513,uVMrF,vchbv,0,4,1,COMPLETED,"
        "2020-06-09 18:42:00,2020-06-09 18:42:00,2020-06-09 18:43:00,60,0",
        "1425514,uXBbc,vcJkd,8,32,1,CANCELLED,"
        "2020-06-09 18:43:01,2020-06-09 18:50:01,2020-06-09 19:50:01,3600,420",
        "1425515,uXBbc,vcJkd,2,8,1,NODE_FAIL,"
        "2020-06-09 18:44:01,2020-06-09 18:44:01,2020-06-09 18:54:01,600,0",
        "",
    ]
)


def test_tiresias_job_file_loads_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "60_job.csv"
    path.write_text(TIRESIAS)
    trace = load_trace(path)
    assert trace.format == "tiresias-csv"
    assert [(j.job_id, j.submit, j.gpus, j.duration, j.vc) for j in trace.jobs] == [
        ("0", 0.0, 1, 164.0, "default"),
        ("1", 30.0, 8, 147.0, "default"),
        ("3", 53.0, 2, 127.0, "default"),
    ]
    assert trace.skipped == {"zero GPUs": 1}


def test_helios_cluster_log_loads_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS)
    trace = load_trace(path)
    assert trace.format == "helios-csv"
    jobs = {j.job_id: j for j in trace.jobs}
    assert sorted(jobs) == ["1425511", "1425512", "1425514", "1425515"]  # the CPU job skipped
    assert trace.skipped == {"zero GPUs": 1}
    assert jobs["1425514"].submit - jobs["1425511"].submit == 120.0
    assert (jobs["1425512"].vc, jobs["1425512"].user, jobs["1425512"].gpus) == ("vchbv", "uVMrF", 4)
    assert {k: j.status for k, j in jobs.items()} == {
        "1425511": "Pass",
        "1425512": "Failed",
        "1425514": "Killed",
        "1425515": "Failed",
    }
    assert jobs["1425514"].duration == 3600.0  # the run, not the queueing Helios recorded


def test_a_bad_helios_date_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "cluster_log.csv"
    path.write_text(HELIOS.replace("2020-06-09 18:41:27,2020", "9/6/2020,2020", 1))
    trace = load_trace(path)
    assert [p.line for p in trace.problems] == [3]
    assert "neither seconds nor YYYY-MM-DD HH:MM:SS" in trace.problems[0].message


def test_simulate_replays_a_helios_log_per_vc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "cluster_log.csv"
    log.write_text(HELIOS)
    machines = tmp_path / "machines.csv"
    machines.write_text("machineId,number of GPUs\nm0,8\nm1,8\n")
    vcs = tmp_path / "vcs.csv"
    vcs.write_text("vc,nodes\nvcJkd,1\nvchbv,1\n")
    argv = ["simulate", "--json", "--quiet", "--trace", str(log), "--cluster", str(machines)]
    assert main([*argv, "--vcs", str(vcs), "--model", "helios"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["trace_format"] == "helios-csv"
    overall = doc["policies"]["fifo:vc_nodes=true"]["overall"]
    assert overall["jobs"] == 4 and overall["failed"] == 3
