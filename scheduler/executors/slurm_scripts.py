"""What LabHive hands Slurm for a gang: one batch job of one component per node, and the
script each task's step runs; and the advice a refused ``sbatch`` gets.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from labhive.scheduler.executors.base import (
    NOT_STARTED,
    LaunchError,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.env import LOOPBACK
from labhive.scheduler.executors.local import (
    STRACE_LOG,
)
from labhive.scheduler.executors.slurm_output import capped_exec

RUN_FILE = "run.sh"
GPUS_FILE = "slurm_gpus"


#: Variables that name the GPUs: Slurm sets them per step from the devices it picked.
_GPU_VARS = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LABHIVE_GPUS"})


@dataclass(frozen=True)
class _Component:
    """The part of a gang on one node: one component of the Slurm job."""

    node: str
    tasks: tuple[TaskLaunch, ...]

    @property
    def gpus(self) -> int:
        return sum(len(t.gpus) for t in self.tasks)

    @property
    def cpus(self) -> int:
        return sum(_cpus(t) for t in self.tasks)

    @property
    def memory_mb(self) -> int:
        return sum(t.memory_mb for t in self.tasks)

    def options(self, partition: str | None) -> list[str]:
        opts = [
            f"--nodelist={self.node}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={self.cpus}",
        ]
        opts.append(f"--mem={self.memory_mb}M")
        if self.gpus:
            opts.append(f"--gres=gpu:{self.gpus}")
        if partition:
            opts.append(f"--partition={partition}")
        return opts


def _cpus(task: TaskLaunch) -> int:
    """Whole CPUs, at least one: the guarantee. Slurm allocates what is asked (``--mem``,
    ``--cpus-per-task``) and its cgroup plugin enforces that same amount, so a task's limit
    (``cpu_limit``/``memory_limit_mb``) has no separate Slurm mapping (docs/slurm.md)."""
    return max(1, int(-(-task.cpu // 1)))


def _components(tasks: Sequence[TaskLaunch]) -> list[_Component]:
    """The gang's tasks by node, nodes in the order the gang first names them."""
    by_node: dict[str, list[TaskLaunch]] = {}
    for task in tasks:
        by_node.setdefault(task.node, []).append(task)
    return [_Component(node, tuple(ts)) for node, ts in by_node.items()]


def _batch_script(components: Sequence[_Component], works: Mapping[TaskKey, Path]) -> str:
    """Start every task as a step on its node; record each step's exit status as it ends."""
    lines = [
        "#!/bin/bash",
        "# Written by LabHive: one step per task; exit statuses into exit.json",
        "declare -A dirs",
    ]
    het = len(components) > 1
    for group, component in enumerate(components):
        for task in component.tasks:
            work = works[task.key]
            step = ["srun", "--nodes=1", "--ntasks=1", "--exact", f"--cpus-per-task={_cpus(task)}"]
            step += [f"--mem={task.memory_mb}M", f"--job-name={task.key.role}-{task.key.index}"]
            step += [f"--het-group={group}"] if het else []
            step += [f"--gres=gpu:{len(task.gpus)}"] if task.gpus else ["--gres=none"]
            step += [f"--output={work / 'stdout'}", f"--error={work / 'stderr'}"]
            step += ["/bin/sh", str(work / RUN_FILE)]
            lines.append(shlex.join(step) + " &")
            lines.append(f"dirs[$!]={shlex.quote(str(work))}")
    lines += [
        "while ((${#dirs[@]})); do",
        "    wait -n -p done; status=$?",
        '    [ -n "${dirs[$done]:-}" ] || continue',
        '    printf \'{"exit_code": %d}\\n\' "$status" > "${dirs[$done]}/exit.json.tmp"',
        '    mv "${dirs[$done]}/exit.json.tmp" "${dirs[$done]}/exit.json"',
        '    unset "dirs[$done]"',
        "done",
    ]
    return "\n".join(lines) + "\n"


def _run_script(
    launch: TaskLaunch, env: Mapping[str, str], work: Path, cap: int | None = None
) -> str:
    """The task's own script: its environment, the GPUs Slurm gave it, then its command."""
    lines = ["#!/bin/sh", f"cd {shlex.quote(str(work))} || exit 111"]
    lines += [
        f"export {k}={shlex.quote(v)}"
        for k, v in env.items()
        if k not in _GPU_VARS and k.isidentifier()
    ]
    lines += [
        'export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-}"',
        'export LABHIVE_GPUS="$CUDA_VISIBLE_DEVICES"',
        f"printf '%s\\n' \"$CUDA_VISIBLE_DEVICES\" > {GPUS_FILE}",
        'printf \'%s.%s\\n\' "$SLURM_JOB_ID" "$SLURM_STEP_ID" > slurm_step',
    ]
    command = ["/bin/bash", "-c", launch.command]
    if launch.observe == "strace":
        command = ["strace", "-f", "-tt", "-T", "-y", "-o", str(work / STRACE_LOG), "--", *command]
    elif launch.observe is not None:
        raise LaunchError(f"unknown observation {launch.observe!r}: the choice is 'strace'")
    lines += capped_exec(command, cap)
    return "\n".join(lines) + "\n"


def _addressed_env(
    launch: TaskLaunch, gang: Sequence[TaskLaunch], addresses: Mapping[str, str]
) -> dict[str, str]:
    """The launch's environment with node addresses where it names loopback: the service built
    it for one machine, but on Slurm each node is reached at the address ``sinfo`` reports."""
    env = dict(launch.env)
    where = {(t.key.role, t.key.index): t.node for t in gang}
    mine = addresses.get(launch.node, LOOPBACK)
    env["PAI_CONTAINER_HOST_IP"] = mine
    for (role, index), node in where.items():
        name = f"PAI_HOST_IP_{role}_{index}"
        if name in env:
            env[name] = addresses.get(node, LOOPBACK)
    rank0 = next((t for t in gang if t.env.get("RANK") == "0"), None)
    if "MASTER_ADDR" in env and rank0 is not None:
        env["MASTER_ADDR"] = addresses.get(rank0.node, LOOPBACK)
    return env


#: Slurm's refusals (words of its messages, lower case) and what the admin does about each.
_FIXES = (
    ("invalid account", "create the Slurm account (sacctmgr add account) or give the service "
     "a default account its users belong to"),
    ("invalid qos", "grant the users that QOS (sacctmgr modify user ... set qos+=...) or "
     "submit to a partition whose QOS they have"),
    ("qos policy", "the job is over a QOS limit of the users' Slurm association "
     "(sacctmgr show assoc): raise it or ask for less"),
    ("invalid partition", "name a partition Slurm has (sinfo -s) with --partition"),
    ("time limit is invalid", "the job's time limit is over the partition's MaxTime: set the "
     "VC's timeLimit max to it (labhive cluster from-slurm --partition reads it)"),
    ("not permitted to use this partition", "allow the users' group in the partition's "
     "AllowGroups, or use another partition"),
    ("node configuration is not available", "the cluster config asks for more CPUs, memory or "
     "GPUs than Slurm gives the node: write it again with labhive cluster from-slurm"),
)  # fmt: skip


def _launch_advice(message: str, launch: TaskLaunch) -> str:
    """Slurm's refusal as the job's why: what Slurm said, what it means, what to do; it starts
    with ``NOT_STARTED`` so the service shows it with the attempt's failure (not a bare 127)."""
    if "Invalid --uid" in message or "Invalid --gid" in message or "Invalid user" in message:
        return (
            f"{NOT_STARTED}Slurm knows no account uid {launch.uid} (group gid {launch.gid}) "
            f"for user {launch.user!r}: create that account on the Slurm controller and every "
            "node, or give the user the uid of their site account in users.yaml, or set "
            "--first-uid to the range of the site's uids. Slurm said: " + message
        )
    lower = message.lower()
    fix = next((f for words, f in _FIXES if words in lower), None)
    return f"{NOT_STARTED}Slurm refused the job: {message}" + (f"; {fix}" if fix else "")
