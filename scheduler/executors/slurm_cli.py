"""Talking to Slurm: its commands, each with a timeout, and what their JSON says.

Every call goes through ``Slurm.run``, which bounds it (with slurmctld gone a client command
blocks for about ten seconds per retry) and turns a failure into ``SlurmError`` with the
command's own message. The JSON readers below take ``squeue --json`` and ``sinfo --json`` as
Slurm 22.05 prints them; they keep only what LabHive needs, so a newer Slurm that adds fields
still reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Node states in which Slurm runs no new work (``sinfo``'s state words, lower case).
BAD_NODE_STATES = ("down", "drain", "drained", "draining", "fail", "failing", "not_responding")


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out; the message carries Slurm's own words."""


@dataclass(frozen=True)
class Slurm:
    """How to reach one Slurm cluster: its config file (``SLURM_CONF``) and a time bound."""

    conf: str | None = None
    timeout_s: float = 20.0
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A Slurm command's environment: ``base`` (the service's own by default), then this
        cluster's settings. ``sbatch`` passes its environment on to the job's tasks, so it is
        given the tasks' allow-list as ``base`` (``SlurmExecutor.launch``)."""
        env = {**(os.environ if base is None else base), **self.extra_env}
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(
        self, argv: Sequence[str], stdin: str | None = None, base: Mapping[str, str] | None = None
    ) -> str:
        """Run a Slurm command; its stdout, or ``SlurmError`` saying what went wrong.
        ``base``: the environment to start from instead of the service's (see ``env``)."""
        if shutil.which(argv[0]) is None:
            raise SlurmError(
                f"{argv[0]} is not installed here: install Slurm's client commands "
                "(Debian: apt-get install slurm-client)"
            )
        try:
            done = subprocess.run(
                list(argv), input=stdin, capture_output=True, text=True,
                timeout=self.timeout_s, env=self.env(base), check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as err:
            raise SlurmError(
                f"{' '.join(argv[:2])} did not answer within {self.timeout_s:g} s: "
                "is slurmctld running and reachable?"
            ) from err
        if done.returncode != 0:
            words = (done.stderr or done.stdout).strip().splitlines()
            raise SlurmError(f"{argv[0]} failed: {words[-1] if words else done.returncode}")
        return done.stdout

    def json(self, argv: Sequence[str]) -> dict[str, Any]:
        out = self.run([*argv, "--json"])
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as err:
            raise SlurmError(f"{argv[0]} --json printed no JSON: {out[:200]!r}") from err
        return doc if isinstance(doc, dict) else {}


@dataclass(frozen=True)
class SlurmNode:
    """One node as ``sinfo`` reports it."""

    name: str
    address: str
    state: str  # lower case, flags joined by "+" ("idle", "mixed+drain", ...)
    reason: str
    cpus: int
    memory_mb: int
    gpus: int
    gpu_type: str | None

    @property
    def problem(self) -> str | None:
        """Why the node takes no work, or None when it is usable."""
        words = set(self.state.replace("*", "+not_responding").split("+"))
        bad = [w for w in BAD_NODE_STATES if w in words]
        if not bad:
            return None
        because = f": {self.reason}" if self.reason else ""
        return f"Slurm marks it {'+'.join(bad).upper()}{because}"


def nodes(doc: Mapping[str, Any]) -> list[SlurmNode]:
    """``sinfo --json``'s nodes (a node in two partitions is listed once)."""
    seen: dict[str, SlurmNode] = {}
    for raw in doc.get("nodes") or []:
        name = str(raw.get("name") or raw.get("hostname") or "")
        if not name or name in seen:
            continue
        gpus, gpu_type = parse_gres(str(raw.get("gres") or ""))
        seen[name] = SlurmNode(
            name=name,
            address=str(raw.get("address") or name),
            state=_state(raw),
            reason=str(raw.get("reason") or ""),
            cpus=int(raw.get("cpus") or 0),
            memory_mb=int(raw.get("real_memory") or 0),
            gpus=gpus,
            gpu_type=gpu_type,
        )
    return list(seen.values())


def _state(raw: Mapping[str, Any]) -> str:
    state = raw.get("state")
    flags = raw.get("state_flags") or []
    words = [str(state).lower()] if state else []
    words += [str(f).lower() for f in flags if str(f).lower() not in words]
    return "+".join(words) or "unknown"


def parse_gres(gres: str) -> tuple[int, str | None]:
    """GPUs in a node's GRES string: ``gpu:4``, ``gpu:a100:8``, ``gpu:a100:8(S:0-1),nic:1``."""
    total, kind = 0, None
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        try:
            total += int(parts[-1])
        except ValueError:
            continue
        if len(parts) == 3:
            kind = parts[1]
    return total, kind


#: Job states after which nothing of the job runs any more.
ENDED_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
     "BOOT_FAIL", "DEADLINE"}
)  # fmt: skip


def job_states(doc: Mapping[str, Any]) -> dict[str, str]:
    """Slurm job id -> its state, upper case. A het job is listed under its leader's id, in the
    state of a component still active if any is (all its components end together)."""
    out: dict[str, str] = {}
    for job in doc.get("jobs") or []:
        leader = str(job.get("het_job_id") or job.get("job_id") or "")
        if not leader:
            continue
        state = str(job.get("job_state") or "UNKNOWN").upper()
        if out.get(leader) is None or out[leader] in ENDED_STATES:
            out[leader] = state
    return out


#: Slurm's "no limit" (INFINITE) and "not set" (NO_VAL) in a 32-bit minutes field.
_NO_LIMIT = 0xFFFFFFFE


def job_time_limits(doc: Mapping[str, Any]) -> dict[str, float]:
    """Slurm job id -> the time limit Slurm enforces on it, in seconds (jobs without one are
    left out). ``--time`` when LabHive passed it, else the partition's ``DefaultTime``: so the
    service learns the limit a job it sent without one ends at. Slurm 22.05 prints minutes as
    a number; later versions as ``{"set": true, "infinite": false, "number": N}``."""
    out: dict[str, float] = {}
    for job in doc.get("jobs") or []:
        leader = str(job.get("het_job_id") or job.get("job_id") or "")
        raw = job.get("time_limit")
        if isinstance(raw, Mapping):
            raw = None if raw.get("infinite") or not raw.get("set", True) else raw.get("number")
        if leader and isinstance(raw, int) and 0 < raw < _NO_LIMIT:
            out.setdefault(leader, raw * 60.0)
    return out


def slurm_minutes(seconds: float) -> int:
    """Slurm counts time limits in whole minutes: ``seconds`` rounded up, at least one."""
    return max(1, int(-(-seconds // 60)))


def relaunched(doc: Mapping[str, Any]) -> set[str]:
    """Jobs Slurm put back in its queue itself after starting them (``restart_cnt``): a launch
    that failed on the controller or a node (an account it does not know, a node that did not
    answer). LabHive submits with ``--no-requeue``, yet Slurm requeues such launches anyway."""
    out = set()
    for job in doc.get("jobs") or []:
        leader = str(job.get("het_job_id") or job.get("job_id") or "")
        restarts = job.get("restart_cnt")
        pending = str(job.get("job_state") or "").upper() == "PENDING"
        if leader and pending and isinstance(restarts, int) and restarts > 0:
            out.add(leader)
    return out


#: Job states in which a job holds its nodes' resources.
_HOLDING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED"})


@dataclass(frozen=True)
class Allocation:
    """One Slurm job's share of one node, as ``squeue --json`` reports it."""

    job_id: str  # the het job's leader for a component
    name: str
    user: str
    node: str
    gpus: int
    cpus: int

    def words(self) -> str:
        return f"job {self.job_id} ({self.user}: {self.name})"


def allocations(doc: Mapping[str, Any]) -> list[Allocation]:
    """What each job that holds resources holds on each of its nodes: its GPUs there from
    ``gres_detail`` (one entry per node, in the order of ``allocated_nodes``) and its cores
    there from ``job_resources``."""
    out = []
    for job in doc.get("jobs") or []:
        if str(job.get("job_state") or "").upper() not in _HOLDING_STATES:
            continue
        leader = str(job.get("het_job_id") or job.get("job_id") or "")
        details = [str(d) for d in job.get("gres_detail") or []]
        held = (job.get("job_resources") or {}).get("allocated_nodes") or []
        for i, node in enumerate(held):
            name = str(node.get("nodename") or "")
            if not name:
                continue
            cores = [c for s in (node.get("sockets") or {}).values()
                     for c in (s.get("cores") or {}).values()]  # fmt: skip
            out.append(
                Allocation(
                    job_id=leader,
                    name=str(job.get("name") or ""),
                    user=str(job.get("user_name") or job.get("user_id") or "?"),
                    node=name,
                    gpus=parse_gres(details[i])[0] if i < len(details) else 0,
                    cpus=sum(1 for c in cores if "allocated" in str(c)),
                )
            )
    return out


def taken_words(held: Sequence[Allocation]) -> str:
    """Why LabHive keeps off a node that jobs outside it hold, in the words of a NodeDown."""
    gpus, cpus = sum(a.gpus for a in held), sum(a.cpus for a in held)
    jobs = ", ".join(dict.fromkeys(a.words() for a in held))
    return (
        f"Slurm gave {gpus} GPU(s) and {cpus} CPU(s) of it to jobs outside LabHive ({jobs}); "
        "LabHive places elsewhere until they end"
    )
