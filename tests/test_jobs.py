"""Given job specs in the short form and in OpenPAI's protocol v2, expect one JobSpec each and
a line-numbered message for every mistake."""

from __future__ import annotations

import pytest
from helpers import DATA, LAB

from labhive.scheduler.core.jobs import SpecError, load_job_file, parse_job, parse_priority


def test_lab_job_files_parse_as_the_lab_means_them():
    spec = load_job_file(LAB / "job-config-1.yaml")
    assert (spec.name, spec.vc, spec.priority, spec.gang) == ("job-config-1", "vc1", 10, True)
    (role,) = spec.roles
    assert (role.name, role.instances, role.gpu, role.cpu, role.memory_mb) == (
        "train",
        1,
        1,
        2.0,
        4096,
    )
    assert role.commands[-1] == "sleep 5m"
    assert spec.image == "openpai/pai.example.pytorch"
    assert load_job_file(LAB / "job-config-4.yaml").priority == -1
    assert load_job_file(LAB / "job-config-6.yaml").gang is True
    incremental = load_job_file(LAB / "job-config-7.yaml")
    assert (incremental.gang, incremental.task_count) == (False, 2)


@pytest.mark.parametrize("path", sorted((DATA / "openpai-jobs").glob("*.yaml")), ids=str)
def test_openpai_examples_parse(path):
    spec = load_job_file(path)
    assert spec.vc in ("default", "vc1") and spec.task_count >= 1


def test_openpai_hived_extras_per_role():
    spec = load_job_file(DATA / "openpai-jobs" / "hived-itc-pin.yaml")
    roles = {r.name: r for r in spec.roles}
    assert roles["vc1nopinned"].sku == "K80"
    assert roles["vc1pinned"].pinned_cell is not None


def test_short_form_defaults_and_keys():
    spec = parse_job({"name": "a", "vc": "vc1", "priority": "prod", "tasks": 3, "gpus": 2})
    assert (spec.priority, spec.gang, spec.task_count, spec.total_gpus) == (100, True, 3, 6)
    spec = parse_job(
        {
            "name": "b",
            "gang": False,
            "retries": 2,
            "duration": 30,
            "sku": "K80",
            "cpu": 3,
            "memory_mb": 8192,
            "command": "python train.py",
            "user": "ann",
            "observe": "strace",
        }
    )
    assert (spec.vc, spec.priority, spec.gang, spec.retries, spec.duration) == (
        "default",
        10,
        False,
        2,
        30.0,
    )
    assert spec.roles[0].commands == ("python train.py",)
    assert parse_job({"name": "c", "vc": "x"}, default_vc="y").vc == "x"
    assert parse_job({"name": "c"}, default_vc="y").vc == "y"


@pytest.mark.parametrize(
    ("value", "priority"),
    [
        ("crit", 120),
        ("PROD", 100),
        ("test", 10),
        ("oppo", -1),
        (0, 0),
        (1000, 1000),
        (-1, -1),
        ("7", 7),
    ],
)
def test_priorities(value, priority):
    assert parse_priority(value) == priority


@pytest.mark.parametrize("value", [-2, 1001, "urgent", True, 1.5])
def test_bad_priorities_say_what_is_allowed(value):
    with pytest.raises(ValueError, match=r"use crit, prod, test, oppo, a number 0..1000"):
        parse_priority(value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"vc": "a"}, "name: is required"),
        ({"name": "a", "gpu": 1}, "gpu: unknown key; a short-form job has"),
        ({"name": "a", "tasks": 0}, "tasks: must be a whole number >= 1, got 0"),
        ({"name": "a", "priority": "high"}, "priority: unknown priority 'high'"),
        ({"name": "a", "gang": "yes"}, "gang: must be true or false"),
        ({"protocolVersion": 1, "name": "a"}, "protocolVersion: must be 2"),
        ({"protocolVersion": 2, "name": "a"}, "taskRoles: is required"),
        (
            {"protocolVersion": 2, "name": "a", "taskRoles": {"t": {"instances": -1}}},
            "taskRoles.t.instances: must be a whole number >= 1",
        ),
        (
            {"protocolVersion": 2, "name": "a", "taskRoles": {"t": {}}, "extra": 1},
            "extra: unknown key in an OpenPAI v2 job",
        ),
    ],
)
def test_bad_specs_name_the_key(data, message):
    with pytest.raises(SpecError) as err:
        parse_job(data)
    assert message in str(err.value)


def test_job_file_errors_carry_the_line(tmp_path):
    text = (LAB / "job-config-0.yaml").read_text().replace("gpu: 1", "gpu: one")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_job_file(path)
    assert str(err.value) == (
        f"{path} line 19: taskRoles.train.resourcePerInstance.gpu: "
        "must be a whole number >= 0 or a share 0.5, 0.25 or 0.125 (1/2, 1/4, 1/8), "
        "got 'one'; at most 10000"
    )


def test_unreadable_and_malformed_job_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read job file"):
        load_job_file(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a\ntasks: [1,\n")
    with pytest.raises(SpecError, match=r"line 3: not valid YAML"):
        load_job_file(bad)
