"""``labhive up --executor slurm|kubernetes``: the hub and the service against a site's engine.

The local default runs every notebook server and job on this machine. On Slurm or Kubernetes
they run on the engine's nodes, so three things change, and each is checked before the hub
starts, with what to do when it cannot work:

- the service is started with ``--executor slurm`` (``--slurm-conf``, ``--partition``) or
  ``--executor kubernetes`` (``--kubeconfig``): ``sbatch`` must be on PATH and answer, the
  kubeconfig must be a readable kubeconfig;
- without ``--cluster``, a Slurm site's cluster config is written from what Slurm reports
  (``labhive cluster from-slurm``), kept in ``DATA/hub/cluster-slurm.yaml``; Kubernetes needs
  ``--cluster`` (no Node lists the GPUs' topology);
- servers run on the nodes (the spawner's ``server_on_nodes``): the hub listens on every
  address, and servers and kernels reach it at ``--hub-ip``, by default this machine's address
  on the route to the first node (Slurm) or to the API server (Kubernetes).
"""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from labhive.scheduler.core.errors import UserError

EXECUTORS = ("local", "slurm", "kubernetes")


@dataclass(frozen=True)
class Engine:
    """Where ``labhive up`` runs the servers and jobs, as the command line gave it."""

    executor: str = "local"
    slurm_conf: str | None = None
    partition: str | None = None
    kubeconfig: str | None = None
    hub_ip: str | None = None


@dataclass(frozen=True)
class EngineSetup:
    """What the checks found: the service's extra arguments, the cluster config, the address
    nodes reach the hub at, and the banner's lines on what is enforced there."""

    service_args: list[str] = field(default_factory=list)
    cluster: str | None = None
    hub_ip: str | None = None  # None: local, everything on loopback
    lines: list[str] = field(default_factory=list)


def prepare_engine(engine: Engine, cluster: str | None, hub_dir: Path) -> EngineSetup:
    """Check that the engine can work from here and say how it will be used."""
    if engine.executor == "local":
        given = [o for o, v in (("--partition", engine.partition),
                                ("--kubeconfig", engine.kubeconfig)) if v]  # fmt: skip
        if given:
            raise UserError(f"{given[0]} needs --executor slurm or --executor kubernetes")
        return EngineSetup(cluster=cluster)
    if engine.executor == "slurm":
        return _slurm(engine, cluster, hub_dir)
    if engine.executor == "kubernetes":
        return _kubernetes(engine, cluster)
    raise UserError(f"--executor {engine.executor}: choose one of {', '.join(EXECUTORS)}")


def _slurm(engine: Engine, cluster: str | None, hub_dir: Path) -> EngineSetup:
    from labhive.scheduler.executors.slurm_cli import Slurm, SlurmError, nodes
    from labhive.scheduler.executors.slurm_config import cluster_from_slurm

    if shutil.which("sbatch") is None:
        raise UserError(
            "--executor slurm: sbatch is not on PATH: install Slurm's client commands where "
            "labhive up runs (Debian: apt-get install slurm-client) and give it the site's "
            "slurm.conf (--slurm-conf or $SLURM_CONF)"
        )
    if engine.slurm_conf and not _readable(engine.slurm_conf):
        raise UserError(f"--slurm-conf {engine.slurm_conf}: no such readable file")
    slurm = Slurm(conf=engine.slurm_conf)
    try:
        listed = nodes(slurm.json(["sinfo"]))
        if cluster is None:
            made = hub_dir / "cluster-slurm.yaml"
            beside = Path(engine.slurm_conf).parent / "topology.conf" if engine.slurm_conf else None
            topology = beside if beside is not None and beside.exists() else None
            made.write_text(cluster_from_slurm(slurm, topology, partition=engine.partition))
            cluster = str(made)
        taskplugin = _slurm_setting(slurm.run(["scontrol", "show", "config"]), "TaskPlugin")
    except SlurmError as err:
        raise UserError(f"--executor slurm: Slurm did not answer: {err}") from None
    if not listed:
        raise UserError("--executor slurm: sinfo lists no nodes: check the partition and conf")
    args = ["--executor", "slurm"]
    args += ["--slurm-conf", engine.slurm_conf] if engine.slurm_conf else []
    args += ["--partition", engine.partition] if engine.partition else []
    hub_ip = engine.hub_ip or _route_to(listed[0].address)
    devices = (
        "Slurm's task/cgroup plugin (ConstrainDevices=yes in cgroup.conf keeps a job to its "
        "GPUs; LabHive does not check cgroup.conf)"
        if "task/cgroup" in taskplugin
        else f"NOT enforced: Slurm's TaskPlugin is {taskplugin or 'unset'}, so a job sees every "
        "GPU of its node; set TaskPlugin=task/cgroup and ConstrainDevices=yes"
    )
    return EngineSetup(
        service_args=args,
        cluster=cluster,
        hub_ip=hub_ip,
        lines=[
            f"  executor:     Slurm ({engine.partition or 'its default partition'}; "
            f"{engine.slurm_conf or 'SLURM_CONF or Slurm default'}), {len(listed)} node(s)",
            f"  cluster:      config {cluster}",
            f"  nodes reach:  the hub at {hub_ip} (--hub-ip); servers run on the nodes",
            "  shared files: the data dir must be on a file system the nodes share (homes, task "
            "dirs)",
            f"  GPU devices: {devices}",
        ],
    )


def _kubernetes(engine: Engine, cluster: str | None) -> EngineSetup:
    import os

    if cluster is None:
        raise UserError(
            "--executor kubernetes needs --cluster FILE: the HiveD config whose nodes are your "
            "Kubernetes nodes (docs/kubernetes/cluster-config.yaml is an example)"
        )
    where = engine.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    path = os.path.expanduser(where)
    if not _readable(path):
        raise UserError(
            f"--executor kubernetes: cannot read the kubeconfig {where}: give a readable one "
            "with --kubeconfig PATH (kubectl config view --raw > FILE makes one)"
        )
    server = _api_server(path, where)
    hub_ip = engine.hub_ip or _route_to(urlparse(server).hostname or "127.0.0.1")
    return EngineSetup(
        service_args=["--executor", "kubernetes", "--kubeconfig", path],
        cluster=cluster,
        hub_ip=hub_ip,
        lines=[
            f"  executor:     Kubernetes at {server} ({where})",
            f"  nodes reach:  the hub at {hub_ip} (--hub-ip); servers run in pods",
            "  GPU devices: the device plugin's resource (the kubelet gives a pod only its GPUs)",
        ],
    )


def _api_server(path: str, where: str) -> str:
    """The API server a kubeconfig names (the kubernetes client's own reading of it)."""
    from labhive.scheduler.executors.kubernetes import connect

    try:
        api = connect(path)
    except UserError as err:
        raise UserError(f"--executor kubernetes: {where}: {err}") from None
    return str(api.configuration.host)


def _readable(path: str) -> bool:
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def _slurm_setting(config: str, name: str) -> str:
    """One setting of ``scontrol show config`` (``Name = value`` lines)."""
    for line in config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == name:
            return value.strip()
    return ""


def _route_to(address: str) -> str:
    """This machine's address on the route to ``address`` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((socket.gethostbyname(address), 9))
            return str(sock.getsockname()[0])
    except OSError as err:
        raise UserError(
            f"cannot tell this machine's address towards {address} ({err}); give the address "
            "the nodes reach the hub at with --hub-ip"
        ) from None


def hub_lines(setup: EngineSetup, port: int, hub_port: int) -> list[str]:
    """The hub's settings for servers on other nodes: it listens on every address, and servers
    and their kernels reach the hub and the service at ``setup.hub_ip``."""
    if setup.hub_ip is None:
        return []
    ip = setup.hub_ip
    return [
        f"c.JupyterHub.bind_url = 'http://0.0.0.0:{port}'",
        f"c.JupyterHub.hub_bind_url = 'http://0.0.0.0:{hub_port}'",
        f"c.JupyterHub.hub_connect_ip = {ip!r}",
        "c.LabHiveSpawner.server_on_nodes = True",
        f"c.LabHiveSpawner.server_service_url = 'http://{ip}:{port}/services/labhive'",
    ]
