"""Given the repo's folders, expect every Python package to be installed under ``labhive``."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> tuple[set[str], dict[str, str]]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(conf["packages"]), conf["package-dir"]


def test_every_package_folder_is_declared() -> None:
    packages, dirs = _declared()
    found = set()
    for prefix, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((prefix, *rel)))
    assert found - packages == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_declared_packages_import() -> None:
    packages, _ = _declared()
    for name in sorted(packages):
        importlib.import_module(name)


def test_scheduler_does_not_import_jupyter() -> None:
    """The core stays usable without Jupyter: importing all of it pulls in no Jupyter module."""
    code = (
        "import sys, pkgutil, importlib, labhive.scheduler as s\n"
        "for m in pkgutil.walk_packages(s.__path__, 'labhive.scheduler.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in "
        "('IPython', 'ipywidgets', 'ipykernel', 'jupyterhub', 'jupyter_server', 'notebook'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_cli_entry_point_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "labhive.scheduler.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("labhive ")
