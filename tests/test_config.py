"""Given HiveD cluster configs as admins write them, expect them to load verbatim (with what
HiveD infers) and every mistake to be refused with the key and the line."""

from __future__ import annotations

import pytest
from helpers import HIVED, LAB

from labhive.scheduler.core.config import (
    ConfigError,
    load_cluster_config,
    memory_mb,
    virtual_cluster,
)
from labhive.scheduler.core.detect import default_cluster

VALID = sorted(p for p in HIVED.glob("*.yaml") if not p.name.startswith("invalid"))


@pytest.mark.parametrize("path", VALID + sorted(LAB.glob("hived-config-*.yaml")), ids=str)
def test_every_shipped_config_loads(path):
    config = load_cluster_config(path)
    assert config.nodes() and config.vcs


def test_lab_config_loads_through_the_openpai_wrapper():
    config = load_cluster_config(LAB / "hived-config-two-vcs.yaml")
    assert {n.name: (n.sku, n.gpus, n.chain) for n in config.nodes()} == {
        "hostname-carol": ("GPU-C", (0,), "GPU-C-NODE-POOL"),
        "hostname-dan": ("GPU-D", (0,), "GPU-D-NODE-POOL"),
    }
    assert config.skus["GPU-C"].memory_mb == 4096
    assert config.skus["GPU-C"].cpu == 2
    assert [c.path for c in config.vcs["vc1"].cells] == [("GPU-D-NODE-POOL", "GPU-D-NODE")]


def test_design_config_infers_what_hived_infers():
    config = load_cluster_config(HIVED / "cluster-design.yaml")
    nodes = {(n.name, n.chain): n for n in config.nodes()}
    # cellChildren: null -> a full DGX-1 with GPUs 0..7; the same node is also a CT1 node.
    assert nodes["1.0.0.2", "3-DGX1-P100-NODE"].gpus == tuple(range(8))
    assert nodes["1.0.0.2", "CT1-NODE"].gpus == (8, 9)
    # explicit, non-standard GPU indices are kept
    assert nodes["1.0.0.0", "3-DGX1-P100-NODE"].gpus == tuple(range(8))
    # a rack's path: the top-level cell's default address is its index in physicalCells
    assert nodes["0.0.3.2", "4-DGX2-V100-NODE"].path == ("7", "1")
    assert set(config.pinned) == {"VC1-YQW-CT1", "VC1-YQW-DGX2", "VC1-YQW-IB-DGX2"}
    assert config.pinned["VC1-YQW-CT1"].gpu == 8


def test_cell_number_zero_is_accepted():
    config = load_cluster_config(HIVED / "cluster-4dgx2.yaml")
    assert [c.number for c in config.vcs["VC1"].cells] == [4, 0]


def test_overcommitted_vcs_are_refused_naming_chain_and_level():
    with pytest.raises(ConfigError) as err:
        load_cluster_config(HIVED / "invalid-overcommitted-vcs.yaml")
    message = str(err.value)
    assert "invalid-overcommitted-vcs.yaml line 265: virtualClusters:" in message
    assert "chain CT1-NODE" in message
    assert "at level CT1-NODE they need 3 (VC1 2, VC2 1) but only 2 are left" in message


def test_wrapped_config_errors_give_lines_of_the_outer_file(tmp_path):
    text = (
        (LAB / "hived-config-one-vc.yaml")
        .read_text()
        .replace("childCellNumber: 2", "childCellNumber: two")
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_cluster_config(path)
    assert str(err.value) == (
        f"{path} line 16: physicalCluster.cellTypes.GPU-NODE-POOL.childCellNumber: "
        "must be a whole number >= 1, got 'two'"
    )


BASE = """\
physicalCluster:
  cellTypes:
    NODE: {childCellType: GPU, childCellNumber: 2, isNodeLevel: true}
    RACK: {childCellType: NODE, childCellNumber: 2}
  physicalCells:
  - cellType: RACK
    cellChildren:
    - cellAddress: n0
    - cellAddress: n1
virtualClusters:
  a: {virtualCells: [{cellType: RACK.NODE, cellNumber: 1}]}
"""


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("virtualClusters:", "virtualCluster:"),
            "line 10: virtualCluster: unknown key; a HiveD config has",
        ),
        (
            ("childCellNumber: 2}", "childCellNumber: 2, size: 3}"),
            "line 4: physicalCluster.cellTypes.RACK.size: unknown key; allowed here: "
            "childCellNumber, childCellType, isNodeLevel",
        ),
        (
            ("childCellType: GPU,", "childCellType: RACK,"),
            "physicalCluster.cellTypes.NODE: cell types form a cycle (NODE -> RACK -> NODE)",
        ),
        (
            ("cellNumber: 1}", "cellNumber: 3}"),
            "at level RACK.NODE they need 3 (a 3) but only 2 are left",
        ),
        (
            ("RACK.NODE", "RACK.GPU"),
            "line 11: virtualClusters.a.virtualCells[0].cellType: RACK.GPU: GPU is not the "
            "childCellType of RACK",
        ),
        (
            ("- cellAddress: n1", "- cellAddress: n1\n      cellChildren: [{cellAddress: x}]"),
            "physicalCluster.physicalCells[0].cellChildren[1].cellChildren[0].cellAddress: "
            "a GPU's address must be its index on the node, got 'x'",
        ),
        (("cellAddress: n1", "cellAddress: n0"), "address n0 is used by two sibling cells"),
        (("cellType: RACK\n", "cellType: ROW\n"), "line 6: physicalCluster.physicalCells[0]"),
        (
            ("  physicalCells:", "  x: 1\n  physicalCells:"),
            "line 5: physicalCluster.x: unknown key",
        ),
        (
            ("  - cellType: RACK\n    cellChildren", "  - cellType: RACK\n    cellChildrn"),
            "cellChildrn: unknown key",
        ),
        (("a: {", "a: {{"), "not valid YAML"),
    ],
)
def test_bad_configs_get_a_message_with_key_and_line(change, expected):
    assert load_cluster_config(BASE).nodes()
    text = BASE.replace(*change)
    assert text != BASE
    with pytest.raises(ConfigError) as err:
        load_cluster_config(text)
    assert expected in str(err.value)


def test_malformed_yaml_names_the_line():
    with pytest.raises(ConfigError, match=r"line 3: not valid YAML"):
        load_cluster_config("physicalCluster:\n  cellTypes: {a: 1\n  physicalCells: [\n")


def test_duplicate_keys_are_refused():
    with pytest.raises(ConfigError, match=r"line 2: duplicate key 'physicalCluster'"):
        load_cluster_config("physicalCluster: {}\nphysicalCluster: {}\n")


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read cluster config"):
        load_cluster_config(tmp_path / "missing.yaml")


def test_a_path_without_yaml_suffix_loads(tmp_path):
    path = tmp_path / "cluster.conf"
    path.write_text(BASE)
    assert [n.name for n in load_cluster_config(str(path)).nodes()] == ["n0", "n1"]


def test_a_parsed_mapping_loads_too():
    import yaml

    config = load_cluster_config(yaml.safe_load(BASE))
    assert [n.name for n in config.nodes()] == ["n0", "n1"]


@pytest.mark.parametrize(
    ("value", "mb"), [("4096Mi", 4096), ("8Gi", 8192), ("1G", 954), (2048, 2048), ("x", None)]
)
def test_memory_quantities(value, mb):
    assert memory_mb(value) == mb


def test_virtual_cluster_is_labelled_and_shared_between_vcs():
    config = virtual_cluster()
    assert config.virtual
    assert [(n.name, n.gpus) for n in config.nodes()] == [
        ("vnode-0", (0, 1, 2, 3)),
        ("vnode-1", (0, 1, 2, 3)),
    ]
    assert {name: vc.cells[0].number for name, vc in config.vcs.items()} == {
        "default": 1,
        "vc1": 1,
    }
    small = virtual_cluster(nodes=1, gpus_per_node=4, vcs=("a", "b", "c"))
    assert [vc.cells[0].number for vc in small.vcs.values()] == [2, 1, 1]


def test_default_cluster_without_a_driver_is_virtual():
    from labhive.scheduler.core.detect import nvml_gpu_count

    config = default_cluster()
    assert config.virtual == (nvml_gpu_count() == 0)
