"""What ``GET /queue``, ``GET /me/standing`` and ``/metrics`` show of the policy's state,
read once per scheduler pass and shared by every request until the next one.

With 10,000 waiting jobs, the cluster view walks every job (per-VC counts) and the fair-share
standing walks every VC's queue: ~15-25 ms each on a busy 2-core machine, under the loop's lock
(which stalls the pass meanwhile). Every ``GET /queue`` paid the walk; now the first request
after a pass does and the rest reuse it. The views of the jobs a page shows (their why-texts
cost ~80 us each) are kept for the same pass too. Reading is thread-safe the way the other
views are: under the lock the loop holds while it changes the policy
(``SchedulerLoop.reading``), so a view is never of a half-applied event.

A view is kept while the loop has made no further pass and its policy is the same object (a
recovery builds a new one), and for at most ``MAX_AGE_S``: between passes running jobs go on
using GPUs, and the standing's usage is shown as of the time it was read. The key is read
before the state, so a view of a newer state filed under an older key is only read again once
more, never the reverse.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labhive.scheduler.core.model import ClusterView, JobView
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.hived.standing import VCStanding, standings

if TYPE_CHECKING:
    from labhive.scheduler.service.loop import SchedulerLoop

#: The longest a view is reused while the loop makes no pass (seconds).
MAX_AGE_S = 5.0


@dataclass(frozen=True)
class PassView:
    """The cluster (per-VC counts, nodes) and, under fair share, every user's standing per
    VC (None without fair share)."""

    cluster: ClusterView[int]
    standings: dict[str, VCStanding] | None
    read_at: float  # time.monotonic() when read


class PassViews:
    """The latest ``PassView`` of one loop."""

    def __init__(self, loop: SchedulerLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()  # one reader computes; the others wait and reuse it
        self._key: tuple[int, Any] | None = None
        self._view: PassView | None = None
        self._jobs: dict[int, JobView[int] | None] = {}  # job views of the same pass
        self.computed = 0  # how many views were read from the policy (tests, benchmarks)

    def get(self) -> PassView:
        with self._lock:
            return self._current()

    def jobs(self, job_ids: list[int]) -> dict[int, JobView[int] | None]:
        """The policy's views of these jobs (None: it no longer holds the job) as of the same
        pass: each job's view (its why-text above all) is built once per pass, under one hold
        of the loop's lock for all the jobs a page lacks, not once per job per request."""
        with self._lock:
            self._current()
            known = self._jobs
            missing = [j for j in job_ids if j not in known]
            if missing:
                with self.loop.reading:
                    policy = self.loop.policy
                    known.update((j, policy.job(j)) for j in missing)
            return {j: known[j] for j in job_ids}

    def _current(self) -> PassView:
        """The view for the loop's latest pass, read anew when the one kept is stale (the
        caller holds ``_lock``)."""
        loop = self.loop
        key = (loop.passes, loop.policy)  # before the state (the module's docstring)
        view = self._view
        if view is not None and self._fresh(key, view):
            return view
        with loop.reading:
            policy = loop.policy
            cluster = policy.cluster()
            sched = policy.scheduler  # (other policies have no fair share)
            found = standings(sched, loop.clock()) if isinstance(sched, HivedScheduler) else None
        self._key, self._view = key, PassView(cluster, found, time.monotonic())
        self._jobs = {}
        self.computed += 1
        return self._view

    def _fresh(self, key: tuple[int, Any], view: PassView) -> bool:
        old = self._key
        return (
            old is not None
            and old[0] == key[0]
            and old[1] is key[1]
            and time.monotonic() - view.read_at < MAX_AGE_S
        )
