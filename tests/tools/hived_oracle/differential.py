"""Differential check of LabHive's HiveD against HiveD's own ``pkg/algorithm`` (the oracle).

Both run the same case (a HiveD config and a list of events: submit, finish, node_down,
node_up); after every event each job's state, nodes and lazy-preemption downgrade are
compared. Random cases find where they part; ``shrink`` cuts a differing case down to the
events that still show the difference. See README.md beside this file for building the oracle.

    python tests/tools/hived_oracle/differential.py --hived-src ~/src/hivedscheduler \\
        --cases 300 --seed 1 [--failures] [--lazy]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from labhive.scheduler.core.config import load_cluster_config
from labhive.scheduler.core.jobs import parse_job
from labhive.scheduler.core.model import Finish, NodeDown, NodeUp, SpecRejected, Submit
from labhive.scheduler.hived.core import HivedScheduler

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "oracle_test.go"
#: The HiveD commit the driver was written against (microsoft/hivedscheduler master).
HIVED_COMMIT = "66f26ac"

Case = dict[str, Any]  # {"config": HiveD YAML text, "events": [...]}
Steps = list[dict[str, dict[str, Any]]]


# ---- the oracle -----------------------------------------------------------------------------


def build_oracle(hived_src: Path, work: Path) -> Path:
    """Compile the driver into HiveD's pkg/algorithm, in GOPATH mode from HiveD's vendored
    dependencies (no network). Returns the test binary; reused while it is newer than the
    driver."""
    binary = work / "hived-oracle.test"
    if binary.exists() and binary.stat().st_mtime > DRIVER.stat().st_mtime:
        return binary
    if shutil.which("go") is None:
        raise RuntimeError("go is not installed (Debian: apt-get install golang-go)")
    algo = hived_src / "pkg" / "algorithm" / "hived_algorithm.go"
    if not algo.exists():
        raise RuntimeError(f"{hived_src} is not a HiveD checkout (no {algo})")
    tree = work / "gopath" / "src" / "github.com" / "microsoft" / "hivedscheduler"
    if not tree.exists():
        shutil.copytree(hived_src, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    pkg = tree / "pkg" / "algorithm"
    # HiveD's own test file parses flags in init(), before `go test`'s flags exist.
    (pkg / "hived_algorithm_test.go").unlink(missing_ok=True)
    shutil.copy(DRIVER, pkg / "oracle_test.go")
    env = {
        **os.environ,
        "GOPATH": str(work / "gopath"),
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOCACHE": str(work / "gocache"),
    }
    subprocess.run(["go", "test", "-c", "-o", str(binary), "."], cwd=pkg, env=env, check=True)
    return binary


def run_oracle(binary: Path, case: Case, log: list[str] | None = None) -> Steps:
    """HiveD's steps on ``case``; its own log (klog's INFO file: bindings, doomed-bad cells)
    appended to ``log`` if given. klog writes its files to the temporary directory, so each
    run gets its own (they used to pile up in /tmp, two or three files per case)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "hived.yaml"
        config.write_text(case["config"])
        path = Path(tmp) / "case.json"
        path.write_text(json.dumps({"config": str(config), "events": case["events"]}))
        out = subprocess.run(
            [str(binary), "-test.run", "TestOracle"],
            env={**os.environ, "HIVED_ORACLE_CASE": str(path), "TMPDIR": tmp},
            capture_output=True,
            text=True,
            check=False,
        )
        if log is not None:
            log += [f.read_text(errors="replace") for f in Path(tmp).glob("*.log.INFO.*")]
    lines = out.stdout.splitlines()
    if "ORACLE-BEGIN" not in lines:
        raise RuntimeError(f"the oracle failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    steps: Steps = json.loads(lines[lines.index("ORACLE-BEGIN") + 1])["steps"]
    return steps


DOOMED = "is doomed to be bad and bound"


def doomed_bindings(binary: Path, case: Case) -> int:
    """How many doomed-bad bindings HiveD makes while playing the case's events: a VC's
    unbound cell bound to a bad free cell because too few healthy cells are left for the VCs'
    quotas (``tryBindDoomedBadCell``). HiveD's startup (every node bad until reported) makes
    some in every case; those of the same config with no events are not counted."""
    log: list[str] = []
    run_oracle(binary, case, log)
    start: list[str] = []
    run_oracle(binary, {**case, "events": []}, start)
    return sum(t.count(DOOMED) for t in log) - sum(t.count(DOOMED) for t in start)


# ---- LabHive on the same case ---------------------------------------------------------------


def run_labhive(case: Case) -> Steps:
    sched = HivedScheduler(load_cluster_config(case["config"]))
    known: list[str] = []
    rejected: set[str] = set()
    steps: Steps = []
    for ev in case["events"]:
        op = ev["op"]
        if op == "submit":
            short = {
                "name": ev["name"],
                "vc": ev["vc"],
                "priority": ev["priority"],
                "tasks": ev["tasks"],
                "gpus": ev["gpus"],
                "lazy_preemption": ev.get("lazy", False),
            }
            if ev.get("sku"):
                short["sku"] = ev["sku"]
            try:
                sched.handle(Submit(ev["name"], parse_job(short)))
            except SpecRejected:  # HiveD leaves it waiting for ever: so does the comparison
                rejected.add(ev["name"])
            known.append(ev["name"])
        elif op == "finish":
            if ev["name"] not in rejected:
                sched.handle(Finish(ev["name"]))
            known.remove(ev["name"])
        elif op == "node_down":
            sched.handle(NodeDown(ev["node"]))
        elif op == "node_up":
            sched.handle(NodeUp(ev["node"]))
        step = {}
        for name in known:
            if name in rejected:
                step[name] = {"state": "WAITING", "tasks": [], "downgraded": False}
                continue
            view = sched.job(name)
            assert view is not None
            step[name] = {
                "state": view.state,
                "tasks": sorted(
                    ({"node": t.node, "gpus": sorted(t.gpus)} for t in view.tasks),
                    key=lambda t: (t["node"], t["gpus"]),
                ),
                "downgraded": bool(view.opportunistic and view.priority >= 0),
            }
        steps.append(step)
    return steps


def normalise(steps: Steps, gpus: bool) -> Steps:
    """Tasks as sorted (node, GPUs) lists; GPU indices dropped unless ``gpus``."""
    out = []
    for step in steps:
        norm = {}
        for name, job in step.items():
            tasks = sorted((t["node"], tuple(t["gpus"]) if gpus else ()) for t in job["tasks"])
            norm[name] = {"state": job["state"], "tasks": tasks, "downgraded": job["downgraded"]}
        out.append(norm)
    return out


def first_difference(case: Case, oracle: Steps, labhive: Steps, gpus: bool = False) -> str | None:
    a, b = normalise(oracle, gpus), normalise(labhive, gpus)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            names = sorted(set(x) | set(y))
            diff = [
                f"  {n}: HiveD {x.get(n)} / LabHive {y.get(n)}"
                for n in names
                if x.get(n) != y.get(n)
            ]
            return f"after event {i} {case['events'][i]}:\n" + "\n".join(diff)
    return None


# ---- random cases and shrinking ---------------------------------------------------------------

RACKS = """\
physicalCluster:
  cellTypes:
    NODE: {{childCellType: GPU, childCellNumber: {gpus}, isNodeLevel: true}}
    RACK: {{childCellType: NODE, childCellNumber: {nodes}}}
    POD: {{childCellType: RACK, childCellNumber: {racks}}}
  physicalCells:
{cells}
virtualClusters:
{vcs}
"""


def random_config(rng: random.Random) -> tuple[str, list[str], list[str]]:
    gpus, nodes, racks, pods = rng.choice([2, 4]), 2, 2, 2
    lines, names, n = [], [], 0
    for p in range(pods):
        lines.append(f"  - cellType: POD\n    cellAddress: p{p}\n    cellChildren:")
        for r in range(racks):
            kids = []
            for _ in range(nodes):
                kids.append(f"{{cellAddress: n{n}}}")
                names.append(f"n{n}")
                n += 1
            lines.append(f"    - {{cellAddress: r{p}{r}, cellChildren: [{', '.join(kids)}]}}")
    # Quotas: whole racks and single nodes, leaving some physical cells to no VC.
    vcs = {
        "a": [("POD.RACK", 1), ("POD.RACK.NODE", rng.randint(0, 1))],
        "b": [("POD.RACK.NODE", rng.randint(1, 2))],
        "c": [("POD.RACK.NODE", 1)],
    }
    vc_lines = []
    for vc, cells in vcs.items():
        want = ", ".join(f"{{cellType: {t}, cellNumber: {k}}}" for t, k in cells if k)
        vc_lines.append(f"  {vc}: {{virtualCells: [{want}]}}")
    text = RACKS.format(
        gpus=gpus, nodes=nodes, racks=racks, cells="\n".join(lines), vcs="\n".join(vc_lines)
    )
    return text, names, list(vcs)


def random_case(rng: random.Random, failures: bool, lazy: bool, length: int = 14) -> Case:
    config, nodes, vcs = random_config(rng)
    gpus = 2 if "childCellNumber: 2, isNodeLevel" in config else 4
    events: list[dict[str, Any]] = []
    running: list[str] = []
    down: list[str] = []
    for i in range(length):
        roll = rng.random()
        if failures and roll < 0.15 and len(down) < 2:
            node = rng.choice([n for n in nodes if n not in down])
            down.append(node)
            events.append({"op": "node_down", "node": node})
        elif failures and roll < 0.2 and down:
            node = down.pop(rng.randrange(len(down)))
            events.append({"op": "node_up", "node": node})
        elif roll < 0.32 and running:
            events.append({"op": "finish", "name": running.pop(rng.randrange(len(running)))})
        else:
            name = f"j{i}"
            running.append(name)
            events.append(
                {
                    "op": "submit",
                    "name": name,
                    "vc": rng.choice(vcs),
                    "priority": rng.choice([-1, 10, 10, 100]),
                    "lazy": lazy and rng.random() < 0.5,
                    "tasks": rng.choice([1, 1, 2]),
                    "gpus": rng.choice([1, gpus // 2, gpus]),
                }
            )
    return {"config": config, "events": events}


def valid(events: list[dict[str, Any]]) -> bool:
    """A shrunk event list still makes sense: jobs finish after they were submitted."""
    seen: set[str] = set()
    for ev in events:
        if ev["op"] == "submit":
            seen.add(ev["name"])
        elif ev["op"] == "finish":
            if ev["name"] not in seen:
                return False
            seen.discard(ev["name"])
    return True


def lazy_stopped(case: Case, oracle: Steps, labhive: Steps) -> str | None:
    """The pattern of issue 34: a guaranteed job that allows lazy preemption keeps running
    downgraded in HiveD but is stopped (WAITING) in LabHive after the same event."""
    for i, (x, y) in enumerate(zip(oracle, labhive, strict=True)):
        for name, job in x.items():
            if job["state"] == "RUNNING" and job["downgraded"] and y[name]["state"] == "WAITING":
                event = case["events"][i]
                return f"after event {i} {event}: {name} downgraded in HiveD, stopped in LabHive"
    return None


def lazy_stopped_first(case: Case, oracle: Steps, labhive: Steps) -> str | None:
    """``lazy_stopped`` at the first event after which the two differ at all (every earlier
    placement agreed: the difference is not a consequence of an earlier one)."""
    a, b = normalise(oracle, False), normalise(labhive, False)
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
    return lazy_stopped(case, oracle[: n + 1], labhive[: n + 1])


def after_failure(case: Case, oracle: Steps, labhive: Steps) -> str | None:
    """The first difference comes with or after a node going down, everything before agreed."""
    a, b = normalise(oracle, False), normalise(labhive, False)
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
    down = next((i for i, ev in enumerate(case["events"]) if ev["op"] == "node_down"), None)
    if n is None or down is None or n < down:
        return None
    return first_difference(case, oracle, labhive)


def after_failure_state(case: Case, oracle: Steps, labhive: Steps) -> str | None:
    """``after_failure`` where a job's state (running, waiting, preempted) differs at the first
    difference, not only its nodes: what ``classify`` calls ``state``."""
    found = after_failure(case, oracle, labhive)
    if found is None:
        return None
    a, b = normalise(oracle, False), normalise(labhive, False)
    n = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    return found if any(a[n][j]["state"] != b[n][j]["state"] for j in a[n]) else None


PATTERNS = {
    "after-failure": after_failure,
    "after-failure-state": after_failure_state,
    "any": None,
    "lazy-stopped": lazy_stopped,
    "lazy-stopped-first": lazy_stopped_first,
}


def classify(binary: Path, case: Case, oracle: Steps, labhive: Steps) -> str:
    """What kind of difference an after-failure case shows: ``state`` when a job's state
    differs at the first difference (else ``placement``), ``/alone`` when the case without its
    node_down/node_up events agrees (the failures alone bring it), ``/also`` when it differs
    without them too (a difference that needs no failure)."""
    a, b = normalise(oracle, False), normalise(labhive, False)
    n = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    state = any(a[n][j]["state"] != b[n][j]["state"] for j in a[n])
    events = [e for e in case["events"] if e["op"] not in ("node_down", "node_up")]
    calm = {**case, "events": events}
    also = first_difference(calm, run_oracle(binary, calm), run_labhive(calm)) is not None
    return ("state" if state else "placement") + ("/also" if also else "/alone")


def differs(binary: Path, case: Case, gpus: bool, pattern: str = "any") -> str | None:
    try:
        oracle = run_oracle(binary, case)
    except RuntimeError as err:  # HiveD panics on some inputs (e.g. a bad request)
        return None if "panic" in str(err) else str(err)
    labhive = run_labhive(case)
    check = PATTERNS[pattern]
    if check is None:
        return first_difference(case, oracle, labhive, gpus)
    return check(case, oracle, labhive)


def shrink(binary: Path, case: Case, gpus: bool, pattern: str = "any") -> Case:
    """Drop events one at a time while the difference stays (greedy delta debugging)."""
    events = list(case["events"])
    changed = True
    while changed:
        changed = False
        for i in range(len(events) - 1, -1, -1):
            trial = events[:i] + events[i + 1 :]
            if trial and valid(trial) and differs(binary, {**case, "events": trial}, gpus, pattern):
                events = trial
                changed = True
    return {**case, "events": events}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hived-src", type=Path, default=os.environ.get("HIVED_SRC"))
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "hived-oracle")
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--failures", action="store_true", help="node_down/node_up events too")
    ap.add_argument("--lazy", action="store_true", help="half the jobs allow lazy preemption")
    ap.add_argument("--gpus", action="store_true", help="compare GPU indices, not just nodes")
    ap.add_argument("--case", type=Path, help="run one case file (JSON) and print both")
    ap.add_argument("--pattern", choices=sorted(PATTERNS), default="any")
    ap.add_argument("--count", action="store_true", help="only count differing cases")
    ap.add_argument(
        "--classify", action="store_true", help="with --count: count them by kind (classify)"
    )
    ap.add_argument("--stop", type=int, default=1, help="stop after this many differences")
    ap.add_argument(
        "--save",
        type=Path,
        help="with --count --classify: write each case of the kinds given by --save-kind here "
        "as seed-S-case-N.json (to shrink and group them later)",
    )
    ap.add_argument("--save-kind", default="state", help="the kind prefix --save keeps")
    ap.add_argument(
        "--doomed",
        action="store_true",
        help="only count the cases in which HiveD makes a doomed-bad binding (doomed_bindings)",
    )
    args = ap.parse_args(argv)
    if args.hived_src is None:
        ap.error("--hived-src (or HIVED_SRC): a checkout of microsoft/hivedscheduler")
    args.work.mkdir(parents=True, exist_ok=True)
    binary = build_oracle(args.hived_src, args.work)
    if args.case:
        case = json.loads(args.case.read_text())
        oracle, labhive = run_oracle(binary, case), run_labhive(case)
        for i, (x, y) in enumerate(
            zip(normalise(oracle, True), normalise(labhive, True), strict=True)
        ):
            print(f"event {i}: {case['events'][i]}")
            for name in x:
                mark = "  " if x[name] == y[name] else "!="
                print(f" {mark} {name}: HiveD {x[name]}\n    {' ' * len(name)}  LabHive {y[name]}")
        print(differs(binary, case, args.gpus, args.pattern) or "same decisions")
        return 0
    rng = random.Random(args.seed)
    if args.doomed:
        hits, panics = 0, 0
        for _ in range(args.cases):
            try:
                hits += doomed_bindings(binary, random_case(rng, args.failures, args.lazy)) > 0
            except RuntimeError as err:  # HiveD panics on some cases (as ``differs`` skips)
                if "panic" not in str(err):
                    raise
                panics += 1
        print(f"{args.cases} cases, {hits} with a doomed-bad binding ({panics} HiveD panicked on)")
        return 0
    found = 0
    kinds: dict[str, int] = {}
    for n in range(args.cases):
        case = random_case(rng, args.failures, args.lazy)
        diff = differs(binary, case, args.gpus, args.pattern)
        if diff and args.count:
            found += 1
            if args.classify:
                kind = classify(binary, case, run_oracle(binary, case), run_labhive(case))
                kinds[kind] = kinds.get(kind, 0) + 1
                if args.save and kind.startswith(args.save_kind):
                    args.save.mkdir(parents=True, exist_ok=True)
                    out = args.save / f"seed-{args.seed}-case-{n}.json"
                    out.write_text(json.dumps(case, indent=1))
        elif diff:
            small = shrink(binary, case, args.gpus, args.pattern)
            print(f"case {n} differs; shrunk to {len(small['events'])} events:")
            print(json.dumps(small))
            print(differs(binary, small, args.gpus, args.pattern))
            found += 1
            if found >= args.stop:
                return 1
    if kinds:
        print(", ".join(f"{kind} {k}" for kind, k in sorted(kinds.items())))
    print(f"{args.cases} cases, {found} differ")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
