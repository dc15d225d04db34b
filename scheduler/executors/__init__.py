"""Executors run a job's tasks somewhere real: local processes or Kubernetes pods."""
