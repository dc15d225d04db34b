"""``labhive serve --executor slurm``: the command-line options and the executor they make.

Like ``k8s_serve``, kept apart from the service, which knows only ``add_options`` for its parser
and ``slurm_executor`` for its executor; node health reaches the loop through the executor's
``node_events``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from labhive.scheduler.core.errors import UserError


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Slurm executor (--executor slurm)")
    group.add_argument(
        "--slurm-conf",
        default=os.environ.get("SLURM_CONF"),
        help="the cluster's slurm.conf (default: $SLURM_CONF, then Slurm's own default)",
    )
    group.add_argument(
        "--partition", help="Slurm partition for job allocations (default: its default)"
    )


def options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The Slurm options of a parsed command line, for ``ServeOptions.executor_options``."""
    return {
        "slurm_conf": getattr(args, "slurm_conf", None),
        "partition": getattr(args, "partition", None),
    }


def slurm_executor(
    options: dict[str, Any], config: Any, cluster_given: bool, data_dir: Path, grace_s: float
) -> Any:
    """The executor for a cluster config whose nodes are Slurm nodes."""
    if not cluster_given:
        raise UserError(
            "--executor slurm needs --cluster FILE: the HiveD config whose nodes are your Slurm "
            "nodes (write one with `labhive cluster from-slurm -o cluster.yaml`)"
        )
    from labhive.scheduler.executors.slurm import SlurmExecutor
    from labhive.scheduler.executors.slurm_cli import Slurm

    return SlurmExecutor(
        data_dir,
        grace_s,
        slurm=Slurm(conf=options.get("slurm_conf")),
        partition=options.get("partition"),
        node_names=[n.name for n in config.nodes()],
    )
