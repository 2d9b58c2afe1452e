"""Named storage errors: each says what happened and what to do."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage error."""


class DatabaseMissing(StorageError):
    def __init__(self, path: str) -> None:
        super().__init__(
            f"database {path!r} does not exist; create it with `qlfsm db init --db {path}`"
        )
        self.path = path


class NotAQingLongDatabase(StorageError):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(
            f"{path!r} is not a QingLong 3.0 database ({why}); "
            "point --db at the node's SQLite file or run `qlfsm db init` on a new path"
        )
        self.path = path
        self.why = why


class Conflict(StorageError):
    """A compare-and-set changed no row: someone else moved the aggregate first."""

    def __init__(self, what: str, ident: str, expected: str) -> None:
        super().__init__(
            f"conflict: {what} {ident} is no longer {expected}; re-read and decide again"
        )
        self.what = what
        self.ident = ident
        self.expected = expected


class NotFound(StorageError):
    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} {ident!r} not found")
        self.what = what
        self.ident = ident


class DuplicateEvent(StorageError):
    """The event's dedupe key is already in the Run's log: the edge was applied before."""

    def __init__(self, run_id: str, dedupe_key: str) -> None:
        super().__init__(f"event with dedupe key {dedupe_key!r} already recorded for this run")
        self.run_id = run_id
        self.dedupe_key = dedupe_key


class Busy(StorageError):
    """The database stayed locked through every bounded retry."""

    def __init__(self, tries: int) -> None:
        super().__init__(
            f"database stayed busy after {tries} tries; stop the other writer and run again"
        )
        self.tries = tries


class InvalidField(StorageError):
    """A field rule of spec 01 ("Field rules") was broken by the caller."""
