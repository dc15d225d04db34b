"""The Slurm executor against a real two-node Slurm (each node in its own network namespace).

Given a gang LabHive placed on two nodes, expect one Slurm job pinned to them, each task on its
node with its own GPUs, both ranks agreeing on the rendezvous, and rank 1 reaching rank 0 over
TCP; a stop that honours the grace period; a node drained in Slurm seen as a node going down;
and tasks found again by a new executor after a restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from slurm_cluster import SlurmCluster
from waiting import wait_until

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import NodeDown, NodeUp, TaskPlacement
from labhive.scheduler.executors.base import NOT_STARTED, LaunchError, TaskExit, TaskLaunch
from labhive.scheduler.executors.slurm import SlurmExecutor
from labhive.scheduler.executors.slurm_cli import Slurm
from labhive.scheduler.service.loop import default_launches

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
pytest_plugins = ["slurm_cluster"]

RANK0 = (
    f"{sys.executable} -c 'import os,socket; s=socket.socket(); "
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    's.bind(("0.0.0.0", int(os.environ["MASTER_PORT"]))); s.listen(); s.settimeout(60); '
    'c, a = s.accept(); print("rank0 accepted", a[0], flush=True)\''
)
RANK1 = (
    f"{sys.executable} -c 'import os,socket,time\n"
    "for _ in range(300):\n"
    "    try:\n"
    '        addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))\n'
    "        socket.create_connection(addr, 2); break\n"
    "    except OSError: time.sleep(0.1)\n"
    'print("rank1 connected", flush=True)\''
)
SHOW = (
    'echo "host=$(hostname) cvd=$CUDA_VISIBLE_DEVICES master=$MASTER_ADDR:$MASTER_PORT rank=$RANK"'
)


@pytest.fixture
def executor(slurm: SlurmCluster, data_dir: Path) -> SlurmExecutor:
    return SlurmExecutor(
        data_dir, grace_s=2.0, slurm=Slurm(conf=str(slurm.conf)),
        node_names=slurm.nodes, poll_s=0.2, node_poll_s=0,
    )  # fmt: skip


def gang(
    job_id: str, commands: dict[str, str], nodes: dict[str, str], gpus: int
) -> list[TaskLaunch]:
    """The launches the service would make for a job of one task per role, placed on nodes."""
    spec = parse_job({
        "protocolVersion": 2, "name": f"job{job_id}",
        "taskRoles": {
            role: {"instances": 1, "commands": [cmd],
                   "resourcePerInstance": {"gpu": gpus, "cpu": 1, "memoryMB": 512}}
            for role, cmd in commands.items()
        },
    })  # fmt: skip
    placements = tuple(TaskPlacement(role, 0, nodes[role], tuple(range(gpus))) for role in commands)
    job = {"id": job_id, "attempt": 0, "name": spec.name, "user": "alice"}
    return default_launches(job, spec, placements, virtual=False)


def settle(executor: SlurmExecutor, count: int) -> dict[str, TaskExit]:
    ended: dict[str, TaskExit] = {}

    def done() -> bool:
        ended.update({e.key.role: e for e in executor.poll()})
        return len(ended) >= count

    wait_until(done, timeout=90)
    return ended


def test_a_two_node_gang_runs_one_task_per_node_with_its_gpus_and_meets_over_tcp(
    slurm: SlurmCluster, executor: SlurmExecutor
) -> None:
    launches = gang(
        "101", {"master": f"{SHOW}; {RANK0}", "worker": f"{SHOW}; {RANK1}"},
        {"master": "n1", "worker": "n2"}, gpus=2,
    )  # fmt: skip
    handles = executor.launch(launches)
    assert len({h.info["slurm_job_id"] for h in handles}) == 1  # one allocation for the gang
    ended = settle(executor, 2)
    assert {r: e.exit_code for r, e in ended.items()} == {"master": 0, "worker": 0}, ended
    out = {h.key.role: Path(h.info["stdout"]).read_text() for h in handles}
    master = f"master={slurm.address('n1')}:"
    assert "host=n1" in out["master"] and "host=n2" in out["worker"]
    assert master in out["master"] and master in out["worker"]
    assert f"rank0 accepted {slurm.address('n2')}" in out["master"]
    assert "rank1 connected" in out["worker"]
    for h in handles:  # each rank sees the two devices Slurm gave it, and says which
        seen = (Path(h.info["workdir"]) / "slurm_gpus").read_text().strip()
        assert len(seen.split(",")) == 2, seen
        assert f"cvd={seen}" in out[h.key.role]


def test_exit_codes_are_each_tasks_own(executor: SlurmExecutor) -> None:
    launches = gang(
        "102", {"ok": "true", "bad": "exit 3", "killed": "kill -9 $$"},
        {"ok": "n1", "bad": "n1", "killed": "n2"}, gpus=1,
    )  # fmt: skip
    executor.launch(launches)
    ended = settle(executor, 3)
    assert {r: e.exit_code for r, e in ended.items()} == {"ok": 0, "bad": 3, "killed": 137}
    assert "signal 9" in ended["killed"].reason


def test_stop_waits_the_grace_period_then_slurm_kills(executor: SlurmExecutor) -> None:
    launches = gang("103", {"stubborn": "trap '' TERM; echo up; sleep 600"}, {"stubborn": "n1"}, 1)
    handles = executor.launch(launches)
    stdout = Path(handles[0].info["stdout"])
    wait_until(lambda: stdout.exists() and "up" in stdout.read_text(), timeout=60)
    executor.stop(handles, grace_s=1.0)
    states = subprocess.run(
        ["squeue", "-h", "-j", handles[0].info["slurm_job_id"], "-o", "%T"],
        capture_output=True, text=True, env=executor.slurm.env(), check=False,
    ).stdout.split()  # fmt: skip
    assert not {"RUNNING", "PENDING", "COMPLETING"} & set(states), states
    assert executor.poll() == []  # a stopped task is settled by stop, never by poll


def test_a_node_drained_in_slurm_goes_down_with_its_reason_and_comes_back(
    slurm: SlurmCluster, executor: SlurmExecutor
) -> None:
    assert executor.node_events() == []  # both healthy from the start
    slurm.scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=fan broken")
    try:
        events = executor.node_events()
        assert [(type(e), e.node) for e in events] == [(NodeDown, "n2")]
        (down,) = events
        assert isinstance(down, NodeDown)
        assert "DRAIN" in down.reason and "fan broken" in down.reason
    finally:
        slurm.scontrol("update", "NodeName=n2", "State=RESUME")
    later: list[NodeDown | NodeUp] = []  # Slurm may say NOT_RESPONDING a moment after the resume

    def up_again() -> bool:
        later.extend(executor.node_events())
        return NodeUp in map(type, later)

    wait_until(up_again, "n2 to be up again", timeout=30)
    assert [(type(e), e.node) for e in later if isinstance(e, NodeUp)] == [(NodeUp, "n2")]


def test_a_new_executor_adopts_running_tasks_and_settles_them_with_real_exit_codes(
    slurm: SlurmCluster, executor: SlurmExecutor, data_dir: Path
) -> None:
    launches = gang("104", {"a": "sleep 3; exit 7", "b": "exit 5"}, {"a": "n1", "b": "n2"}, 1)
    handles = executor.launch(launches)
    # the service dies; a new one reads the handles from its store
    stored = [type(h)(h.key, json.loads(json.dumps(h.info))) for h in handles]
    again = SlurmExecutor(
        data_dir, slurm=Slurm(conf=str(slurm.conf)), node_names=slurm.nodes, poll_s=0.2
    )
    ended = {e.key.role: e for e in again.adopt(stored)}
    ended.update(settle(again, 2 - len(ended)))
    assert {r: e.exit_code for r, e in ended.items()} == {"a": 7, "b": 5}


def test_a_task_runs_as_its_users_uid(executor: SlurmExecutor) -> None:
    uid = 23457
    subprocess.run(["groupadd", "-g", str(uid), "lhslurmtest"], capture_output=True, check=False)
    made = subprocess.run(
        ["useradd", "-u", str(uid), "-g", str(uid), "-M", "-s", "/bin/sh", "lhslurmtest"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if made.returncode not in (0, 9):  # 9: the account exists already
        pytest.skip(f"cannot create a test account: {made.stderr.strip()}")
    try:
        (launch,) = gang("105", {"who": "id -u; id -g; id -G"}, {"who": "n2"}, 0)
        handles = executor.launch([replace(launch, uid=uid, gid=uid)])
        assert settle(executor, 1)["who"].exit_code == 0
        assert Path(handles[0].info["stdout"]).read_text().split() == [str(uid)] * 3
        work = Path(handles[0].info["workdir"])  # its environment is for its user alone
        assert (work.stat().st_uid, work.stat().st_mode & 0o777) == (uid, 0o700)
        assert ((work / "run.sh").stat().st_mode & 0o777) == 0o600
    finally:
        subprocess.run(["userdel", "lhslurmtest"], capture_output=True, check=False)
        subprocess.run(["groupdel", "lhslurmtest"], capture_output=True, check=False)


def test_a_task_gets_the_allow_list_not_the_services_environment(
    executor: SlurmExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sbatch passes its environment on to the job: the service's secrets must not be in it."""
    for name, value in {"PGPASSWORD": "pg-pass", "ADMIN_CLOUD_SECRET": "cloud-key"}.items():
        monkeypatch.setenv(name, value)
    (launch,) = gang("107", {"dump": "env -0"}, {"dump": "n1"}, 0)
    (handle,) = executor.launch([launch])
    assert settle(executor, 1)["dump"].exit_code == 0
    out = Path(handle.info["stdout"]).read_text()
    seen = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    assert not {"PGPASSWORD", "ADMIN_CLOUD_SECRET"} & set(seen)
    assert seen["PAI_JOB_NAME"] == "job107" and seen["SLURM_JOB_ID"] and seen["PATH"]


def test_an_unknown_uid_is_refused_with_what_to_do(executor: SlurmExecutor) -> None:
    (launch,) = gang("106", {"who": "id -u"}, {"who": "n1"}, 0)
    with pytest.raises(LaunchError, match="create that account"):
        executor.launch([replace(launch, uid=3999999, gid=3999999)])


def test_from_slurm_writes_a_config_that_validates(slurm: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "cluster.yaml"
    cmd = [sys.executable, "-m", "labhive.scheduler.cli"]
    done = subprocess.run(
        [*cmd, "cluster", "from-slurm", "--slurm-conf", str(slurm.conf), "-o", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    checked = subprocess.run([*cmd, "validate", str(out)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 nodes, 8 GPUs" in checked.stdout


def test_slurm_time_limits_end_jobs_as_time_limits_not_lost_tasks(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    """Given the site's partition "short" (DefaultTime 1 min) and two jobs that outlive their
    limit: one that declares none (the partition's minute applies) and one that declares 20 s
    (it reaches Slurm as --time, 20 s + the grace in whole minutes). Expect each to end as a
    time limit reached, with the limit it had, never as a task lost to requeue."""
    short = SlurmExecutor(
        data_dir, grace_s=2.0, slurm=Slurm(conf=str(slurm.conf)), partition="short",
        node_names=slurm.nodes, poll_s=0.2, node_poll_s=0,
    )  # fmt: skip
    (unlimited,) = gang("111", {"forever": "sleep 600"}, {"forever": "n1"}, 0)
    (limited,) = gang("112", {"limited": "sleep 600"}, {"limited": "n2"}, 0)
    handles = short.launch([unlimited]) + short.launch([replace(limited, time_limit=20.0)])
    shown = {h.key.role: short.slurm.run(["scontrol", "show", "job", h.info["slurm_job_id"]])
             for h in handles}  # fmt: skip
    assert "TimeLimit=00:01:00" in shown["forever"] and "TimeLimit=00:01:00" in shown["limited"]
    ended: dict[str, TaskExit] = {}

    def done() -> bool:
        ended.update({e.key.role: e for e in short.poll()})
        return len(ended) >= 2

    wait_until(done, timeout=200)
    seen = {r: (e.exit_code, e.reason, e.timed_out, e.requeue) for r, e in ended.items()}
    assert all(e.timed_out and not e.requeue for e in ended.values()), seen
    assert ended["forever"].time_limit == 60.0 and "of 1 min (TIMEOUT)" in ended["forever"].reason
    assert ended["limited"].time_limit == 20.0
    assert {e.exit_code for e in ended.values()} == {143}  # Slurm's TERM, never "-"


def test_from_slurm_reads_the_partitions_time_limits_into_the_vc(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """Given partition "short" (DefaultTime 1 min, MaxTime 10 min), expect the VC's timeLimit
    to say the same, in a config that validates; the default partition (no limits) gives
    none; a partition Slurm lacks is named in the error with the ones it has."""
    cmd = [sys.executable, "-m", "labhive.scheduler.cli", "cluster", "from-slurm"]
    cmd += ["--slurm-conf", str(slurm.conf)]
    out = tmp_path / "short.yaml"
    done = subprocess.run([*cmd, "--partition", "short", "-o", str(out)], capture_output=True)
    assert done.returncode == 0, done.stderr
    vc = yaml.safe_load(out.read_text())["virtualClusters"]["default"]
    assert vc["timeLimit"] == {"default": "1m", "max": "10m"}
    check = [sys.executable, "-m", "labhive.scheduler.cli", "validate", str(out)]
    checked = subprocess.run(check, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    plain = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "timeLimit" not in plain
    bad = subprocess.run([*cmd, "--partition", "gpu-long"], capture_output=True, text=True)
    assert bad.returncode != 0 and "no partition 'gpu-long' (it has: main, short)" in bad.stderr


def test_a_uid_the_controller_no_longer_knows_fails_the_launch_saying_what_to_do(
    slurm: SlurmCluster, executor: SlurmExecutor
) -> None:
    """Given a job submitted as an account that exists when sbatch runs but is gone when Slurm
    starts it (its node was drained meanwhile; the account deleted: the controller cannot
    make its credential), Slurm puts the job back in its queue on its own, for ever. Expect
    the task to end as not started, naming the uid and the fix, and the Slurm job cancelled."""
    uid = 23999
    subprocess.run(["groupadd", "-g", str(uid), "lhghost"], capture_output=True, check=False)
    subprocess.run(
        ["useradd", "-u", str(uid), "-g", str(uid), "-M", "-s", "/bin/sh", "lhghost"],
        capture_output=True, check=False,
    )  # fmt: skip
    slurm.scontrol("update", "NodeName=n2", "State=DRAIN", "Reason=maintenance")
    try:
        (launch,) = gang("113", {"ghost": "id -u"}, {"ghost": "n2"}, 0)
        (handle,) = executor.launch([replace(launch, uid=uid, gid=uid)])
    finally:
        subprocess.run(["userdel", "lhghost"], capture_output=True, check=False)
        subprocess.run(["groupdel", "lhghost"], capture_output=True, check=False)
        slurm.scontrol("update", "NodeName=n2", "State=RESUME")
    ended = settle(executor, 1)["ghost"]
    assert ended.exit_code == 127 and ended.reason.startswith(NOT_STARTED), ended
    assert f"no account for uid {uid}" in ended.reason and "--first-uid" in ended.reason
    wait_until(lambda: handle.info["slurm_job_id"] not in executor.slurm.run(["squeue", "-h"]))


def test_a_partition_slurm_lacks_is_refused_with_slurms_words_and_the_fix(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    """Given a service configured for partition "gpu-long", which this Slurm lacks, expect the
    launch refused as not started, with Slurm's words and where to look for the right name."""
    wrong = SlurmExecutor(
        data_dir, slurm=Slurm(conf=str(slurm.conf)), partition="gpu-long", node_names=slurm.nodes
    )
    (launch,) = gang("114", {"any": "true"}, {"any": "n1"}, 0)
    with pytest.raises(LaunchError) as refused:
        wrong.launch([launch])
    said = str(refused.value)
    assert said.startswith(NOT_STARTED + "Slurm refused the job: sbatch failed:"), said
    assert "Invalid partition name specified; name a partition Slurm has (sinfo -s)" in said


def native_sbatch(slurm: SlurmCluster, node: str, gpus: int, name: str = "mine") -> str:
    """A user's own job, submitted with ``sbatch`` beside LabHive: ``gpus`` GPUs of ``node``."""
    done = subprocess.run(
        ["sbatch", "--parsable", f"--job-name={name}", f"--nodelist={node}",
         f"--gres=gpu:{gpus}", "--cpus-per-task=2", "--mem=512", "--output=/dev/null",
         "--wrap", "sleep 600"],
        capture_output=True, text=True, env=slurm.env, check=True,
    )  # fmt: skip
    job = done.stdout.strip().split(";")[0]
    wait_until(lambda: _slurm_state(slurm, job) == "RUNNING", f"native job {job} to run", 60)
    return job


def _slurm_state(slurm: SlurmCluster, job: str) -> str:
    return subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, env=slurm.env,
        check=False,
    ).stdout.strip()  # fmt: skip


def test_a_node_a_native_sbatch_job_holds_is_down_for_labhive_until_it_ends(
    slurm: SlurmCluster, executor: SlurmExecutor
) -> None:
    """Given a user's own ``sbatch`` job holding 2 GPUs of n1, and one holding a GPU of n2
    where a LabHive task runs, expect n1 down for the scheduler naming that job (LabHive
    never places onto what Slurm gave away), n2 left alone (a NodeDown would stop LabHive's
    task there), and n1 back up once the native job ends."""
    assert executor.node_events() == []
    (ours,) = executor.launch(gang("105", {"ours": "sleep 600"}, {"ours": "n2"}, 1))
    wait_until(lambda: _slurm_state(slurm, ours.info["slurm_job_id"]) == "RUNNING", timeout=60)
    theirs = native_sbatch(slurm, "n1", gpus=2, name="bobs-training")
    beside = native_sbatch(slurm, "n2", gpus=1)
    try:
        events = executor.node_events()
        assert [(type(e), e.node) for e in events] == [(NodeDown, "n1")], events
        (down,) = events
        assert isinstance(down, NodeDown)
        why = down.reason
        assert f"job {theirs} (root: bobs-training)" in why and "2 GPU(s)" in why, why
        assert executor.node_events() == []  # said once
    finally:
        subprocess.run(["scancel", theirs, beside], env=slurm.env, check=False)
        wait_until(lambda: not _slurm_state(slurm, beside), "the native job on n2 to end", 60)
        executor.stop([ours], grace_s=0)
    later: list[NodeDown | NodeUp] = []

    def up_again() -> bool:
        later.extend(executor.node_events())
        return NodeUp in map(type, later)

    wait_until(up_again, "n1 to be up again", timeout=60)
    assert [(type(e), e.node) for e in later] == [(NodeUp, "n1")]
