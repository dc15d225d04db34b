"""Given two root services on one host that run tasks as their users, expect the second to
refuse to start while its uid range overlaps the first's (naming the first's data dir and a
free --first-uid), and, started on that free range, its user's job to be denied the first
service's user's files and task; a restart of the same data dir to keep its claim, a removed
data dir to release it.

The finding on main: both services allocated from 200000, so carol of one service got bob's
uid in the other, read his work file and environment and killed his task."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from isolation_util import needs_root, open_tmp_dir, user_python
from service_process import serve_process
from waiting import wait_until

from labhive.scheduler.client import Client
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.service import uid_claims
from labhive.scheduler.service.uid_claims import claim, free_first, live_claims

pytest_plugins = ["service_fixtures"]
CLUSTER = Path(__file__).with_name("data") / "cluster-2x4.yaml"
FIRST = 200500
BOB = "users:\n  bob: {token: bob-token-4567, groups: [s]}\ngroups:\n  s: {vcs: [vc1]}\n"
CAROL = "users:\n  carol: {token: carol-token-89, groups: [s]}\ngroups:\n  s: {vcs: [vc1]}\n"

#: carol's job: read bob's notes, signal bob's task (argv: the notes file, the pid file).
TRESPASS = """
import json, os, signal, sys
out = {"uid": os.getuid()}
try:
    out["notes"] = open(sys.argv[1]).read()
except OSError as err:
    out["notes"] = err.errno
try:
    os.kill(int(sys.argv[2]), signal.SIGKILL)
    out["kill"] = "ok"
except OSError as err:
    out["kill"] = err.errno
print(json.dumps(out))
"""


def service_args(tmp: Path, name: str, users: str, first_uid: int) -> list[str]:
    (tmp / name).mkdir(mode=0o755)
    users_file = tmp / name / "users.yaml"
    users_file.write_text(users)
    users_file.chmod(0o600)
    return ["--users", str(users_file), "--task-identity", "users", "--grace-s", "1",
            "--first-uid", str(first_uid)]  # fmt: skip


def serve_cli(tmp: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``labhive serve`` that is expected to refuse: it exits at once, saying why."""
    cmd = [sys.executable, "-m", "labhive.scheduler.cli", "serve", "--port", "1", "--cluster",
           str(CLUSTER), "--data-dir", str(tmp / name / "data"), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@needs_root
def test_a_second_service_on_an_overlapping_range_refuses_and_on_a_free_one_is_kept_apart():
    with open_tmp_dir("/var/tmp") as tmp:  # not /tmp: carol's task must see bob's paths
        a_args = service_args(tmp, "a", BOB, FIRST)
        with serve_process(tmp / "a", CLUSTER, *a_args) as a:
            bob = Client(a.url, "bob-token-4567").submit(
                name="bob", vc="vc1", gpus=0,
                command="echo $$ > pid; echo bob-private-notes > notes; exec sleep 60",
            )  # fmt: skip
            wait_until(lambda: bob.refresh().state == "RUNNING" and bob, "bob's job", 60)
            work = tmp / "a" / "data" / "jobs" / str(bob.id) / "1" / f"{bob.tasks[0]['role']}-0"
            wait_until(lambda: (work / "work" / "pid").exists(), "bob's pid file", 30)
            pid = (work / "work" / "pid").read_text().strip()

            refused = serve_cli(tmp, "b", *service_args(tmp, "b", CAROL, FIRST))  # carol: bob's uid
            assert refused.returncode == 2, refused
            said = refused.stderr
            assert str(tmp / "a" / "data") in said, said
            assert f"uids {FIRST}-{FIRST + 999_999}" in said
            free = int(re.search(r"--first-uid (\d+)", said).group(1))
            assert free == FIRST + 1_000_000
            assert [c.data_dir for c in live_claims()] == [str(tmp / "a" / "data")]

            b_args = service_args(tmp, "b2", CAROL, free)
            with serve_process(tmp / "b2", CLUSTER, *b_args) as b:
                command = shlex.join(
                    [user_python(), "-c", TRESPASS, str(work / "work" / "notes"), pid]
                )
                carol = Client(b.url, "carol-token-89").submit(
                    name="carol", vc="vc1", gpus=0, command=command
                )
                wait_until(lambda: carol.refresh().done, "carol's job", 60)
                report = json.loads(carol.logs().data.strip().splitlines()[-1])
            assert bob.refresh().state == "RUNNING", "bob's task was killed from service b"
            bob.cancel()
            assert {c.data_dir for c in live_claims()} == {
                str(tmp / "a" / "data"),
                str(tmp / "b2" / "data"),
            }

    assert report["uid"] == free != FIRST
    assert (report["notes"], report["kill"]) == (13, 1)  # EACCES, EPERM


def test_a_restart_of_the_same_data_dir_keeps_its_claim(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    claim(data, 1000, 1999, tmp_path / "state")
    claim(data, 1000, 2999, tmp_path / "state")  # restarted with a wider range
    assert live_claims(tmp_path / "state") == [uid_claims.Claim(str(data), 1000, 2999)]


def test_a_removed_data_dir_releases_its_range(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    claim(old, 1000, 1999, tmp_path / "state")
    with pytest.raises(UserError, match=f"data dir {old}"):
        claim(new, 1500, 2500, tmp_path / "state")
    old.rmdir()
    assert claim(new, 1500, 2500, tmp_path / "state").first == 1500
    assert [c.data_dir for c in live_claims(tmp_path / "state")] == [str(new)]


def test_disjoint_ranges_both_hold_and_the_refusal_names_a_free_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    dirs = [tmp_path / n for n in ("a", "b", "c")]
    for d in dirs:
        d.mkdir()
    claim(dirs[0], 1000, 1999, state)
    claim(dirs[1], 2000, 2499, state)
    with pytest.raises(UserError) as refused:
        claim(dirs[2], 1200, 1699, state)
    assert "--first-uid 2500 (with --uid-count 500)" in str(refused.value)
    assert claim(dirs[2], 2500, 2999, state).last == 2999
    assert len(live_claims(state)) == 3


def test_free_first_skips_every_claim_in_its_way() -> None:
    held = [uid_claims.Claim("x", 100, 199), uid_claims.Claim("y", 250, 300)]
    assert free_first(50, held, 100) == 200
    assert free_first(60, held, 100) == 301
    assert free_first(10, held, 0) == 0


def test_services_starting_at_once_see_each_other(tmp_path: Path) -> None:
    """The lock makes read-check-write one step: of eight overlapping claims made at once,
    exactly one holds."""
    state = tmp_path / "state"
    outcomes: list[str] = []

    def one(i: int) -> None:
        d = tmp_path / f"s{i}"
        d.mkdir()
        try:
            claim(d, 5000 + i, 6000 + i, state)
            outcomes.append("held")
        except UserError:
            outcomes.append("refused")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["held"] + ["refused"] * 7
    assert len(live_claims(state)) == 1


def test_a_broken_registry_is_reported_not_overwritten(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / uid_claims.REGISTRY).write_text("{not json")
    with pytest.raises(UserError, match=r"cannot be read .*fix or remove it"):
        claim(tmp_path, 1, 10, state)
    assert (state / uid_claims.REGISTRY).read_text() == "{not json"


def test_the_claim_covers_uids_handed_out_under_an_earlier_range(store) -> None:
    from labhive.scheduler.service.accounts import Accounts

    Accounts(store, first_uid=500, count=10).of("dan")  # uid 500
    assert Accounts(store, first_uid=9000, count=100).claimed_span() == (500, 9099)


@needs_root
def test_a_service_that_does_not_switch_uids_claims_nothing(tmp_path: Path) -> None:
    from labhive.scheduler.service.server import ServeOptions, build

    running = build(ServeOptions(data_dir=tmp_path / "data", task_identity="service"))
    running.service.store.dispose()
    assert live_claims() == []
    running = build(ServeOptions(data_dir=tmp_path / "data", task_identity="users"))
    running.service.store.dispose()
    assert live_claims() == [uid_claims.Claim(str(tmp_path / "data"), 200000, 1_199_999)]
    assert os.environ["LABHIVE_STATE_DIR"] != str(uid_claims.DEFAULT_STATE_DIR)


def test_a_range_that_holds_no_uid_or_runs_past_the_last_is_refused(store) -> None:
    from labhive.scheduler.service.accounts import Accounts

    with pytest.raises(UserError, match=r"--uid-count 0: .*at least one uid"):
        Accounts(store, first_uid=500, count=0)
    with pytest.raises(UserError, match=r"--first-uid 2147483000 --uid-count 1000: .*end by"):
        Accounts(store, first_uid=2_147_483_000, count=1000)


def test_labhive_up_hands_its_uid_range_to_the_service_it_starts(tmp_path: Path) -> None:
    """A second hub on the host is told to pick another range: ``up`` must be able to."""
    from labhive.hub_extension.hubconfig import HubPlan, service_command
    from labhive.scheduler.cli import build_parser

    args = build_parser().parse_args(["up", "--first-uid", "1200000", "--uid-count", "5000"])
    plan = HubPlan(str(tmp_path), "t", first_uid=args.first_uid, uid_count=args.uid_count)
    serve = build_parser().parse_args(service_command(plan)[3:])
    assert (serve.first_uid, serve.uid_count) == (1_200_000, 5000)
    default = build_parser().parse_args(service_command(HubPlan(str(tmp_path), "t"))[3:])
    assert (default.first_uid, default.uid_count) == (200000, 1_000_000)


@needs_root
def test_a_users_file_uid_in_another_services_range_or_users_is_refused_both_ways():
    """Service a allocates from FIRST (bob gets FIRST) and its users file names eve's uid.
    Service b's users file naming dave as bob's uid, or b's range covering eve's uid, would
    hand one uid to two people: b refuses to start, naming both claimants and the fix."""
    eve_uid = FIRST + 2_000_123
    eve = BOB.replace("users:\n", f"users:\n  eve: {{token: eve-token-1234, uid: {eve_uid}}}\n")
    with (
        open_tmp_dir("/var/tmp") as tmp,
        serve_process(tmp / "a", CLUSTER, *service_args(tmp, "a", eve, FIRST)) as a,
    ):
        bob = Client(a.url, "bob-token-4567").submit(name="b", vc="vc1", gpus=0, command="id -u")
        wait_until(lambda: bob.refresh().done, "bob's job", 60)
        assert bob.logs().data.strip() == str(FIRST)
        a_data = str(tmp / "a" / "data")

        dave = CAROL.replace("carol: {", f"dave: {{uid: {FIRST}, ")
        refused = serve_cli(tmp, "b", *service_args(tmp, "b", dave, FIRST + 1_000_000))
        assert refused.returncode == 2, refused
        said = refused.stderr
        assert f"uid {FIRST} of user 'dave'" in said and str(tmp / "b" / "data") in said
        assert f"lies in uids {FIRST}-{FIRST + 999_999} (the service of data dir {a_data})" in said
        assert "Give the user in this service's users file a uid outside" in said

        refused = serve_cli(tmp, "c", *service_args(tmp, "c", CAROL, FIRST + 2_000_000))
        assert refused.returncode == 2, refused
        said = refused.stderr
        assert (
            f"uid {eve_uid} of user 'eve' in the users file of the service of data dir {a_data}"
            in said
        )
        assert f"lies in uids {FIRST + 2_000_000}-" in said and str(tmp / "c" / "data") in said
        assert [c.data_dir for c in live_claims()] == [a_data]


def test_two_users_files_naming_one_uid_for_two_names_are_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    claim(a, 1000, 1999, state, users={"alice": 5001})
    with pytest.raises(UserError) as refused:
        claim(b, 2000, 2999, state, users={"mallory": 5001})
    said = str(refused.value)
    assert f"uid 5001 is user 'mallory' in the users file of this service (data dir {b})" in said
    assert f"user 'alice' in that of the service of data dir {a}" in said
    # the same person (name and uid) in two services' users files: one OS identity, allowed
    assert claim(c, 3000, 3999, state, users={"alice": 5001}).users == (("alice", 5001),)
    assert [c.users for c in live_claims(state)] == [(("alice", 5001),), (("alice", 5001),)]


def test_a_registry_written_before_users_were_claimed_still_reads(tmp_path: Path) -> None:
    state, data = tmp_path / "state", tmp_path / "data"
    state.mkdir()
    data.mkdir()
    doc = {"claims": [{"data_dir": str(data), "first": 10, "last": 20}]}
    (state / uid_claims.REGISTRY).write_text(json.dumps(doc))
    assert live_claims(state) == [uid_claims.Claim(str(data), 10, 20)]
