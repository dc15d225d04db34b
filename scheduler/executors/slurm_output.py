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

#: The two FIFOs between the command and its cappers, and the marks each capper leaves at its
#: end, in the task's directory (its working directory).
FIFOS = {"stdout": ".labhive-stdout", "stderr": ".labhive-stderr"}
#: Seconds a capper may go on reading after the command ended (a process the command left in
#: the background still holds its output): then the script ends, and Slurm ends the step.
DRAIN_S = 5

_CAP_FUNCTION = """labhive_cap() {
    trap '' TERM
    if command -v stdbuf >/dev/null; then stdbuf -o0 head -c "$1"; else head -c "$1"; fi
    dropped=$(wc -c)
    if [ "$dropped" -gt 0 ]; then printf '\\n%s' "$2"; fi
    : > "$3"
}"""


def capped_exec(command: list[str], cap: int | None) -> list[str]:
    """The run script's last lines: ``exec`` the command, or with a ``cap`` run it with each
    of its streams capped (see the module docstring) and exit with its status."""
    if cap is None:
        return ["exec " + shlex.join(command)]
    out, err = FIFOS["stdout"], FIFOS["stderr"]
    notice = {s: shlex.quote(cap_notice(s, cap, False).decode()) for s in FIFOS}
    return [
        _CAP_FUNCTION,
        # TERM (scancel) reaches every process of the step: the command gets it and its grace
        # period, this script waits on (a caught signal is the default again in the command)
        "trap : TERM",
        f"rm -f {out} {err} {out}.done {err}.done && mkfifo -m 600 {out} {err} || exit 111",
        f"labhive_cap {cap} {notice['stdout']} {out}.done < {out} &",
        f"labhive_cap {cap} {notice['stderr']} {err}.done < {err} >&2 &",
        f"{shlex.join(command)} > {out} 2> {err}",
        "status=$?",
        f"n=0; until [ -e {out}.done ] && [ -e {err}.done ] || [ $n -ge {DRAIN_S * 10} ]; do",
        "    sleep 0.1; n=$((n + 1))",
        "done",
        f"rm -f {out} {err} {out}.done {err}.done",
        'exit "$status"',
    ]
