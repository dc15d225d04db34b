"""Scheduling policies: one module each, all behind the interface in ``labhive.scheduler.model``."""
