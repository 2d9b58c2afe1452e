"""Exit codes and the two errors every command maps to them (spec 06), in a module that imports
nothing: the zero-candidate start-up raises them, or not, before anything heavier is loaded."""

from __future__ import annotations

EXIT_SAFE = 0
EXIT_FATAL = 1
EXIT_USAGE = 2
EXIT_BLOCKED = 3
# sysexits.h EX_TEMPFAIL: another process holds the database (or the start-up lock) past the
# lock budget; nothing is wrong, run it again - what service managers are told to retry (D-20).
EXIT_TEMPFAIL = 75


class UsageError(Exception):
    """A bad flag or configuration: exit 2 with the message (which says how to fix it)."""


class FatalError(Exception):
    """The database is missing, unreadable or not QingLong's: exit 1."""


class RetryLater(Exception):
    """Another process held the database past the lock budget: exit 75 with the message,
    one line (docs/decisions.md D-20)."""
