"""LabHive: share a GPU cluster from Jupyter.

The installed names live under this one namespace: ``labhive.scheduler`` (the scheduling core,
its drivers and the service), ``labhive.kernel_ext`` (IPython magics and widgets) and
``labhive.hub_extension`` (JupyterHub and Jupyter server integration).
"""

from labhive.scheduler.native import install as _use_native_if_fresh

__version__ = "0.1.0"

# The simulator's compiled modules load only when built from the sources beside them
# (scheduler/native/); decided here, before anything imports them.
_use_native_if_fresh()


def on_stop(callback):  # type: ignore[no-untyped-def]
    """Call ``callback(notice)`` when this job is told it will stop (culling, a time limit,
    preemption, a drain), before SIGTERM: write a checkpoint.
    See ``scheduler/drivers/stop_watch.py``."""
    from labhive.scheduler.drivers.stop_watch import on_stop as watch_for_stop

    return watch_for_stop(callback)
