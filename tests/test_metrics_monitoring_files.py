"""Given the alert rules, scrape config and dashboard LabHive ships, expect promtool to accept
them and every metric they query to be one LabHive's /metrics exports."""

from __future__ import annotations

import json
import shutil
import subprocess

import yaml
from metrics_service import labhive_service
from monitoring_files import (
    DASHBOARD,
    PROMETHEUS_OWN,
    RULES,
    SCRAPE,
    dashboard_exprs,
    metric_names,
    rule_exprs,
)
from prometheus_client.parser import text_string_to_metric_families


def exported_names(text: str) -> set[str]:
    """Family names and sample names (``_bucket``, ``_total``, ...) as they are on the wire."""
    names = set()
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        names.update(s.name for s in fam.samples)
    names.update(line.split()[2] for line in text.splitlines() if line.startswith("# TYPE "))
    return names


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.9, sum by (vc, le) (rate(labhive_queue_wait_seconds_bucket{vc=~"$vc"}'
        "[$__rate_interval]))) or count(labhive_node_healthy == 0) or vector(0)"
    )
    assert metric_names(expr) == {"labhive_queue_wait_seconds_bucket", "labhive_node_healthy"}
    assert metric_names('absent(up{job="labhive"})') == {"up"}


def test_rules_and_dashboard_query_only_exported_metrics(tmp_path) -> None:
    """Against the service's own /metrics, with a job whose process holds the GPU."""
    with labhive_service(tmp_path) as w:
        w.running_on_the_gpu("train")
        w.wait_samples()
        exported = exported_names(w.metrics())
    for source, exprs in (("alert rules", rule_exprs()), ("dashboard", dashboard_exprs())):
        assert exprs, source
        used = set().union(*(metric_names(e) for e in exprs))
        assert used, source
        unknown = used - exported - PROMETHEUS_OWN
        assert not unknown, f"{source} query metrics LabHive does not export: {sorted(unknown)}"


def test_dashboard_has_cluster_vc_and_job_sections() -> None:
    dash = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ["Cluster", "Virtual clusters ($vc)", "Job ($job)"]
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "vc", "job"}
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))


def test_promtool_accepts_rules_and_scrape_config(tmp_path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run `bash .ci/deps.sh` (Debian package prometheus)"
    out = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 11 rules found" in out.stdout
    # the config names the rules file beside it
    shutil.copy(SCRAPE, tmp_path / "prometheus.yml")
    shutil.copy(RULES, tmp_path / RULES.name)
    out = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    scrape = yaml.safe_load(SCRAPE.read_text())["scrape_configs"][0]
    assert scrape["job_name"] == "labhive" and scrape["honor_labels"] is True
