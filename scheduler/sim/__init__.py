"""Trace-driven simulation in virtual time: trace loaders, event-heap driver, metrics, figures."""
