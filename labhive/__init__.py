"""LabHive: share a GPU cluster from Jupyter.

The installed names live under this one namespace: ``labhive.scheduler`` (the scheduling core,
its drivers and the service), ``labhive.kernel_ext`` (IPython magics and widgets) and
``labhive.hub_extension`` (JupyterHub and Jupyter server integration).
"""

__version__ = "0.1.0"
