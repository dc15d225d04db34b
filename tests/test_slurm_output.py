"""Given a real Slurm (tests/slurm_cluster.py) and a task that prints without end, expect its
stdout and stderr files (written by slurmstepd on the node, read by the service) to keep the
first CAP bytes of each and one line saying the rest was dropped, the relay's own words, and
the task's own exit status; with no cap, everything."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster
from test_slurm_executor import gang, settle
from waiting import wait_until

from labhive.scheduler.executors.output import cap_notice
from labhive.scheduler.executors.slurm import SlurmExecutor
from labhive.scheduler.executors.slurm_cli import Slurm

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
pytest_plugins = ["slurm_cluster"]
MIB = 1024 * 1024
#: 5 MiB on stdout (no newline at the cut), 3 MiB on stderr, then the task's own exit status.
FLOOD = "head -c 5242880 /dev/zero | tr '\\0' x; head -c 3145728 /dev/zero | tr '\\0' e >&2; exit 3"


def executor(slurm: SlurmCluster, data_dir: Path, cap: int | None) -> SlurmExecutor:
    return SlurmExecutor(
        data_dir, grace_s=2.0, slurm=Slurm(conf=str(slurm.conf)),
        node_names=slurm.nodes, poll_s=0.2, node_poll_s=0, output_cap=cap,
    )  # fmt: skip


def test_a_slurm_tasks_output_past_its_cap_is_dropped_with_one_line_saying_so(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    ex = executor(slurm, data_dir, MIB)
    (handle,) = ex.launch(gang("301", {"chatty": FLOOD}, {"chatty": "n1"}, gpus=0))
    ended = settle(ex, 1)
    assert ended["chatty"].exit_code == 3  # the command's, through the pipeline
    out = Path(handle.info["stdout"]).read_bytes()
    err = Path(handle.info["stderr"]).read_bytes()
    assert out == b"x" * MIB + b"\n" + cap_notice("stdout", MIB, False)
    assert err == b"e" * MIB + b"\n" + cap_notice("stderr", MIB, False)
    assert ex.read_log(handle, "stdout", MIB - 2, 10) == b"xx\nlabhive"


def test_output_under_the_cap_or_with_no_cap_is_kept_whole(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    small = executor(slurm, data_dir, MIB)
    (a,) = small.launch(gang("302", {"quiet": "echo hi; echo oops >&2"}, {"quiet": "n1"}, gpus=0))
    assert settle(small, 1)["quiet"].exit_code == 0
    assert Path(a.info["stdout"]).read_text() == "hi\n"
    assert Path(a.info["stderr"]).read_text() == "oops\n"
    uncapped = executor(slurm, data_dir, None)
    (b,) = uncapped.launch(gang("303", {"chatty": FLOOD}, {"chatty": "n2"}, gpus=0))
    assert settle(uncapped, 1)["chatty"].exit_code == 3
    assert Path(b.info["stdout"]).stat().st_size == 5 * MIB


def test_a_stop_gives_a_capped_task_its_term_and_grace_and_its_last_words(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    """TERM reaches every process of the step: the command must get its grace period to end
    well (and print), not lose its output with cappers that died of the same TERM."""
    ex = executor(slurm, data_dir, MIB)
    trap = "trap 'echo got TERM; exit 0' TERM; echo up; while true; do sleep 0.1; done"
    (handle,) = ex.launch(gang("304", {"graceful": trap}, {"graceful": "n1"}, gpus=0))
    stdout = Path(handle.info["stdout"])
    wait_until(lambda: stdout.exists() and stdout.read_text() == "up\n", timeout=60)
    ex.stop([handle], grace_s=30)
    assert stdout.read_text() == "up\ngot TERM\n"
