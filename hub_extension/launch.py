"""Start a single-user server in its LabHive task: ``python -m labhive.hub_extension.launch F``.

The spawner writes FILE (mode 0600) with the server's command and the hub's environment for
it, the server's token included, so no secret is ever stored in the job store. The task's own
variables (``LABHIVE_*``, ``PAI_*``, ``CUDA_VISIBLE_DEVICES``) are kept; any ``JUPYTERHUB_*``
inherited from the service (which is itself a hub service) is dropped first, so the server
sees exactly its own. With ``LABHIVE_COURSE_DIR`` in that environment, the course's new files
are first copied into the server's folder (``labhive.hub_extension.course``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m labhive.hub_extension.launch LAUNCH_FILE", file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            doc = json.load(f)
    except (OSError, ValueError) as err:
        print(
            f"labhive launch: cannot read {argv[0]}: {err}; start the server again from the hub",
            file=sys.stderr,
        )
        return 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "JPY_"))}
    env.update({str(k): str(v) for k, v in doc["env"].items()})
    cwd = doc.get("cwd")
    if cwd:
        os.makedirs(cwd, exist_ok=True)
        os.chdir(cwd)
    if env.get("LABHIVE_COURSE_DIR"):
        _course(env["LABHIVE_COURSE_DIR"], os.getcwd())
    cmd = [str(c) for c in doc["cmd"]]
    os.execvpe(cmd[0], cmd, env)
    return 1  # pragma: no cover - exec does not return


def _course(course: str, home: str) -> None:
    """The instructor's course files into the home (see ``course``); a missing course folder
    is said in the server's log and does not stop the server."""
    from labhive.hub_extension.course import deliver

    try:
        copied = deliver(Path(course), Path(home))
    except OSError as err:
        print(f"labhive launch: course files not copied: {err}", file=sys.stderr)
        return
    if copied:
        print(f"labhive launch: {len(copied)} course file(s) copied into {home}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
