"""Errors a user can hit. Each carries a message that says what to do; the CLI prints it
without a traceback and exits 2, the service turns it into a 4xx."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from a user: a file, a flag, a request. The message is shown as it is."""
