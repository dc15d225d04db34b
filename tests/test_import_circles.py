"""Given the source tree, expect no import circles: every module can be read, typed and changed
after the modules it imports, never together with them."""

from __future__ import annotations

from pathlib import Path

from import_graph import circles, imports


def test_the_source_tree_has_no_import_circles() -> None:
    assert circles(imports()) == []


def test_a_circle_through_a_lazy_or_type_only_import_is_found(tmp_path: Path) -> None:
    """The check sees what static tools see: imports inside functions and TYPE_CHECKING."""
    pkg = tmp_path / "scheduler"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from labhive.scheduler import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from labhive.scheduler.a import f\n"
    )
    (pkg / "c.py").write_text("from labhive.scheduler import a\n")
    assert circles(imports(tmp_path)) == [["labhive.scheduler.a", "labhive.scheduler.b"]]


def test_the_scheduler_and_the_client_import_no_kernel_extension() -> None:
    """The client hands display to whoever registers (the kernel extension does)."""
    graph = imports()
    scheduler = {m for m in graph if m.startswith("labhive.scheduler")}
    assert {m for m in scheduler if any(t.startswith("labhive.kernel_ext") for t in graph[m])} == (
        set()
    )
