"""The output cap of a Slurm task: its stdout and stderr capped inside its own job step.

On Slurm the task's ``stdout`` and ``stderr`` files are written by ``slurmstepd`` on the node
(``srun --output/--error``), not by a supervisor of the service's, so the local executor's relay
(``output.py``) cannot hold them: a task printing without end filled the shared file system the
service reads them from (and keeps its own store on, where they share it). So ``run.sh`` does
what the relay does, in POSIX shell (Slurm nodes need no Python of LabHive's): the command's
stdout and stderr go through pipes into ``head -c CAP``, which reads no more than that from the
pipe (GNU and busybox ``head`` alike), then ``wc -c`` drains the rest, so the task never blocks on
a full pipe, and where it dropped anything one line says so, the relay's own words. The
command's exit status is kept through the pipeline in a file of the task's directory.

What it does not hold: the task runs as its user, who owns the task directory and the files in
it (Slurm opens them as that user), so a task can still write into ``stdout`` by its path, or
any other file of its directory, as much as the file system lets it: on Slurm the disk is the
site's quotas' to hold. ``output_cap_kills`` has no Slurm counterpart (the task goes on).
"""

from __future__ import annotations

import shlex

from labhive.scheduler.executors.output import cap_notice

#: The command's exit status, written by the pipeline's first member for the script to exit with.
STATUS_FILE = "command.status"

_CAP_FUNCTION = """labhive_cap() {
    if command -v stdbuf >/dev/null; then stdbuf -o0 head -c "$1"; else head -c "$1"; fi
    dropped=$(wc -c)
    if [ "$dropped" -gt 0 ]; then printf '\\n%s' "$2"; fi
}"""


def capped_exec(command: list[str], cap: int | None) -> list[str]:
    """The run script's last lines: ``exec`` the command, or with a ``cap`` run it with each
    of its streams capped (see the module docstring) and exit with its status."""
    if cap is None:
        return ["exec " + shlex.join(command)]
    notice = {s: shlex.quote(cap_notice(s, cap, False).decode()) for s in ("stdout", "stderr")}
    status = shlex.quote(STATUS_FILE)
    run = f"{shlex.join(command)}; echo $? > {status}"
    return [
        _CAP_FUNCTION,
        f"rm -f {status}",
        # fd 3: the stdout capper's pipe; the command's stderr goes through its own capper
        f"{{ {{ {run}; }} 2>&1 1>&3 3>&- | labhive_cap {cap} {notice['stderr']} 1>&2 3>&-; }}"
        f" 3>&1 | labhive_cap {cap} {notice['stdout']}",
        f'read -r status < {status} 2>/dev/null || status=1; exit "$status"',
    ]
