"""A real multi-node Slurm for the tests: munged, slurmctld, and one slurmd per node, each node
in its own network and UTS namespace.

Debian's ``slurm-wlm`` and ``munge`` (installed by ``.ci/deps.sh``). Each node is a network
namespace joined to a bridge on a private subnet made for this run only (a veth pair per node,
its own address and hostname), so a task on node 2 reaches a task on node 1 over TCP as on a
real cluster; all share this machine's file system (the task directories), as nodes of a Slurm
site share ``/home``. Fake GPUs are symlinks to ``/dev/null`` (slurmd refuses plain files) named
in ``gres.conf`` with ``AutoDetect=off``.

``SlurmCluster.start`` raises ``Unavailable`` with the reason when something it needs is missing
(not root, no Slurm, no namespaces), so that tests skip saying why. ``stop`` ends every daemon
it started by pid and removes every namespace, veth and bridge it made.

Pitfalls met on the way, kept here for the next reader: ``ip netns exec`` remounts ``/sys``, which
hides the cgroup mounts slurmd insists on, so nodes are entered with ``nsenter --net``;
heterogeneous jobs (a gang over several nodes) are scheduled by the backfill scheduler only, so
``bf_interval`` is 1 s; slurmd must be told its node name (``-N``) and the nodes' CPUs and
memory are declared (``SlurmdParameters=config_overrides``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd", "sinfo", "nsenter", "unshare", "ip")


class Unavailable(RuntimeError):
    """A real Slurm cannot be brought up here; the message says why."""


@dataclass
class SlurmCluster:
    nodes: tuple[str, ...] = ("n1", "n2")
    gpus_per_node: int = 4
    cpus_per_node: int = 8
    memory_mb: int = 16000
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lhslurm-")))
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _netns: list[str] = field(default_factory=list)
    _links: list[str] = field(default_factory=list)
    _munged_pid: int | None = None

    def __post_init__(self) -> None:
        tag = os.getpid() % 100_000
        self.bridge = f"lhsb{tag}"
        self.subnet = f"10.213.{20 + tag % 200}"
        self.conf = self.root / "slurm.conf"

    def address(self, node: str) -> str:
        return f"{self.subnet}.{11 + self.nodes.index(node)}"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---- bring-up -------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        missing = [d for d in DAEMONS if shutil.which(d) is None]
        if missing:
            raise Unavailable(f"not installed: {', '.join(missing)} (apt-get install slurm-wlm)")
        if os.geteuid() != 0:
            raise Unavailable("a multi-node Slurm in namespaces needs root")
        try:
            self._network()
            self._files()
            self._munge()
            self._daemons()
            self._wait_idle()
        except Exception:
            self.stop()
            raise
        return self

    def _run(self, *argv: str) -> None:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
        if done.returncode != 0:
            raise Unavailable(f"{' '.join(argv)}: {done.stderr.strip()}")

    def _network(self) -> None:
        self._run("ip", "link", "add", self.bridge, "type", "bridge")
        self._links.append(self.bridge)
        self._run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        self._run("ip", "link", "set", self.bridge, "up")
        for i, node in enumerate(self.nodes):
            ns, veth = f"{self.bridge}-{node}", f"{self.bridge}v{i}"
            self._run("ip", "netns", "add", ns)
            self._netns.append(ns)
            self._run(
                "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns
            )
            self._links.append(veth)
            self._run("ip", "link", "set", veth, "master", self.bridge, "up")
            self._run("ip", "-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
            self._run("ip", "-n", ns, "link", "set", "eth0", "up")
            self._run("ip", "-n", ns, "link", "set", "lo", "up")

    def _files(self) -> None:
        r = self.root
        r.chmod(0o755)  # slurmd copies a batch script into its spool dir; the job's user runs it
        for sub in ("state", "log", "run", *(f"spool/{n}" for n in self.nodes)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        gres = ["AutoDetect=off"]
        for node in self.nodes:
            dev = r / "dev" / node
            dev.mkdir(parents=True)
            for g in range(self.gpus_per_node):
                (dev / f"nvidia{g}").symlink_to("/dev/null")
            gres.append(f"NodeName={node} Name=gpu File={dev}/nvidia[0-{self.gpus_per_node - 1}]")
        (r / "gres.conf").write_text("\n".join(gres) + "\n")
        (r / "munge.key").write_bytes(os.urandom(1024))
        (r / "munge.key").chmod(0o400)
        host = socket.gethostname().split(".")[0]
        lines = [
            "ClusterName=labhive",
            f"SlurmctldHost={host}({self.subnet}.1)",
            f"SlurmctldPort={_free_port()}",
            "SlurmdPort=16818",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r}/run/munge.sock",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "GresTypes=gpu",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "KillWait=3",
            "MinJobAge=300",
            "InactiveLimit=0",
        ]
        for node in self.nodes:
            lines.append(
                f"NodeName={node} NodeAddr={self.address(node)} CPUs={self.cpus_per_node} "
                f"RealMemory={self.memory_mb} Gres=gpu:{self.gpus_per_node} State=UNKNOWN"
            )
        lines.append(f"PartitionName=main Nodes={','.join(self.nodes)} Default=YES State=UP")
        # A site's usual short partition: a job that says nothing runs 1 minute, 10 at most.
        lines.append(
            f"PartitionName=short Nodes={','.join(self.nodes)} DefaultTime=1 MaxTime=10 State=UP"
        )
        self.conf.write_text("\n".join(lines) + "\n")

    def _munge(self) -> None:
        r = self.root
        self._run(
            "munged", "--force", f"--key-file={r}/munge.key", f"--socket={r}/run/munge.sock",
            f"--pid-file={r}/run/munged.pid", f"--log-file={r}/log/munged.log",
            f"--seed-file={r}/run/munged.seed",
        )  # fmt: skip
        self._munged_pid = int((r / "run" / "munged.pid").read_text())

    def _daemons(self) -> None:
        log = open(self.root / "log" / "daemons.out", "ab")  # noqa: SIM115 - kept for the run
        self._procs.append(
            subprocess.Popen(
                ["slurmctld", "-D", "-f", str(self.conf)], stdout=log, stderr=log, env=self.env
            )
        )
        time.sleep(0.5)
        for node in self.nodes:
            ns = f"/run/netns/{self.bridge}-{node}"
            argv = ["nsenter", f"--net={ns}", "unshare", "--uts", "sh", "-c",
                    f'hostname {node} && exec slurmd -D -f "$SLURM_CONF" -N {node}']  # fmt: skip
            self._procs.append(subprocess.Popen(argv, stdout=log, stderr=log, env=self.env))

    def _wait_idle(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise Unavailable(f"a Slurm daemon exited ({proc.args!r}): {self.logs()}")
            done = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                env=self.env, timeout=15, check=False,
            )  # fmt: skip
            last = done.stdout + done.stderr
            states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
            if all(states.get(n) == "idle" for n in self.nodes):
                return
            time.sleep(0.5)
        raise Unavailable(f"Slurm's nodes did not come up in {timeout_s:g} s: {last.strip()}")

    # ---- use and tear-down ----------------------------------------------------------------

    def scontrol(self, *argv: str) -> str:
        done = subprocess.run(
            ["scontrol", *argv], capture_output=True, text=True, env=self.env, timeout=20,
            check=True,
        )  # fmt: skip
        return done.stdout

    def logs(self) -> str:
        out = []
        for path in sorted((self.root / "log").glob("*")):
            out.append(f"--- {path.name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._munged_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._munged_pid, 15)
        for ns in self._netns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        for link in reversed(self._links):
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


# ---- fixtures (``pytest_plugins = ["slurm_cluster"]`` in a test module) -------------------------


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """A real Slurm for the module's tests, or a skip saying why there is none."""
    cluster = SlurmCluster()
    try:
        cluster.start()
    except Unavailable as why:
        pytest.skip(f"no real Slurm here: {why}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """The service's data dir; its parents let a task's uid reach its own directory (pytest's
    tmp_path lies under a 0700 directory of root's)."""
    path = Path(tempfile.mkdtemp(prefix="lhslurm-data-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)
