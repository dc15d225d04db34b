"""ETAs over a real two-node Slurm (2 x 4 GPUs, one VC): given a gang over both nodes that
declared a 60 s limit and a job queued behind it, expect an estimate on grounds (the limit)
whose low end is not before the soonest the gang can end, and the start inside the range."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster
from test_slurm_service import service, state
from waiting import wait_until

pytestmark = pytest.mark.slow
pytest_plugins = ["slurm_cluster"]


def test_a_job_behind_a_limited_gang_gets_its_start_on_grounds(
    slurm: SlurmCluster, data_dir: Path
) -> None:
    with service(slurm, data_dir) as alice:
        gang = alice.submit(command="sleep 15", gpus=4, tasks=2, name="gang", time_limit=60)
        state(gang, "RUNNING")
        behind = alice.submit(command="true", gpus=4, tasks=2, name="behind", time_limit=30)
        wait_until(lambda: behind.refresh().data.get("eta") is not None, "behind's estimate", 60)
        began, got = gang.data["started_at"], behind.data
        assert got["waits_for"] is None
        # no history of limits: a tenth to all of 60 s; the gang has run a few s of it
        assert began + 6 - 1 <= got["eta_low"] <= got["eta"] <= got["eta_high"] <= began + 61
        state(behind, "SUCCEEDED")
        assert got["eta_low"] <= behind.data["started_at"] <= got["eta_high"]
