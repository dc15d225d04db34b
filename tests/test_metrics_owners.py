"""Given real processes, expect a GPU process to be mapped to the LabHive job whose recorded
task pid is its ancestor, and a stranger's process to no job."""

from __future__ import annotations

import os
import subprocess

import psutil
from waiting import wait_until

from labhive.scheduler.observe.owners import owner_of, process_owners
from labhive.scheduler.observe.prometheus import Owner


def test_grandchild_of_a_task_belongs_to_its_job() -> None:
    # the task's shell starts a shell that starts the "training" process
    task = subprocess.Popen(["sh", "-c", "sh -c 'sleep 30' & wait"])
    try:
        (leaf,) = wait_until(
            lambda: [
                p for p in psutil.Process(task.pid).children(recursive=True) if p.name() == "sleep"
            ],
            "the task's sleep",
            5,
        )
        alice = Owner("42", "vc1", "alice")
        assert owner_of(leaf.pid, {task.pid: alice}) == alice
        assert owner_of(os.getpid(), {task.pid: alice}) is None  # the test runner is a stranger
        assert process_owners([leaf.pid, os.getpid()], {task.pid: alice}) == {leaf.pid: alice}
    finally:
        for child in psutil.Process(task.pid).children(recursive=True):
            child.kill()
        task.kill()
        task.wait()


def test_vanished_process_has_no_owner() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert owner_of(gone.pid, {}) is None


def test_orphan_is_found_by_its_process_group() -> None:
    """The task leads a process group; a grandchild whose parent exited is reparented to init
    but stays in the group."""
    task = subprocess.Popen(
        ["sh", "-c", "sleep 30 & echo $!; exit 0"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert task.stdout is not None  # stdout=PIPE
    orphan = int(task.stdout.readline())
    task.wait()
    try:
        assert psutil.Process(orphan).ppid() != task.pid
        bob = Owner("7", "vc2", "bob")
        assert owner_of(orphan, {task.pid: bob}) == bob
    finally:
        psutil.Process(orphan).kill()
