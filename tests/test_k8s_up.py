"""``labhive up --executor kubernetes`` against the in-memory Kubernetes API server.

Given a HiveD config of two Kubernetes nodes and a kubeconfig for the API server, expect one
command to start the hub and the service on Kubernetes, its banner to say so (where pods reach
the hub, what keeps pods to their GPUs), and a job submitted to that service to run as a pod
and succeed. Given no readable kubeconfig, or no cluster config, expect ``labhive up`` to refuse
before starting anything, saying what to give it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hub_support import wait_for
from k8s_fake import FakeServer, Kubelet
from kernel_support import free_port, venv_env
from test_k8s_service import CLUSTER, KUBECONFIG

from labhive.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.k8s]


def up(data: Path, *engine: str) -> list[str]:
    return [
        sys.executable, "-m", "labhive.scheduler.cli", "up", "--data-dir", str(data),
        "--port", str(free_port()), "--service-port", str(free_port()), "--grace-s", "1",
        *engine,
    ]  # fmt: skip


def test_labhive_up_on_kubernetes_starts_the_hub_and_runs_a_job_as_a_pod(tmp_path: Path) -> None:
    with FakeServer({"node-a": 4, "node-b": 4}) as fake:
        kubelet = Kubelet(fake.api).start()
        (tmp_path / "cluster.yaml").write_text(CLUSTER)
        (tmp_path / "kubeconfig").write_text(KUBECONFIG.replace("{url}", fake.url))
        engine = ["--executor", "kubernetes", "--kubeconfig", str(tmp_path / "kubeconfig")]
        cmd = up(tmp_path / "data", *engine, "--cluster", str(tmp_path / "cluster.yaml"))
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=venv_env(),
            start_new_session=True,
        )  # fmt: skip
        try:
            lines = []
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.append(line)
                if "GPU devices" in line:
                    break
            banner = "".join(lines)
            assert "LabHive is up:" in banner, banner
            assert f"executor:     Kubernetes at {fake.url}" in banner, banner
            assert "the hub at 127.0.0.1 (--hub-ip); servers run in pods" in banner, banner
            assert "cluster:      2 nodes x 4 GPUs; VCs vc1" in banner, banner
            assert "GPU devices: the device plugin's resource" in banner, banner
            keys = json.loads((tmp_path / "data" / "hub" / "secrets.json").read_text())
            port = re.search(r"LABHIVE_URL=http://127.0.0.1:(\d+)", banner)
            assert port, banner
            service = Client(f"http://127.0.0.1:{port.group(1)}", keys["service_token"])
            job = service.submit(name="hello", command="echo hi", gpus=1, vc="vc1")
            wait_for(lambda: job.refresh().done, 30, "the job's pod")
            assert job.state == "SUCCEEDED", job.data
            assert any(p.startswith("/api/v1/namespaces/labhive/pods") for p in fake.paths("POST"))
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            kubelet.close()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--kubeconfig", "/nonexistent/kubeconfig"],
         "cannot read the kubeconfig /nonexistent/kubeconfig: give a readable one"),
        (["--kubeconfig", "{garbage}"], "--executor kubernetes: {garbage}: cannot load Kubernetes"),
        ([], "--executor kubernetes needs --cluster FILE"),
    ],
)  # fmt: skip
def test_labhive_up_on_kubernetes_refuses_what_cannot_work(
    tmp_path: Path, given: list[str], said: str
) -> None:
    garbage = tmp_path / "not-a-kubeconfig"
    garbage.write_text("just: [text\n")
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    args = [a.replace("{garbage}", str(garbage)) for a in given]
    if given:
        args += ["--cluster", str(tmp_path / "cluster.yaml")]
    done = subprocess.run(
        up(tmp_path / "data", "--executor", "kubernetes", *args), capture_output=True,
        text=True, env=venv_env(), timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert said.replace("{garbage}", str(garbage)) in done.stderr, done.stderr
    assert not (tmp_path / "data" / "hub" / "jupyterhub.log").exists()  # nothing started
