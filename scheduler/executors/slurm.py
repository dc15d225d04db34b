"""Run a job's tasks on a Slurm cluster: LabHive decides, Slurm executes.

LabHive keeps its decisions (VCs, cells, priorities, gangs, preemption) and hands each placed
gang to Slurm as ONE batch job pinned to the nodes it chose: one component per node
(``--nodelist``, that node's GPUs as ``--gres=gpu:N``, its CPUs and memory), a heterogeneous job
when the gang spans nodes, so that every node gets exactly its share. The batch script starts
each task as its own job step (``srun --exact``) and records each step's exit status in the
task's directory, as the local executor's supervisor does; so the task directories must be on a
file system the nodes share with the service (the usual ``/home`` or ``/scratch`` of a Slurm
site). Slurm picks the GPU devices inside a node; the task records the ``CUDA_VISIBLE_DEVICES``
Slurm gave it (``slurm_gpus`` in its directory).

State comes from ``squeue --json`` (a job that left the queue has ended) and node health from
``sinfo --json``: a node Slurm marks DOWN, DRAIN or FAIL becomes a ``NodeDown`` for the
scheduler, with Slurm's reason, and a ``NodeUp`` when it comes back; so does a node that jobs
outside LabHive (users' own ``sbatch``) hold part of, while no LabHive task is on it. Stop is
``scancel`` with the grace period: TERM to the steps, then Slurm's own TERM+KILL. After a
restart of the service, tasks are found again by their Slurm job ids (kept in each handle) and
settle with the exit codes their batch script recorded.

Tasks run as their LabHive user: ``sbatch --uid/--gid`` when the service runs as root (Slurm
needs an account for that uid on the controller and the nodes), else as the service's user.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from labhive.scheduler.core.model import NodeDown, NodeUp
from labhive.scheduler.executors.base import (
    NOT_STARTED,
    LaunchError,
    Stream,
    TaskExit,
    TaskHandle,
    TaskKey,
    TaskLaunch,
)
from labhive.scheduler.executors.env import process_env
from labhive.scheduler.executors.local import (
    HANDLE_FILE,
    read_log_range,
    recorded_info,
    set_aside_task_dir,
    strace_observations,
    task_dir,
)
from labhive.scheduler.executors.node_watch import NodeWatch
from labhive.scheduler.executors.output import DEFAULT_CAP
from labhive.scheduler.executors.slurm_cli import (
    ENDED_STATES,
    Allocation,
    Slurm,
    SlurmError,
    allocations,
    job_states,
    job_time_limits,
    nodes,
    relaunched,
    slurm_minutes,
    taken_words,
)
from labhive.scheduler.executors.slurm_records import (
    _describe,
    _read_exit,
    _recorded,
    _slurm_said,
    _step,
    _timed_out,
)
from labhive.scheduler.executors.slurm_scripts import (
    GPUS_FILE,
    RUN_FILE,
    _addressed_env,
    _batch_script,
    _components,
    _launch_advice,
    _run_script,
)
from labhive.scheduler.executors.supervise import EXIT_FILE, write_json_atomic

# Public names that lived here before the scripts and records moved out.
__all__ = ["GPUS_FILE", "RUN_FILE", "SlurmExecutor"]

log = logging.getLogger("labhive.executors.slurm")

#: Job states in which Slurm lost the job through no fault of its own: the service requeues
#: without spending a retry, as for a node that goes down (a node failure, a node that never
#: booted, Slurm's own preemption).
_LOST_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})
#: Slurm stopped the job at its time limit (``--time``, else the partition's DefaultTime).
_TIMEOUT = "TIMEOUT"
#: Slurm ended the job as failed before its script recorded the task's exit: Slurm could not
#: run it (an account the node lacks, an output file it cannot open, its memory): a failure
#: with Slurm's words, never a lost task requeued over and over.
_FAILED_STATES = frozenset({"FAILED", "OUT_OF_MEMORY", "DEADLINE"})
#: srun's and slurmstepd's words for a step they could not start.
_STEP_REFUSED = re.compile(
    r"unable to (create|launch)|launch failed|invalid (user|group)|couldn't|execve|"
    r"permission denied|no such file",
    re.IGNORECASE,
)
#: The name ``launch`` gives each Slurm job (``--job-name``): LabHive's job id and attempt.
_OUR_JOB_NAME = re.compile(r"labhive-\d+-\d+")


class SlurmExecutor:
    """Tasks as Slurm job steps (see the module docstring)."""

    name = "slurm"
    partial_stops = False  # its job steps are named by attempt and task, not generation

    def __init__(
        self,
        data_dir: Path,
        grace_s: float = 10.0,
        *,
        slurm: Slurm | None = None,
        partition: str | None = None,
        node_names: Iterable[str] = (),
        poll_s: float = 1.0,
        node_poll_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        output_cap: int | None = DEFAULT_CAP,
    ):
        self.data_dir = Path(data_dir).resolve()
        self.grace_s = grace_s
        self.slurm = slurm or Slurm()
        self.partition = partition
        self._node_names = tuple(dict.fromkeys(node_names))
        #: What each of a task's stdout and stderr keeps (``slurm_output.py``); None: all.
        self.output_cap: int | None = output_cap
        self._poll_s = poll_s
        self._node_poll_s = node_poll_s
        self._clock = clock
        self._tasks: dict[TaskKey, TaskHandle] = {}
        self._lock = threading.Lock()  # the loop polls while actuation workers launch and stop
        self._queried_at = float("-inf")
        self._nodes_listed_at: float | None = None
        self._nodes = NodeWatch()  # what was wrong with each node at the last poll
        #: Nodes a launch is submitting to right now (not yet tracked): never taken for others'.
        self._launching: list[str] = []
        #: Tasks that recorded a failure, already asked ``squeue`` about once: they wait for
        #: the next regular query (a job Slurm is still ending shows COMPLETING, not why).
        self._doubted: set[TaskKey] = set()

    # ---- launch ---------------------------------------------------------------------------

    def launch(self, tasks: Sequence[TaskLaunch]) -> list[TaskHandle]:
        """Submit the gang as one Slurm job; raise ``LaunchError`` when Slurm refuses it."""
        if not tasks:
            return []
        for launch in tasks:
            if launch.key in dict(self._tracked()):
                raise LaunchError(f"task {launch.key} is already running")
        try:
            addresses = {n.name: n.address for n in nodes(self.slurm.json(["sinfo"]))}
        except SlurmError as err:
            raise LaunchError(str(err)) from err
        missing = sorted({t.node for t in tasks} - set(addresses))
        if missing:
            raise LaunchError(
                f"Slurm has no node named {', '.join(missing)}: check the cluster config"
            )
        works = {t.key: self._prepare(t, _addressed_env(t, tasks, addresses)) for t in tasks}
        components = _components(tasks)
        first = tasks[0].key
        script = works[first].parent / f"slurm-{first.role}-{first.index}.sh"
        script.write_text(_batch_script(components, works))
        # sbatch hands its own environment to the job (--export=ALL): so it gets the tasks'
        # allow-list as the service's own user, never the service's whole environment
        # --no-requeue: LabHive decides where a job goes again; Slurm requeueing it itself (a
        # launch that failed on the node) left it PENDING under a job the service saw running
        argv = ["sbatch", "--parsable", "--export=ALL", "--no-requeue"]
        argv.append(f"--job-name=labhive-{first.job_id}-{first.attempt}")
        argv += [f"--output={script.with_suffix('.out')}", *self._identity(tasks[0], works)]
        argv += self._time(tasks[0])
        for i, component in enumerate(components):
            argv += ([":"] if i else []) + component.options(self.partition)
        argv.append(str(script))
        on = [t.node for t in tasks]
        with self._lock:
            self._launching.extend(on)
        try:
            slurm_id = self.slurm.run(argv, base=process_env({})).strip().split(";")[0]
        except SlurmError as err:
            raise LaunchError(_launch_advice(str(err), tasks[0])) from err
        finally:
            with self._lock:
                for node in on:
                    self._launching.remove(node)
        handles = []
        for launch in tasks:
            work = works[launch.key]
            info = {
                "slurm_job_id": slurm_id,
                "node": launch.node,
                "address": addresses[launch.node],  # where its servers are reached
                "workdir": str(work),
                "stdout": str(work / "stdout"),
                "stderr": str(work / "stderr"),
                "exit_file": str(work / EXIT_FILE),
                "slurm_output": str(script.with_suffix(".out")),  # srun's and Slurm's own words
                "observe": launch.observe,
                "time_limit": launch.time_limit,  # what a Slurm TIMEOUT reports as reached
                "uid": launch.uid if os.geteuid() == 0 else None,  # as sbatch --uid named it
            }
            write_json_atomic(work / HANDLE_FILE, info)
            handle = TaskHandle(launch.key, info)
            with self._lock:
                self._tasks[launch.key] = handle
            handles.append(handle)
        return handles

    def _prepare(self, launch: TaskLaunch, env: Mapping[str, str]) -> Path:
        """The task's directory with its ``run.sh``, owned by the user the task runs as."""
        work = task_dir(self.data_dir, launch.key)
        if work.exists():
            self._retire(work)
        work.mkdir(parents=True, mode=0o700)
        work.chmod(0o700)  # its environment (tokens included) is for its user alone
        run = work / RUN_FILE
        if launch.uid is not None and os.geteuid() == 0:  # the service's $HOME is not theirs
            name = launch.user or str(launch.uid)
            env = {**env, "HOME": str(work), "USER": name, "LOGNAME": name}
        run.write_text(_run_script(launch, env, work, self.output_cap))
        run.chmod(0o600)
        if launch.uid is not None and os.geteuid() == 0:
            for path in (work, run):
                os.chown(path, launch.uid, launch.gid if launch.gid is not None else launch.uid)
        return work

    def _retire(self, work: Path) -> None:
        """An earlier launch of this attempt the service never recorded (it died in between):
        cancel its Slurm job, so it keeps no GPUs, and keep its files aside."""
        try:
            old = json.loads((work / HANDLE_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
        if old.get("slurm_job_id"):
            self._scancel([str(old["slurm_job_id"])])
        set_aside_task_dir(work)

    @staticmethod
    def _identity(launch: TaskLaunch, works: Mapping[TaskKey, Path]) -> list[str]:
        if launch.uid is None or os.geteuid() != 0:
            return []
        gid = launch.gid if launch.gid is not None else launch.uid
        out = next(iter(works.values())).parent
        os.chown(out, launch.uid, gid)  # the batch script's own output lands here
        return [f"--uid={launch.uid}", f"--gid={gid}"]

    def _time(self, launch: TaskLaunch) -> list[str]:
        """``--time``: the job's limit plus the grace period, in Slurm's whole minutes. The
        service stops the job at its limit itself; Slurm's limit is the backstop and what its
        backfill plans with. Without one, the partition's DefaultTime applies (learned from
        ``squeue`` while the job runs)."""
        if launch.time_limit is None:
            return []
        return [f"--time={slurm_minutes(launch.time_limit + self.grace_s)}"]

    # ---- poll and adopt -------------------------------------------------------------------

    def poll(self) -> list[TaskExit]:
        """Tasks that ended since the last poll: a recorded exit of 0 at once; a recorded
        failure once ``squeue`` says why the job ended (asked at once: a step Slurm killed at
        the time limit records a failure too); a vanished Slurm job once ``squeue`` (asked at
        most every ``poll_s``) no longer runs it. The loop polls while actuation workers
        launch and stop: a task a stop took away is simply skipped."""
        tracked = self._tracked()
        codes = {k: _read_exit(h.info) for k, h in tracked if _recorded(h.info)}
        now = time.monotonic()
        fresh = {k for k, c in codes.items() if c != 0} - self._doubted
        self._doubted |= fresh
        if not tracked or (not fresh and now - self._queried_at < self._poll_s):
            return [e for k, c in codes.items() if c == 0 for e in self._settled(k)]
        self._queried_at = now
        try:
            doc = self.slurm.json(["squeue"])
        except SlurmError as err:
            log.warning("cannot ask Slurm for job states (tasks keep their state): %s", err)
            return [e for k in codes for e in self._settled(k)]
        states, limits, requeued = job_states(doc), job_time_limits(doc), relaunched(doc)
        ended = []
        for key, handle in tracked:
            slurm_id = str(handle.info["slurm_job_id"])
            if slurm_id in requeued:
                ended.extend(self._not_launched(key))
                continue
            if slurm_id in limits:
                handle.info.setdefault("slurm_time_limit", limits[slurm_id])
            state = states.get(slurm_id)
            if key in codes:
                if codes[key] != 0 and state == "COMPLETING":
                    continue  # Slurm is still ending the job: its end state will say why
                ended.extend(self._settled(key, state))
            elif state is None or state in ENDED_STATES:
                ended.extend(self._settled(key, state or "gone from squeue"))
        return ended

    def _tracked(self) -> list[tuple[TaskKey, TaskHandle]]:
        with self._lock:
            return list(self._tasks.items())

    def _settled(self, key: TaskKey, slurm_state: str | None = None) -> list[TaskExit]:
        """The task's exit (none when a concurrent stop settled it first)."""
        with self._lock:
            handle = self._tasks.pop(key, None)
        self._doubted.discard(key)
        if handle is None:
            return []
        info = handle.info
        record = _read_exit(info)
        if slurm_state == _TIMEOUT:
            return [_timed_out(key, info, record)]
        if record is not None and (record == 0 or slurm_state not in _LOST_STATES):
            said = _slurm_said(info) if record else ""
            if said and _STEP_REFUSED.search(said):  # Slurm never ran it: its words, not a code
                return [TaskExit(key, record, f"{NOT_STARTED}{_describe(record)}; {said}")]
            return [TaskExit(key, record, _describe(record) + (f"; {said}" if said else ""))]
        if slurm_state in _FAILED_STATES:
            said = _slurm_said(info) or f"nothing in {info.get('slurm_output')}: see slurmd's log"
            why = (
                f"{NOT_STARTED}Slurm job {info['slurm_job_id']} ended {slurm_state} before "
                f"the task recorded an exit status; {said}"
            )
            return [TaskExit(key, 127, why)]
        lost = slurm_state in _LOST_STATES
        why = (
            f"Slurm job {info['slurm_job_id']} ended ({slurm_state}) "
            "before the task recorded an exit status"
        )
        return [TaskExit(key, None, why, requeue=lost)]

    def _not_launched(self, key: TaskKey) -> list[TaskExit]:
        """Slurm tried to start the job and put it back in its queue: cancel it (else it waits
        there while the service shows it running) and fail the attempt saying why."""
        with self._lock:
            handle = self._tasks.pop(key, None)
        if handle is None:
            return []
        info = handle.info
        self._scancel([str(info["slurm_job_id"])])
        why = (
            f"{NOT_STARTED}Slurm could not start job {info['slurm_job_id']} on {info['node']} "
            "and put it back in its queue"
        )
        if info.get("uid") is not None:
            why += (
                f"; most often the controller or the node knows no account for uid "
                f"{info['uid']} (slurmctld's log: 'getpwuid failed'): create that account on "
                "the Slurm controller and every node, or set --first-uid to the range of the "
                "site's uids"
            )
        else:
            why += "; slurmctld's log says why"
        return [TaskExit(key, 127, why)]

    def adopt(self, handles: Sequence[TaskHandle]) -> list[TaskExit]:
        """Take over tasks recorded before a restart; settle those whose Slurm job ended."""
        for handle in handles:
            info = self._info(handle)
            with self._lock:
                if info is not None and handle.key not in self._tasks:
                    self._tasks[handle.key] = TaskHandle(handle.key, info)
        tracked = dict(self._tracked())
        lost = [
            TaskExit(h.key, None, "no record that this task was launched")
            for h in handles
            if h.key not in tracked
        ]
        self._queried_at = float("-inf")
        adopted = {h.key for h in handles}
        return lost + [e for e in self.poll() if e.key in adopted]

    # ---- stop -----------------------------------------------------------------------------

    def stop(self, handles: Sequence[TaskHandle], grace_s: float | None = None) -> None:
        """TERM the tasks' steps, wait up to the grace period, then have Slurm kill what is
        left; return once Slurm says the tasks are gone (or cannot be asked)."""
        grace = self.grace_s if grace_s is None else grace_s
        infos = [i for i in (self._info(h) for h in handles) if i is not None]
        with self._lock:
            for handle in handles:
                self._tasks.pop(handle.key, None)
        targets = self._targets(infos)
        if not targets:
            return
        self._scancel(targets, "--signal=TERM")
        if not self._wait_gone(infos, grace):
            self._scancel(targets)
            self._wait_gone(infos, max(grace, self.slurm.timeout_s))

    def _targets(self, infos: list[dict[str, Any]]) -> list[str]:
        """Whole Slurm jobs whose every task is stopped; single steps of the others."""
        ours = {str(i["slurm_job_id"]) for i in infos}
        still = {str(h.info["slurm_job_id"]) for _, h in self._tracked()}
        targets = sorted(ours - still)
        for info in infos:
            if str(info["slurm_job_id"]) in still:
                step = _step(info)
                if step:
                    targets.append(step)
        return targets

    def _scancel(self, targets: list[str], *flags: str) -> None:
        try:
            self.slurm.run(["scancel", *flags, *targets])
        except SlurmError as err:
            log.warning("scancel %s: %s", " ".join(targets), err)

    def _wait_gone(self, infos: list[dict[str, Any]], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if all(_recorded(i) for i in infos):
                return True
            try:
                states = job_states(self.slurm.json(["squeue"]))
            except SlurmError:
                return False
            pending = [i for i in infos if not _recorded(i)]
            if all(states.get(str(i["slurm_job_id"]), "GONE") in (*ENDED_STATES, "GONE")
                   for i in pending):  # fmt: skip
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    # ---- nodes ----------------------------------------------------------------------------

    def node_events(self) -> list[NodeDown | NodeUp]:
        """Changes of the config's nodes since the last call (the first call reports every node
        that is bad from the start); Slurm is asked at most every ``node_poll_s``. A node is
        down while Slurm marks it DOWN/DRAIN/FAIL, and while jobs outside LabHive (users'
        own ``sbatch``) hold any of it and no LabHive task is there (``_held_by_others``). An
        unreachable controller reports nothing."""
        now = time.monotonic()
        if self._nodes_listed_at is not None and now - self._nodes_listed_at < self._node_poll_s:
            return []
        self._nodes_listed_at = now
        try:
            listed = {n.name: n for n in nodes(self.slurm.json(["sinfo"]))}
            others = self._held_by_others(allocations(self.slurm.json(["squeue"])))
        except SlurmError as err:
            log.warning("cannot list Slurm's nodes and jobs: %s", err)
            return []
        t = self._clock()
        events: list[NodeDown | NodeUp] = []
        for name in self._node_names or tuple(listed):
            node = listed.get(name)
            problem = node.problem if node else "Slurm has no node of this name"
            event = self._nodes.saw(name, problem or others.get(name), t)
            if event is not None:
                events.append(event)
        return events

    def _held_by_others(self, held: Sequence[Allocation]) -> dict[str, str]:
        """Node -> why LabHive keeps off it: jobs LabHive did not submit hold some of it.

        The policy knows whole nodes going down and up, not parts of them, so a node partly
        taken is taken out whole (the smallest mechanism it already understands, see
        docs/slurm.md). A node where LabHive's own tasks run or are being launched is never
        taken out: a NodeDown would stop them; it is taken out once they end."""
        with self._lock:
            ours = {str(h.info["slurm_job_id"]) for h in self._tasks.values()}
            busy = {str(h.info["node"]) for h in self._tasks.values()} | set(self._launching)
        mine = [a for a in held if a.job_id in ours or _OUR_JOB_NAME.fullmatch(a.name)]
        busy |= {a.node for a in mine}
        theirs: dict[str, list[Allocation]] = {}
        for a in held:
            if a not in mine and a.node not in busy:
                theirs.setdefault(a.node, []).append(a)
        return {node: taken_words(allocs) for node, allocs in theirs.items()}

    # ---- logs and observations ------------------------------------------------------------

    def read_log(self, handle: TaskHandle, stream: Stream, offset: int, limit: int) -> bytes:
        info = self._info(handle)
        return b"" if info is None else read_log_range(info, stream, offset, limit)

    def observations(self, handle: TaskHandle) -> list[str]:
        return strace_observations(self._info(handle))

    def _info(self, handle: TaskHandle) -> dict[str, Any] | None:
        with self._lock:
            tracked = self._tasks.get(handle.key)
        if tracked is not None:
            return tracked.info
        if "slurm_job_id" in handle.info:
            return handle.info
        return recorded_info(self.data_dir, handle.key)


# ---- scripts --------------------------------------------------------------------------------


# ---- records ----------------------------------------------------------------------------------
