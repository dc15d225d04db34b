"""Observing running jobs: strace parsing, ioctl decoding, NVML sampling, Prometheus export."""
