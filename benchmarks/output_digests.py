"""A digest of every replay and simulation output a structural change must leave as it was.

Issue 32's "behaviour unchanged" asks for byte-identical ``labhive replay --json`` of every
scenario and ``labhive simulate --json`` of every policy variant before and after a change.
This runs each of them in a fresh process of the tree named by ``--tree`` (its ``labhive``
package first on ``PYTHONPATH``) and prints one line a case: the SHA-256 of its stdout, its
exit status and the case. Run it on the tree before and on the tree after, and ``diff`` the two:

    git archive BASE | tar -x -C /tmp/before
    python benchmarks/output_digests.py --tree /tmp/before > before.txt
    python benchmarks/output_digests.py > after.txt
    diff before.txt after.txt && echo identical

Each case runs in ``tree`` with the paths of its inputs relative to it, and what it writes for
a case goes to the same ``--scratch`` in both runs, because ``simulate`` names its inputs in its
output. stderr is left out (``simulate`` prints its run time there). The simulations replay the
first 1,000 jobs of the synthetic Philly trace (``shared/data/philly/synthetic``) on the first 60
of Philly's machines, where jobs contend, and Tiresias' and Helios' own test inputs under
``--model``; the scenarios are ``scheduler/examples`` and every scenario under ``tests/data``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"

#: Every policy and the options that change what it decides (docs/policies.md's table).
POLICIES = (
    "hived",
    "hived:fair_share=7d",
    "hived:fair_share=7d,reserve_after=1h",
    "fifo",
    "fifo:backfill=true",
    "fifo:per_vc=true",
    "fifo:locality=anywhere",
    "sjf",
    "sjf:backfill=true",
    "sjf:per_vc=true",
    "drf",
    "drf:backfill=true",
    "capacity",
    "capacity:borrow=false",
    "capacity:backfill=true",
    "las",
    "las:promote_knob=0,quantum=0,same_queue=true",
    "las:backfill=true",
    "las:per_vc=true",
)
#: The policies a scenario is replayed under (the queue policies share one scaffold).
REPLAY_POLICIES = ("hived", "fifo", "capacity", "las")


def scenarios(tree: Path) -> list[Path]:
    """The scenario files of ``tree``: a YAML file with ``events`` at its top."""
    found = sorted((tree / "scheduler" / "examples").glob("*.yaml"))
    found += sorted((tree / "tests" / "data").rglob("*.yaml"))
    return [p for p in found if _is_scenario(p)]


def _is_scenario(path: Path) -> bool:
    import yaml

    doc = yaml.safe_load(path.read_text())
    return isinstance(doc, dict) and "events" in doc


def cases(tree: Path, scratch: Path) -> Iterator[tuple[str, list[str]]]:
    """(name, labhive arguments) of every case, paths relative to ``tree`` in the name."""
    for path in scenarios(tree):
        name = str(path.relative_to(tree))  # run in ``tree``: the output names it the same
        for policy in REPLAY_POLICIES:
            yield f"replay {name} {policy}", ["replay", name, "--json", "--policy", policy]
        yield f"simulate --scenario {name}", ["simulate", "--scenario", name, "--json",
                                              "--quiet", "--policy", "hived"]  # fmt: skip
    philly = SHARED / "philly"
    trace = ["--trace", str(philly / "synthetic" / "synthetic_jobs_sample1000.csv"),
             "--cluster", str(philly / "cluster_machine_list"), "--machines", "60"]  # fmt: skip
    for policy in POLICIES:
        yield f"simulate philly-1000 {policy}", ["simulate", *trace, "--json", "--quiet",
                                                 "--policy", policy]  # fmt: skip
    machines = scratch / "n2g4.csv"
    machines.write_text("machineId,number of GPUs\nm0,4\nm1,4\n")
    tiresias = "tests/data/tiresias/60_job.csv"
    yield "simulate tiresias-60 --model tiresias", ["simulate", "--trace", tiresias,
        "--cluster", str(machines), "--model", "tiresias", "--json", "--quiet"]  # fmt: skip
    helios = "tests/data/helios/cluster_log_300.csv"
    nodes = scratch / "helios-nodes.csv"  # its README: vcA 3 nodes of 8 GPUs, vcB 2
    nodes.write_text("machineId,number of GPUs\n" + "".join(f"m{i},8\n" for i in range(5)))
    vcs = scratch / "helios-vcs.csv"
    vcs.write_text("vc,nodes\nvcA,3\nvcB,2\n")
    for policy in ("fifo", "sjf"):
        yield f"simulate helios-300 --model helios {policy}", ["simulate", "--trace", helios,
            "--cluster", str(nodes), "--vcs", str(vcs), "--model", "helios", "--policy", policy,
            "--json", "--quiet"]  # fmt: skip


def digest(tree: Path, args: list[str]) -> tuple[str, int]:
    """The SHA-256 of ``labhive ARGS``' stdout under ``tree``, and its exit status."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "labhive.scheduler.cli", *args],
        env=env,
        capture_output=True,
        cwd=tree,
        check=False,
    )
    return hashlib.sha256(done.stdout).hexdigest(), done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the source tree to run")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/output_digests"))
    opts = parser.parse_args(argv)
    tree = opts.tree.resolve()
    opts.scratch.mkdir(parents=True, exist_ok=True)
    for name, args in cases(tree, opts.scratch):
        sha, code = digest(tree, args)
        print(f"{sha[:16]} rc={code} {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
