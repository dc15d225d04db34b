"""The first-party import graph of the source tree, and its circles.

Every import counts, at module level, inside a function or under ``TYPE_CHECKING``: a static
tool (mypy, an IDE, a structure drawing) follows them all, so a lazy import does not break a
circle, it only hides it. ``python tests/import_graph.py`` prints the circles of this checkout.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Source folders and the packages users import them as (``labhive/`` holds links to them).
PACKAGES = {
    "scheduler": "labhive.scheduler",
    "kernel_ext": "labhive.kernel_ext",
    "hub_extension": "labhive.hub_extension",
}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for the three packages and ``labhive/``'s own modules."""
    found: dict[str, Path] = {}
    folders = [*((root / d, pkg) for d, pkg in PACKAGES.items()), (root / "labhive", "labhive")]
    for folder, package in folders:
        for path in sorted(folder.rglob("*.py")):
            inside = path.relative_to(folder)
            if any((folder / p).is_symlink() for p in inside.parents) or path.is_symlink():
                continue  # labhive/scheduler -> ../scheduler: counted under its own name
            parts = list(inside.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the first-party modules it imports."""
    mods = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, package):
                found = _resolve(target, mods)
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


def _targets(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = package
        for _ in range(node.level - 1):
            anchor = anchor.rpartition(".")[0]
        base = f"{anchor}.{base}" if base else anchor
    # ``from pkg import name``: the module ``pkg.name`` if there is one, else ``pkg`` itself
    return [f"{base}.{alias.name}" for alias in node.names]


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The module ``name`` lands in: itself, or the package holding the imported name."""
    while name:
        if name in mods:
            return name
        name = name.rpartition(".")[0]
    return None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return sorted(found)


def main(root: Path = ROOT) -> int:
    graph = imports(root)
    found = circles(graph)
    edges = sum(len(targets) for targets in graph.values())
    print(f"{len(graph)} modules, {edges} imports, {len(found)} circles")
    for part in found:
        print("circle: " + ", ".join(part))
        for name in part:
            inside = sorted(t for t in graph[name] if t in part)
            print(f"    {name} -> {', '.join(inside)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
