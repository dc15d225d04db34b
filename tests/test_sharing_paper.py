"""The FGD paper's fill experiment and baselines (scheduler/sim/sharing_paper.py).

Given hand-made nodes and one pod, expect the placement each of the paper's policies defines;
given a slice of the real Alibaba cluster, expect the checked table of unallocated GPU shares;
given a seed, expect the same run twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sim_helpers import DATA

from labhive.scheduler.cli import main
from labhive.scheduler.sim.openb import MILLI, NodeSpec, Pod, load_nodes, load_pods
from labhive.scheduler.sim.openb_variants import build_variant
from labhive.scheduler.sim.sharing import GpuNode
from labhive.scheduler.sim.sharing_paper import (
    PAPER_PLACEMENTS,
    PaperCluster,
    PaperFragmentation,
    node_names,
    paper_classes,
    paper_fill,
    paper_workload,
    summarise,
)

ALIBABA = DATA / "alibaba-gpu-v2023"
ROOT = Path(__file__).resolve().parents[1]


def pod(name: str, gpus: int = 1, milli: int = MILLI, cpu: int = 1000,
        models: tuple[str, ...] = ()) -> Pod:  # fmt: skip
    return Pod(name, 0.0, 0.0, cpu, 1024, gpus, milli if gpus == 1 else gpus and MILLI,
               frozenset(models))  # fmt: skip


def node(name: str, gpus: int, cpu: int = 32000, model: str = "T4") -> NodeSpec:
    return NodeSpec(name, cpu, 262144, gpus, model)


def cluster(specs: list[NodeSpec], placement: str, pods: list[Pod], seed: int = 0) -> PaperCluster:
    return PaperCluster(specs, paper_classes(pods), placement, seed=seed)


def placed(c: PaperCluster, p: Pod) -> GpuNode:
    """The node the placement picks for a pod that fits somewhere."""
    where = c.place(p)
    assert where is not None, f"{p.name} fits nowhere"
    return where


def test_paper_bestfit_weighs_free_cpu_and_gpu_half_and_half() -> None:
    # a has fewer free GPUs (1 vs 2) but b has far less CPU: LabHive's bestfit (GPU first)
    # would pick a; the paper's half-and-half leftover (CPU/128 + GPU/8) picks b:
    # a: 0.5*(64-1)/128 + 0.5*(1-1)/8 = 0.246; b: 0.5*(2-1)/128 + 0.5*(2-1)/8 = 0.066
    specs = [node("a", 1, cpu=64000), node("b", 2, cpu=2000)]
    c = cluster(specs, "paper-bestfit", [pod("x")])
    assert placed(c, pod("x")).name == "b"


def test_ties_go_to_the_first_name_as_in_the_paper_simulator_or_at_random() -> None:
    specs = [node(f"n{i}", 1) for i in (3, 1, 2, 0)]  # listed out of name order
    for placement in ("paper-bestfit", "fgd", "gpupacking"):
        c = PaperCluster(specs, paper_classes([pod("x")]), placement, seed=0, ties="name")
        assert placed(c, pod("x")).name == "n0", placement  # not the first listed, n3
    picked = {placed(PaperCluster(specs, paper_classes([pod("x")]), "fgd", seed=s,
                                  ties="random"), pod("x")).name for s in range(20)}  # fmt: skip
    assert len(picked) > 1


def test_the_first_name_is_a_node_drawn_per_seed_as_the_simulator_renames_its_nodes() -> None:
    # The paper's simulator prefixes the nodes, sorted by name, with "%04d-" of a seeded
    # permutation before the run: the tie winner is a random node, the same all run long.
    specs = [node(f"n{i}", 2) for i in (3, 1, 2, 0)]
    names = node_names(specs, seed=7)
    assert sorted(n.split("-", 1)[1] for n in names) == ["n0", "n1", "n2", "n3"]
    assert sorted(n.split("-", 1)[0] for n in names) == ["0000", "0001", "0002", "0003"]
    assert names == node_names(specs, seed=7)
    firsts = set()
    for s in range(30):
        c = PaperCluster(specs, paper_classes([pod("x")]), "gpupacking", seed=s)
        first = placed(c, pod("c1", gpus=0, milli=0))  # a CPU-only task ties everywhere
        assert first.name == min(zip(c.tie_name, specs, strict=True))[1].name
        assert placed(c, pod("c2", gpus=0, milli=0)) is first  # kept for the whole run
        firsts.add(first.name)
    assert firsts == {"n0", "n1", "n2", "n3"}  # not n0 every time, as with ties="name"


def test_random_picks_a_node_and_a_shares_gpu_at_random_whatever_the_tie_rule() -> None:
    # the paper's Random runs with -gpusel random: a first-name tie rule would make it first
    # fit, and the fullest GPU every time would make it a packer
    specs = [node(f"n{i}", 4) for i in range(2)]
    nodes, onto_fullest = set(), set()
    for s in range(40):
        c = cluster(specs, "random", [pod("s", milli=300)], seed=s)
        c.put(c.nodes[0], pod("h", milli=300), (1,))  # n0's GPU 1 is the fullest
        where = placed(c, pod("x", milli=300))
        nodes.add(where.name)
        if where.name == "n0":
            onto_fullest.add(where.free[1] == 400)
    assert nodes == {"n0", "n1"}
    assert onto_fullest == {True, False}


def test_gpupacking_prefers_a_partly_used_gpu_then_a_used_node_then_an_idle_one() -> None:
    specs = [node("idle", 2), node("used", 2), node("shared", 2)]
    c = cluster(specs, "gpupacking", [pod("s", milli=500)])
    c.put(c.nodes[1], pod("w"), (0,))  # used: one whole GPU taken, one free
    c.put(c.nodes[2], pod("h", milli=500), (0,))  # shared: half a GPU taken
    assert placed(c, pod("s", milli=300)).name == "shared"
    # a whole GPU: a node already in use (used and shared tie at 50 - 1), never the idle one
    assert placed(c, pod("w2")).name in ("used", "shared")


def test_gpuclustering_puts_a_share_beside_other_shares() -> None:
    specs = [node("a", 2), node("b", 2)]
    c = cluster(specs, "gpuclustering", [pod("s", milli=200)])
    first = c.place(pod("s1", milli=200))
    assert first is not None
    assert placed(c, pod("s2", milli=200)).name == first.name  # same kind of task already there


def test_fgd_fills_a_hole_instead_of_breaking_a_whole_gpu() -> None:
    # workload: half-GPU and whole-GPU tasks. a has one GPU with 0.5 free (a hole only a
    # share fits), b two whole GPUs free. A 0.5 share on b would leave a 0.5 hole and break
    # a whole GPU; on a it removes the hole: FGD (both scorings) picks a.
    workload = [pod("h", milli=500), pod("w")]
    for placement in ("fgd", "fgd-exact"):
        c = cluster([node("a", 1), node("b", 2)], placement, workload)
        c.put(c.nodes[0], pod("h0", milli=500), (0,))
        assert placed(c, pod("h1", milli=500)).name == "a", placement


def test_the_paper_measure_counts_cpu_only_classes_and_not_memory() -> None:
    # a CPU-only class can never use a GPU: all free GPU capacity is its fragment
    cpu_only = PaperFragmentation([(1.0, 1000, 0, 0, frozenset())])
    assert cpu_only.of("T4", 32000, [MILLI, 400]) == 1400
    # a whole-GPU class: partly used GPUs are fragments, and with too little CPU all of it
    whole = PaperFragmentation([(1.0, 8000, 1, MILLI, frozenset())])
    assert whole.of("T4", 32000, [MILLI, 400]) == 400
    assert whole.of("T4", 4000, [MILLI, 400]) == 1400
    # a class asking for another GPU model: all of it
    v100 = PaperFragmentation([(1.0, 1000, 1, 500, frozenset({"V100"}))])
    assert v100.of("T4", 32000, [MILLI, 400]) == 1400


def test_the_classes_are_the_popular_95_percent_with_cpu_only_tasks() -> None:
    pods = [pod(f"c{i}", gpus=0, milli=0) for i in range(60)] + [
        pod(f"s{i}", milli=500) for i in range(38)
    ] + [pod("rare1", gpus=8), pod("rare2", gpus=4)]  # fmt: skip
    classes = paper_classes(pods)
    assert [(g, s) for _, _, g, s, _ in classes] == [(0, 0), (1, 500)]
    assert abs(sum(w for w, *_ in classes) - 1) < 1e-9


def test_the_workload_keeps_every_row_shuffled_then_adds_copies_up_to_130_percent() -> None:
    pods = [pod("cpu", gpus=0, milli=0), pod("w"), pod("s", milli=500)]
    out = paper_workload(pods, capacity=10 * MILLI, seed=3)
    assert sorted(out[:3], key=lambda p: p.name) == sorted(pods, key=lambda p: p.name)
    demand = sum(p.demand for p in out)
    assert 12.5 * MILLI <= demand <= 13 * MILLI
    assert any(p.gpus == 0 for p in out[3:])  # CPU-only copies too


def test_summarise_gives_mean_and_sample_spread_over_seeds() -> None:
    (s,) = summarise([[0.1], [0.3]], (1.0,))
    assert s.mean == pytest.approx(0.2) and s.spread == pytest.approx(0.1414, abs=1e-3)
    assert (s.low, s.high) == (0.1, 0.3)


def test_an_unknown_placement_says_which_exist() -> None:
    with pytest.raises(ValueError, match="paper-bestfit"):
        cluster([node("a", 1)], "bestfit-ish", [pod("x")])


needs_trace = pytest.mark.skipif(not ALIBABA.is_dir(), reason=f"no Alibaba trace at {ALIBABA}")


@needs_trace
def test_the_same_seed_gives_the_same_fill_and_another_seed_another() -> None:
    pods = load_pods(ALIBABA / "openb_pod_list_default.csv", unscheduled=True).pods[:400]
    nodes = load_nodes(ALIBABA / "openb_node_list_gpu_node.csv", machines=30)
    for ties in ("seeded", "name", "random"):
        one = paper_fill(nodes, pods, "fgd", seed=5, ties=ties)
        assert one == paper_fill(nodes, pods, "fgd", seed=5, ties=ties)
        assert any(paper_fill(nodes, pods, "fgd", seed=s, ties=ties) != one for s in (6, 7))


#: Unallocated GPU share (%) at 100% arrived load on the first 200 GPU nodes with the default
#: list (tuned down to 130% of this slice's GPUs), seeds 0-2 mean, ties to the seeded first
#: name. Recorded from this simulator (the paper's simulator on this slice: BestFit 6.55, FGD
#: 4.59 - issue 34). With the nodes' own names (the rule before the simulator's renaming was
#: found) GPU packing and clustering left 6.19 and 6.59 here: every CPU-only task went to
#: openb-node-0000 first.
SLICE_TABLE = {
    "random": 15.08,
    "dotprod": 9.23,
    "gpupacking": 9.55,
    "gpuclustering": 9.76,
    "paper-bestfit": 6.70,
    "fgd": 5.20,
}


@needs_trace
def test_the_fgd_figures_on_a_slice_match_the_checked_table() -> None:
    pods = load_pods(ALIBABA / "openb_pod_list_default.csv", unscheduled=True).pods
    nodes = load_nodes(ALIBABA / "openb_node_list_gpu_node.csv", machines=200)
    started = time.process_time()  # CPU time: the wall clock here is shared by many
    got = {}
    for placement in SLICE_TABLE:
        runs = [paper_fill(nodes, pods, placement, loads=(1.0,), seed=s)[0] for s in range(3)]
        got[placement] = round(100 * sum(r.unallocated for r in runs) / 3, 2)
    assert time.process_time() - started < 20
    assert got == SLICE_TABLE
    assert got["fgd"] == min(got.values())  # FGD leaves the least unallocated


#: The same slice with the multigpu20 list built from the default list (``--variant
#: multigpu20``, drawn with seed 0), seeds 0-2: per seed and mean, under the simulator's tie
#: rule (nodes renamed with a seeded random prefix) and under the nodes' own names.
MULTIGPU_SLICE = {
    ("seeded", "gpupacking"): ([6.58, 7.21, 8.30], 7.36),
    ("seeded", "gpuclustering"): ([6.95, 7.72, 8.51], 7.73),
    ("seeded", "paper-bestfit"): ([6.15, 5.62, 6.00], 5.92),
    ("seeded", "fgd"): ([4.36, 4.78, 4.17], 4.44),
    ("name", "gpupacking"): ([5.28, 5.33, 5.44], 5.35),
    ("name", "gpuclustering"): ([5.52, 5.52, 5.82], 5.62),
}


@needs_trace
def test_the_tie_rule_moves_gpu_packing_and_clustering_on_a_multigpu20_slice() -> None:
    """Given 200 nodes and the multigpu20 list, expect the checked figures: the tie rule is
    what GPU packing and clustering turn on (CPU-only tasks tie on every node), so the
    nodes' own names and the seeded first name give different figures, while FGD stays the
    best placement."""
    pods = load_pods(ALIBABA / "openb_pod_list_default.csv", unscheduled=True).pods
    multi = build_variant(pods, "multigpu20", seed=0)
    nodes = load_nodes(ALIBABA / "openb_node_list_gpu_node.csv", machines=200)
    started = time.process_time()
    got = {}
    for ties, placement in MULTIGPU_SLICE:
        runs = [paper_fill(nodes, multi, placement, loads=(1.0,), seed=s, ties=ties)[0]
                for s in range(3)]  # fmt: skip
        per_seed = [round(100 * r.unallocated, 2) for r in runs]
        got[ties, placement] = (per_seed, round(100 * sum(r.unallocated for r in runs) / 3, 2))
    assert time.process_time() - started < 20
    assert got == MULTIGPU_SLICE
    assert got["seeded", "fgd"][1] < got["seeded", "paper-bestfit"][1]


def test_every_paper_placement_runs_on_hand_made_nodes() -> None:
    pods = [pod("c", gpus=0, milli=0), pod("s", milli=300), pod("w"), pod("m", gpus=2)]
    for placement in PAPER_PLACEMENTS:
        c = cluster([node("a", 2), node("b", 4, model="V100")], placement, pods)
        assert all(c.place(p) is not None for p in pods), placement
        assert c.allocated == 300 + 1000 + 2000


POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def small_files(tmp_path: Path) -> list[str]:
    """Two T4 nodes; half-GPU, whole-GPU, CPU-only and never-scheduled rows."""
    pods = tmp_path / "pods.csv"
    pods.write_text(
        POD_HEADER + "p0,4000,8192,1,500,,LS,Running,0,100,0\n"
        "p1,4000,8192,1,1000,,LS,Running,0,100,0\n"
        "p2,8000,8192,0,0,,BE,Running,0,10,0\n"
        "p3,4000,8192,1,500,,BE,Pending,5,,\n"
    )
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,2,T4\n"
    )
    return ["simulate", "--trace", str(pods), "--cluster", str(nodes), "--quiet"]


def test_fill_paper_runs_the_named_policies_over_seeds_keeping_every_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = small_files(tmp_path)
    assert main([*args, "--policy", "fgd", "--policy", "random:ties=random", "--fill", "paper",
                 "--seeds", "3", "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["policies"]) == ["fgd", "random:ties=random"]  # only those asked for
    assert doc["seeds"] == [0, 1, 2] and doc["frag"] == "paper"
    assert "4 pods to replay" in doc["notes"][0]  # the never-scheduled row is kept
    point = doc["policies"]["fgd"]["points"][-1]
    assert point["load"] == 1.3 and 0 <= point["unallocated_mean"] <= 1
    assert doc["published_unallocated_at_100"]["default"]["fgd"] == 4.77


def test_fill_paper_refuses_other_policies_and_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = small_files(tmp_path)
    assert main([*args, "--policy", "bestfit", "--fill", "paper"]) == 2
    assert "paper-bestfit" in capsys.readouterr().err
    assert main([*args, "--policy", "fgd:ties=lowest", "--fill", "paper"]) == 2
    assert "ties=seeded or ties=name or ties=random" in capsys.readouterr().err
    assert main([*args, "--policy", "fgd", "--fill", "paper", "--seeds", "0"]) == 2
    assert "--seeds must be at least 1" in capsys.readouterr().err


def test_fill_labhive_honours_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = small_files(tmp_path)
    assert main([*args, "--policy", "bestfit", "--fill", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["fill"]) == ["bestfit"]


def test_frag_labhive_scores_and_reports_with_labhives_measure() -> None:
    # one node, one 0.5 share placed, workload: a CPU-only class and a half-GPU class. The
    # paper's measure counts all free GPU for the CPU-only class; LabHive's leaves it out.
    pods = [pod("c", gpus=0, milli=0), pod("h", milli=500)]
    specs = [node("a", 1)]
    paper = paper_fill(specs, pods, "fgd", loads=(0.5,), seed=0)[0]
    labhive = paper_fill(specs, pods, "fgd", loads=(0.5,), seed=0, frag="labhive")[0]
    assert paper.unallocated == labhive.unallocated == 0.5
    assert paper.fragmentation == pytest.approx(0.25)  # the CPU-only half of 500 free
    assert labhive.fragmentation == 0.0  # the half-GPU class fits in the 500 left


def fill_seeds_table(seeds: str) -> list[list[str]]:
    """The rows ``benchmarks/paper_fill_seeds.py --table SEEDS`` prints from the checked
    results CSV, as lists of cells."""
    script = ROOT / "benchmarks" / "paper_fill_seeds.py"
    results = ROOT / "benchmarks" / "results" / "paper_fill_seeds.csv"
    run = subprocess.run([sys.executable, str(script), "--out", str(results), "--table", seeds],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return [line.strip("| ").split(" | ") for line in run.stdout.splitlines()]


def doc_fill_tables() -> dict[str, list[list[str]]]:
    """docs/policies.md's fill tables (those whose first column is the pod list), keyed by
    their second column's header, each as its rows' cells."""
    tables: dict[str, list[list[str]]] = {}
    rows: list[list[str]] | None = None  # the table being read, None between tables
    for line in (ROOT / "docs" / "policies.md").read_text().splitlines():
        cells = line.strip("| ").split(" | ")
        if line.startswith("| pod list | "):
            rows = tables.setdefault(cells[1], [])
        elif line.startswith("| ---"):
            continue
        elif line.startswith("| ") and rows is not None:
            rows.append(cells)
        else:
            rows = None
    return tables


def test_the_docs_fill_tables_are_what_the_results_csv_gives() -> None:
    """Given the per-seed runs in benchmarks/results/paper_fill_seeds.csv, expect
    docs/policies.md's paper-fill tables to be what the script makes of them: every cell of
    the three-seed table (seeds 42-44, the built variants' rows included), and the
    paper-bestfit, FGD and cut cells of the five-seed one (42-46). A figure edited by hand, or
    a run added to the CSV without the table redone, fails here."""
    docs = doc_fill_tables()
    assert docs["random"] == fill_seeds_table("42-44")
    assert docs["paper-bestfit"] == [[r[0], *r[-3:]] for r in fill_seeds_table("42-46")]
