"""A ``%%submit`` cell body as a job command.

The body travels inside the command itself (a quoted here-document), so it is stored with the
job and runs wherever the job runs, with no shared file system needed; Python bodies run
unbuffered so that a following log tail sees each print as it happens.
"""

from __future__ import annotations

import secrets
import shlex

LANGUAGES = ("python", "shell")


def script_command(body: str, language: str, interpreter: str) -> str:
    """The shell command that runs ``body`` with ``interpreter`` (Python) or the shell itself."""
    if language == "shell":
        return body.strip("\n")
    if language != "python":
        raise ValueError(f"unknown cell language {language!r}; use one of {LANGUAGES}")
    delimiter = _delimiter(body)
    return f"{shlex.quote(interpreter)} -u - <<'{delimiter}'\n{body.rstrip()}\n{delimiter}"


def _delimiter(body: str) -> str:
    """A here-document end marker that cannot occur as a line of the body."""
    lines = set(body.splitlines())
    while True:
        candidate = f"LABHIVE_EOF_{secrets.token_hex(4)}"
        if candidate not in lines:
            return candidate
