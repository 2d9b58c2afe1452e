"""The three errors the application layer raises (spec 06), in a module that imports nothing:
the zero-candidate start-up raises them, or not, before anything heavier is loaded. The
command line maps each to its exit code (``reconciler.cli._exit``)."""

from __future__ import annotations


class UsageError(Exception):
    """A bad flag or configuration: exit 2 with the message (which says how to fix it)."""


class FatalError(Exception):
    """The database is missing, unreadable or not QingLong's: exit 1."""


class RetryLater(Exception):
    """Another process held the database past the lock budget: exit 75 with the message,
    one line (docs/decisions.md D-20)."""
