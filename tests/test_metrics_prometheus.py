"""Given the LabHive service serving HTTP on loopback (a job of vc1 on the node's recorded
H100), expect a real Prometheus server, configured with the shipped scrape config and alert
rules, to scrape its /metrics, answer PromQL for the VC's GPU and queue, evaluate every
dashboard and rule query, and fire the lost-GPU alert when the GPU falls off the bus; and the
client library to read the job's GPU history over HTTP."""

from __future__ import annotations

from metrics_service import NODE, labhive_service
from monitoring_files import dashboard_exprs, instantiate, rule_exprs
from prometheus_server import prometheus
from serving import serving

from labhive.scheduler.client import Client
from labhive.scheduler.service.app import create_app


def test_prometheus_scrapes_the_service_and_answers_promql(tmp_path) -> None:
    with labhive_service(tmp_path) as w:
        job = w.submit(name="train", vc="vc1", gpus=1, command="sleep 60")
        w.wait_state(job, "RUNNING")
        w.wait_samples()
        with serving(create_app(w.service), timeout=10) as port:
            target = f"127.0.0.1:{port}"
            with prometheus(target, "/api/v1/metrics", tmp_path / "prom") as prom:
                (up,) = prom.wait_for('up{job="labhive"}')
                assert up["value"][1] == "1"
                (gpu,) = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{vc="vc1"}')
                assert gpu["value"][1] == "100"
                # honor_labels: the LabHive job survives the scrape job's own `job` label
                assert gpu["metric"]["job"] == str(job) and gpu["metric"]["user"] == "admin"
                assert gpu["metric"]["Hostname"] == NODE
                (queue,) = prom.query('labhive_queue_length{vc="vc1"}')
                assert queue["value"][1] == "0"
                for expr in dashboard_exprs() + rule_exprs():
                    prom.query(instantiate(expr, job=str(job)))  # raises unless accepted
                assert prom.query(instantiate('DCGM_FI_DEV_FB_USED{job="$job"}', job=str(job)))
                rules = prom.api("rules")["groups"]
                assert sum(len(g["rules"]) for g in rules) == 11
                # the client library (widgets, reports) reads the job's GPU history
                token = w.headers["Authorization"].split()[1]
                with Client(url=f"http://{target}/api/v1", token=token) as client:
                    gpus = client.job(job).gpu_history()
                assert gpus["history"][0]["points"] and gpus["current"][0]["gpu_util"] == 100
                w.nvml.recording["devices"][0]["lost"] = True
                (alert,) = prom.wait_for('ALERTS{alertname="LabHiveGpuLost",alertstate="firing"}')
                assert alert["metric"]["Hostname"] == NODE and alert["metric"]["gpu"] == "0"
