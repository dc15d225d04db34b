"""The scheduling core: the events/decisions contract (``model``), the job model and its
forms, the job states, user errors, the cluster config and the limits and sizes they
hold. Every other layer imports it; it imports nothing above it (tests/test_layers.py).
"""
