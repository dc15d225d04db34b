"""Given the real service (local processes, the 2x4 cluster: default and vc1 own a node each)
and a crowded afternoon - alice queues five 4-GPU jobs on vc1's one node, bob runs two small
ones on default, carol gives up on one while it waits - expect ``labhive whatif`` to replay
those submissions with their real run times and show that one more node for vc1 shortens its
p95 wait (and changes nothing for default's), a bad ``--vc-quota`` to say what the syntax is,
and ``labhive journal export`` to write a trace ``labhive simulate`` reads back, with names
hashed when asked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from waiting import job_in, wait_until

from labhive.scheduler.cli import main
from labhive.scheduler.sim.traces import load_trace

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"
CLUSTER = Path(__file__).with_name("data") / "cluster-2x4.yaml"
CROWD = 5  # alice's 4-GPU jobs on vc1's one node: they run one after another


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data dir of a service that lived through the crowded afternoon (SQLite)."""
    from service_fixtures import live_service

    data_dir = tmp_path_factory.mktemp("whatif") / "data"
    with live_service(data_dir, cluster=str(CLUSTER)) as live:
        alice, bob = live.client(ALICE), live.client(BOB)
        queue = [
            alice.submit(command="sleep 1.5", vc="vc1", gpus=4, name=f"train{i}")
            for i in range(CROWD)
        ]
        small = [
            bob.submit(command="sleep 1", vc="default", gpus=2, name=f"eval{i}") for i in range(2)
        ]
        # A job given up while it waits: cancelled at the same time in every replay.
        gave_up = alice.submit(command="sleep 5", vc="vc1", gpus=4, name="gave-up")
        alice.cancel(gave_up.id)
        for job in [*queue, *small]:
            wait_until(job_in(job, "SUCCEEDED"), "the queue", 90)
    return data_dir


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_one_more_node_for_the_crowded_vc_shortens_its_p95_wait(
    crowded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["whatif", "--data-dir", str(crowded), "--live-cluster", str(CLUSTER)]
    code, out, err = run_cli(capsys, *base, "--vc-quota", "vc1=+1nodes", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["baseline"]["policy"] == "hived"  # what the journal says the service ran
    assert report["jobs"] == CROWD + 2 + 1
    assert (report["baseline"]["gpus"], report["whatif"]["gpus"]) == (8, 12)
    vc1 = report["per_vc"]["vc1"]
    assert vc1["baseline"]["quota_gpus"] == 4 and vc1["whatif"]["quota_gpus"] == 8
    # Five 1.5-s jobs one after another: the last waits about 6 s; two at a time, about 3 s.
    assert vc1["baseline"]["wait_p95_s"] > 4.0, vc1
    assert vc1["whatif"]["wait_p95_s"] < 0.75 * vc1["baseline"]["wait_p95_s"], vc1
    assert vc1["whatif"]["refused"] == vc1["baseline"]["refused"] == 0
    default = report["per_vc"]["default"]
    assert default["whatif"]["wait_p95_s"] == default["baseline"]["wait_p95_s"]
    moved = report["changed_most"]
    assert moved and all(r["vc"] == "vc1" and r["change_s"] < 0 for r in moved), moved
    # (gave-up too, when its cancel came late enough for the bigger vc1 to start it first)
    assert {r["name"] for r in moved} <= {f"train{i}" for i in range(CROWD)} | {"gave-up"}

    # The same as text, with the figure.
    html = tmp_path / "whatif.html"
    code, out, err = run_cli(capsys, *base, "--vc-quota", "vc1=+1nodes", "--html", str(html))
    assert code == 0, err
    assert "vc1" in out and "jobs whose wait changed most:" in out, out
    assert "with vc1=+1nodes (12 GPUs)" in out, out
    assert "plotly" in html.read_text()


def test_a_what_if_that_takes_vc1s_node_away_refuses_its_jobs(
    crowded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """vc1 without its node: its guaranteed 4-GPU jobs no longer fit its quota, refused."""
    code, out, err = run_cli(
        capsys, "whatif", "--data-dir", str(crowded), "--live-cluster", str(CLUSTER),
        "--vc-quota", "vc1=-1nodes", "--json",
    )  # fmt: skip
    assert code == 0, err
    vc1 = json.loads(out)["per_vc"]["vc1"]
    assert vc1["baseline"]["refused"] == 0
    assert vc1["whatif"]["refused"] == CROWD + 1, vc1


@pytest.mark.parametrize(
    ("quota", "says"),
    [
        ("vc1=2", "the syntax is VC=+Nnodes or VC=-Nnodes"),
        ("vc1+2nodes", "the syntax is VC=+Nnodes or VC=-Nnodes"),
        ("vc1=+0nodes", "the syntax is VC=+Nnodes or VC=-Nnodes"),
        ("nosuch=+1nodes", "no VC 'nosuch' in the cluster (it has default, vc1)"),
        ("vc1=-2nodes", "VC 'vc1' holds only 1 nodes"),
    ],
)
def test_a_bad_vc_quota_says_what_the_syntax_is(
    crowded: Path, capsys: pytest.CaptureFixture[str], quota: str, says: str
) -> None:
    code, out, err = run_cli(
        capsys, "whatif", "--data-dir", str(crowded), "--live-cluster", str(CLUSTER),
        "--vc-quota", quota,
    )  # fmt: skip
    assert code == 2 and out == ""
    assert says in err, err


def test_whatif_needs_a_change_and_an_editable_config(
    crowded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "whatif", "--data-dir", str(crowded))
    assert code == 2 and "give --cluster, --policy or --vc-quota" in err
    quota = ["--vc-quota", "vc1=+1nodes"]
    code, _, err = run_cli(capsys, "whatif", "--data-dir", str(crowded), *quota)
    assert code == 2 and "give the service's --live-cluster" in err, err


def test_the_export_round_trips_through_labhive_simulate(
    crowded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulator's own format: every job that ran, with its VC, user, GPUs and real run
    time; the one given up while waiting is left out and said so."""
    trace = tmp_path / "trace.csv"
    code, _, err = run_cli(
        capsys, "journal", "export", "--data-dir", str(crowded), "-o", str(trace)
    )
    assert code == 0, err
    assert f"exported {CROWD + 2} jobs (labhive)" in err
    assert "1 never ran (cancelled while waiting)" in err
    read = load_trace(trace, strict=True)
    assert read.format == "generic-csv" and len(read.jobs) == CROWD + 2
    by_vc = {(j.vc, j.user, j.gpus) for j in read.jobs}
    assert by_vc == {("vc1", "alice", 4), ("default", "bob", 2)}
    assert all(1.0 <= j.duration < 10 and j.status == "Pass" for j in read.jobs), read.jobs
    assert read.jobs[0].submit == 0.0

    code, out, err = run_cli(
        capsys, "simulate", "--trace", str(trace), "--cluster", str(CLUSTER),
        "--policy", "hived", "--policy", "fifo", "--json", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    policies = json.loads(out)["policies"]
    for name in ("hived", "fifo"):
        summary = policies[name]
        assert summary["overall"]["finished"] == CROWD + 2, (name, summary["overall"])
        assert {vc: s["jobs"] for vc, s in summary["per_vc"].items()} == {
            "vc1": CROWD,
            "default": 2,
        }

    # The durations are the journal's run times (what whatif replays), to the millisecond.
    from labhive.scheduler.service.journal import recorded, table
    from labhive.scheduler.service.store import Store, database_url

    store = Store(database_url(None, crowded))
    with store.read() as conn:
        jobs = recorded.recorded_jobs(table.read(conn)).jobs
    store.dispose()
    ran = {str(j.job_id): round(j.run_seconds, 3) for j in jobs if j.ran}
    assert {j.job_id: j.duration for j in read.jobs} == ran


def test_the_philly_export_hashes_names_stably_within_one_export(
    crowded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--hash-names``: no user or VC name in the file; one name, one hash, within an export;
    another export, another salt. The Philly loader reads it back with each run's GPUs."""
    paths = [tmp_path / f"philly{i}.json" for i in range(2)]
    for path in paths:
        code, _, err = run_cli(
            capsys, "journal", "export", "--data-dir", str(crowded), "--format", "philly",
            "--hash-names", "-o", str(path),
        )  # fmt: skip
        assert code == 0, err
    text = paths[0].read_text()
    for name in ("alice", "bob", "vc1", "default", "train0", "sleep"):
        assert name not in text, name
    first, second = (load_trace(p, strict=True) for p in paths)
    assert first.format == "philly-json" and len(first.jobs) == CROWD + 2
    users = {j.user for j in first.jobs}
    assert len(users) == 2 and all(u.startswith("user-") for u in users)
    assert {j.gpus for j in first.jobs} == {4, 2}
    assert {j.user for j in second.jobs}.isdisjoint(users), "the salt was not drawn afresh"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_cannot_export_or_replay_the_journal(crowded: Path, tmp_path: Path) -> None:
    """The attack: a user who is not the service's account runs ``labhive journal export``
    (or ``whatif``) on the service's data dir to read everyone's submissions. The store is the
    service's own (data dir 0700), so it is refused by the file system, with no trace written."""
    import subprocess
    import sys

    out = tmp_path / "stolen.csv"
    tmp_path.chmod(0o777)
    for command in (
        ["journal", "export", "-o", str(out)],
        ["whatif", "--live-cluster", str(CLUSTER), "--vc-quota", "vc1=+1nodes"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "labhive.scheduler.cli", *command, "--data-dir", str(crowded)],
            user="nobody",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stdout
        assert "cannot read the job store" in done.stderr and "is for admins" in done.stderr, (
            done.stderr
        )
        assert "alice" not in done.stdout and "train" not in done.stdout
        assert not out.exists()


def test_the_papermill_report_template_runs_the_what_if_and_plots_it(
    crowded: Path, tmp_path: Path
) -> None:
    """``notebooks/whatif_report.ipynb`` with its parameters set for this recording."""
    from labs_support import NOTEBOOKS, execute, text_of

    nb, _ = execute(
        NOTEBOOKS / "whatif_report.ipynb",
        tmp_path / "whatif_report.ipynb",
        {"data_dir": str(crowded), "live_cluster": str(CLUSTER), "vc_quota": "vc1=+1nodes"},
    )
    text = text_of(nb)
    assert "REPORT DONE: 2 VCs, 8 jobs; shorter p95 wait in: vc1" in text, text[-2000:]
    figures = [o for c in nb["cells"] for o in c.get("outputs", []) if "data" in o]
    assert any("application/vnd.plotly.v1+json" in o["data"] for o in figures)


def test_run_times_are_read_off_preemptions_restarts_and_cancels() -> None:
    """Given a journal where job 1 runs 0-10 s, is preempted, runs again from 15 s across a
    service restart (adopted at 21 s) and finishes at 30 s; job 2 is cancelled while it waits;
    job 3 runs from 2 s to the end; job 4 starts at 12 s and the restart finds it waiting
    (submitted again at 21 s): expect run times 25 s, none, 28 s (censored at the end), 9 s."""
    from labhive.scheduler.core.jobs import JobSpec, RoleSpec
    from labhive.scheduler.core.model import (
        Adopt,
        Cancel,
        Finish,
        Preempt,
        Start,
        Submit,
        TaskPlacement,
        Tick,
    )
    from labhive.scheduler.service.journal import recorded
    from labhive.scheduler.service.journal.table import Pass

    spec = JobSpec("j", "vc1", 10, (RoleSpec("main", 1, 1),), user="alice")
    task = (TaskPlacement("main", 0, "vnode-0", (0,)),)
    hived = {"name": "hived"}
    passes = [
        Pass(1, 0.0, True, hived, [(Submit(1, spec, 0.0), [Start(1, task)])]),
        Pass(2, 2.0, False, None, [(Submit(3, spec, 2.0), [Start(3, task)])]),
        Pass(3, 5.0, False, None, [(Submit(2, spec, 5.0), [])]),
        Pass(4, 8.0, False, None, [(Cancel(2, 8.0), [])]),
        Pass(5, 10.0, False, None, [(Submit(9, spec, 10.0), [Preempt(1, "9", "prio")])]),
        Pass(6, 12.0, False, None, [(Submit(4, spec, 12.0), [Start(4, task)])]),
        Pass(7, 15.0, False, None, [(Tick(15.0), [Start(1, task)])]),
        Pass(
            8,
            21.0,
            True,
            hived,
            [(Adopt(1, spec, task, time=21.0), []), (Submit(4, spec, 21.0), [])],
        ),
        Pass(9, 30.0, False, None, [(Finish(1, 30.0), [])]),
    ]
    rec = recorded.recorded_jobs(passes)
    got = {j.job_id: (j.how, round(j.run_seconds, 3)) for j in rec.jobs}
    assert got == {
        1: (recorded.FINISHED, 25.0),
        2: (recorded.CANCELLED, 0.0),
        3: (recorded.RUNNING, 28.0),
        4: (recorded.WAITING, 9.0),
        9: (recorded.WAITING, 0.0),
    }
    assert rec.policy == "hived" and (rec.begin, rec.end) == (0.0, 30.0)
    assert [j.job_id for j in rec.jobs] == [1, 3, 2, 9, 4]  # submit order, not id order

    # The export keeps the one job done; the others' run times are not known (or there are none).
    from labhive.scheduler.service.journal import export

    out = export.export(rec, "labhive")
    assert out.jobs == 1 and out.text.splitlines()[1].startswith("1,0.0,vc1,alice,1,25.0,Pass")
    assert out.skipped == {
        "never ran (cancelled while waiting)": 1,
        "still running at the end (run time not known yet)": 1,
        "waiting again at the end (preempted or requeued; run time not known yet)": 1,
        "still waiting": 1,
    }


def test_a_what_if_that_changes_nothing_differs_in_nothing_and_a_policy_is_named(
    crowded: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline is the same replay: the live policy named as the change gives the same
    figures and no job whose wait changed (the differences are the setting's alone); another
    policy is named in the report; an unknown one is refused with the known ones."""
    base = ["whatif", "--data-dir", str(crowded), "--live-cluster", str(CLUSTER), "--json"]
    code, out, err = run_cli(capsys, *base, "--policy", "hived")
    assert code == 0, err
    same = json.loads(out)
    assert same["changed_most"] == []
    for vc, both in same["per_vc"].items():
        assert both["baseline"] == both["whatif"], vc

    code, out, err = run_cli(capsys, *base, "--policy", "fifo")
    assert code == 0, err
    assert json.loads(out)["whatif"]["label"].startswith("fifo on ")

    code, out, err = run_cli(capsys, *base, "--policy", "nosuch")
    assert code == 2 and out == ""
    assert "nosuch" in err and "hived" in err, err


def test_since_takes_the_passes_from_then_on_without_waiting_for_a_service_start(
    crowded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A service up for weeks has no start in the last 7 days: the twin check must begin at
    one (it rebuilds the policy), but whatif and export only walk the events, from --since."""
    from labhive.scheduler.core.model import Tick
    from labhive.scheduler.service.journal import table
    from labhive.scheduler.service.store import Store, database_url

    store = Store(database_url(str(tmp_path / "j.db"), tmp_path))
    store.migrate()
    with store.write() as conn:
        for t in (1.0, 2.0, 3.0):
            table.write(conn, t, [(Tick(t), [])], {"name": "hived"} if t == 1.0 else None)
    with store.read() as conn:
        assert list(table.read(conn, since=2.0)) == []
        assert [p.t for p in table.read(conn, since=2.0, fresh=False)] == [2.0, 3.0]
    store.dispose()

    code, _, err = run_cli(capsys, "journal", "export", "--data-dir", str(crowded), "--since", "1h")
    assert code == 0 and f"exported {CROWD + 2} jobs" in err, err
    code, _, err = run_cli(
        capsys, "whatif", "--data-dir", str(crowded), "--since", "4102444800",
        "--live-cluster", str(CLUSTER), "--vc-quota", "vc1=+1nodes",
    )  # fmt: skip
    assert code == 2 and "the journal holds no submission in that span" in err, err


def test_a_job_cancelled_in_the_pass_it_arrived_in_is_cancelled_not_lost() -> None:
    """Given a journal where job 2 is submitted and cancelled in the same pass (both at 5 s),
    job 5 is recorded leaving a hair before its own submission (two clocks' rounding), and job
    3 is cancelled at 8 s while it waits behind job 1: expect the what-if replay to cancel all
    three without touching a job it has not yet seen (the driver runs timed actions before the
    arrivals due at the same time: a cancel at the submission time found no job, KeyError), and
    job 3's cancel to keep its own time."""
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.core.jobs import JobSpec, RoleSpec
    from labhive.scheduler.core.model import Cancel, Finish, Start, Submit, TaskPlacement
    from labhive.scheduler.service.journal import recorded, whatif
    from labhive.scheduler.service.journal.table import Pass

    whole_node = JobSpec("j", "vc1", 10, (RoleSpec("main", 1, 4),), user="alice")
    task = (TaskPlacement("main", 0, "vnode-0", (0, 1, 2, 3)),)
    hived = {"name": "hived"}
    passes = [
        Pass(1, 0.0, True, hived, [(Submit(1, whole_node, 0.0), [Start(1, task)])]),
        Pass(2, 5.0, False, None, [(Submit(2, whole_node, 5.0), []), (Cancel(2, 5.0), [])]),
        Pass(3, 6.0, False, None, [(Submit(5, whole_node, 6.0), []), (Cancel(5, 5.9999), [])]),
        Pass(4, 7.0, False, None, [(Submit(3, whole_node, 7.0), [])]),
        Pass(5, 8.0, False, None, [(Cancel(3, 8.0), [])]),
        Pass(6, 20.0, False, None, [(Finish(1, 20.0), [])]),
    ]
    rec = recorded.recorded_jobs(passes)
    assert {j.job_id: j.how for j in rec.jobs} == {
        1: recorded.FINISHED,
        2: recorded.CANCELLED,
        3: recorded.CANCELLED,
        5: recorded.CANCELLED,
    }
    setting = whatif.Setting("hived", "hived", load_cluster_config(CLUSTER))
    ends = {j.job_id: j for j in whatif.replay(rec, setting).result.jobs}
    assert ends["1"].end == 20.0
    assert all(ends[k].first_start is None for k in "235")
    assert ends["2"].end == pytest.approx(5.0) and ends["5"].end == pytest.approx(6.0)
    assert ends["3"].end == 8.0
