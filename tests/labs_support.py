"""Executing the labs and notebooks the way a student's report run does: papermill, a real
``labhive serve`` (local executor, virtual cluster), and the outputs read back as text."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernel_support import VENV_BIN, Service

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
LABS = REPO / "labs"
NOTEBOOKS = REPO / "notebooks"
#: What a widget leaves in ``text/plain`` when no front end rendered it: a stale repr.
WIDGET_REPRS = ("VBox(", "HBox(", "HTML(value=", "IntProgress(", "Button(description")


@contextmanager
def service_env(service: Service, user: str = "alice") -> Iterator[None]:
    """The kernel papermill starts inherits this environment: the service, and the venv's
    commands (``labhive``) first on PATH."""
    saved = dict(os.environ)
    os.environ.update(service.env(user))
    os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def execute(
    notebook: Path, out: Path, parameters: Mapping[str, Any] | None = None, timeout: float = 240
) -> tuple[dict[str, Any], float]:
    """Run ``notebook`` with papermill in its own folder; the executed notebook and seconds."""
    import papermill

    start = time.monotonic()
    papermill.execute_notebook(
        str(notebook),
        str(out),
        parameters=dict(parameters or {}),
        cwd=str(notebook.parent),
        kernel_name="python3",
        progress_bar=False,
        execution_timeout=timeout,
    )
    return json.loads(out.read_text()), time.monotonic() - start


def outputs(nb: dict[str, Any]) -> list[str]:
    """Every output's text in order: streams, and ``text/plain`` of displays and results."""
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                texts.append("".join(out["text"]))
            elif "data" in out:
                texts.append("".join(out["data"].get("text/plain", "")))
    return texts


def text_of(nb: dict[str, Any]) -> str:
    return "\n".join(outputs(nb))


def stale_widgets(nb: dict[str, Any]) -> list[str]:
    return [t for t in outputs(nb) if t.lstrip().startswith(WIDGET_REPRS)]


def last_output(nb: dict[str, Any]) -> str:
    texts = [t for t in outputs(nb) if t.strip()]
    return texts[-1] if texts else ""
