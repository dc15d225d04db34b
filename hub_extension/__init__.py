"""JupyterHub spawner and service, and the Jupyter server extension.

They talk to the service only through ``labhive.client``.
"""
