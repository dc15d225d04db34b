"""The kernel extension's parts that need no service: flags, expansion, sweeps, cell scripts,
snapshots and the poller. The magics themselves run in a real IPython shell here."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from IPython.core.error import UsageError
from IPython.testing import globalipapp

from labhive.kernel_ext import sweep
from labhive.kernel_ext.arguments import expand_vars, priority, split_command
from labhive.kernel_ext.cellscript import script_command
from labhive.kernel_ext.facts import ClusterFacts, JobFacts, QueueFacts
from labhive.kernel_ext.picture import cluster_svg, cluster_text
from labhive.kernel_ext.poller import Poller
from labhive.kernel_ext.render import jobs_text, queue_text, summary_line

T0 = 1_700_000_000.0


def job(**fields) -> JobFacts:
    data = {"id": "j1", "name": "a", "state": "WAITING", "vc": "vc1", "submitted_at": T0}
    data.update(fields)
    return JobFacts.from_api(data)


# ---- flags and expansion ------------------------------------------------------------------


def test_command_after_double_dash_keeps_its_quoting() -> None:
    flags, command = split_command("--gpus 2 -- python -c \"print('a -- b')\" --lr 3")
    assert flags == "--gpus 2"
    assert command == "python -c \"print('a -- b')\" --lr 3"
    assert split_command("--gpus 2") == ("--gpus 2", "")
    assert split_command("-- echo hi") == ("", "echo hi")


def test_expansion_takes_notebook_variables_and_leaves_the_rest() -> None:
    ns = {"lr": 0.1, "n": 4, "cfg": type("C", (), {"bs": 32})()}
    line = "--gpus $n -- train --lr {lr} --bs $cfg.bs --x {n*2} --home $HOME --keep {lr2} $$ {{}}"
    assert expand_vars(line, ns) == (
        "--gpus 4 -- train --lr 0.1 --bs 32 --x 8 --home $HOME --keep {lr2} $ {}"
    )


def test_sweep_keys_are_not_expanded_even_when_a_variable_has_the_name() -> None:
    assert expand_vars("--lr {lr} $lr {n}", {"lr": 9, "n": 1}, frozenset({"lr"})) == (
        "--lr {lr} $lr 1"
    )


def test_priority_accepts_classes_and_openpai_numbers_only() -> None:
    assert priority("prod") == "prod"
    assert priority("-1") == -1
    assert priority("500") == 500
    for bad in ("1001", "-2", "urgent"):
        with pytest.raises(ValueError, match="prod"):
            priority(bad)


# ---- sweeps -------------------------------------------------------------------------------


def test_sweep_is_the_product_in_flag_order() -> None:
    axes = sweep.parse_axes(["lr=0.1,0.01", "bs=32,64"])
    pts = sweep.sweep_points(axes)
    assert pts == [
        {"lr": "0.1", "bs": "32"},
        {"lr": "0.1", "bs": "64"},
        {"lr": "0.01", "bs": "32"},
        {"lr": "0.01", "bs": "64"},
    ]
    assert sweep.sweep_name("train", pts[1]) == "train-lr0.1-bs64"
    assert sweep.fill_command("python t.py --lr {lr} --bs {bs}", pts[0]) == (
        "python t.py --lr 0.1 --bs 32"
    )


@pytest.mark.parametrize("spec", ["lr", "=1,2", "1x=2", "lr=", "lr=,"])
def test_bad_sweep_specs_say_how_to_write_one(spec: str) -> None:
    with pytest.raises(ValueError, match="--sweep"):
        sweep.parse_axes([spec])


def test_sweep_values_become_python_literals_or_strings() -> None:
    assert sweep.python_header({"lr": "0.1", "opt": "adam"}) == "lr = 0.1\nopt = 'adam'\n"
    assert sweep.shell_header({"opt": "a b"}) == "opt='a b'\n"


# ---- cell bodies as commands, run by a real shell -----------------------------------------


def run_shell(command: str) -> str:
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    return out.stdout


def test_python_cell_body_runs_with_the_given_interpreter() -> None:
    body = sweep.python_header({"lr": "0.5"}) + (
        "import sys\nprint('lr', lr * 2)\nprint(\"quotes ' and $HOME and `x`\")\n"
        "print('LABHIVE_EOF')\n"
    )
    out = run_shell(script_command(body, "python", sys.executable))
    assert out == "lr 1.0\nquotes ' and $HOME and `x`\nLABHIVE_EOF\n"


def test_shell_cell_body_runs_as_written() -> None:
    body = sweep.shell_header({"bs": "64"}) + 'echo "bs=$bs"\necho done\n'
    assert run_shell(script_command(body, "shell", sys.executable)) == "bs=64\ndone\n"


# ---- snapshots ----------------------------------------------------------------------------


def test_summary_lines_say_where_a_job_stands() -> None:
    waiting = job(queue_position=2, queue_length=3, why="vc1 has 0 free of the 2 cells")
    assert summary_line(waiting, T0 + 3) == (
        "job a: WAITING (position 2 of 3 in vc1) for 3.0 s - vc1 has 0 free of the 2 cells"
    )
    tasks = [
        {"role": "worker", "index": 0, "node": "node-1", "gpus": [0, 1]},
        {"role": "worker", "index": 1, "node": "node-2", "gpus": [0]},
    ]
    done = job(state="SUCCEEDED", started_at=T0 + 1, finished_at=T0 + 13.3, tasks=tasks)
    assert summary_line(done, T0 + 99) == (
        "job a: SUCCEEDED after 12.3 s on node-1 GPUs 0,1; node-2 GPU 0"
    )
    running = job(state="RUNNING", started_at=T0, tasks=tasks[:1])
    assert summary_line(running, T0 + 125) == "job a: RUNNING for 2 min 05 s on node-1 GPUs 0,1"


def test_iso_timestamps_are_read_as_utc() -> None:
    facts = job(submitted_at="2026-11-22T12:00:00", finished_at="2026-11-22T12:00:05Z")
    assert facts.elapsed(0) == 5.0


def test_jobs_table_lists_each_job() -> None:
    rows = [job(), job(id="j2", name="b", state="RUNNING", user="ann", started_at=T0)]
    text = jobs_text(rows, T0 + 1).splitlines()
    assert text[0].split()[:5] == ["id", "name", "user", "vc", "state"]
    assert text[2].split()[:5] == ["j2", "b", "ann", "vc1", "RUNNING"]


def test_queue_text_groups_waiting_jobs_by_vc() -> None:
    vcs = {
        "vc1": {"guaranteed_gpus": 4, "used_gpus": 4, "opportunistic_gpus": 0, "waiting": 2},
        "default": {"guaranteed_gpus": 4, "used_gpus": 0, "opportunistic_gpus": 2, "waiting": 0},
    }
    waiting = [
        {"id": 3, "name": "c", "state": "WAITING", "vc": "vc1", "position": 1, "gpus": 2},
        {"id": None, "state": "WAITING", "vc": "vc1", "position": 2, "gpus": 4},
    ]
    text = queue_text(QueueFacts.from_api({"vcs": vcs, "waiting": waiting}), T0)
    assert text.splitlines() == [
        "vc1: 4/4 guaranteed GPUs used, 0 opportunistic, 2 waiting",
        "  1. job c: WAITING (position 1 in vc1)",
        "  2. another user's job, 4 GPUs",
        "default: 0/4 guaranteed GPUs used, 2 opportunistic, 0 waiting",
    ]


def test_cluster_map_colours_gpus_by_the_vc_of_their_job() -> None:
    data = {
        "virtual": True,
        "vcs": {"vc1": {"guaranteed_gpus": 4}, "default": {"guaranteed_gpus": 4}},
        "nodes": [
            {"name": "node-1", "gpus": [0, 1, 2, 3], "used": {"0": "j1", "1": "j1"}},
            {
                "name": "node-2",
                "gpus": [0, 1, 2, 3],
                "used": {"3": "j2"},
                "healthy": False,
                "reason": "taken down by admin: fan",
            },
            {"name": "node-3", "gpus": [0, 1], "used": {"1": "j9"}},
        ],
    }
    jobs = [job(id="j1", vc="vc1"), job(id="j2", vc="default")]
    cluster = ClusterFacts.from_api(data, jobs)
    assert cluster_text(cluster).splitlines() == [
        "virtual cluster (GPU slots, no devices)",
        "node-1           BB..",
        "node-2           xxxx  down: taken down by admin: fan",
        "node-3           .#",
        "A=job in default  B=job in vc1  .=free  #=another user's job (hidden from you)",
    ]
    svg = cluster_svg(cluster)
    assert svg.count("<rect") == 10 + 4  # 10 GPUs; legend: 2 VCs, "free", "another user's"
    assert ">job in vc1</text>" in svg and ">another user&#x27;s job (hidden from you)<" in svg
    assert "virtual cluster" in svg and "node-1 GPU 1: job j1 (vc1)" in svg


# ---- the poller ---------------------------------------------------------------------------


def test_poller_stops_when_done_and_caps_its_rate() -> None:
    seen: list[int] = []
    counter = iter(range(100))
    poller = Poller(lambda: next(counter), seen.append, lambda n: n >= 3, interval=0.01)
    assert poller.interval == 0.25
    started = time.monotonic()
    poller.start().join(5)
    assert seen == [0, 1, 2, 3]
    assert time.monotonic() - started >= 0.7  # three waits of 0.25 s between four polls


def test_poller_survives_errors_and_stops_on_request() -> None:
    errors: list[Exception] = []
    calls = threading.Event()

    def fetch() -> int:
        calls.set()
        raise RuntimeError("service down")

    poller = Poller(fetch, lambda _: None, on_error=errors.append).start()
    assert calls.wait(30)
    poller.stop()
    poller.join(6)
    assert not poller.running and str(errors[0]) == "service down"


# ---- the magics in a real IPython shell (no service needed for these) ---------------------


@pytest.fixture(scope="module")
def shell():
    globalipapp.start_ipython()  # once per process: the second caller of it gets None
    ip = globalipapp.get_ipython()
    ip.run_line_magic("load_ext", "labhive.kernel_ext")
    return ip


def test_help_is_generated_from_the_flags(shell) -> None:
    doc = shell.find_line_magic("submit").__doc__
    assert "%submit [--gpus N] [--tasks M] [--vc VC]" in doc
    assert "--sweep <KEY=V1,V2>" in doc and "--no-wait" in doc


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--gpus two -- echo", "%submit: argument --gpus: not a number of GPUs (got 'two')"),
        ("--priority urgent -- echo", "%submit: argument --priority: invalid priority value"),
        ("--gpus 2", "%submit: give the command after --"),
        ("--sweep lr -- echo {lr}", "--sweep 'lr': write NAME=V1,V2"),
    ],
)
def test_usage_errors_carry_the_usage_line(shell, line: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("submit", line)
    assert str(err.value).startswith(message)
    if "argument" in message:
        assert "usage: %submit [--gpus N]" in str(err.value)


def test_job_card_escapes_names_and_shows_gpu_readings() -> None:
    from labhive.kernel_ext.render import job_html
    from labhive.kernel_ext.snapshot import gpu_html

    card = job_html(job(name="<b>x</b>", queue_position=1, why="vc1 has 0 free"), T0 + 1)
    assert "&lt;b&gt;x&lt;/b&gt;" in card and "<b>x</b>" not in card
    assert 'data-state="WAITING"' in card and "vc1 has 0 free" in card
    bars = gpu_html(
        [{"node": "n1", "gpu": 0, "gpu_util": 87, "fb_used_mib": 512, "fb_total_mib": 81559}]
    )
    assert "n1 GPU 0: 87% util, 512/81559 MiB" in bars and "width:174px" in bars
