"""The scheduler loop, for those who import it from here: it lives in ``runtime/``, split by
owner of state (``runtime/__init__.py`` has the map)."""

from labhive.scheduler.service.runtime.launch import LaunchBuilder, default_launches
from labhive.scheduler.service.runtime.loop import SchedulerLoop, whole_job_stops
from labhive.scheduler.service.runtime.record import transient

__all__ = ["LaunchBuilder", "SchedulerLoop", "default_launches", "transient", "whole_job_stops"]
