"""Forecasts: when a waiting job will start (``eta``), how well those estimates held
(``eta_replay``, ``eta_calibration``) and what would start it now (``suggest``).
They import the core, the policies and the simulator, never the service.
"""
