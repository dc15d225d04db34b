"""Given the store's event rows of a few jobs, expect submissions, preemptions, retries,
failures and queue waits per VC, each row counted once however often it is fed."""

from __future__ import annotations

from labhive.scheduler.observe.tally import EventTally, JobEvent, failure_reason

ROWS = [
    # job 1 (vc1): submitted at 0, started at 10, preempted at 50, restarted at 80, succeeded
    JobEvent(1, 1, "vc1", 0.0, None, "WAITING", "submitted"),
    JobEvent(2, 1, "vc1", 10.0, "WAITING", "RUNNING", "started"),
    JobEvent(3, 2, "vc2", 20.0, None, "WAITING", "submitted"),
    JobEvent(4, 1, "vc1", 50.0, "RUNNING", "WAITING", "preempted"),
    JobEvent(5, 1, "vc1", 80.0, "WAITING", "RUNNING", "started"),
    JobEvent(6, 1, "vc1", 81.0, "RUNNING", "RUNNING", "more tasks started"),
    JobEvent(7, 1, "vc1", 90.0, "RUNNING", "SUCCEEDED", "succeeded"),
    # job 3 (vc1): fails once, retries, fails for good
    JobEvent(8, 3, "vc1", 100.0, None, "WAITING", "submitted"),
    JobEvent(9, 3, "vc1", 100.0, "WAITING", "RUNNING", "started"),
    JobEvent(10, 3, "vc1", 110.0, "RUNNING", "WAITING", "retrying"),
    JobEvent(11, 3, "vc1", 112.0, "WAITING", "RUNNING", "started"),
    JobEvent(12, 3, "vc1", 120.0, "RUNNING", "FAILED", "failed"),
]


def test_counts_per_vc() -> None:
    tally = EventTally()
    tally.add(ROWS[:5])
    tally.add(ROWS[3:])  # overlapping feed: rows already seen are skipped
    assert tally.cursor == 12
    assert tally.submissions() == {"vc1": 2, "vc2": 1}
    assert tally.preemptions() == {"vc1": 1}
    assert tally.retries() == {"vc1": 1}
    assert tally.failures() == {("vc1", "failed"): 2}  # the retried attempt and the last one


def test_queue_waits_count_each_start_from_its_latest_wait() -> None:
    tally = EventTally()
    tally.add(ROWS)
    waits = tally.queue_wait()["vc1"]
    # waits: 10 (first start), 30 (after preemption), 0 and 2 (job 3)
    assert sum(waits.counts) == 4 and waits.total == 42.0
    assert "vc2" not in tally.queue_wait()  # job 2 never started
    assert tally.oldest_wait(now=100.0) == {"vc2": 80.0}  # only job 2 is still waiting


def test_oom_kills_are_counted_from_executor_exit_reasons() -> None:
    tally = EventTally()
    tally.task_failed("vc1", "killed by SIGKILL: went over its memory limit of 512 MB")
    tally.task_failed("vc1", "exit code 1")
    assert tally.failures() == {("vc1", "oom_killed"): 1}
    assert failure_reason("OOMKilled") == "oom_killed"


def test_disk_limit_ends_are_counted_by_their_kind() -> None:
    tally = EventTally()
    tally.task_failed("vc1", "disk full: the data dir's file system filled up while it ran")
    tally.task_failed("vc1", "task main-0 could not start: disk full: the service's data dir")
    tally.task_failed("vc1", "killed: over its disk quota of 10 GiB (its work dir held 10.1 MiB)")
    tally.task_failed("vc1", "killed: its stdout went past its cap of 100 MiB")
    assert tally.failures() == {
        ("vc1", "disk_full"): 2,
        ("vc1", "disk_quota"): 1,
        ("vc1", "output_cap"): 1,
    }
