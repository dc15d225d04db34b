"""Given users who come, go, change tokens and share names, expect jobs to stay with the
account that submitted them (issue 16 item 4: ownership by id, not by name).

Each user is an account number; a users-file edit that replaces alice by a new alice (another
token), or removes her and adds her back, gives the new alice a new number and none of the old
one's jobs, until the admin hands the account over with ``account: N``. The admin token, hub
users and hub services each have accounts of their own whatever their names. Numbers stay the
same across restarts, on SQLite and PostgreSQL, and a store from before the numbers is
back-filled from the names on its jobs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from service_fixtures import live_service
from waiting import wait_until

from labhive.scheduler.client import NotFoundError
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service import lifecycle as lc
from labhive.scheduler.service.accounts import Accounts, Member, fingerprint
from labhive.scheduler.service.auth import ADMIN_KIND, SERVICE, USER, Forbidden, Identity
from labhive.scheduler.service.store import Store, accounts, jobs
from labhive.scheduler.service.store import transitions as tx

pytest_plugins = ["service_fixtures"]

GROUPS = "groups:\n  students: {vcs: [vc1]}\n  others: {vcs: [default]}\n"
BOB = "  bob: {token: bob-token-4567, groups: [others]}\n"


def users(*entries: str) -> str:
    return "users:\n" + "".join(f"  {e}\n" for e in entries) + BOB + GROUPS


OLD_ALICE = users("alice: {token: alice-token-123, groups: [students]}")
NEW_ALICE = users("alice: {token: another-alice-789, groups: [students]}")


def sleeper(client, name: str = "mine"):
    return client.submit(command="sleep 60", vc="vc1", gpus=1, name=name)


def shut_out(client, job_id: int) -> None:
    """``client`` can neither see, nor read the logs of, nor cancel the job, and the queue,
    GPU and cluster views show it as someone else's."""
    for act in (client.job, client.logs, client.cancel):
        with pytest.raises(NotFoundError, match=f"no job {job_id} of yours"):
            act(job_id)
    assert job_id not in [j.id for j in client.jobs()]
    queue = client.queue()
    assert not any(e["mine"] or e["id"] == job_id for e in queue["running"] + queue["waiting"])
    held = [g["job"] for g in client.gpus()]
    held += [j for n in client.cluster()["nodes"] for j in n["used"].values()]
    assert job_id not in held


def test_a_new_alice_gets_a_new_account_and_none_of_the_old_ones_jobs(db_url, tmp_path):
    """Restart after restart on both backends: the number stays; a token change (a new person
    of the same name) gets a new number; ``account: N`` gives the old one back (here also
    renaming alice to alicia)."""
    data = tmp_path / "data"
    with live_service(data, db_url, users=OLD_ALICE) as live:
        old = live.client("alice-token-123")
        old_id = old.me()["id"]
        job = sleeper(old)
        assert job.owner_id == old_id
    with live_service(data, db_url, users=OLD_ALICE) as live:
        same = live.client("alice-token-123")
        assert same.me()["id"] == old_id
        assert same.job(job.id).owner_id == old_id
    with live_service(data, db_url, users=NEW_ALICE) as live:
        seen = live.client().job(job.id)
        wait_until(lambda: seen.refresh().state == "RUNNING", "the old alice's job to run")
        new = live.client("another-alice-789")
        new_id = new.me()["id"]
        assert new_id != old_id
        shut_out(new, job.id)
        seen.refresh()  # the admin still sees it, and whose it is
        assert (seen.user, seen.owner_id) == ("alice", old_id)
        assert job.id in [g["job"] for g in live.client().gpus()]
    handed = users(f"alicia: {{token: another-alice-789, groups: [students], account: {old_id}}}")
    with live_service(data, db_url, users=handed) as live:
        alicia = live.client("another-alice-789")
        assert (alicia.me()["name"], alicia.me()["id"]) == ("alicia", old_id)
        assert alicia.job(job.id).state in ("WAITING", "RUNNING")
        assert alicia.cancel(job.id, wait=10).state == "STOPPED"


def test_a_user_removed_and_added_back_starts_afresh(tmp_path):
    """Removal retires the account at the next start; the same name and even the same token
    later is someone new unless the admin says otherwise."""
    data = tmp_path / "data"
    with live_service(data, users=OLD_ALICE) as live:
        job = sleeper(live.client("alice-token-123"))
    with live_service(data, users=users()) as live:
        assert live.client().job(job.id).state in ("WAITING", "RUNNING")
    with live_service(data, users=OLD_ALICE) as live:
        shut_out(live.client("alice-token-123"), job.id)


def test_the_admin_token_and_each_user_have_accounts_of_their_own(live_sqlite):
    admin, alice = live_sqlite.client(), live_sqlite.client("alice-token-123")
    ids = {admin.me()["id"], alice.me()["id"], live_sqlite.client("bob-token-4567").me()["id"]}
    assert len(ids) == 3
    job = admin.submit(command="sleep 60", vc="vc1", gpus=1, name="admins")
    shut_out(alice, job.id)
    mine = sleeper(alice)
    assert admin.job(mine.id).owner_id == alice.me()["id"]  # admins see every job


def test_hub_names_that_look_like_the_admin_or_a_service_are_other_accounts(store):
    """Under JupyterHub, user names are the hub's: a hub user called ``admin`` or
    ``service:labhive`` is neither the admin token nor the hub service of that name."""
    owners = Accounts(store)
    owners.sync()
    ids = {
        (kind, name): owners.id_of(Identity(name, kind=kind))
        for kind, name in [
            (ADMIN_KIND, "admin"),
            (USER, "admin"),
            (SERVICE, "service:labhive"),
            (USER, "service:labhive"),
        ]
    }
    assert len(set(ids.values())) == 4
    hub_admin = Identity("admin", id=ids[(USER, "admin")])
    assert not hub_admin.owns(ids[(ADMIN_KIND, "admin")]) and hub_admin.owns(hub_admin.id)
    assert not Identity("x", id=None).owns(None)  # an unowned job is the admins' alone
    again = Accounts(store)  # a restart: the same numbers
    assert {(k, n): again.id_of(Identity(n, kind=k)) for k, n in ids} == ids


def test_a_hub_name_the_store_cannot_hold_is_refused_with_what_to_do(store):
    """JupyterHub allows names no users file would (255 characters): a 403 that says so, not a
    database error on every request."""
    with pytest.raises(Forbidden, match=r"200 characters long \(the limit is 128\): ask the hub"):
        Accounts(store).id_of(Identity("u" * 200))


def test_tasks_of_a_retired_account_keep_its_uid_not_the_new_holders(store):
    """A requeued job of the old alice runs as the old alice's uid, never as the new one's."""
    first = Accounts(store, members={"alice": Member(fingerprint("old-token-1"))})
    first.sync()
    old = first.of("alice")
    (job_id,) = _submit(store, "alice", old.id)
    second = Accounts(store, members={"alice": Member(fingerprint("new-token-2"))})
    second.sync()
    new = second.of("alice")
    assert new.id != old.id and new.uid != old.uid
    assert second.of_job(job_id, "alice") == old


def test_handing_over_an_account_says_what_is_wrong(store):
    Accounts(store, members={"alice": Member("a"), "bob": Member("b")}).sync()
    bob_id = Accounts(store).id_of(Identity("bob"))
    with pytest.raises(UserError, match="no user account 999"):
        Accounts(store, members={"alice": Member("a", claim=999)}).sync()
    with pytest.raises(UserError, match=f"account {bob_id} belongs to 'bob', who is still"):
        Accounts(store, members={"alice": Member("a", claim=bob_id), "bob": Member("b")}).sync()
    with pytest.raises(UserError, match="no user account"):  # the admin's is not a user's
        admin_id = Accounts(store).id_of(Identity("admin", kind=ADMIN_KIND))
        Accounts(store, members={"alice": Member("a", claim=admin_id)}).sync()


def test_a_claim_in_a_users_file_must_be_a_number(tmp_path: Path):
    from labhive.scheduler.service.accounts import load_members

    path = tmp_path / "users.yaml"
    path.write_text(users("alice: {token: alice-token-123, groups: [students], account: x}"))
    with pytest.raises(UserError, match=r"users\.alice\.account must be a number"):
        load_members(path)


def test_a_store_from_before_account_numbers_is_back_filled_from_job_names(db_url, tmp_path):
    """0006 on a store at 0005: every name on a job gets an account (the one it had, with its
    uid, if any), and each job its owner's number; the admin and hub services get their kind."""
    from alembic import command
    from alembic.config import Config

    from labhive.scheduler.service.store import MIGRATIONS, database_url

    store = Store(database_url(db_url, tmp_path))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005_job_etas")
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                'INSERT INTO accounts ("user", uid, gid, source, created_at) '
                "VALUES ('alice', 200007, 200007, 'allocated', 1.0)"
            )
        )
        for name in ["alice", "bob", "alice", "admin", "service:hub"]:
            conn.execute(
                sa.text(
                    'INSERT INTO jobs (name, "user", vc, priority, state, attempt, retries, '
                    "retries_used, task_count, gpus, opportunistic, cancel_requested, spec, "
                    "reason, submitted_at, updated_at) VALUES ('j', :u, 'vc1', 10, 'WAITING', "
                    "1, 0, 0, 1, 1, false, false, '{}', 'submitted', 1.0, 1.0)"
                ),
                {"u": name},
            )
    store.migrate()
    with store.read() as conn:
        owners = conn.execute(
            sa.select(jobs.c.user, accounts.c.id, accounts.c.kind, accounts.c.uid)
            .join(accounts, accounts.c.id == jobs.c.owner_id)
            .order_by(jobs.c.id)
        ).all()
    assert [(o.user, o.kind) for o in owners] == [
        ("alice", USER), ("bob", USER), ("alice", USER), ("admin", ADMIN_KIND),
        ("service:hub", SERVICE),
    ]  # fmt: skip
    assert owners[0].uid == 200007 and owners[0].id == owners[2].id
    assert len({o.id for o in owners}) == 4
    assert Accounts(store).of("alice").uid == 200007  # the uid it had stays its own
    store.dispose()


def _submit(store: Store, user: str, owner_id: int) -> list[int]:
    job = lc.NewJob("j", user, "vc1", 10, 0, 1, 1, {"name": "j", "gpus": 1}, owner_id)
    with store.write() as conn:
        return tx.submit_many(conn, [job], 1.0)
