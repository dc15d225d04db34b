"""Given the shipped job files, mutated 300 ways (values, keys, shapes, raw bytes), submitted to a
live service, expect every answer to be a 2xx or a 4xx with a message, never a 5xx, and every
accepted job to stay readable. The mutations are drawn from a fixed seed, so a failure repeats.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from helpers import DATA

pytest_plugins = ["service_fixtures"]

ROOT = Path(__file__).resolve().parents[1]
SEED_FILES = sorted((ROOT / "scheduler" / "examples" / "lab6").glob("job-config-*.yaml")) + sorted(
    (DATA / "openpai-jobs").glob("*.yaml")
)
SHORT_SEEDS: list[dict[str, Any]] = [
    {"name": "short", "vc": "vc1", "gpus": 1, "tasks": 2, "cpu": 1.5, "memory_mb": 2048},
    {"name": "oppo", "vc": "default", "priority": "oppo", "gpus": 0, "retries": 1},
]
MUTATIONS = 300
#: Values that broke the service or the store before (issue 16), and their neighbours.
ODD_VALUES: list[Any] = [
    None, math.nan, math.inf, -math.inf, -1, 0, 10**30, -(10**30), 2**63, 1.5, True, "",
    "x" * 300, "w\ud800", "a\x00b", "\x1b[2J", "١٢", [], {}, [None], {"k": None}, "5", -0.0,
]  # fmt: skip
ODD_KEYS = ["", "w\ud800", "n\x00", "x" * 200, "instances", "gpu", "cpu", "name", "1"]


def seeds() -> list[dict[str, Any]]:
    """The shipped job files with harmless commands (accepted jobs really run)."""
    out = []
    for path in SEED_FILES:
        doc = json.loads(json.dumps(yaml.safe_load(path.read_text()), default=str))
        for role in (doc.get("taskRoles") or {}).values():
            role["commands"] = ["sleep 1"]
        out.append(doc)
    return out + [{**s, "command": "sleep 1"} for s in SHORT_SEEDS]


def nodes(doc: Any, path: tuple = ()) -> list[tuple]:
    """Every (container, key) in the tree, to pick a place to mutate."""
    found: list[tuple[Any, Any]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            found.append((doc, k))
            found.extend(nodes(v, (*path, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found.append((doc, i))
            found.extend(nodes(v, (*path, i)))
    return found


def replace_value(rng: random.Random, doc: Any) -> None:
    container, key = rng.choice(nodes(doc))
    container[key] = copy.deepcopy(rng.choice(ODD_VALUES))


def drop_key(rng: random.Random, doc: Any) -> None:
    container, key = rng.choice(nodes(doc))
    if isinstance(container, dict):
        del container[key]


def odd_key(rng: random.Random, doc: Any) -> None:
    dicts = [c for c, _ in nodes(doc) if isinstance(c, dict)] or [doc]
    rng.choice(dicts)[rng.choice(ODD_KEYS)] = copy.deepcopy(rng.choice(ODD_VALUES))


def reshape(rng: random.Random, doc: Any) -> None:
    container, key = rng.choice(nodes(doc))
    value = container[key]
    container[key] = [value] if not isinstance(value, list) else {"x": value}


def scale(rng: random.Random, doc: Any) -> None:
    numbers = [(c, k) for c, k in nodes(doc) if type(c[k]) in (int, float)]
    if numbers:
        container, key = rng.choice(numbers)
        container[key] = container[key] * rng.choice([10**6, 10**20, -1, 0.5, 1e300])


TREE: list[Callable[[random.Random, Any], None]] = [
    replace_value,
    drop_key,
    odd_key,
    reshape,
    scale,
]


def mutated(rng: random.Random, base: list[dict[str, Any]]) -> bytes:
    """One mutated job: 1-3 tree mutations, then (one time in six) a cut or flipped byte."""
    doc = copy.deepcopy(rng.choice(base))
    for _ in range(rng.randint(1, 3)):
        if nodes(doc):
            rng.choice(TREE)(rng, doc)
    body = json.dumps(doc).encode()  # allow_nan, ensure_ascii: NaN and \\ud800 travel as sent
    if rng.random() < 1 / 6:
        cut = rng.randrange(len(body))
        body = body[:cut] + bytes([rng.randrange(256)]) + body[cut + 1 :]
    return body


def test_mutated_job_files_never_get_a_5xx(live_sqlite) -> None:
    rng = random.Random(16)
    base = seeds()
    admin = {"Authorization": f"Bearer {live_sqlite.admin}", "Content-Type": "application/json"}
    accepted: list[int] = []
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=live_sqlite.url, headers=admin, timeout=60) as http:
        for i in range(MUTATIONS):
            body = mutated(rng, base)
            answer = http.post("/jobs", content=body)
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            assert answer.status_code < 500, (i, body[:300], answer.text)
            if answer.status_code == 201:
                accepted.append(answer.json()["id"])
            else:
                assert 400 <= answer.status_code < 500 and answer.json()["detail"], answer.text
        assert accepted and len(accepted) < MUTATIONS, statuses  # both kinds were exercised
        for job_id in accepted:  # what was stored is readable (a poison row answered 500)
            assert http.get(f"/jobs/{job_id}").status_code == 200, job_id
        for view in ("/queue", "/cluster", "/gpus", "/jobs?limit=1000"):
            assert http.get(view).status_code == 200, view
