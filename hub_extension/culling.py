"""Idle culling as hub-managed services of ``labhive up`` (added to the hub's config).

- ``idle-culler``: ``jupyterhub-idle-culler`` (PyPI) with a long ``--timeout`` (2 h by
  default, ``labhive up --cull-idle``): any server with no activity that long is stopped. The
  scopes are those its README lists (no ``admin:users``: users are never deleted).
- ``labhive-gpu-culler``: our rule for servers holding a GPU (``gpu_culler.py``): idle kernels
  and a GPU at 0 % for ``--cull-gpu-idle`` (15 min) get a notice, then a stop ``--stop-notice``
  later. Its scopes: read the users' servers and activity, mark servers active (so the idle
  culler spares servers that compute unattended), reach the servers' kernel lists, and the
  LabHive admin scope to read jobs' GPU readings and give notices.
"""

from __future__ import annotations

import sys
from typing import Any

from labhive.hub_extension.hubauth import ADMIN_SCOPE
from labhive.hub_extension.hubconfig import ACCESS

IDLE_CULLER, GPU_CULLER = "idle-culler", "labhive-gpu-culler"


def add_culling(
    c: Any, service_url: str, public_url: str, idle_s: float, gpu_idle_s: float, notice_s: float
) -> None:
    """Add both cullers and their roles to a JupyterHub config ``c``."""
    c.JupyterHub.services.append(
        {
            "name": IDLE_CULLER,
            "command": [
                sys.executable,
                "-m",
                "jupyterhub_idle_culler",
                f"--timeout={round(idle_s)}",
                f"--cull-every={_every(idle_s)}",
            ],
        }
    )
    c.JupyterHub.services.append(
        {
            "name": GPU_CULLER,
            "command": [
                sys.executable,
                "-m",
                "labhive.hub_extension.gpu_culler",
                f"--gpu-idle={gpu_idle_s:g}",
                f"--notice={notice_s:g}",
                f"--every={min(30.0, max(1.0, notice_s / 4)):g}",
                f"--service-url={service_url}",
                f"--public-url={public_url}",
            ],
        }
    )
    c.JupyterHub.load_roles.extend(
        [
            {
                "name": "idle-culler",
                "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
                "services": [IDLE_CULLER],
            },
            {
                "name": "labhive-gpu-culler",
                "scopes": [
                    "list:users",
                    "read:users:activity",
                    "users:activity",
                    "read:servers",
                    "access:servers",
                    ACCESS,
                    ADMIN_SCOPE,
                ],
                "services": [GPU_CULLER],
            },
        ]
    )


def _every(idle_s: float) -> int:
    """Check a tenth of the timeout, between 1 min and 10 min (the idle culler's own default
    is half the timeout, which lets a server idle 3 h on a 2 h timeout)."""
    return int(min(600, max(60, idle_s / 10)))
