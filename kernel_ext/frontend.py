"""Is anyone watching? Live widgets need a front end; a report run needs blocking waits.

nbclient (and so papermill and nbconvert) sends every execute request with
``allow_stdin=False``, while JupyterLab, Notebook 7 and VS Code allow input: that flag is the
signal. ``LABHIVE_INTERACTIVE=0|1`` overrides it for unusual clients.
"""

from __future__ import annotations

import os
from typing import Any


def interactive(shell: Any) -> bool:
    """True when a front end that renders widgets is running this cell."""
    forced = os.environ.get("LABHIVE_INTERACTIVE", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    kernel = getattr(shell, "kernel", None)
    if kernel is None:  # terminal IPython: text only
        return False
    try:
        content = kernel.get_parent("shell").get("content", {})
    except Exception:
        content = {}
    if "allow_stdin" in content:
        return bool(content["allow_stdin"])
    return bool(getattr(kernel, "_allow_stdin", False))
