"""Given the scheduler's source tree, expect no module over 700 lines (issue 32: a module that
size holds more than one idea, and grew there because it was the easy place to put the next).

The sizes are read from the files each run, so a module that grows past the limit fails here
the day it does, not at the next review.
"""

from __future__ import annotations

from pathlib import Path

from import_graph import ROOT

#: The most lines a module of ``scheduler/`` may have.
MAX_LINES = 700


def oversized(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Path under ``root`` -> its line count, for every Python module over ``limit`` lines."""
    sizes = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts or path.is_symlink():
            continue
        lines = len(path.read_text().splitlines())
        if lines > limit:
            sizes[str(path.relative_to(root))] = lines
    return sizes


def test_no_scheduler_module_is_over_700_lines() -> None:
    modules = list((ROOT / "scheduler").rglob("*.py"))
    assert len(modules) > 200, "scheduler/ was not found where the test looks"
    assert oversized(ROOT / "scheduler") == {}


def test_a_module_over_the_limit_is_found(tmp_path: Path) -> None:
    """The check above can fail: given a package with a module of 701 lines beside one of
    exactly 700, expect the first reported with its size and the second not."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "grown.py").write_text("x = 1\n" * 701)
    (tmp_path / "at_limit.py").write_text("y = 2\n" * 700)
    assert oversized(tmp_path) == {"policies/grown.py": 701}
