"""``labhive.client``: the client library for the LabHive service (see ``scheduler/client.py``)."""

from labhive.scheduler.client import (
    AuthenticationError,
    Client,
    Job,
    LabHiveError,
    LogChunk,
    NotFoundError,
    PermissionDenied,
    Rejected,
    ServiceUnavailable,
    connect,
    find_token,
    service_url,
)

__all__ = [
    "AuthenticationError",
    "Client",
    "Job",
    "LabHiveError",
    "LogChunk",
    "NotFoundError",
    "PermissionDenied",
    "Rejected",
    "ServiceUnavailable",
    "connect",
    "find_token",
    "service_url",
]
