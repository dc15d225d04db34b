"""Given a small GPU-sharing cluster and hand-written pods, expect the placements, waits and
fragmentation worked out by hand; and the Alibaba v2023 files to load as the README counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_helpers import DATA

from labhive.scheduler.sim.openb import MILLI, NodeSpec, Pod, load_nodes, load_pods
from labhive.scheduler.sim.sharing import Fragmentation, SharingCluster, fill, workload
from labhive.scheduler.sim.sharing_sim import simulate_sharing

ALIBABA = DATA / "alibaba-gpu-v2023"


def pod(name: str, submit: float, duration: float, gpus: int = 1, milli: int = MILLI,
        models: tuple[str, ...] = (), cpu: int = 1000, memory: int = 1024) -> Pod:  # fmt: skip
    return Pod(name, submit, duration, cpu, memory, gpus, milli if gpus == 1 else gpus and MILLI,
               frozenset(models))  # fmt: skip


def node(name: str, gpus: int, model: str = "T4", cpu: int = 32000, memory: int = 65536):
    return NodeSpec(name, cpu, memory, gpus, model)


def test_two_half_gpu_tasks_share_one_gpu_and_a_third_waits() -> None:
    pods = [pod("a", 0, 100, milli=500), pod("b", 0, 100, milli=500), pod("c", 0, 10, milli=500)]
    result = simulate_sharing([node("n0", 1)], pods, "fifo")
    # a and b fill the GPU (500 + 500); c waits until one of them ends at 100
    assert sorted(result.wait) == [0, 0, 100]
    assert sorted(result.jct) == [100, 100, 110]


def test_shares_pack_up_to_a_whole_gpu_and_no_further() -> None:
    cluster = SharingCluster([node("n0", 1)], [], "firstfit")
    assert cluster.place(pod("a", 0, 1, milli=600)) is not None
    assert cluster.place(pod("b", 0, 1, milli=400)) is not None
    assert cluster.place(pod("c", 0, 1, milli=1)) is None
    assert cluster.nodes[0].free == [0]


def test_a_task_runs_only_on_a_gpu_model_it_names() -> None:
    nodes = [node("t4", 1, "T4"), node("v100", 1, "V100M32")]
    cluster = SharingCluster(nodes, [], "firstfit")
    placed = cluster.place(pod("a", 0, 1, models=("V100M32", "A10")))
    assert placed is not None and placed.name == "v100"
    assert cluster.place(pod("b", 0, 1, models=("V100M32",))) is None  # its one GPU is taken
    assert cluster.place(pod("c", 0, 1, models=("P100",))) is None
    assert not cluster.fits_empty(pod("c", 0, 1, models=("P100",)))


def test_a_task_naming_a_model_the_cluster_lacks_is_rejected_not_queued_forever() -> None:
    result = simulate_sharing([node("n0", 2, "T4")], [pod("a", 0, 5, models=("P100",))], "fgd")
    assert result.rejected == 1 and result.unfinished == 0


def test_cpu_only_tasks_compete_for_cpu() -> None:
    pods = [pod("a", 0, 50, gpus=0, cpu=24000), pod("b", 0, 50, gpus=0, cpu=16000)]
    result = simulate_sharing([node("n0", 1, cpu=32000)], pods, "fifo")
    assert sorted(result.wait) == [0, 50]  # 24 + 16 CPUs exceed the node's 32


def test_the_fragmentation_measure_by_hand() -> None:
    # workload: half the tasks ask 0.5 GPU, half a whole GPU
    measure = Fragmentation(workload([pod("s", 0, 1, milli=500), pod("w", 0, 1)]))
    # GPUs free 1000 and 300: the 300 is too small for either class (both see it as fragment)
    assert measure.of("T4", 32000, 65536, [1000, 300]) == pytest.approx(300)
    # only 300 free: no class can run; all of it is fragment
    assert measure.of("T4", 32000, 65536, [0, 300]) == pytest.approx(300)
    # 600 free on one GPU: the half-GPU class can run (0 fragment), the whole-GPU one cannot
    assert measure.of("T4", 32000, 65536, [600, 0]) == pytest.approx(0.5 * 600)
    # no CPU left: nothing runs, every free GPU counts
    assert measure.of("T4", 0, 65536, [1000, 1000]) == pytest.approx(2000)


def test_fgd_keeps_a_whole_gpu_free_where_best_fit_splits_it() -> None:
    # a: one T4; b: two V100s, one of them 0.6 used. A 0.4 share arrives, then two whole GPUs.
    # best-fit puts the share on a (least left over); FGD fills b's 0.4 hole (a whole GPU
    # stays whole), so both whole-GPU tasks still fit.
    nodes = [node("a", 1, "T4"), node("b", 2, "V100M32")]
    classes = workload([pod("w", 0, 1), pod("s", 0, 1, milli=600)])
    placed = {}
    for placement in ("bestfit", "fgd"):
        cluster = SharingCluster(nodes, classes, placement)
        cluster.place(pod("setup", 0, 1, milli=600, models=("V100M32",)))
        share = cluster.place(pod("share", 0, 1, milli=400))
        whole = [cluster.place(pod(f"w{k}", 0, 1)) for k in range(2)]
        placed[placement] = (share.name if share else None, sum(w is not None for w in whole))
    assert placed == {"bestfit": ("a", 1), "fgd": ("b", 2)}


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(1, 1000),
            st.integers(0, 3),
            st.sampled_from(["firstfit", "bestfit", "fgd"]),
        ),
        max_size=40,
    )
)
def test_no_gpu_is_ever_more_than_a_whole_gpu_allocated(ops) -> None:
    nodes = [node("n0", 2), node("n1", 1, "V100M32"), node("n2", 4)]
    clusters = {p: SharingCluster(nodes, [], p) for p in ("firstfit", "bestfit", "fgd")}
    placed: dict[str, list[Pod]] = {p: [] for p in clusters}
    for k, (release, milli, gpus, placement) in enumerate(ops):
        cluster, held = clusters[placement], placed[placement]
        if release and held:
            cluster.release(held.pop(0))
        else:
            p = pod(f"p{k}", 0, 1, gpus=gpus, milli=milli)
            if cluster.place(p) is not None:
                held.append(p)
        for n in cluster.nodes:
            assert all(0 <= f <= MILLI for f in n.free)
        used = sum(p.demand for p in held)
        assert (
            cluster.allocated == used == cluster.capacity - sum(sum(n.free) for n in cluster.nodes)
        )


@pytest.mark.skipif(not ALIBABA.is_dir(), reason=f"the Alibaba trace is not at {ALIBABA}")
def test_the_real_alibaba_files_load_with_the_readmes_counts() -> None:
    pods = load_pods(ALIBABA / "openb_pod_list_default.csv")
    assert len(pods.pods) + sum(pods.skipped.values()) == 8152
    assert pods.skipped == {"never scheduled (no scheduled_time)": 897}
    assert not pods.problems and pods.timed
    assert sum(p.gpus for p in pods.pods) == 6571
    assert sum(p.demand for p in pods.pods) == 5_484_930  # thousandths of a GPU
    assert sum(p.sharing for p in pods.pods) == 2573
    assert sum(p.gpus == 0 for p in pods.pods) == 1052
    assert all(p.submit <= q.submit for p, q in zip(pods.pods, pods.pods[1:], strict=False))
    nodes = load_nodes(ALIBABA / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    assert len(load_nodes(ALIBABA / "openb_node_list_gpu_node.csv", machines=10)) == 10
    shapes_only = load_pods(ALIBABA / "openb_pod_list_multigpu50.csv")
    assert not shapes_only.timed and len(shapes_only.pods) == 9061


@pytest.mark.skipif(not ALIBABA.is_dir(), reason=f"the Alibaba trace is not at {ALIBABA}")
def test_filling_a_slice_of_the_real_cluster_leaves_less_unallocated_with_fgd() -> None:
    pods = load_pods(ALIBABA / "openb_pod_list_default.csv").pods
    nodes = load_nodes(ALIBABA / "openb_node_list_gpu_node.csv", machines=100)
    at_full = {
        p: fill(nodes, pods, p, loads=(1.0,), seed=1)[0].unallocated for p in ("bestfit", "fgd")
    }
    assert at_full["fgd"] < at_full["bestfit"]
