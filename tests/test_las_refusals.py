"""Given eight 8-GPU nodes, each running a 6-GPU job, and eight 1-GPU jobs (best fit puts two on
each of nodes 0 to 3: four nodes full, four with 2 GPUs free), and LAS jobs of 5 to 8 then 3 and
4 GPUs waiting, one line each: expect placement's refusal of a GPU count by free counts
(``NodePool.may_fit``, kept by ``SizeRefusals``) to be asked once and kept across passes until a
release leaves some node with that many GPUs free (``NodePool.wake_level``), and a pass whose
searches are spent to skip the lines so refused without fetching their heads (``_thinned``);
expect a head to start as soon as a release makes room for it, as a pass asking afresh at every
try decides (``test_pass_skips.py`` holds the two to the same decisions on random workloads).

Why: on a contended cluster most waiting lines' heads are gangs placement refuses, each pass
follows a finish that frees a GPU or two on one node, and asking the wide-gang bound again for
each of them at every pass was 7% of a contended LAS run (issue 34).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_pass_skips import LAS, eight_nodes_of_eight, tries_of

from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, Start, Submit, Tick
from labhive.scheduler.policies.las import LasPolicy
from labhive.scheduler.policies.node_pool import NodePool
from labhive.scheduler.policies.queued import QueuedPolicy, from_config
from labhive.scheduler.policies.size_refusals import SizeRefusals

# White-box throughout: subclasses of the compiled ``SizeRefusals`` (never forgetting,
# counting what it asks).
pytestmark = pytest.mark.sources


class NeverForgetting(SizeRefusals):
    """The attack: a refusal kept past the release that ended it (``peak`` ignored)."""

    def _wake(self, peak: int) -> None:
        pass


class LasNeverForgetting(LasPolicy):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sizes = NeverForgetting()


class Counted(SizeRefusals):
    """Keeps the GPU counts it asks the pool about, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def _ask(self, pool: NodePool, gpus: int) -> bool:
        self.asked.append(gpus)
        return super()._ask(pool, gpus)


def waiting_behind_full_nodes(cls: type[QueuedPolicy]) -> tuple[QueuedPolicy, float]:
    """The cluster of the module's docstring, all jobs young (none may be preempted) and in
    LAS's top queue; w2 to w8 waiting."""
    policy = from_config(cls, eight_nodes_of_eight(), {}, **LAS)
    now = 0.0
    jobs = [(f"big{i}", 6) for i in range(8)] + [(f"one{i}", 1) for i in range(8)]
    order = [f"w{g}" for g in (5, 6, 7, 8, 3, 4)]
    for job_id, gpus in jobs + [(w, int(w[1:])) for w in order]:
        now += 0.01
        spec = parse_job({"name": job_id, "vc": "vc0", "user": job_id, "gpus": gpus})
        policy.check(spec)
        policy.handle(Submit(job_id, spec, now))
    assert [v.job_id for v in policy.jobs() if v.state == "WAITING"] == order
    assert {v.name: len(v.used) for v in policy.pool.views()} == {
        f"n{i}": 8 if i < 4 else 6 for i in range(8)
    }
    return policy, now


def asked(policy: QueuedPolicy) -> list[int]:
    """The GPU counts the policy asks the pool about from now on, in order (what it knew
    before is kept: the refusals so far move to the counting keeper)."""
    counted, kept = Counted(), policy._sizes
    counted._pool, counted._refused, counted._low = kept._pool, kept._refused, kept._low
    policy._sizes = counted
    return counted.asked


def started(decisions: list[Any]) -> list[str]:
    return [d.job_id for d in decisions if isinstance(d, Start)]


def test_a_refused_gpu_count_is_asked_again_only_once_a_node_has_that_many_free() -> None:
    policy, now = waiting_behind_full_nodes(LasPolicy)
    sizes = asked(policy)
    tried = tries_of(policy)
    # w5 and w6 spend the pass's two searches (nothing to preempt); 7, 8, 3, 4 GPUs: refused
    assert policy.handle(Tick(now + 1.0)) == []
    assert sizes == [7, 8, 3, 4] and tried == ["w5", "w6"]
    sizes.clear()
    tried.clear()
    # one0 ends: node 0 has 1 GPU free, no node as many as any refused count: the pass tries
    # the two heads that spend its searches, and neither asks nor fetches the others (the
    # counts of w5 and w6, refused by their tries, are asked once first: may the kept quiet
    # pass be replayed? ``LasPolicy._all_refused``; it may not, their searches changed)
    assert policy.handle(Finish("one0", now + 2.0)) == []
    assert sizes == [5, 6] and tried == ["w5", "w6"]
    sizes.clear()
    # big0 and one1 end: node 0 is empty. w5 starts there, and w3 beside it (3 GPUs left)
    ends = [Finish("big0", now + 3.0), Finish("one1", now + 3.0)]
    assert started(policy.handle_batch(ends)) == ["w5", "w3"]
    # (w5 is placed once ``may_fit`` passes it, not asked again; the refused 8, 3 and 4 are
    # asked again now that node 0 has 8 GPUs free, and 3 then fits beside w5; 3 was asked
    # first by the replay's test, which it fails)
    assert sizes == [3, 8, 3, 4]


def test_a_refusal_kept_past_the_release_that_ended_it_leaves_a_head_waiting() -> None:
    """The attack: the same events given to LAS keeping refusals for ever. 3 GPUs were
    refused while no node had 3 free; once node 0 is empty w3 fits beside w5, and only the
    policy that forgets the refusal on that release starts it."""
    outcomes = {}
    for cls in (LasPolicy, LasNeverForgetting):
        policy, now = waiting_behind_full_nodes(cls)
        policy.handle(Tick(now + 1.0))
        policy.handle(Finish("one0", now + 2.0))
        ends = [Finish("big0", now + 3.0), Finish("one1", now + 3.0)]
        outcomes[cls.__name__] = started(policy.handle_batch(ends))
    assert outcomes == {"LasPolicy": ["w5", "w3"], "LasNeverForgetting": ["w5"]}
