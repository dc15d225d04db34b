"""Start a student's ``jupyterhub-singleuser`` with JupyterLab imported without ``node``.

Importing ``jupyterlab.labapp`` computes its module-level ``app_version = get_app_version()``,
which makes an ``AppOptions`` whose ``registry`` default runs ``node yarn.js config --json``
(``_yarn_config``): ~0.5 CPU s per server, 1 in 5 of a server's start, spent to learn an npm
registry that only building or installing lab extensions uses, and a student's server does
neither (``hubconfig.LIGHT_SERVER_ARGS``: read-only extension manager; ``page_config.json``:
no rebuild check). ``_yarn_config`` skips the run when ``which("node")`` finds no ``node`` on
PATH ("Node not found == user with no need for building jupyterlab", its own comment), and
nothing else turns it off: the import has no options, and ``AppOptions`` is not configurable.

So this module, run by the server's own interpreter in place of the ``jupyterhub-singleuser``
script, imports ``jupyterlab.labapp`` with the PATH's folders that hold ``node`` (or
``nodejs``) left out, puts the PATH back as it was, and only then runs the single-user server
(``jupyterhub.singleuser.main``, what the script runs). Every process the server starts (a
kernel, a terminal) gets the PATH it was given; nothing runs during the import (the server
starts no process before its app starts). The registry JupyterLab then holds is its default,
``https://registry.yarnpkg.com``, where ``node`` would have read a site's ``.yarnrc``.

Checked against JupyterLab 4.6.6 with jupyterlab_server 2.28.1 (``jupyterlab/commands.py``:
``_default_registry``, ``_yarn_config``; ``jupyterlab_server.process.which``), the versions
installed at the time; pyproject.toml allows ``jupyterlab>=4.1``. ``tests/test_server_boot.py``
fails when a server started this way runs ``node`` at all (and shows that the plain script
does), so a release that finds ``node`` another way is caught.

``server_command`` is the spawner's side: the script's command rewritten to run this module,
only where the script is run by the hub's own interpreter (so this package is importable).
"""

from __future__ import annotations

import os
import shutil
import sys

SINGLEUSER = "jupyterhub-singleuser"
MODULE = "labhive.hub_extension.serverboot"
#: The PATH during the import when every folder on it holds ``node``: one that cannot.
NO_FOLDER = os.devnull


def server_command(cmd: list[str], quick_boot: bool = True) -> list[str]:
    """``cmd`` (the spawner's, its program resolved to a path) made to start the server
    through this module; unchanged when ``quick_boot`` is off, when it is not the
    ``jupyterhub-singleuser`` script, or when the script's interpreter (its ``#!`` line) is
    not the hub's ``sys.executable`` (another environment may not have LabHive installed)."""
    if not quick_boot or os.path.basename(cmd[0]) != SINGLEUSER:
        return cmd
    try:
        with open(cmd[0], "rb") as script:
            first = script.readline(4096)
    except OSError:
        return cmd
    python = os.fsdecode(first[2:].strip()) if first.startswith(b"#!") else ""
    if not _same_python(python, sys.executable):
        return cmd
    # -P: no current folder (the student's home) first on sys.path, as with the script; the
    # script's path stays in the command line, where ps, pgrep -f and LabHive's own process
    # roles (the ETA's SERVER_MARKS, the class benchmark) look for it
    return [python, "-P", "-m", MODULE, *cmd]


def _same_python(python: str, hubs: str) -> bool:
    """``python`` (a ``#!`` line's) is the hub's interpreter: in the same folder (so the same
    environment: a venv is its folder's) and the same program (``python`` or ``python3``)."""
    if not os.path.isabs(python) or os.path.dirname(python) != os.path.dirname(hubs):
        return False
    try:
        return os.path.samefile(python, hubs)
    except OSError:
        return False


def without_node(path: str) -> str:
    """PATH with the folders that hold a ``node`` or ``nodejs`` program left out."""
    kept = [
        folder
        for folder in path.split(os.pathsep)
        if folder and not (shutil.which("node", path=folder) or shutil.which("nodejs", path=folder))
    ]
    return os.pathsep.join(kept) or NO_FOLDER


def import_lab_without_node() -> None:
    """Import ``jupyterlab.labapp`` with no ``node`` on PATH, then restore PATH exactly (set or
    unset). A server without JupyterLab skips it."""
    given = os.environ.get("PATH")
    os.environ["PATH"] = without_node(given if given is not None else os.defpath)
    try:
        import jupyterlab.labapp  # noqa: F401 - its module-level get_app_version() runs here
    except ImportError:
        pass
    finally:
        if given is None:
            del os.environ["PATH"]
        else:
            os.environ["PATH"] = given


def main() -> None:
    if len(sys.argv) < 2 or os.path.basename(sys.argv[1]) != SINGLEUSER:
        print(f"usage: python -m {MODULE} /path/to/{SINGLEUSER} [server options]",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    del sys.argv[0]  # the server sees the argv the script would have
    import_lab_without_node()
    from jupyterhub.singleuser import main as singleuser

    sys.exit(singleuser())


if __name__ == "__main__":
    main()
