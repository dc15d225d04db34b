"""JupyterHub spawner and service auth, the Jupyter server extension, and ``labhive up``.

They talk to the service only through ``labhive.client``. Nothing is imported here eagerly:
the service imports ``hubauth`` from this package and must not pull in Jupyter.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Discovery for jupyter-server (enabled by the installed jupyter_server_config.d file)."""
    from labhive.hub_extension.server_ext import LabHiveServerExt

    return [{"module": "labhive.hub_extension.server_ext", "app": LabHiveServerExt}]
