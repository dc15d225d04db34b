"""Shared test helpers: where the data lives, and a scheduler that is easy to talk to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labhive.scheduler.core.config import ClusterConfig, load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Decision, Event, Finish, Preempt, Start, Submit
from labhive.scheduler.hived.core import HivedScheduler

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
HIVED = DATA / "hived"
LAB = DATA / "openpai-lab6"
EXAMPLES = Path(__file__).resolve().parents[1] / "scheduler" / "examples"


class Cluster:
    """A HiveD scheduler plus the decisions of the last event, for readable tests."""

    def __init__(self, config: ClusterConfig | str | Path) -> None:
        if not isinstance(config, ClusterConfig):
            config = load_cluster_config(config)
        self.sched = HivedScheduler(config)
        self.last: list[Decision] = []

    def handle(self, event: Event) -> list[Decision]:
        self.last = self.sched.handle(event)
        return self.last

    def submit(self, name: str, **short: Any) -> list[Decision]:
        return self.handle(Submit(name, parse_job({"name": name, **short})))

    def finish(self, name: str) -> list[Decision]:
        return self.handle(Finish(name))

    def nodes(self, name: str) -> list[str]:
        view = self.sched.job(name)
        assert view is not None, f"{name} is not in the scheduler"
        return sorted(t.node for t in view.tasks)

    def gpus(self, name: str) -> dict[str, tuple[int, ...]]:
        view = self.sched.job(name)
        assert view is not None
        return {t.node: t.gpus for t in view.tasks}

    def state(self, name: str) -> str:
        view = self.sched.job(name)
        assert view is not None
        return view.state

    def why(self, name: str) -> str | None:
        view = self.sched.job(name)
        assert view is not None
        return view.why

    def started(self) -> list[str]:
        return [d.job_id for d in self.last if isinstance(d, Start)]

    def preempted(self) -> list[str]:
        return [d.job_id for d in self.last if isinstance(d, Preempt)]
