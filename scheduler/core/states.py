"""The job states, once for every part of LabHive (OpenPAI's names, as DESIGN.md lists them).

``JobState`` is a ``str`` enum: a member *is* its name as a string, so it compares equal to the
plain strings stored in the database, sent over REST and written in scenario files, and it
serialises (JSON, SQL, f-strings) as that name. Pure: no I/O.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """WAITING -> RUNNING -> SUCCEEDED | FAILED | STOPPED; REJECTED is a spec refused at
    submit (shown by scenario replay and the simulator, never stored by the service)."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    REJECTED = "REJECTED"

    def __repr__(self) -> str:
        """As the plain string would show (messages quote a state as ``'RUNNING'``)."""
        return repr(self.value)


#: The states the service stores (a REST job is in one of these).
STORED = (
    JobState.WAITING,
    JobState.RUNNING,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.STOPPED,
)
#: A job in one of these has ended for good: no further transition.
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED, JobState.REJECTED})
#: A job in one of these still holds a place in the queue or on the cluster.
ACTIVE = frozenset({JobState.WAITING, JobState.RUNNING})
