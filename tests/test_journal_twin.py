"""Given the real service (local processes, the 2x4 cluster) and a day of its work - submissions,
a cancel, a preemption, a node taken down and brought up, a restart - expect its journal to hold
every event its policy was given and every decision it made, and ``labhive twin check`` to
replay them under the same config to identical decisions; under another config (a VC's quota
changed) expect it to report the first divergence, with both sides' decisions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select
from waiting import job_in, wait_until

from labhive.scheduler.cli import main
from labhive.scheduler.service.journal import table
from labhive.scheduler.service.store import Store, database_url

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"
CLUSTER = Path(__file__).with_name("data") / "cluster-2x4.yaml"


def state_is(job, *states: str) -> bool:
    return job.refresh().state in states


def a_recorded_day(data_dir: Path, db: str | None) -> None:
    """The service's work, across a restart: what the journal must replay."""
    from service_fixtures import live_service

    with live_service(data_dir, db, cluster=str(CLUSTER), stop_tasks=False) as live:
        admin, alice, bob = live.client(), live.client(ALICE), live.client(BOB)
        # Two opportunistic 4-GPU jobs fill both nodes, vc1's and default's.
        oppo = [
            alice.submit(command="sleep 60", vc="vc1", gpus=4, priority="oppo", name=f"o{i}")
            for i in range(2)
        ]
        for job in oppo:
            wait_until(job_in(job, "RUNNING"), "an opportunistic job to run")
        # default's own job takes its node back: one opportunistic job is preempted.
        guaranteed = bob.submit(command="sleep 60", vc="default", gpus=4, name="owner")
        wait_until(lambda: state_is(guaranteed, "RUNNING"), "the owner's job to run", 60)
        assert any(j.refresh().state == "WAITING" for j in oppo), "nobody was preempted"
        short = alice.submit(command="true", vc="vc1", gpus=1, name="short")
        alice.cancel(oppo[0].id)
        wait_until(lambda: state_is(oppo[0], "STOPPED"), "the cancel", 60)
        wait_until(lambda: state_is(short, "SUCCEEDED"), "the short job", 60)
        admin.node_down("vnode-1", "fan")
        admin.node_up("vnode-1")
        waiting = alice.submit(command="sleep 60", vc="vc1", gpus=4, name="queued")
    # The restart: the jobs ran on; the service rebuilds its policy from the store (Adopt for
    # the running, Submit for the waiting) and adopts their processes.
    with live_service(data_dir, db, cluster=str(CLUSTER)) as live:
        alice = live.client(ALICE)
        assert live.client().job(guaranteed.id).state == "RUNNING", "not adopted after the restart"
        alice.submit(command="true", vc="vc1", gpus=2, name="after")
        wait_until(lambda: state_is(alice.job(waiting.id), "RUNNING", "WAITING"), "recovery")
        wait_until(lambda: alice.jobs(state="SUCCEEDED"), "a job done after the restart", 60)


def twin_check(data_dir: Path, db: str | None, capsys, *more: str) -> tuple[int, dict]:
    args = ["twin", "check", "--data-dir", str(data_dir), "--json", *more]
    code = main([*args, "--db", db] if db else args)
    return code, json.loads(capsys.readouterr().out)


def test_a_recorded_run_replays_to_identical_decisions_and_another_quota_diverges(
    db_url: str, tmp_path: Path, capsys
) -> None:
    data_dir = tmp_path / "data"
    a_recorded_day(data_dir, db_url)

    code, same = twin_check(data_dir, db_url, capsys, "--cluster", str(CLUSTER))
    assert same["divergence"] is None, same["divergence"]
    assert code == 0
    assert same["stretches"] >= 2, "the restart's fresh policy was not journalled"
    assert same["decisions"] >= 6  # starts, the preemption, the restart's placements
    assert same["notes"] == []

    # The same day under another quota: vc1 owns both nodes, default none.
    changed = tmp_path / "vc1-owns-all.yaml"
    text = (
        CLUSTER.read_text()
        .replace(
            "default: {virtualCells: [{cellType: POOL.VNODE, cellNumber: 1}]}",
            "default: {virtualCells: []}",
        )
        .replace(
            "vc1: {virtualCells: [{cellType: POOL.VNODE, cellNumber: 1}]}",
            "vc1: {virtualCells: [{cellType: POOL.VNODE, cellNumber: 2}]}",
        )
    )
    assert text != CLUSTER.read_text()
    changed.write_text(text)
    code, other = twin_check(data_dir, db_url, capsys, "--cluster", str(changed))
    assert code == 1
    report = other["divergence"]
    assert "DIVERGED at journal pass" in report
    assert "recorded:" in report and "replayed:" in report


def test_the_journal_holds_what_the_store_acknowledged_and_old_passes_are_pruned(
    tmp_path: Path,
) -> None:
    """Retention: ``--journal-days`` passes are kept, older ones go at the housekeeping tick."""
    import time

    from labhive.scheduler.core.model import Tick
    from labhive.scheduler.service.housekeeping import Housekeeping
    from labhive.scheduler.service.journal.retention import JournalRetention

    store = Store(database_url(str(tmp_path / "j.db"), tmp_path))
    store.migrate()
    now = time.time()
    with store.write() as conn:
        table.write(conn, now - 40 * 86400, [(Tick(now - 40 * 86400), [])], {"name": "hived"})
        table.write(conn, now - 1, [(Tick(now - 1), [])], {"name": "hived"})
    Housekeeping(None, None, journal=JournalRetention(store, keep_s=30 * 86400)).tick()
    with store.read() as conn:
        left = [p.t for p in table.read(conn)]
        rows = conn.execute(select(func.count()).select_from(table.journal)).scalar()
    assert rows == 1 and left == [pytest.approx(now - 1)]
    store.dispose()


def test_explain_names_the_job_that_held_the_cells_a_finished_job_waited_for(
    tmp_path: Path, capsys
) -> None:
    """Given vc1's one node taken by job A (4 GPUs, 3 s) and job B (4 GPUs) queued behind it,
    expect ``labhive explain B`` to say B waited with the why-text the service showed while it
    waited, with A holding the GPUs, and then that B started."""
    from service_fixtures import live_service

    data_dir = tmp_path / "data"
    with live_service(data_dir, cluster=str(CLUSTER)) as live:
        alice = live.client(ALICE)
        holder = alice.submit(command="sleep 3", vc="vc1", gpus=4, name="holder")
        wait_until(lambda: state_is(holder, "RUNNING"), "the holder to run")
        blocked = alice.submit(command="true", vc="vc1", gpus=4, name="blocked")
        live_why = wait_until(lambda: blocked.refresh().why, "the blocked job's why")
        assert state_is(blocked, "WAITING")
        wait_until(lambda: state_is(blocked, "SUCCEEDED"), "the blocked job to run", 60)

    code = main(
        ["explain", str(blocked.id), "--data-dir", str(data_dir), "--cluster", str(CLUSTER)]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert f"waited: {live_why}" in text, text
    assert f"GPUs held by: job {holder.id} holder (alice, vc1) on vnode-" in text, text
    assert "started" in text


def test_a_pass_the_journal_cannot_encode_still_commits_and_the_replay_reports_the_gap(
    tmp_path: Path,
) -> None:
    """Given a pass with an event the codec does not know (a ``Reconfigure``), expect the
    pass's transaction to commit (scheduling goes on) with a row naming the gap, and the twin
    check to stop there rather than call the rest identical; and a journal row of another
    format version, or naming a class outside the model, to be refused with what to do."""
    from labhive.scheduler.core.config import load_cluster_config
    from labhive.scheduler.core.model import Reconfigure, Tick
    from labhive.scheduler.service.journal import codec, twin

    store = Store(database_url(str(tmp_path / "j.db"), tmp_path))
    store.migrate()
    config = load_cluster_config(str(CLUSTER))
    with store.write() as conn:
        table.write(conn, 1.0, [(Tick(1.0), [])], {"name": "hived"})
        table.write(conn, 2.0, [(Reconfigure(config, 2.0), [])], None)
        table.write(conn, 3.0, [(Tick(3.0), [])], None)
    with store.read() as conn:
        passes = list(table.read(conn))
    assert [p.gap is not None for p in passes] == [False, True, False]
    report = twin.replay(passes, twin.policy_maker(str(CLUSTER), "hived", None))
    assert report.divergence is not None and report.divergence.pass_id == passes[1].id
    assert "not recorded" in report.divergence.text()

    with pytest.raises(codec.JournalFormatError, match=r"unknown record type 'os\.system'"):
        codec.loads('{"@": "os.system", "command": "true"}')
    with store.write() as conn:
        conn.execute(table.journal.insert().values(t=4.0, fresh=True, body='{"v": 99}'))
    refused = pytest.raises(codec.JournalFormatError, match="version 99; this labhive reads")
    with refused, store.read() as conn:
        list(table.read(conn, since=4.0))
    store.dispose()
