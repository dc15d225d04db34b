"""``%submit``, ``%%submit``, ``%jobs``, ``%queue``, ``%job``, ``%logs``, ``%cancel``, ``%wait``,
``%cluster``, ``%strace``: the scheduler from a notebook, through ``labhive.client`` only.

Every magic turns service errors and bad flags into ``UsageError`` (a message, no traceback).
In a report run (papermill, nbconvert) ``%submit`` waits for the job by default, so the executed
notebook records how it ended.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments

from labhive.kernel_ext import sweep
from labhive.kernel_ext.arguments import expand_vars, join_words, parse, priority, split_command
from labhive.kernel_ext.cellscript import script_command
from labhive.kernel_ext.facts import ClusterFacts, JobFacts, QueueFacts
from labhive.kernel_ext.frontend import interactive
from labhive.kernel_ext.logtail import LogTail
from labhive.kernel_ext.render import jobs_text, summary_line
from labhive.kernel_ext.views import (
    ClusterMapView,
    QueueView,
    TableView,
    job_view,
    wait_for,
)
from labhive.scheduler.client import JobState
from labhive.scheduler.core.gpu_share import gpus_arg

_SWEEP_KEY = re.compile(r"--sweep[=\s]+['\"]?([A-Za-z_][A-Za-z0-9_]*)=")
TAIL_LINES = 20


@contextmanager
def user_errors() -> Iterator[None]:
    """The client's errors carry the service's message; show it as a usage error."""
    from labhive.client import LabHiveError

    try:
        yield
    except LabHiveError as err:
        raise UsageError(err.message) from None


@magics_class
class LabHiveMagics(Magics):
    """The magics share one connection, opened on first use from the environment."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from labhive import client

            with user_errors():
                self._client = client.connect()
        return self._client

    def _expand(self, line: str, keep: frozenset[str] = frozenset()) -> str:
        namespace = self.shell.user_ns if self.shell is not None else {}
        return expand_vars(line, namespace, keep)

    # ---- submitting ------------------------------------------------------------------------

    @magic_arguments()
    @argument(
        "--gpus",
        type=gpus_arg,
        default=1,
        metavar="N",
        help="GPUs per task (default 1), or a share of one GPU: 0.5, 0.25 or 0.125",
    )
    @argument("--tasks", type=int, default=1, metavar="M", help="tasks; more than one is a gang")
    @argument("--vc", metavar="VC", help="virtual cluster (default: the service's default)")
    @argument(
        "--priority", type=priority, metavar="P", help="prod | test | oppo | crit, or a number"
    )
    @argument("--cpu", type=float, metavar="C", help="CPU cores guaranteed per task")
    @argument("--memory-mb", type=int, metavar="M", help="memory guaranteed per task, in MB")
    @argument("--cpu-limit", type=float, metavar="C", help="CPU cores a task may use (--cpu)")
    @argument("--memory-limit", "--memory-limit-mb", dest="memory_limit", type=int, metavar="M",
              help="memory a task may use, in MB (default: --memory-mb)")  # fmt: skip
    @argument("--cwd", metavar="DIR",
              help="directory the tasks run in (default: this notebook's)")  # fmt: skip
    @argument("--retries", type=int, metavar="R", help="retries after a failed attempt")
    @argument("--time", metavar="T", help='time limit per attempt: seconds or "30m", "2h"')
    @argument("--name", metavar="NAME", help="job name (a sweep appends each point to it)")
    @argument("--observe", choices=["strace"], help="run each task under strace")
    @argument("--image", metavar="IMAGE", help="run each task in a container from IMAGE")
    @argument("--incremental", action="store_true", help="place tasks as they fit, not as a gang")
    @argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="submit one job per combination of all --sweep values; "
        "{KEY} in the command (or KEY in a cell body) takes each value",
    )
    @argument("--python", dest="language", action="store_const", const="python",
              help="%%%%submit: run the cell body with this kernel's Python (default)")  # fmt: skip
    @argument("--shell", dest="language", action="store_const", const="shell",
              help="%%%%submit: run the cell body with the shell")  # fmt: skip
    @argument("--wait", dest="wait", action="store_true", default=None,
              help="block until the job ends, then print a summary and the log tail "
              "(the default when no front end is attached, e.g. papermill)")  # fmt: skip
    @argument("--no-wait", dest="wait", action="store_false",
              help="return at once even in a report run")  # fmt: skip
    @argument("--timeout", type=float, metavar="S", help="with --wait: give up after S seconds")
    @argument("command", nargs="*", help="the command, after -- (not with %%%%submit)")
    @no_var_expand
    @line_cell_magic
    def submit(self, line: str, cell: str | None = None) -> Any:
        """Submit a job to the LabHive scheduler and watch it.

        %submit [flags] -- COMMAND runs COMMAND in each task; %%submit [flags] runs the cell
        body (a training script). $var and {var} are expanded from the notebook's variables.
        Example: %submit --gpus 2 --tasks 2 --vc vc1 -- python train.py --lr $lr
        """
        keys = frozenset(_SWEEP_KEY.findall(line))
        flags, command = split_command(self._expand(line, keys))
        args = parse(self.submit, flags)
        command = command or (join_words(args.command) if args.command else "")
        if cell is None and not command:
            raise UsageError("%submit: give the command after --, e.g. %submit -- python train.py")
        if cell is not None and command:
            raise UsageError("%%submit: the cell body is the job; put no command on the line")
        try:
            axes = sweep.parse_axes(args.sweep)
        except ValueError as err:
            raise UsageError(str(err)) from None
        build = self._command_builder(command, cell, args.language or "python")
        base = self._short_form(args)
        with user_errors():
            if not axes:
                job = self.client.submit(**base, command=build({}))
            else:
                table = self._sweep(base, axes, build, args.name)
        if not axes:
            return self._follow(job, args)
        return self._follow_table(table, args)

    def _command_builder(
        self, command: str, cell: str | None, language: str
    ) -> Callable[[sweep.Point], str]:
        if cell is None:
            return lambda point: sweep.fill_command(command, point)
        header = sweep.python_header if language == "python" else sweep.shell_header

        def build(point: sweep.Point) -> str:
            body = header(point) + cell if point else cell
            return script_command(body, language, sys.executable)

        return build

    @staticmethod
    def _short_form(args: Any) -> dict[str, Any]:
        form = {
            "name": args.name,
            "gpus": args.gpus,
            "tasks": args.tasks,
            "vc": args.vc,
            "priority": args.priority,
            "cpu": args.cpu,
            "memory_mb": args.memory_mb,
            "cpu_limit": args.cpu_limit,
            "memory_limit_mb": args.memory_limit,
            # a kernel starts in its notebook's directory: `python train.py` finds train.py
            "cwd": os.path.abspath(args.cwd or os.getcwd()),
            "retries": args.retries,
            "time_limit": args.time,
            "observe": args.observe,
            "image": args.image,
            "gang": False if args.incremental else None,
        }
        return {k: v for k, v in form.items() if v is not None}

    def _sweep(
        self,
        base: dict[str, Any],
        axes: dict[str, list[str]],
        build: Callable[[sweep.Point], str],
        name: str | None,
    ) -> Any:
        from labhive.client import sweep as submit_sweep

        form = {k: v for k, v in base.items() if k != "name"}
        return submit_sweep(build, axes, client=self.client, name=name or "sweep", **form)

    def _wants_wait(self, args: Any) -> bool:
        return args.wait if args.wait is not None else not interactive(self.shell)

    def _follow(self, job: Any, args: Any) -> Any:
        view = job_view(job).show()
        if self._wants_wait(args):
            # a live widget in this cell already shows the progress, the end and the log tail
            facts = wait_for(view, args.timeout, out=_silent if view.live else None)
            if not view.live:
                self._report([facts], [job])
                view.drop_log()  # printed right below it: not twice in an HTML report
        return job

    def _follow_table(self, table: Any, args: Any) -> Any:
        """The sweep's table, shown once: waiting updates that display (no second table)."""
        from labhive.kernel_ext.display import show_table

        view = show_table(table)
        if self._wants_wait(args):
            deadline = None if args.timeout is None else time.monotonic() + args.timeout
            for job in table.jobs:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                wait_for(job_view(job, live=False), left, out=_silent)
                view.jobs = [JobFacts.from_job(j.info) for j in table.jobs]
                view.publish()
        return table

    def _report(self, facts: list[JobFacts], jobs: list[Any], logs: bool = True) -> None:
        """After a wait: the final summary, then each job's log tail (unless ``logs`` is off:
        a live widget shows it)."""
        now = time.time()
        print(jobs_text(facts, now) if len(facts) > 1 else summary_line(facts[0], now))
        for job in jobs if logs else ():
            tail = LogTail(job, TAIL_LINES)
            tail.read_new()
            if tail.text():
                print(f"--- last lines of {job.info.name} ---\n{tail.text()}")
            if job.info.state == JobState.FAILED:  # why it failed is on stderr, not stdout
                errors = LogTail(job, TAIL_LINES, stream="stderr")
                errors.read_new()
                text = errors.text()
                if text:
                    count = len(text.split("\n"))
                    print(f"--- stderr (last {count} lines) of {job.info.name} ---\n{text}")

    # ---- watching and managing ---------------------------------------------------------------

    @magic_arguments()
    @argument("--all", action="store_true", help="include jobs that have ended")
    @line_magic
    def jobs(self, line: str) -> None:
        """Your jobs, as a table that follows them until they end."""
        args = parse(self.jobs, self._expand(line))
        with user_errors():
            self.client.jobs()  # fail here, not in the display

            def fetch() -> list[JobFacts]:
                rows = [JobFacts.from_job(j.info) for j in self.client.jobs()]
                return rows if args.all else [j for j in rows if not j.terminal] or rows

            TableView(fetch).show()

    @magic_arguments()
    @argument("vc", nargs="?", help="only this virtual cluster")
    @line_magic
    def queue(self, line: str) -> None:
        """The queue per virtual cluster: quota, use and the waiting jobs in order."""
        args = parse(self.queue, self._expand(line))

        def fetch() -> QueueFacts:
            facts = QueueFacts.from_api(self.client.queue())
            if args.vc is None:
                return facts
            known = [v.name for v in facts.vcs]
            if args.vc not in known:
                raise UsageError(f"%queue: no VC {args.vc!r}; known: {', '.join(known)}")
            return facts.only(args.vc)

        with user_errors():
            QueueView(fetch).show()

    @magic_arguments()
    @argument("id", help="job id or name")
    @line_magic
    def job(self, line: str) -> Any:
        """One job, live: state, position and why, placement, log tail, cancel button."""
        args = parse(self.job, self._expand(line))
        with user_errors():
            job = self.client.job(args.id)
            job_view(job).show()
        return job

    @magic_arguments()
    @argument("id", help="job id or name")
    @argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    @argument("--tail", type=int, metavar="N", help="only the last N lines of each task")
    @line_magic
    def logs(self, line: str) -> None:
        """Every task's output, each line prefixed with its task (role/index)."""
        args = parse(self.logs, self._expand(line))
        with user_errors():
            tail = LogTail(self.client.job(args.id), args.tail)
            if not args.follow:
                tail.read_new()
                print(tail.text())
                return
            for block in tail.follow():
                print(block, flush=True)

    @magic_arguments()
    @argument("ids", nargs="+", help="job ids or names")
    @line_magic
    def cancel(self, line: str) -> None:
        """Cancel jobs (waiting or running); their tasks are stopped."""
        args = parse(self.cancel, self._expand(line))
        with user_errors():
            for ident in args.ids:
                job = self.client.job(ident).cancel()
                print(summary_line(JobFacts.from_job(job.info), time.time()))

    @magic_arguments()
    @argument("ids", nargs="+", help="job ids or names")
    @argument("--timeout", type=float, metavar="S", help="give up after S seconds")
    @line_magic
    def wait(self, line: str) -> None:
        """Block until the jobs end; their displays show the final state."""
        args = parse(self.wait, self._expand(line))
        with user_errors():
            jobs = [self.client.job(i) for i in args.ids]
            views = [job_view(j) for j in jobs]
            live = any(v.live for v in views)
            facts = [wait_for(v, args.timeout, out=_silent if live else None) for v in views]
        # the jobs' live widgets (in the cells that submitted them) show their logs already
        self._report(facts, jobs, logs=not live)

    @magic_arguments()
    @line_magic
    def cluster(self, line: str) -> None:
        """The cluster as a picture: nodes x GPUs, coloured by the VC of the job on each."""
        parse(self.cluster, self._expand(line))

        def fetch() -> ClusterFacts:
            jobs = [JobFacts.from_job(j.info) for j in self.client.jobs()]
            return ClusterFacts.from_api(self.client.cluster(), jobs)

        with user_errors():
            ClusterMapView(fetch).show()

    @magic_arguments()
    @argument("source", help="a job id (its strace logs, from --observe strace) or a log's path")
    @argument("--task", metavar="ROLE-I", help="only this task's log, e.g. worker-0")
    @argument("--top", type=int, default=15, metavar="N", help="rows and graph edges (default 15)")
    @line_magic
    def strace(self, line: str) -> list[Any]:
        """An strace log as tabs: syscall counts, ioctls by device, timeline, transition graph.

        A job id shows each of the job's logs (submit it with --observe strace); anything else
        is read as the path of a log on this machine (plain or .gz).
        """
        from labhive.kernel_ext.strace_view import job_logs, show_logs
        from labhive.scheduler.core.errors import UserError

        args = parse(self.strace, self._expand(line))
        try:
            if not args.source.isdigit():
                return Shown(show_logs([(args.source, args.source)], args.top))
            with user_errors():
                logs = job_logs(self.client.job(args.source), args.task)
            return Shown(show_logs(logs, args.top))
        except UserError as err:
            raise UsageError(f"%strace: {err}") from None


class Shown(list[Any]):
    """Views a magic displayed already and returns for use in code: as a cell's result they
    add nothing (no ``[<StraceView at 0x...>]`` under the pictures)."""

    def _ipython_display_(self) -> None:
        return None


def _silent(_line: str) -> None:
    """Progress lines nobody needs: a live widget shows the same."""
