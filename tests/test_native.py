"""The simulator's compiled modules (``scheduler/native/``): they load only when built from the
sources beside them, and they decide exactly as the sources do.

Given the checkout built with ``make native``: expect a replay of contended synthetic Philly jobs
under every shipped policy to give the same jobs (every field of every ``SimJob``) and the same
summary compiled as with ``LABHIVE_PURE=1``; expect ``LABHIVE_PURE=1`` to load the sources;
and, given a copy of the package with one source edited after the build, expect the copy to
load every compiled module from its source and to say which file is stale. Without a build
(no C compiler) these skip; the guard's reading of the manifest is tested either way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sim_helpers import PHILLY

import labhive
from labhive.scheduler import native

TRACE = PHILLY / "synthetic" / "synthetic_cluster_job_log.json.gz"
BUILT = native.install().compiled
needs_build = pytest.mark.skipif(
    not BUILT, reason=f"the compiled modules do not load here: {native.status()}"
)

#: A child that replays the first N contended jobs under one policy and prints a digest of the
#: result (as the sessions' ``contended_digest.py``), and which engine it ran.
DIGEST = r"""
import hashlib, sys
from pathlib import Path
import labhive
from labhive.scheduler import native
from labhive.scheduler.sim.machines import load_sim_cluster
from labhive.scheduler.sim.runner import run_policy
from labhive.scheduler.sim.traces import load_trace
philly, jobs, policy, checkpoint = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
config, _ = load_sim_cluster(
    philly / "cluster_machine_list", philly / "philly_vc_nodes_helios.csv", 360
)
trace = load_trace(philly / "synthetic" / "synthetic_cluster_job_log.json.gz").jobs[:jobs]
extra = {"checkpoint": float(checkpoint)} if checkpoint != "-" else {}
run = run_policy(policy, config, trace, keep_jobs=True, **extra)
digest = hashlib.sha256()
for job in run.result.jobs:
    digest.update(repr(job).encode())
digest.update(repr(sorted(run.summary["overall"].items())).encode())
print(native.loaded(), digest.hexdigest(), run.result.events)
"""
RUNS = [
    ("fifo", "-"),
    ("sjf", "-"),
    ("drf", "-"),
    ("drf:backfill=true", "-"),
    ("capacity", "-"),
    ("las", "-"),
    ("las", "60"),
    ("las:promote_knob=0,quantum=0", "60"),
    ("hived", "-"),
]


def _digest(policy: str, checkpoint: str, *, pure: bool) -> tuple[str, str, str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop(native.PURE_ENV, None)
    if pure:
        env[native.PURE_ENV] = "1"
    args = [sys.executable, "-c", DIGEST, str(PHILLY), "6000", policy, checkpoint]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    loaded, digest, events = out.split()
    return loaded, digest, events


@needs_build
@pytest.mark.slow
@pytest.mark.parametrize(("policy", "checkpoint"), RUNS)
def test_compiled_modules_decide_as_the_sources(policy: str, checkpoint: str) -> None:
    if not TRACE.exists():
        pytest.skip(f"the synthetic Philly trace is missing: {TRACE}")
    compiled = _digest(policy, checkpoint, pure=False)
    pure = _digest(policy, checkpoint, pure=True)
    assert (compiled[0], pure[0]) == ("True", "False")  # each ran the engine it was asked for
    assert compiled[1:] == pure[1:]


def _engine_file(env: dict[str, str], cwd: Path | None = None) -> str:
    """Where a fresh interpreter (``-c``: the working directory first on its path) loads the
    simulator's engine from, and the guard's status."""
    code = "import labhive.scheduler.sim.engine as e, labhive.scheduler.native as n\n"
    code += "print(e.__file__); print(n.install())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_build
def test_labhive_pure_loads_the_sources() -> None:
    env = {**os.environ, native.PURE_ENV: "1"}
    engine, reason = _engine_file(env).splitlines()
    assert engine.endswith("engine.py")
    assert reason == f"pure Python ({native.PURE_ENV} is set)"


@needs_build
def test_a_source_edited_after_the_build_loads_every_module_from_its_source(
    tmp_path: Path,
) -> None:
    """A copy of the built package runs compiled as it is; with ``sim/timeline.py`` edited
    after the build, none of the compiled modules loads compiled (they call one another
    natively), and the status names the stale file."""
    copy = tmp_path / "labhive"
    copy.mkdir()
    shutil.copy(str(labhive.__file__), copy)
    shutil.copytree(native.HERE, copy / "scheduler", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    engine, reason = _engine_file(env, tmp_path).splitlines()
    assert engine.startswith(str(copy)) and not engine.endswith(".py")
    assert reason == "compiled (mypyc)"
    timeline = copy / "scheduler" / "sim" / "timeline.py"
    timeline.write_text(timeline.read_text() + "\n# edited after the build\n")
    engine, reason = _engine_file(env, tmp_path).splitlines()
    assert engine == str(copy / "scheduler" / "sim" / "engine.py")
    assert reason.startswith("pure Python (stale: sim/timeline.py changed since the build")


def test_the_manifest_decides_whether_the_compiled_modules_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard's reading, on a package folder of its own: not built, built and fresh, a
    source changed, built for another interpreter, unreadable, and ``LABHIVE_PURE``."""
    for folder in native.HASHED:
        (tmp_path / folder).mkdir()
    (tmp_path / "sim" / "timeline.py").write_text("STEP = 1\n")
    monkeypatch.setattr(native, "HERE", tmp_path)
    monkeypatch.setattr(native, "MANIFEST", tmp_path / "_native.json")
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    assert str(native.status()) == "pure Python (not built: run `make native`)"
    for path in native.extension_paths():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    manifest = {"build": native.build_key(), "sources": native.source_digests()}
    native.MANIFEST.write_text(json.dumps(manifest))
    assert native.status().compiled
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert str(native.status()) == f"pure Python ({native.PURE_ENV} is set)"
    monkeypatch.setenv(native.PURE_ENV, "0")
    assert native.status().compiled
    (tmp_path / "sim" / "timeline.py").write_text("STEP = 2\n")
    (tmp_path / "core" / "new.py").write_text("")
    stale = "stale: core/new.py and 1 more changed since the build: run `make native`"
    assert str(native.status()) == f"pure Python ({stale})"
    native.MANIFEST.write_text(json.dumps({**manifest, "build": {"hexversion": 0}}))
    assert "built for another Python" in native.status().reason
    native.MANIFEST.write_text("{")
    assert native.status().reason.startswith("unreadable _native.json")
