"""Given a live service on the virtual 2 x 4 GPU cluster, expect an admin to take a node out of
service (its jobs requeued and restarted elsewhere, nothing new placed on it), the mark to
survive a restart and to resist GPU health saying the node is fine, and only ``up`` to lift it."""

from __future__ import annotations

import pytest
from waiting import wait_until

from labhive.scheduler.cli import main
from labhive.scheduler.client import NotFoundError, PermissionDenied
from labhive.scheduler.core.model import NodeDown, NodeUp

pytest_plugins = ["service_fixtures"]

ALICE, BOB = "alice-token-123", "bob-token-4567"


def node(client, name: str) -> dict:
    (found,) = [n for n in client.cluster()["nodes"] if n["name"] == name]
    return found


def running_on(job) -> str:
    """The node of a running one-task job, once it runs."""
    wait_until(lambda: job.refresh().state == "RUNNING" and job.tasks[0]["node"], "the job to run")
    return str(job.tasks[0]["node"])


def test_taking_a_node_down_requeues_its_job_elsewhere_and_up_brings_it_back(
    live_sqlite,
) -> None:
    admin = live_sqlite.client()
    job = live_sqlite.client(ALICE).submit(command="sleep 600", vc="vc1", gpus=1, name="long")
    first = running_on(job)

    down = admin.node_down(first, "replacing a fan")
    assert (down["healthy"], down["held"]) == (False, True)
    assert down["reason"] == "taken down by admin: replacing a fan"
    wait_until(lambda: job.refresh().attempt == 2 and running_on(job), "the job's second run")
    assert running_on(job) != first
    (stop,) = [e for e in job.events() if e["reason"] == "stopped"]
    assert stop["why"] == f"node {first} went down (taken down by admin: replacing a fan)"
    # The other VC's node-level cell has only the downed node left to bind to: it waits.
    other = live_sqlite.client(BOB).submit(command="sleep 600", vc="default", gpus=1, name="x")
    wait_until(lambda: other.refresh().why, "the other job's why-text")
    assert other.state == "WAITING" and not node(admin, first)["used"]

    up = admin.node_up(first)
    assert (up["healthy"], up["held"], up["reason"]) == (True, False, "")
    assert running_on(other) == first
    other.cancel()
    job.cancel()


def test_only_admins_mark_nodes_and_only_nodes_that_exist(live_sqlite) -> None:
    name = live_sqlite.client().cluster()["nodes"][0]["name"]
    with pytest.raises(PermissionDenied, match="only an admin"):
        live_sqlite.client(ALICE).node_down(name, "mine now")
    with pytest.raises(NotFoundError, match=f"no node 'nope'; this cluster has {name}"):
        live_sqlite.client().node_down("nope")
    assert node(live_sqlite.client(), name)["healthy"]


def test_gpu_health_cannot_lift_an_admins_mark_nor_an_admin_lift_a_broken_gpu(
    live_sqlite,
) -> None:
    admin, loop = live_sqlite.client(), live_sqlite.running.service.loop
    first, second = (n["name"] for n in admin.cluster()["nodes"])
    admin.node_down(first)
    loop.inject([NodeUp(first)])  # health: the GPUs answer again
    admin.node_down(second)  # returns once a pass has run, after the NodeUp had its chance
    assert (node(admin, first)["healthy"], node(admin, first)["reason"]) == (
        False,
        "taken down by admin",
    )
    admin.node_up(second)

    loop.inject([NodeDown(first, reason="GPU 0 fell off the bus")])
    lifted = admin.node_up(first)  # the admin's mark goes; the broken GPU keeps it down
    assert (lifted["healthy"], lifted["held"]) == (False, False)
    assert lifted["reason"] == "GPU 0 fell off the bus"
    loop.inject([NodeUp(first)])
    wait_until(lambda: node(admin, first)["healthy"], "health to bring the node back")


def test_a_policy_rebuilt_after_a_failed_pass_still_knows_which_nodes_are_down(
    live_sqlite,
) -> None:
    admin, loop = live_sqlite.client(), live_sqlite.running.service.loop
    first, second = (n["name"] for n in admin.cluster()["nodes"])
    admin.node_down(first, "maintenance")
    loop.inject([NodeDown(second, reason="Xid 79")])
    wait_until(lambda: not node(admin, second)["healthy"], "health to take the node down")
    decide = loop._decide

    def fail_once(*args):
        loop._decide = decide
        raise RuntimeError("a bug in a pass")

    loop._decide = fail_once  # the loop logs it and rebuilds the policy from the store
    job = live_sqlite.client(ALICE).submit(command="true", vc="vc1", gpus=1, name="after")
    wait_until(lambda: loop._decide is decide and job.refresh().why, "the rebuilt policy's why")
    assert job.state == "WAITING"  # both nodes are still down for the new policy
    assert [n["healthy"] for n in admin.cluster()["nodes"]] == [False, False]
    loop.inject([NodeUp(second)])
    assert job.wait(30, 0.05).state == "SUCCEEDED"
    assert job.tasks[0]["node"] == second


def test_a_node_taken_down_stays_down_across_a_restart(tmp_path) -> None:
    from service_fixtures import live_service

    with live_service(tmp_path / "data") as first:
        name = first.client().cluster()["nodes"][-1]["name"]
        first.client().node_down(name, "disk swap")
    with live_service(tmp_path / "data") as second:
        admin = second.client()
        wait_until(lambda: not node(admin, name)["healthy"], "the mark to be applied again")
        assert node(admin, name)["reason"] == "taken down by admin: disk swap"
        assert admin.node_up(name)["healthy"]
    with live_service(tmp_path / "data") as third:
        assert node(third.client(), name)["healthy"]


def test_the_command_line_takes_a_node_down_and_shows_why(live_sqlite, capsys) -> None:
    name = live_sqlite.client().cluster()["nodes"][0]["name"]
    base = ["--url", live_sqlite.url, "--token", live_sqlite.admin]
    assert main(["node", "down", name, *base, "--reason", "kernel update"]) == 0
    assert capsys.readouterr().out == f"{name}: down (taken down by admin: kernel update)\n"
    assert main(["cluster", *base]) == 0
    assert "taken down by admin: kernel update" in capsys.readouterr().out
    assert main(["node", "up", name, *base]) == 0
    assert capsys.readouterr().out == f"{name}: in service\n"
    assert main(["node", "up", "nope", *base]) == 2
    assert "no node 'nope'" in capsys.readouterr().err


def test_a_node_taken_down_under_a_job_that_ignores_sigterm_holds_up_nobody(tmp_path) -> None:
    """Issue 16: node-down stopped its jobs inside the scheduling pass, like cancel and
    preemption, so a task ignoring SIGTERM froze every user's scheduling for the grace period.
    Now the job shows as stopping, and another job starts and ends while the stubborn one is
    still being stopped (a 20 s grace: room for a loaded machine)."""
    from service_fixtures import live_service

    stubborn = "trap '' TERM; echo ready; while true; do sleep 0.2; done"
    with live_service(tmp_path / "data", grace_s=20) as live:
        admin = live.client()
        job = live.client(ALICE).submit(command=stubborn, vc="vc1", gpus=1, name="stubborn")
        first = running_on(job)
        wait_until(lambda: "ready" in job.logs().data, "the job to ignore SIGTERM")
        down = admin.node_down(first, "stubborn test")
        assert down["healthy"] is False
        wait_until(lambda: job.refresh().reason == "stopping", "the job to be stopping")
        # The admin's 1-GPU job: on this 2-node cluster, with one node down, only vc1's cell
        # on the other node has room.
        other = admin.submit(command="true", vc="vc1", gpus=1, name="other")
        assert other.wait(timeout=30, poll_s=0.05).state == "SUCCEEDED"
        assert job.refresh().reason == "stopping", "the stubborn job ended before its grace"
        wait_until(lambda: job.refresh().reason != "stopping", "the stubborn job to end", 60)
        assert not node(admin, first)["used"]
