"""The simulator's hot modules compiled with mypyc, and the guard that loads them only when they
are built from the sources beside them.

Why: a replay of a million jobs spends its time in a few modules (the simulator's loop, the queue
policies, the node pool), all of them typed to ``mypy --strict``. mypyc compiles such modules to
C extensions with the same behaviour: the same decisions, byte for byte (``tests/
test_native.py`` holds the compiled modules to the pure ones), in a fraction of
the CPU time. The sources stay the truth: the extensions are built in place beside them
(``python -m labhive.scheduler.native.build``, which ``make native`` runs), never committed, and
optional: without a C compiler, or with ``LABHIVE_PURE=1`` set, everything runs as plain Python.

The guard (``install``, run when ``labhive`` is imported): Python prefers an extension module to
the ``.py`` beside it, so an extension built before a source was edited would run the old code.
The build writes a manifest of the sources' SHA-256 digests; at import, unless every source
still matches (and the interpreter is the one it was built for), a finder placed first on
``sys.meta_path`` loads each compiled module from its source instead. It is all or nothing: the
compiled modules call one another natively, so one stale module means none is loaded compiled.
The digests cover every module the compiled ones may read types from (``HASHED``), not only the
compiled ones: an edit there can change what the compiled code assumes.

Who can change what runs: the extensions live in the installed package's own folders, writable
by whoever may write its sources; the guard adds no other place code is loaded from.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

# (hashlib, json and importlib.util are imported where used: ``import labhive`` runs the guard in
# every kernel and task, and with nothing built it reads no manifest and hashes nothing)

PACKAGE = "labhive.scheduler"
HERE = Path(__file__).resolve().parents[1]  # the folder ``labhive.scheduler`` is loaded from
#: The compiled modules, by their path under ``HERE`` (the simulator's loop, its records and
#: timeline, the queue policies and what they share). Not HiveD (``hived.py``): its cells are
#: walked through untyped config dicts, where mypyc gains little.
MODULES: tuple[str, ...] = (
    "sim/engine.py",
    "sim/timeline.py",
    "sim/workload.py",
    "sim/jobtable.py",
    "drivers/replay.py",
    "drivers/lifecycle.py",
    "policies/policy_base.py",
    "policies/queued_config.py",
    "policies/queued_job.py",
    "policies/queued_views.py",
    "policies/queued_pass.py",
    "policies/queued.py",
    "policies/fifo.py",
    "policies/sjf.py",
    "policies/backfill.py",
    "policies/drf.py",
    "policies/head_index.py",
    "policies/capacity_pass.py",
    "policies/capacity.py",
    "policies/las.py",
    "policies/preempt_probe.py",
    "policies/node_pool.py",
    "policies/vc_nodes.py",
    "policies/size_refusals.py",
)
#: The folders whose sources the manifest digests: the compiled modules and what they import.
HASHED: tuple[str, ...] = ("core", "drivers", "policies", "sim")
GROUP = f"{PACKAGE}.native.group"  # mypyc's shared library: ``...native.group__mypyc``
MANIFEST = HERE / "native" / "manifest.json"
PURE_ENV = "LABHIVE_PURE"
EXT_SUFFIX: str = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def module_name(relpath: str) -> str:
    return f"{PACKAGE}.{relpath.removesuffix('.py').replace('/', '.')}"


def extension_paths() -> list[Path]:
    """Every file the build makes: one extension per module, and the group's shared library."""
    paths = [HERE / (rel.removesuffix(".py") + EXT_SUFFIX) for rel in MODULES]
    return [*paths, HERE / "native" / f"group__mypyc{EXT_SUFFIX}"]


def extensions_present() -> list[Path]:
    """The extensions in the package's folders now, from this build or any earlier one (a
    module dropped from ``MODULES`` leaves its extension until ``clean``)."""
    return sorted(HERE.rglob(f"*{EXT_SUFFIX}"))


def source_digests() -> dict[str, str]:
    """SHA-256 of every hashed source, by its path under ``HERE``, in a fixed order."""
    import hashlib

    files = sorted(p for folder in HASHED for p in (HERE / folder).rglob("*.py"))
    return {str(p.relative_to(HERE)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def build_key() -> dict[str, object]:
    """What the extensions were built for, besides the sources: the interpreter and the list."""
    return {"ext_suffix": EXT_SUFFIX, "hexversion": sys.hexversion, "modules": list(MODULES)}


@dataclass(frozen=True)
class Status:
    """Whether the compiled modules run, and why not when they do not."""

    compiled: bool
    reason: str  # one line a user can act on

    def __str__(self) -> str:
        return "compiled (mypyc)" if self.compiled else f"pure Python ({self.reason})"


def status(present: list[Path] | None = None) -> Status:
    """Compiled only when asked for (no ``LABHIVE_PURE``), built, and built from these sources."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return Status(False, f"{PURE_ENV} is set")
    return built(present)


def built(present: list[Path] | None = None) -> Status:
    """Whether the extensions here (``present``: ``extensions_present()``, when the caller has
    it) were built, from these sources, for this interpreter."""
    if present is None:
        present = extensions_present()
    if present != sorted(extension_paths()) or not MANIFEST.exists():
        return Status(False, "not built: run `make native`")
    import json

    try:
        manifest = json.loads(MANIFEST.read_text())
    except (OSError, ValueError) as exc:
        return Status(False, f"unreadable {MANIFEST.name} ({exc}): run `make native`")
    if manifest.get("build") != build_key():
        return Status(False, "built for another Python or module list: run `make native`")
    built, now = manifest.get("sources", {}), source_digests()
    changed = sorted(rel for rel in built.keys() | now.keys() if built.get(rel) != now.get(rel))
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        return Status(
            False, f"stale: {changed[0]}{more} changed since the build: run `make native`"
        )
    return Status(True, "")


class _Sources:
    """Finds each compiled module's ``.py`` source ahead of the extension beside it (a meta path
    finder: ``find_spec`` is all the import system asks of one)."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self.sources = sources

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        source = self.sources.get(fullname)
        if source is None:
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(fullname, source)


_STATUS: Status | None = None


def install() -> Status:
    """Decide once per process whether the compiled modules load; when they must not (not asked
    for, or not built from these sources) and any extension is there, load the sources."""
    global _STATUS
    if _STATUS is None:
        present = extensions_present()  # (walked once: the status reads it too)
        _STATUS = status(present)
        if not _STATUS.compiled:
            sources = {}
            for path in present:
                rel = str(path.relative_to(HERE)).removesuffix(EXT_SUFFIX) + ".py"
                if (HERE / rel).exists():
                    sources[module_name(rel)] = HERE / rel
            if sources:
                sys.meta_path.insert(0, _Sources(sources))
    return _STATUS


def loaded() -> bool:
    """Whether this process runs the compiled modules (asked after they were imported)."""
    engine = sys.modules.get(module_name("sim/engine.py"))
    return engine is not None and not str(engine.__file__).endswith(".py")


def clean() -> None:
    """Remove every extension and the manifest: everything runs as plain Python again."""
    for path in [*extensions_present(), MANIFEST]:
        path.unlink(missing_ok=True)
