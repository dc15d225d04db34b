"""The FGD paper's trace variants, built from the Alibaba default pod list
(scheduler/sim/openb_variants.py).

Given a slice of the real default list, expect each variant to hold what the paper's files
hold: gpushare80 with sharing tasks asking for 80% of the GPU capacity asked for and as many
GPU tasks as before, multigpu20 with the default's tasks plus copies of multi-GPU tasks up to
20%, gpuspec33 with a third of GPU tasks constrained to GPU models the cluster has; the same
seed, the same list; and ``labhive simulate --fill paper --variant`` running on it."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from sim_helpers import DATA

from labhive.scheduler.cli import main
from labhive.scheduler.core.errors import UserError
from labhive.scheduler.sim.openb import load_nodes, load_pods
from labhive.scheduler.sim.openb_variants import build_variant

ALIBABA = DATA / "alibaba-gpu-v2023"
POD_LIST = ALIBABA / "openb_pod_list_default.csv"
NODE_LIST = ALIBABA / "openb_node_list_gpu_node.csv"


@pytest.fixture(scope="module")
def pods() -> list:
    return load_pods(POD_LIST, limit=2000, unscheduled=True).pods


def _demand_share(pods: list, which) -> float:  # type: ignore[no-untyped-def]
    gpu = [p for p in pods if p.gpus > 0]
    return sum(p.demand for p in gpu if which(p)) / sum(p.demand for p in gpu)


def test_gpushare80_has_sharing_tasks_ask_for_80_percent(pods: list) -> None:
    before = _demand_share(pods, lambda p: p.sharing)
    built = build_variant(pods, "gpushare80", seed=1)
    assert before < 0.5
    assert _demand_share(built, lambda p: p.sharing) == pytest.approx(0.80, abs=0.03)
    assert sum(p.gpus > 0 for p in built) == sum(p.gpus > 0 for p in pods)
    assert Counter(p for p in built if p.gpus == 0) == Counter(p for p in pods if p.gpus == 0)
    assert len({p.name for p in built}) == len(built)  # copies get names of their own


def test_multigpu20_adds_copies_of_multi_gpu_tasks_up_to_20_percent(pods: list) -> None:
    built = build_variant(pods, "multigpu20", seed=1)
    assert built[: len(pods)] == pods  # every task kept
    added = built[len(pods) :]
    assert added and all(p.gpus > 1 for p in added)
    share = _demand_share(built, lambda p: p.gpus > 1)
    assert 0.20 <= share < 0.20 + 8000 / sum(p.demand for p in built)


def test_gpuspec33_constrains_a_third_of_gpu_tasks_to_models_the_cluster_has(
    pods: list,
) -> None:
    built = build_variant(pods, "gpuspec33", seed=1)
    models = {n.model for n in load_nodes(NODE_LIST)}
    gpu = [p for p in built if p.gpus > 0]
    constrained = [p for p in gpu if p.models]
    assert len(constrained) == round(0.33 * len(gpu))
    assert all(p.models <= models for p in constrained)
    assert [p.name for p in built] == [p.name for p in pods]


def test_the_same_seed_builds_the_same_list_and_a_bad_name_is_refused(pods: list) -> None:
    assert build_variant(pods, "gpushare80", 3) == build_variant(pods, "gpushare80", 3)
    assert build_variant(pods, "gpushare80", 3) != build_variant(pods, "gpushare80", 4)
    with pytest.raises(UserError, match="gpushareN, multigpuN or gpuspecN"):
        build_variant(pods, "gpushare", 0)


def test_simulate_fill_paper_builds_the_variant(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--json", "--quiet", "--trace", str(POD_LIST), "--cluster",
            str(NODE_LIST), "--machines", "20", "--limit", "400", "--fill", "paper",
            "--policy", "fgd", "--variant", "gpushare80"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("variant gpushare80" in n for n in doc["notes"])
