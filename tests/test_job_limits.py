"""Given job specs the store or the executor cannot hold, expect the parser to refuse each with a
message naming the key and saying what to change (the service answers it as a 4xx, ``labhive
validate`` prints it and exits 2). Each case is a finding of issue 16 that today's code
accepted or crashed on."""

from __future__ import annotations

import math

import pytest

from labhive.scheduler.core import job_limits as lim
from labhive.scheduler.core.jobs import SpecError, load_job_file, parse_job
from labhive.scheduler.service.store import jobs, tasks


def openpai(role: str = "worker", **res: object) -> dict:
    """An OpenPAI v2 job with one role whose resourcePerInstance holds ``res``."""
    instances = res.pop("instances", 1)
    return {
        "protocolVersion": 2,
        "name": "poison",
        "taskRoles": {
            role: {
                "instances": instances,
                "resourcePerInstance": {"gpu": 1, "cpu": 1, "memoryMB": 1024, **res},
                "commands": ["true"],
            }
        },
    }


@pytest.mark.parametrize(
    ("doc", "key", "says"),
    [
        (openpai("w\ud800"), "taskRoles", "surrogate"),
        ({"name": "a\x00b"}, "name", "NUL"),
        ({"name": "ok", "command": ["echo \x00"]}, "command[0]", "NUL"),
        ({"name": "ok", "command": "echo \udfff"}, "command", "surrogate"),
        (openpai("r" * (lim.MAX_ROLE_NAME + 1)), "taskRoles", "129 characters"),
        ({"name": "n" * (lim.MAX_JOB_NAME + 1)}, "name", "the limit is 256"),
        ({"name": "ok", "vc": "v" * 129}, "vc", "the limit is 128"),
        ({"name": "ok", "retries": None}, "retries", "got null"),
        ({"name": "ok", "gpus": None}, "gpus", "got null"),
        ({"name": "ok", "tasks": None}, "tasks", "got null"),
        ({"name": "ok", "memory_mb": None}, "memory_mb", "got null"),
        ({"name": "ok", "cpu": None}, "cpu", "got null"),
        ({"name": "ok", "cpu": math.nan}, "cpu", "finite"),
        ({"name": "ok", "cpu": math.inf}, "cpu", "finite"),
        (openpai(cpu=math.inf), "cpu", "finite"),
        (openpai(cpu=math.nan), "cpu", "finite"),
        (openpai(gpu=None), "gpu", "got null"),
        (openpai(cpu=None), "cpu", "got null"),
        (openpai(instances=None), "instances", "got null"),
        (openpai(instances=10**30), "instances", "at most 10000"),
        (openpai(instances=lim.MAX_TASKS + 1), "instances", "at most 10000"),
        ({"name": "ok", "tasks": 10**30}, "tasks", "at most 10000"),
        ({"name": "ok", "gpus": 10**30}, "gpus", "at most 10000"),
        ({"name": "ok", "memory_mb": 2**70}, "memory_mb", "at most 1099511627776"),
        ({**openpai(), "prerequisites": 5}, "prerequisites", "must be a list"),
        ({**openpai(), "jobRetryCount": None}, "jobRetryCount", "got null"),
        ({"name": "ok", "command": [None]}, "command", "must hold strings, got None"),
        ({"name": "ok", "command": ["a", {"x": 1}]}, "command", "must hold strings"),
        ({**openpai(), "taskRoles": {"w": {"commands": [None]}}}, "commands", "must hold strings"),
    ],
    ids=repr,
)
def test_unstorable_specs_are_refused_with_what_to_change(doc, key, says):
    with pytest.raises(SpecError) as err:
        parse_job(doc)
    message = str(err.value)
    assert key in message and says in message, message
    message.encode("utf-8")  # the message itself is sendable (it never echoes a surrogate)


def test_one_task_bound_for_all_roles_of_an_openpai_job():
    half = lim.MAX_TASKS // 2 + 1
    doc = openpai(instances=half)
    doc["taskRoles"]["ps"] = {"instances": half, "resourcePerInstance": {"gpu": 0}}
    with pytest.raises(SpecError, match="at most 10000"):
        parse_job(doc)
    doc["taskRoles"]["ps"]["instances"] = lim.MAX_TASKS - half
    assert parse_job(doc).task_count == lim.MAX_TASKS


def test_null_for_an_optional_name_means_its_default():
    assert parse_job({"name": "a", "vc": None}, default_vc="vc1").vc == "vc1"
    doc = {**openpai(), "defaults": {"virtualCluster": None}}
    assert parse_job(doc, default_vc="vc1").vc == "vc1"
    with pytest.raises(SpecError, match="name: is required"):
        parse_job({"name": None})


def test_the_largest_allowed_jobs_still_parse():
    spec = parse_job({"name": "n" * lim.MAX_JOB_NAME, "tasks": lim.MAX_TASKS, "cpu": 0.5})
    assert spec.task_count == lim.MAX_TASKS
    assert parse_job(openpai("r" * lim.MAX_ROLE_NAME)).roles[0].name == "r" * lim.MAX_ROLE_NAME


def test_limits_match_the_store_columns():
    """The parser's bounds are the store's column sizes (same on both backends)."""
    assert jobs.c.name.type.length == lim.MAX_JOB_NAME
    assert jobs.c.vc.type.length == lim.MAX_VC_NAME
    assert tasks.c.role.type.length == lim.MAX_ROLE_NAME


def test_validate_gives_the_parsers_message(tmp_path):
    """``labhive validate`` and the job file loader use the same parser: same refusal."""
    path = tmp_path / "job.yaml"
    path.write_text("protocolVersion: 2\nname: x\nprerequisites: 5\ntaskRoles:\n  w: {}\n")
    with pytest.raises(SpecError, match="line 3: prerequisites: must be a list"):
        load_job_file(path)
    path.write_text("name: x\ncpu: .nan\n")
    with pytest.raises(SpecError, match="cpu: must be a finite number"):
        load_job_file(path)


def test_a_deeply_nested_spec_is_refused_without_recursion():
    deep: object = "x\x00"
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(SpecError, match="NUL"):
        parse_job({"name": "ok", "command": deep})


def test_labhive_validate_prints_the_message_and_exits_2(tmp_path, capsys):
    from labhive.scheduler.cli import main

    path = tmp_path / "job.yaml"
    path.write_text("protocolVersion: 2\nname: x\ntaskRoles:\n  w: {instances: 10000000000}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 4: taskRoles.w.instances: must be a whole number >= 1" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("field", ["cpu", "gpu", "instances"])
def test_labhive_validate_and_replay_answer_a_null_resource_with_a_message(tmp_path, capsys, field):
    """Issue 16: ``labhive validate``/``replay`` of real job files with ``cpu: null``,
    ``gpu: null`` or ``instances: null`` were tracebacks; each is now the parser's message
    naming the key, exit 2 (replay: the job is rejected, the scenario still runs)."""
    import yaml

    from labhive.scheduler.cli import main

    job = openpai()
    role = job["taskRoles"]["worker"]
    (role if field == "instances" else role["resourcePerInstance"])[field] = None
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{field}: must be" in err and "got null" in err and "internal error" not in err, err
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({"events": [{"at": 0, "submit": {"spec": job}}]}))
    assert main(["replay", str(scenario)]) in (0, 2)
    out = capsys.readouterr()
    assert "internal error" not in out.err and "Traceback" not in out.err, out.err
