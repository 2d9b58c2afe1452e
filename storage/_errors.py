"""Named storage errors: each says what happened and what to do."""

from __future__ import annotations

import os
import sqlite3


def directory_of(path: str) -> str:
    """The directory holding the database file ``path`` (and its -wal/-shm files)."""
    return os.path.dirname(os.path.abspath(path)) or "/"


class StorageError(Exception):
    """Base of every storage error."""


class DatabaseMissing(StorageError):
    def __init__(self, path: str) -> None:
        super().__init__(
            f"database {path!r} does not exist; create it with `qlfsm db init --db {path}`"
        )
        self.path = path


class NotAQingLongDatabase(StorageError):
    # Never "run `qlfsm db init`": for a file that exists, an empty new database would make
    # start-up "safe" and forget every crashed run in the real one.
    def __init__(
        self, path: str, why: str, fix: str = "point --db at the node's SQLite file"
    ) -> None:
        super().__init__(f"{path!r} is not a QingLong 3.0 database ({why}); {fix}")
        self.path = path
        self.why = why


class ForeignDatabase(NotAQingLongDatabase):
    """`db init` on a file that holds tables and none of QingLong's: another application's
    database, never written unless the operator says so (``--force``; docs/decisions.md D-15)."""

    def __init__(self, path: str, tables: list[str]) -> None:
        shown = ", ".join(repr(t) for t in tables[:5]) + (", ..." if len(tables) > 5 else "")
        super().__init__(
            path,
            f"it holds {len(tables)} other table(s), {shown}, and none of QingLong's",
            "nothing was written: point --db at the node's SQLite file, or add --force to add "
            "the QingLong 3.0 tables beside them",
        )
        self.tables = tables


class DatabaseUnusable(StorageError):
    """An existing database file qlfsm cannot use as it is: the message names the problem and
    the fix, and never advises `qlfsm db init` (it would not bring the file's runs back)."""

    def __init__(self, path: str, problem: str, fix: str) -> None:
        super().__init__(f"database {path!r} {problem}; {fix}")
        self.path = path
        self.problem = problem


class NotARegularFile(DatabaseUnusable):
    """The path is a device, FIFO, socket or directory: refused before SQLite opens it (SQLite
    would block on a FIFO, or write a `-journal` file beside a device)."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(
            path, f"is a {kind}, not a regular file", "point --db at the node's SQLite file"
        )
        self.kind = kind


class DatabaseReadOnly(DatabaseUnusable):
    def __init__(self, path: str, what: str) -> None:
        super().__init__(
            path,
            f"cannot be written: {what}",
            "make that writable for this user and run again (SQLite writes the database and "
            "the -wal and -shm files beside it)",
        )
        self.what = what


class HotJournal(DatabaseReadOnly):
    """SQLITE_READONLY_ROLLBACK: a writer crashed mid-transaction and left a hot rollback
    journal (``<path>-journal``) that only a connection with write access can roll back. A
    read-only connection (a dry run) cannot read the database until that happened."""

    def __init__(self, path: str, unwritable: str | None) -> None:
        journal = path + "-journal"
        fix = (
            f"open it once with write access so SQLite rolls the crashed transaction back, e.g. "
            f"`qlfsm inspect --db {path}` (it only reads; the rollback restores the last commit), "
            "then run again; never delete the -journal file (the database would stay "
            "half-written)"
        )
        if unwritable is not None:
            fix = f"{unwritable}: make it writable for this user, then {fix}"
        DatabaseUnusable.__init__(
            self,
            path,
            f"cannot be read yet: a writer crashed mid-transaction and left {journal!r} (a hot "
            "rollback journal)",
            fix,
        )
        self.what = f"the hot journal {journal!r} must be rolled back first"


class DatabaseFull(DatabaseUnusable):
    """SQLITE_FULL: the filesystem holding the database (or its -wal) has no room left, so no
    further write can succeed until space is freed."""

    def __init__(self, path: str) -> None:
        super().__init__(
            path,
            f"cannot be written: the filesystem holding {directory_of(path)!r} is full",
            "free space there and run again (nothing was half-written: each change is one "
            "transaction)",
        )


class DatabaseCorrupt(DatabaseUnusable):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(
            path,
            f"is corrupt or truncated ({why})",
            "stop and restore it from a backup (or repair it with the sqlite3 `.recover` "
            "command); do not replace it with a new database, its runs would be forgotten",
        )
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


class RowNotInserted(StorageError):
    """An INSERT that must land changed no row (spec 01: no Run change without its event),
    though SQLite reported no error: something in the database itself dropped it, most likely
    a trigger ending in ``RAISE(IGNORE)``. The transaction it belongs to is rolled back."""

    def __init__(self, table: str, what: str) -> None:
        super().__init__(
            f"an INSERT into {table} ({what}) changed no row (a trigger's RAISE(IGNORE)?): "
            "rolled back, nothing written; drop that trigger (sqlite3 "
            f"`.schema {table}` shows it) and run again"
        )
        self.table = table
        self.what = what


class WriteRefused(StorageError, sqlite3.IntegrityError):
    """SQLite refused a statement of a write with an error: a constraint failed, or a trigger
    ended it with ``RAISE(ABORT|FAIL|ROLLBACK, ...)``. QingLong's schema has no such trigger,
    so one is another application's. The transaction is rolled back; still an
    ``sqlite3.IntegrityError`` for callers that catch that."""

    def __init__(self, path: str | None, why: str) -> None:
        schema = f"sqlite3 {path} .schema" if path else "sqlite3's `.schema`"
        super().__init__(
            f"the database refused a write ({why}): rolled back, nothing written; a "
            f"constraint or another application's trigger refuses it ({schema} shows them): "
            "drop that trigger or mend the row it names, and run again"
        )
        self.why = why


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
    """The database stayed locked by another connection through the bounded retry (or the
    pass's lock budget, ``storage.LockBudget``, was spent)."""

    def __init__(self, tries: int, waited_s: float = 0.0, path: str | None = None) -> None:
        where = "database" if path is None else f"database {path!r}"
        super().__init__(
            f"{where} is locked by another process (waited {waited_s:.1f} s); try again "
            "when that process has finished writing"
        )
        self.tries = tries
        self.waited_s = waited_s
        self.path = path


class InvalidField(StorageError):
    """A field rule of spec 01 ("Field rules") was broken by the caller."""


class BadRow(StorageError):
    """A candidate row qlfsm cannot read (a value of the wrong type, or text that is not
    UTF-8): that candidate fails, the others are handled as usual."""


class CounterExhausted(StorageError):
    """An edge would move a counter QingLong reads past 2^53 - 1 (``storage._changes``
    ``MAX_COUNTER``, docs/decisions.md D-29): the transaction is rolled back before anything
    is written, so the row stays one QingLong can read."""

    def __init__(self, what: str, ident: str, counter: str, value: int) -> None:
        super().__init__(
            f"{what} {ident} has {counter} {value}, the largest QingLong 3.0 can read (2^53 - 1): "
            "no further edge can be recorded on it, nothing was written; leave it as it is "
            "(QingLong refuses to advance it too) and repair the row by hand if it must move"
        )
        self.what = what
        self.ident = ident
        self.counter = counter
        self.value = value
