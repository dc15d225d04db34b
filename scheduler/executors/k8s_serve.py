"""``labhive serve --executor kubernetes``: the command-line options and the executor they make.

Kept apart from the service so the service knows only two hooks: ``add_options`` for its
parser and ``kubernetes_executor`` for its executor; the scheduler loop takes node health from
the executor's ``node_events``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from labhive.scheduler.core.errors import UserError
from labhive.scheduler.executors.k8s_objects import DEFAULT_IMAGE, GPU_RESOURCE


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Kubernetes executor (--executor kubernetes)")
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)"
    )
    where.add_argument(
        "--in-cluster",
        action="store_true",
        help="use the pod's service account (LabHive deployed in the cluster)",
    )
    group.add_argument("--context", help="kubeconfig context (default: its current context)")
    group.add_argument(
        "--namespace",
        default=os.environ.get("LABHIVE_NAMESPACE", "labhive"),
        help="namespace of the job pods (default: $LABHIVE_NAMESPACE or %(default)s)",
    )
    group.add_argument(
        "--image",
        default=os.environ.get("LABHIVE_DEFAULT_IMAGE", DEFAULT_IMAGE),
        help="image for jobs that name none, such as the short form (default %(default)s)",
    )
    group.add_argument(
        "--node-label",
        help="match config nodes to Nodes by this label's value instead of the Node name",
    )
    group.add_argument(
        "--gpu-resource",
        default=GPU_RESOURCE,
        help="extended resource the device plugin advertises (default %(default)s; "
        "'none' on nodes without one)",
    )


def options_from(args: argparse.Namespace) -> dict[str, Any]:
    """The Kubernetes options of a parsed command line, for ``ServeOptions``."""
    gpu = getattr(args, "gpu_resource", GPU_RESOURCE)
    return {
        "kubeconfig": getattr(args, "kubeconfig", None),
        "in_cluster": getattr(args, "in_cluster", False),
        "context": getattr(args, "context", None),
        "namespace": getattr(args, "namespace", "labhive"),
        "image": getattr(args, "image", DEFAULT_IMAGE),
        "node_label": getattr(args, "node_label", None),
        "gpu_resource": None if str(gpu).lower() == "none" else gpu,
    }


def kubernetes_executor(options: dict[str, Any], config: Any, cluster_given: bool) -> Any:
    """The executor for a cluster config whose nodes are Kubernetes nodes."""
    if not cluster_given:
        raise UserError(
            "--executor kubernetes needs --cluster FILE: the HiveD config whose nodes are your "
            "Kubernetes nodes (the default cluster describes this machine)"
        )
    from labhive.scheduler.executors.kubernetes import KubernetesExecutor, connect

    api = connect(
        options.get("kubeconfig"),
        in_cluster=bool(options.get("in_cluster")),
        context=options.get("context"),
    )
    return KubernetesExecutor(
        api,
        options.get("namespace") or "labhive",
        nodes=config.nodes(),
        node_label=options.get("node_label"),
        default_image=options.get("image") or DEFAULT_IMAGE,
        gpu_resource=options.get("gpu_resource", GPU_RESOURCE),
    )
