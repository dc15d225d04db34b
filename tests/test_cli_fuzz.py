"""Given the shipped cluster configs, job files and scenarios with random damage (a value
swapped for a hostile one, a key dropped or renamed, a list where a mapping was, bytes cut,
doubled or spliced with YAML syntax), expect `labhive validate` and `labhive replay` to answer
with exit 0, 1 (a failed expectation) or 2 and a message: never a traceback, never a hang.

The commands run in this process (``cli.main``) for speed; a few run as the real CLI too, in a
process with bounded memory. Hypothesis draws the same inputs on every run (``repeatable``
profile, tests/conftest.py); ``HYPOTHESIS_PROFILE=explore`` searches with fresh ones."""

from __future__ import annotations

import copy
import io
import math
import resource
import shutil
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import DATA, EXAMPLES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from labhive.scheduler.cli import main

SOURCES = [EXAMPLES, DATA / "hived", DATA / "openpai-lab6", DATA / "openpai-jobs"]
#: Bugs the last-resort handler may still report, by the module they happen in: job-spec
#: parsing (``prerequisites: 5``, ``cpu: null``, ``instances: null``) is being fixed with the
#: intake's validation (issue 16 item 1); empty this once that is merged. Every other module
#: must answer with its own message.
TOLERATED_BUGS: tuple[str, ...] = ()
#: Not a speed bound (benchmarks measure speed): a hang detector, generous for a loaded CI.
HANG_S = 30.0

NASTY: list[Any] = [
    None, -1, 0, 1, 3, 2**31, 10**8, 10**30, -(10**30), 0.5, math.inf, -math.inf, math.nan,
    True, "", "-1", "a\x00b", "\x1b[2J", "ééé", "x" * 300, "../../etc/passwd",
    [], ["a"], [[1]], {}, {"a": 1}, {"cellType": "x"}, "2020-13-45",
]  # fmt: skip
#: The values that break assumptions most often: drawn half of the time.
BREAKING: list[Any] = [None, [], {}, ["a"], -1, math.nan, math.inf, "x", 10**8]
SNIPPETS = [
    "&a ", "*a", "*zz", "<<: *a\n", "? [a, b]\n: 1\n", "{", "}", "[", "- ", ": ", "\t", "'",
    '"', "!!int 0x", "!!float abc", "2020-13-45", ".inf", ".nan", "~", "\n  ", "#", "\x1b[2J",
    "\\0", "%YAML 1.1\n---\n", "--- |\n", "null",
    "\udcff",  # written as the byte 0xff: not UTF-8
]  # fmt: skip


def corpus() -> list[Path]:
    files = []
    for folder in SOURCES:
        if folder.is_dir():
            files += sorted(folder.rglob("*.yaml"))
    return files


CORPUS = corpus()


@cache
def parsed(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    """A copy of every source folder, so mutated files sit beside the files they name."""
    root = tmp_path_factory.mktemp("fuzz")
    copies = {}
    for i, folder in enumerate(f for f in SOURCES if f.is_dir()):
        copies[folder] = root / f"{i}-{folder.name}"
        shutil.copytree(folder, copies[folder])
    return copies


def paths_in(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a parsed document: mapping keys and list indices, depth first."""
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += paths_in(value, (*prefix, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += paths_in(value, (*prefix, i))
    return out


def mutate_tree(data: Any, where: tuple[Any, ...], op: str, value: Any) -> Any:
    data = copy.deepcopy(data)
    if not where:
        return value if op == "replace" else [data]
    parent = data
    for step in where[:-1]:
        parent = parent[step]
    last = where[-1]
    if op == "replace":
        parent[last] = value
    elif op == "wrap":
        parent[last] = [parent[last]]
    elif op == "drop":
        del parent[last]
    elif op == "rename" and isinstance(parent, dict):
        parent[str(value)[:40] if value is not None else "null"] = parent.pop(last)
    elif op == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[last]))
    return data


@st.composite
def damaged(draw: st.DrawFn) -> tuple[Path, str]:
    """A corpus file and its damaged text."""
    source = draw(st.sampled_from(CORPUS))
    text = source.read_text()
    if draw(st.booleans()):
        data = parsed(source)
        places = paths_in(data)
        keyed = [p for p in places if p and not isinstance(p[-1], int)]  # not command lines
        pool = keyed if keyed and draw(st.integers(0, 3)) != 0 else places
        where = pool[draw(st.integers(0, len(pool) - 1))]
        op = draw(st.sampled_from(["replace", "replace", "wrap", "drop", "rename", "duplicate"]))
        value = draw(st.one_of(st.sampled_from(BREAKING), st.sampled_from(NASTY)))
        return source, yaml.safe_dump(mutate_tree(data, where, op, value), allow_unicode=True)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        end = min(len(text), at + draw(st.integers(0, 40)))
        action = draw(st.sampled_from(["cut", "double", "splice", "truncate"]))
        if action == "cut":
            text = text[:at] + text[end:]
        elif action == "double":
            text = text[:end] + text[at:end] + text[end:]
        elif action == "splice":
            text = text[:at] + draw(st.sampled_from(SNIPPETS)) + text[at:]
        else:
            text = text[:at]
    return source, text


def run_in_process(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse's own exits
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue() + err.getvalue()


def check_answer(code: int, output: str, allowed: set[int]) -> None:
    assert code in allowed, output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    if "internal error (a bug in LabHive" in output:
        assert any(where in output for where in TOLERATED_BUGS), output[-2000:]


@pytest.mark.skipif(not CORPUS, reason="no shipped files found")
@settings(
    max_examples=settings().max_examples * 3 // 2,  # 150, or more when exploring
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(case=damaged())
@example(case=(EXAMPLES / "demo.yaml", "physicalCluster:\n  cellTypes:\n    ? [a, b]\n    : {}\n"))
@example(case=(EXAMPLES / "demo.yaml", 'hivedscheduler: {config: "-1"}\n'))
@example(
    case=(
        EXAMPLES / "demo.yaml",
        "events: [{at: 0, submit: {name: a}}]\nexpect: [{at: 0, job: [a]}]",
    )
)
def test_damaged_files_get_an_answer_never_a_traceback(workdir, case) -> None:
    source, text = case
    folder = next(f for f in workdir if source.is_relative_to(f))
    path = workdir[folder] / source.relative_to(folder).with_name(f"fuzzed-{source.name}")
    path.write_text(text, errors="surrogateescape")
    for command, allowed in (("validate", {0, 2}), ("replay", {0, 1, 2})):
        started = time.monotonic()
        code, output = run_in_process(command, str(path))
        assert time.monotonic() - started < HANG_S, f"{command} hung on {source.name}"
        check_answer(code, output, allowed)


def test_every_shipped_file_still_validates(workdir) -> None:
    for path in CORPUS:
        code, output = run_in_process("validate", str(path))
        expected = 2 if path.name.startswith("invalid-") else 0
        assert code == expected, output


# ---- the real command line, in a process of bounded memory ------------------------------------

REAL_CASES = {
    "key.yaml": "physicalCluster:\n  cellTypes:\n    ? [a, b]\n    : {}\n",
    "wrapper.yaml": 'hivedscheduler: {config: "-1"}\n',
    "expect.yaml": (
        "events:\n  - {at: 0, submit: {name: a, tasks: 1, gpus: 1, duration: 5}}\n"
        "expect:\n  - {at: 0, job: [a], state: RUNNING}\n"
    ),
    "nul.yaml": 'events:\n  - {at: 0, submit: {spec: "a\\0b.yaml"}}\n',
    "cells.yaml": (
        "physicalCluster:\n  cellTypes:\n"
        "    N: {childCellType: G, childCellNumber: 100000000, isNodeLevel: true}\n"
        "  physicalCells: [{cellType: N, cellAddress: n0}]\n"
        "virtualClusters: {default: {virtualCells: [{cellType: N.G, cellNumber: 1}]}}\n"
    ),
    "deep.yaml": "x: " + "[" * 10_000 + "\n",
}


@pytest.mark.parametrize("name", sorted(REAL_CASES))
def test_the_real_cli_exits_2_with_a_message(tmp_path, name) -> None:
    path = tmp_path / name
    path.write_text(REAL_CASES[name])

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    for command in ("validate", "replay") if "events" in REAL_CASES[name] else ("validate",):
        proc = subprocess.run(
            [sys.executable, "-m", "labhive.scheduler.cli", command, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=limit,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.startswith(f"labhive {command}: ") and proc.stderr.count("\n") == 1
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
