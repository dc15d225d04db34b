"""The scheduling core, its drivers (simulator, local and Kubernetes executors) and the job service.

Nothing in this package imports Jupyter.
"""
