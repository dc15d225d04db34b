"""Admission as a pure function of the config (issue 19, item 4): ``hived.admission.Admission``
holds the numbers a check reads, derived once; the service checks a submission with it once,
at intake, and the loop's policy takes the job as admitted."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from loop_helpers import job_state, loop_by_hand, submit_by_hand

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import JobSpec, parse_job
from labhive.scheduler.core.model import NodeDown, Reconfigure, SpecRejected, Submit
from labhive.scheduler.hived.admission import Admission, reject_if_never_runs
from labhive.scheduler.hived.core import HivedScheduler
from labhive.scheduler.policies import admission, get_policy
from labhive.scheduler.service.server import ServeOptions, build

CLUSTER = """\
physicalCluster:
  skuTypes:
    K80: {gpu: 1, cpu: 4, memory: 8192Mi}
    V100: {gpu: 1, cpu: 8, memory: 16384Mi}
  cellTypes:
    K80-NODE: {childCellType: K80, childCellNumber: 4, isNodeLevel: true}
    K80-RACK: {childCellType: K80-NODE, childCellNumber: 2}
    V100-NODE: {childCellType: V100, childCellNumber: 8, isNodeLevel: true}
  physicalCells:
  - cellType: K80-RACK
    cellChildren: [{cellAddress: k0}, {cellAddress: k1}]
  - {cellType: V100-NODE, cellAddress: v0, pinnedCellId: PIN}
virtualClusters:
  a:
    virtualCells: [{cellType: K80-RACK.K80-NODE, cellNumber: 1}]
    pinnedCells: [{pinnedCellId: PIN}]
  b: {virtualCells: [{cellType: K80-RACK.K80-NODE.K80, cellNumber: 3}]}
"""

#: Specs (short form) and what admission says of them; None: accepted.
CASES: list[tuple[dict[str, Any], str | None]] = [
    ({"vc": "a", "gpus": 2}, None),
    ({"vc": "zz", "gpus": 1}, "unknown VC 'zz'; this cluster has a, b"),
    ({"vc": "a", "gpus": 1, "sku": "V100"}, "a has V100 cells only in its pinned cells (PIN)"),
    ({"vc": "b", "gpus": 1, "sku": "V100"}, "b has no V100 cells; it has 3 K80 GPUs."),
    ({"vc": "a", "gpus": 9}, "the largest K80/V100 node has 8"),
    ({"vc": "b", "gpus": 2, "tasks": 2}, "more than b has in all (3 K80 GPUs); ask for at most 3"),
    ({"vc": "a", "gpus": 1, "pinned_cell": "PIN"}, None),
    (
        {"vc": "a", "gpus": 1, "pinned_cell": "PIN", "sku": "V100"},
        "names both skuType V100 and pinnedCellId PIN",
    ),
    ({"vc": "b", "gpus": 1, "pinned_cell": "PIN"}, "pinnedCellId PIN is not pinned to b"),
]


def _spec(short: dict[str, Any]) -> JobSpec:
    return parse_job({"name": "j", "priority": "prod", **short})


def _message(check: Any, spec: JobSpec) -> str | None:
    try:
        check(spec)
    except SpecRejected as err:
        return str(err)
    return None


@pytest.mark.parametrize(("short", "expected"), CASES)
def test_the_pure_check_says_what_the_scheduler_says(
    short: dict[str, Any], expected: str | None
) -> None:
    config = load_cluster_config_text(CLUSTER)
    spec = _spec(short)
    pure = _message(lambda s: reject_if_never_runs(Admission.of(config), s), spec)
    assert pure == _message(HivedScheduler(config).check, spec)
    assert pure == _message(admission("hived", config), spec)
    assert (pure is None) == (expected is None)
    assert expected is None or (pure is not None and expected in pure)


def test_admission_reads_the_config_not_who_uses_the_cells() -> None:
    """A full cluster with its nodes down answers every check as an idle one does."""
    config = load_cluster_config_text(CLUSTER)
    busy = HivedScheduler(config)
    busy.handle(Submit("big", _spec({"vc": "a", "gpus": 4})))
    busy.handle(Submit("pin", _spec({"vc": "a", "gpus": 8, "pinned_cell": "PIN"})))
    for node in ("k0", "k1", "v0"):
        busy.handle(NodeDown(node, reason="test"))
    idle = Admission.of(config)
    assert busy.admission == idle
    for short, _ in CASES:
        spec = _spec(short)
        assert _message(busy.check, spec) == _message(lambda s: reject_if_never_runs(idle, s), spec)


def test_a_reconfigure_rebuilds_the_record() -> None:
    config = load_cluster_config_text(CLUSTER)
    sched = HivedScheduler(config)
    spec = _spec({"vc": "b", "gpus": 1})
    sched.check(spec)
    smaller = load_cluster_config_text(CLUSTER.replace("  b: {virtualCells", "  c: {virtualCells"))
    sched.handle(Reconfigure(smaller))
    assert sched.admission == Admission.of(smaller) != Admission.of(config)
    with pytest.raises(SpecRejected, match="unknown VC 'b'; this cluster has a, c"):
        sched.check(spec)


def test_the_record_is_frozen_and_holds_the_vcs_numbers() -> None:
    facts = Admission.of(load_cluster_config_text(CLUSTER))
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.has_skus = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        facts.max_node["K80"] = 1  # type: ignore[index]
    a = facts.vcs["a"]
    assert (a.leaves, a.cells, a.types, a.free_types) == (
        12,
        "4 K80 + 8 V100 GPUs",
        {"K80", "V100"},
        {"K80"},
    )
    assert dict(facts.max_node) == {"K80": 4, "V100": 8}
    assert dict(facts.type_leaves) == {"K80": 8, "V100": 8}


@pytest.mark.parametrize("policy", ["fifo", "capacity"])
def test_a_queue_policy_keeps_its_own_check(policy: str) -> None:
    config = load_cluster_config_text(CLUSTER)
    for short in ({"vc": "a", "gpus": 2}, {"vc": "zz", "gpus": 1}, {"vc": "a", "gpus": 64}):
        spec = _spec(short)
        assert _message(admission(policy, config), spec) == _message(
            get_policy(policy, config).check, spec
        )


def test_an_admitted_submit_is_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = HivedScheduler(load_cluster_config_text(CLUSTER))
    checked: list[JobSpec] = []
    monkeypatch.setattr(sched, "check", checked.append)
    sched.handle(Submit("x", _spec({"vc": "a", "gpus": 1}), admitted=True))
    assert checked == []
    sched.handle(Submit("y", _spec({"vc": "a", "gpus": 1})))
    assert len(checked) == 1


def test_the_service_builds_no_policy_for_admission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []
    init = HivedScheduler.__init__

    def counting(self: HivedScheduler, config: Any) -> None:
        made.append(self)
        init(self, config)

    monkeypatch.setattr(HivedScheduler, "__init__", counting)
    running = build(ServeOptions(data_dir=tmp_path / "data", grace_s=1))
    try:
        assert len(made) == 1  # the loop's own
        assert made[0] is running.service.loop.scheduler
    finally:
        running.service.intake.close()
        running.service.loop.stop(stop_tasks=True)
        running.service.store.dispose()


def test_the_loop_does_not_check_what_the_intake_admitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(spec: JobSpec) -> None:
        raise AssertionError("checked twice")

    with loop_by_hand(tmp_path / "data") as loop:
        monkeypatch.setattr(loop.scheduler, "check", refuse)
        doc = {"name": "a", "vc": "vc1", "gpus": 1, "command": "true"}
        job_id = submit_by_hand(loop, doc, admitted=True)
        loop.step()
        assert job_state(loop, job_id) in ("RUNNING", "SUCCEEDED")


def load_cluster_config_text(text: str) -> Any:
    return load_cluster_config(yaml.safe_load(text))
