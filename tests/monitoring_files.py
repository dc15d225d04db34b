"""The shipped monitoring files and the PromQL they hold, for the tests."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

MONITORING = Path(str(resources.files("labhive.scheduler.observe") / "monitoring"))
RULES = MONITORING / "labhive-alerts.yml"
SCRAPE = MONITORING / "prometheus.yml"
DASHBOARD = MONITORING / "labhive-dashboard.json"

#: Series Prometheus records itself for every target, not exported by anyone.
PROMETHEUS_OWN = {"up"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and"}
_KEYWORDS |= {"or", "unless", "offset", "inf", "nan"}


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


def _walk(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        q = node.get("query")
        if isinstance(q, dict) and isinstance(q.get("query"), str):
            found.append(q["query"])
        return found + [e for v in node.values() for e in _walk(v)]
    if isinstance(node, list):
        return [e for v in node for e in _walk(v)]
    return []


def dashboard_exprs() -> list[str]:
    """Panel queries and template-variable queries (``label_values(METRIC, label)``)."""
    exprs = _walk(json.loads(DASHBOARD.read_text()))
    return [re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", e) for e in exprs]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are neither functions,
    keywords, label names nor parts of strings, ranges or grouping clauses."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        if e[m.end() :].lstrip().startswith("(") or m.group(0).lower() in _KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def instantiate(expr: str, job: str = "42") -> str:
    """A dashboard query with Grafana's variables filled in, as Grafana would send it."""
    return expr.replace("$__rate_interval", "1m").replace("$vc", ".*").replace("$job", job)
