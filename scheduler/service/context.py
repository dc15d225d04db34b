"""The ``Service``: what the REST handlers share (store, loop, executor, authenticator, the
parse and check of a submission), in a module of its own so that ``app.py``, the ``JobService``
facade the ``api/`` handlers call both depend on it and not on each other."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.core.jobs import JobSpec
from labhive.scheduler.core.model import SpecRejected
from labhive.scheduler.executors.base import Executor
from labhive.scheduler.executors.gpu_share_env import NOT_ENFORCED
from labhive.scheduler.service.accounts import Accounts
from labhive.scheduler.service.auth import Authenticator, Forbidden, Identity
from labhive.scheduler.service.diskspace import DiskGuard
from labhive.scheduler.service.housekeeping import Housekeeping
from labhive.scheduler.service.intake import Intake
from labhive.scheduler.service.loop import SchedulerLoop
from labhive.scheduler.service.monitoring import Monitoring
from labhive.scheduler.service.pass_views import PassViews
from labhive.scheduler.service.store import Store

#: The largest request body the service reads (a job file is far smaller).
MAX_BODY = 1 << 20


@dataclass
class Service:
    """What the handlers need; ``server.build`` assembles it."""

    store: Store
    loop: SchedulerLoop
    executor: Executor
    auth: Authenticator
    parse: Callable[[dict[str, Any]], JobSpec]
    #: The one check of a submission against the cluster (``policies.admission``: for HiveD a
    #: pure function of the config); the loop's policy takes what passed it as admitted.
    check: Callable[[JobSpec], None]
    intake: Intake | None = None
    policy: str = "hived"
    max_body: int = MAX_BODY
    loop_stall_s: float = 30.0  # /health is 503 once the loop has not passed for this long
    monitoring: Monitoring | None = None  # GPU sampler and /metrics (off when not given)
    accounts: Any = None  # users' OS identities (service/accounts.py), for GET /me
    owners: Accounts | None = None  # account numbers: jobs are owned by them, not by names
    disk: DiskGuard | None = None  # the data dir's headroom: 507 for submissions when full
    housekeeping: Housekeeping | None = None  # the disk guard's tick and work-dir retention
    #: What enforces a GPU share here, as a share's record says (``gpu_share_env``).
    gpu_sharing_note: str = NOT_ENFORCED

    #: The policy's state as the queue, the standing and /metrics show it: once per pass.
    pass_views: PassViews | None = None

    def __post_init__(self) -> None:
        self._check_lock = threading.Lock()
        if self.owners is None:
            self.owners = Accounts(self.store)
        if self.intake is None:
            self.intake = Intake(self.store, self.loop)
        if self.monitoring is None:
            self.monitoring = Monitoring(self.store, self.loop, interval_s=0)
        if self.pass_views is None:
            self.pass_views = PassViews(self.loop)

    def identify(self, request: Request) -> Identity:
        """The caller with their account number, which every ownership check compares."""
        return self.numbered(self.auth.identify(request))

    def numbered(self, who: Identity) -> Identity:
        """``who`` with their account number (the first sight of a hub user writes it)."""
        assert self.owners is not None
        return dataclasses.replace(who, id=self.owners.id_of(who))

    def admit(self, doc: dict[str, Any], who: Identity) -> JobSpec:
        """Parse and check a submission; raise a UserError/SpecRejected/Forbidden to refuse."""
        try:
            spec = self.parse(doc)
        except UserError:
            raise
        except (ValueError, TypeError, KeyError) as err:
            raise UserError(f"invalid job: {err}") from err
        with self._check_lock:
            try:
                self.check(spec)
            except SpecRejected as err:  # say what would make it runnable, when something does
                from labhive.scheduler.forecast.suggest import with_remedy

                vcs = [v for v in self.loop.cluster().vcs if who.may_submit_to(v)]
                raise SpecRejected(with_remedy(str(err), spec, vcs, self.check)) from err
        if not who.may_submit_to(spec.vc):
            allowed = ", ".join(sorted(who.vcs)) or "none"
            raise Forbidden(f"you may not submit to VC {spec.vc!r}; your groups grant: {allowed}")
        return dataclasses.replace(spec, user=who.name)
