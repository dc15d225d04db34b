"""How long each course lab and researcher notebook takes as a papermill run against a real
``labhive serve`` (local executor, virtual cluster): the figure behind "each lab under 2
minutes, the whole suite under a few minutes on 2 cores".

    python benchmarks/bench_labs.py [NOTEBOOK ...]

Prints seconds per notebook and the total; asserts nothing.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kernel_support import labhive_serve
from labs_support import LABS, NOTEBOOKS, execute, service_env

DEFAULT = [
    *sorted(p.name for p in LABS.glob("lab*.ipynb")),
    "submit_and_watch.ipynb",
    "parameter_sweep.ipynb",
    "experiment_report.ipynb",
]


def main(names: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-labs-"))
    start = time.monotonic()
    with labhive_serve(root / "service") as service, service_env(service):
        print(f"service up in {time.monotonic() - start:.1f} s")
        total = 0.0
        for name in names:
            notebook = LABS / name if (LABS / name).exists() else NOTEBOOKS / name
            params = {"results_file": str(root / "sweep.csv")} if "sweep" in name else {}
            _, seconds = execute(notebook, root / name, params)
            total += seconds
            print(f"{name:<40} {seconds:6.1f} s")
    print(f"{'all notebooks':<40} {total:6.1f} s (wall, service start included: "
          f"{time.monotonic() - start:.1f} s)")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
