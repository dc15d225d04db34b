"""Given ``labhive up`` for a class (or ``labhive serve --fair-share``), expect fair share on in
the service it starts unless the cluster config says otherwise: ``labhive up`` hands the
service a 7-day half-life by default, ``--fair-share off`` hands it nothing (first come, first
served), and a cluster config's own ``fairShare`` always wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from labhive.hub_extension.hubconfig import HubPlan, service_command
from labhive.scheduler.cli import build_parser
from labhive.scheduler.core.config import FairShare, load_cluster_config
from labhive.scheduler.core.detect import default_cluster
from labhive.scheduler.service.server import with_fair_share

WEEK = 7 * 86400.0


def test_labhive_up_starts_its_service_with_fair_share_by_default(tmp_path: Path) -> None:
    up = build_parser().parse_args(["up"])
    assert up.fair_share == "7d"
    serve = build_parser().parse_args(service_command(HubPlan(str(tmp_path), "t"))[3:])
    assert serve.fair_share == WEEK
    off = HubPlan(str(tmp_path), "t", fair_share=None)
    assert build_parser().parse_args(service_command(off)[3:]).fair_share is None


def test_a_half_life_that_is_no_duration_is_refused_saying_the_forms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["serve", "--fair-share", "soon"])
    assert stop.value.code == 2
    assert "--fair-share: a half-life must be" in capsys.readouterr().err


def test_the_option_turns_fair_share_on_and_a_configs_own_setting_wins(tmp_path: Path) -> None:
    plain = default_cluster()
    assert plain.fair_share is None
    assert with_fair_share(plain, WEEK).fair_share == FairShare(WEEK)
    assert with_fair_share(plain, None).fair_share is None
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "physicalCluster:\n  cellTypes: {N: {childCellType: G, childCellNumber: 2, "
        "isNodeLevel: true}}\n  physicalCells: [{cellType: N, cellAddress: n0}]\n"
        "virtualClusters: {vc1: {virtualCells: [{cellType: N, cellNumber: 1}]}}\n"
        "fairShare: {halfLife: 1h}\n"
    )
    own = load_cluster_config(str(cluster))
    assert with_fair_share(own, WEEK).fair_share == FairShare(3600.0)
