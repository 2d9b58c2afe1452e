"""Connections and the one transaction helper (spec 02 "Connection rules")."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from ._errors import (
    Busy,
    DatabaseCorrupt,
    DatabaseFull,
    DatabaseMissing,
    DatabaseReadOnly,
    DatabaseUnusable,
    HotJournal,
    NotAQingLongDatabase,
    NotARegularFile,
    StorageError,
    WriteRefused,
    directory_of,
)

T = TypeVar("T")

BUSY_TIMEOUT_S = 5.0
BUSY_TRIES = 5
# The most one start-up pass (or one `qlfsm startup`, `qlfsm db init`) waits in total for
# other processes' write locks; then it stops writing (docs/decisions.md "lock budget").
LOCK_BUDGET_S = BUSY_TIMEOUT_S
LOCK_BUDGET_ENV = "QLFSM_LOCK_BUDGET_S"
# Below this, a shrinking budget is not worth a `PRAGMA busy_timeout` (the bound's slack).
_CLAMP_SLACK_S = 0.05


def connect(
    path: str,
    *,
    create: bool = False,
    busy_timeout_s: float = BUSY_TIMEOUT_S,
    read_only: bool = False,
) -> sqlite3.Connection:
    """Open the node's database. Never creates one unless ``create`` (only `db init` does).

    Opening runs no SQL statement: the busy timeout is the driver's, and the per-connection
    write pragmas are applied before the first write (``transaction``). This keeps the
    zero-candidate start-up at exactly one statement (spec 04 "Before any candidate").
    A path that exists but is not a regular file (a device, FIFO, socket or directory) is
    refused BEFORE SQLite opens it: SQLite would block reading a FIFO, and write a
    `<path>-journal` beside a character device.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if not create:
            raise DatabaseMissing(path) from None
    except OSError as exc:
        raise DatabaseUnusable(
            path, f"cannot be examined ({exc.strerror})", "check the path and its permissions"
        ) from exc
    else:
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(path, file_kind(st.st_mode))
    # read_only (a dry run): SQLite opens the file for reading only, so not even the
    # checkpoint a closing connection may run can change a byte of it.
    mode = "ro" if read_only else ("rwc" if create else "rw")
    quoted = os.path.abspath(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    try:
        conn = sqlite3.connect(
            f"file:{quoted}?mode={mode}",
            uri=True,
            timeout=busy_timeout_s,
            isolation_level=None,
            factory=QlConnection,
        )
    except sqlite3.OperationalError as exc:
        raise database_error(path, exc) from exc
    conn.row_factory = sqlite3.Row
    conn.path = path
    conn.busy_timeout_s = busy_timeout_s
    return conn


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, kind in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return "special file"


class LockBudget:
    """How long one pass (or one whole start-up) may wait, in total, for other processes'
    write locks. Every ``BEGIN IMMEDIATE`` and busy back-off is charged to it; each try waits
    at most what is left. Once a write finds the database still locked with nothing left, the
    budget is *blocked*: every later write of the pass fails at once with :class:`Busy`,
    without trying (docs/decisions.md "lock budget")."""

    def __init__(self, seconds: float = LOCK_BUDGET_S) -> None:
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError("a lock budget is a finite number of seconds >= 0")
        self.seconds = float(seconds)
        self.spent = 0.0
        self.tries = 0
        self.blocked = False

    def remaining(self) -> float:
        return max(0.0, self.seconds - self.spent)


def lock_budget_from_env(environ: Mapping[str, str] | None = None) -> LockBudget:
    """``QLFSM_LOCK_BUDGET_S`` (seconds, >= 0), else :data:`LOCK_BUDGET_S`; ValueError with
    a one-line fix for anything else."""
    env = os.environ if environ is None else environ
    raw = env.get(LOCK_BUDGET_ENV, "").strip()
    if not raw:
        return LockBudget()
    try:
        return LockBudget(float(raw))
    except ValueError:
        raise ValueError(
            f"${LOCK_BUDGET_ENV} must be a number of seconds >= 0 (default {LOCK_BUDGET_S:g}); "
            "fix or unset it"
        ) from None


@contextmanager
def lock_budget(conn: sqlite3.Connection, budget: LockBudget | None) -> Iterator[None]:
    """Charge every write transaction of ``conn`` to ``budget`` for the block; afterwards the
    connection's own busy timeout is restored. ``None``: the unbudgeted bounded retry."""
    if budget is None or not isinstance(conn, QlConnection):
        yield
        return
    before = conn.lock_budget
    conn.lock_budget = budget
    try:
        yield
    finally:
        conn.lock_budget = before
        if conn.current_timeout_s is not None:  # the driver's own timeout again
            conn.execute(f"PRAGMA busy_timeout = {int(conn.busy_timeout_s * 1000)}")
            conn.current_timeout_s = None


class QlConnection(sqlite3.Connection):
    """A connection that remembers its path, whether its write pragmas were applied, its busy
    timeout and the lock budget its writes are charged to."""

    write_ready: bool = False
    path: str = ""
    busy_timeout_s: float = BUSY_TIMEOUT_S
    current_timeout_s: float | None = None  # set when a budget lowered the driver's timeout
    lock_budget: LockBudget | None = None


def _fit_timeout(conn: QlConnection, budget: LockBudget) -> None:
    """Let the next try wait no longer than the budget has left (within the slack)."""
    left = budget.remaining()
    current = conn.busy_timeout_s if conn.current_timeout_s is None else conn.current_timeout_s
    if current - left > _CLAMP_SLACK_S:
        conn.execute(f"PRAGMA busy_timeout = {int(left * 1000)}")
        conn.current_timeout_s = left


def prepare_for_writes(conn: sqlite3.Connection) -> None:
    """foreign keys on, synchronous FULL (receipts are deleted and processes judged on the
    strength of a commit), WAL. Once per connection."""
    if getattr(conn, "write_ready", False):
        return
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA synchronous=FULL")
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    if str(mode).lower() != "wal":
        conn.execute("PRAGMA journal_mode=WAL")
    if isinstance(conn, QlConnection):
        conn.write_ready = True


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def _is_busy(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = _code(exc)
    if code is not None:
        return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc)
    return "locked" in text or "busy" in text


def write_blocker(exc: BaseException) -> str | None:
    """``database_locked`` / ``database_read_only`` / ``database_full`` when ``exc`` means no
    further write of this pass can succeed (another process holds the lock past the budget;
    the file, its directory or its filesystem is read-only; that filesystem is full); None for
    an error of one candidate."""
    if isinstance(exc, Busy) or _is_busy(exc):
        return "database_locked"
    code = _code(exc) if isinstance(exc, sqlite3.OperationalError) else None
    if isinstance(exc, DatabaseReadOnly) or code == sqlite3.SQLITE_READONLY:
        return "database_read_only"
    # A full filesystem is like a read-only one: every later candidate would fail the same way
    # after its own attempt, so the pass stops writing and names it once.
    if isinstance(exc, DatabaseFull) or code == sqlite3.SQLITE_FULL:
        return "database_full"
    return None


def database_error(path: str, exc: BaseException, *, waited_s: float | None = None) -> StorageError:
    """The named storage error for a SQLite error on the existing database ``path``: locked,
    read-only (saying what cannot be written), corrupt, unopenable, or not QingLong's."""
    if isinstance(exc, StorageError):
        return exc
    code = _code(exc)
    if _is_busy(exc):
        return Busy(1, waited_s or 0.0, path=path)
    if code == sqlite3.SQLITE_READONLY:
        part = unwritable_part(path)
        if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_READONLY_ROLLBACK:
            # A crashed writer's hot `-journal` that this (read-only) connection cannot roll
            # back: the fix is one writable open, not permissions (D-15).
            return HotJournal(path, None if part == _SQLITE_SAYS_READ_ONLY else part)
        return DatabaseReadOnly(path, part)
    if code == sqlite3.SQLITE_CANTOPEN:
        directory = directory_of(path)
        if os.access(path, os.R_OK) and not os.access(directory, os.W_OK):
            # A WAL database is opened with its -wal/-shm files, created beside it.
            return DatabaseReadOnly(
                path, f"its directory {directory!r} is read-only (no -wal/-shm files there)"
            )
        return DatabaseUnusable(path, f"cannot be opened: {_why_cannot_open(path)}", _CHECK)
    if code == sqlite3.SQLITE_CORRUPT:
        return DatabaseCorrupt(path, str(exc))
    if code == sqlite3.SQLITE_FULL:
        return DatabaseFull(path)
    if code == sqlite3.SQLITE_IOERR:
        if _filesystem_full(path):
            # SQLite reports a -shm or -wal it could not create or grow on a full filesystem
            # as an I/O error: name the cause the operator can fix.
            return DatabaseFull(path)
        return DatabaseUnusable(path, f"hit an I/O error ({exc})", "check the disk")
    if code is None and str(exc).startswith("Could not decode to UTF-8"):
        # The driver's message for one TEXT value that is not UTF-8: a bad row, not a bad file.
        return DatabaseUnusable(
            path, f"holds a row this command cannot read ({exc})", "repair or remove that row"
        )
    return NotAQingLongDatabase(path, str(exc))


_CHECK = "check the file, its directory and their permissions, and run again"


def busy_wait_s(conn: sqlite3.Connection) -> float | None:
    """How long a statement of ``conn`` that failed with SQLITE_BUSY waited: the driver's busy
    timeout in effect (None when unknown)."""
    if not isinstance(conn, QlConnection):
        return None
    return conn.busy_timeout_s if conn.current_timeout_s is None else conn.current_timeout_s


_SQLITE_SAYS_READ_ONLY = "SQLite reports it read-only"


def unwritable_part(path: str) -> str:
    """Which part of the database cannot be written, checked the way the kernel checks it
    (``access(2)`` reports a read-only mount or an immutable file even to root)."""
    directory = directory_of(path)
    if not os.path.isfile(path):
        return _SQLITE_SAYS_READ_ONLY
    if not os.access(path, os.W_OK):
        return "the file is read-only"
    if not os.access(directory, os.W_OK):
        return f"its directory {directory!r} is read-only"
    for suffix in ("-wal", "-shm"):
        side = path + suffix
        if os.path.exists(side) and not os.access(side, os.W_OK):
            return f"{side!r} is read-only"
    return _SQLITE_SAYS_READ_ONLY


def _filesystem_full(path: str) -> bool:
    try:
        return os.statvfs(directory_of(path)).f_bavail == 0
    except OSError:
        return False


def _why_cannot_open(path: str) -> str:
    if not os.path.exists(path):
        return f"it cannot be created in {directory_of(path)!r} (is that directory writable?)"
    if not os.access(path, os.R_OK):
        return "the file is not readable by this user"
    return "SQLite cannot open it"


class transaction:  # lower case: called as `with transaction(conn) as c:`, a function before
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; ROLLBACK on any exception (spec 01 rule 5).

    A class, not a generator-based context manager: the ADR-0068 pass opens one per candidate
    and the generator machinery cost more than everything else around the two statements."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        conn = self.conn
        budget = getattr(conn, "lock_budget", None)
        started = time.monotonic()
        try:
            # Waiting for another process's lock happens here (the driver's busy timeout): in
            # BEGIN IMMEDIATE, or once in switching a rollback-journal file to WAL.
            prepare_for_writes(conn)
            conn.execute("BEGIN IMMEDIATE")
        finally:
            if budget is not None:
                budget.spent += time.monotonic() - started
        return conn

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        conn = self.conn
        if kind is not None:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            _refused(conn, exc)
            return  # the exception goes on
        try:
            conn.execute("COMMIT")
        except BaseException as failed:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            _refused(conn, failed)
            raise


def _refused(conn: sqlite3.Connection, exc: object) -> None:
    """A write SQLite refused with an error (a constraint, another application's trigger) is
    the named ``WriteRefused``, not a bare ``sqlite3.IntegrityError`` (spec 06: one line naming
    the problem and the fix); anything else goes on as it is."""
    if isinstance(exc, sqlite3.IntegrityError) and not isinstance(exc, WriteRefused):
        raise WriteRefused(getattr(conn, "path", None), str(exc)) from exc


def in_transaction(
    conn: sqlite3.Connection,
    work: Callable[[sqlite3.Connection], T],
    *,
    tries: int = BUSY_TRIES,
    backoff_s: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``work`` in one transaction, retrying the WHOLE transaction on SQLITE_BUSY a
    bounded number of times (spec 01: "SQLITE_BUSY gets a bounded retry").

    A retry starts from a rolled-back state, so it can never append an event twice; any other
    error (a Conflict above all) is raised at once, never retried blindly.

    With a :class:`LockBudget` on the connection (:func:`lock_budget`), every try waits at
    most what the budget has left, the retry ends when it is spent, and once spent (blocked)
    no write is tried again: Busy at once. The whole pass then waits at most the budget.
    """
    budget: LockBudget | None = getattr(conn, "lock_budget", None)
    if budget is not None and budget.blocked:
        raise Busy(budget.tries, budget.spent)
    started = time.monotonic()
    for attempt in range(1, tries + 1):
        if budget is not None and isinstance(conn, QlConnection):
            _fit_timeout(conn, budget)
        try:
            with transaction(conn):
                return work(conn)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            if budget is not None:
                budget.tries += 1
                if budget.remaining() <= 0 or attempt == tries:
                    budget.blocked = True
                    raise Busy(budget.tries, budget.spent) from exc
            if attempt == tries:
                raise Busy(tries, time.monotonic() - started) from exc
            pause = backoff_s * attempt
            if budget is not None:
                pause = min(pause, budget.remaining())
                budget.spent += pause
            sleep(pause)
    raise Busy(tries)  # pragma: no cover - the loop always returns or raises
