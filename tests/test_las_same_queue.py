"""Given LAS with Tiresias' same-queue rule (``las:same_queue=true``), expect a job demoted
while it runs to go behind the jobs already waiting in its new queue, and those jobs to take
its GPUs at once, as Tiresias' dlas-gpu hands out GPUs in queue order; without the rule the
demoted job keeps running ahead of them."""

from __future__ import annotations

from sim_helpers import cluster, job, las, simulate

from labhive.scheduler.core.model import Cancel, Finish, Submit


def _demoted_behind_a_waiting_job(same_queue: bool) -> dict[str, tuple[float | None, float]]:
    """One 4-GPU node, two queues split at 100 GPU-seconds, no minimum run. c (4 GPUs) starts
    at 0 and is demoted at 25; a (4 GPUs, submitted at 10, waiting in the top queue) preempts
    it then. a is demoted in turn at 50, into the queue where c waits."""
    jobs = simulate(
        "las",
        cluster([4]),
        [job("c", 0, 4, 1000), job("a", 10, 4, 1000)],
        checkpoint=1,
        thresholds=(100.0,),
        quantum=0,
        promote_knob=0,
        same_queue=same_queue,
    )
    return {name: (j.end, j.run_seconds) for name, j in jobs.items()}


def test_a_job_demoted_behind_a_waiting_job_is_preempted_by_it() -> None:
    ends = _demoted_behind_a_waiting_job(same_queue=True)
    # c waited in the lower queue since 25 and is ahead of a there: it runs again at 50
    assert ends["c"] == (50 + 975, 1000)
    assert ends["a"] == (1025 + 975, 1000)


def test_without_the_rule_the_demoted_job_runs_on() -> None:
    ends = _demoted_behind_a_waiting_job(same_queue=False)
    assert ends["a"] == (25 + 1000, 1000)
    assert ends["c"] == (1025 + 975, 1000)


def test_a_finished_or_cancelled_job_leaves_no_entry_behind() -> None:
    """Given LAS with the same-queue rule on one 4-GPU node, a job that finishes and one
    cancelled while it waits leave no entry order behind (the rule's books hold only the jobs
    LAS holds): a finish reaches the policy by ``handle``'s own path, not ``_remove``'s, and
    its entry was once left there, a leak a job and a stale order for a job id submitted
    again."""
    policy = las(cluster([4]), same_queue="true")
    for n, name in enumerate(["a", "b"]):
        spec = job(name, float(n), 4, 100).spec
        policy.check(spec)
        policy.handle(Submit(name, spec, float(n)))
    assert set(policy._entry) == {"a", "b"}
    policy.handle(Cancel("b", 5.0))
    policy.handle(Finish("a", 10.0))
    assert policy._entry == {} and policy._entered_at == {}
