"""Connections and the one transaction helper (spec 02 "Connection rules")."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ._errors import Busy, DatabaseMissing, NotAQingLongDatabase

T = TypeVar("T")

BUSY_TIMEOUT_S = 5.0
BUSY_TRIES = 5


def connect(
    path: str, *, create: bool = False, busy_timeout_s: float = BUSY_TIMEOUT_S
) -> sqlite3.Connection:
    """Open the node's database. Never creates one unless ``create`` (only `db init` does).

    Opening runs no SQL statement: the busy timeout is the driver's, and the per-connection
    write pragmas are applied before the first write (``transaction``). This keeps the
    zero-candidate start-up at exactly one statement (spec 04 "Before any candidate").
    """
    if not create and not os.path.exists(path):
        raise DatabaseMissing(path)
    mode = "rwc" if create else "rw"
    uri = "file:" + _quote(os.path.abspath(path)) + f"?mode={mode}"
    try:
        conn = sqlite3.connect(
            uri,
            uri=True,
            timeout=busy_timeout_s,
            isolation_level=None,
            factory=QlConnection,
        )
    except sqlite3.OperationalError as exc:
        raise NotAQingLongDatabase(path, f"cannot open: {exc}") from exc
    conn.row_factory = sqlite3.Row
    return conn


def _quote(path: str) -> str:
    return path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")


class QlConnection(sqlite3.Connection):
    """A connection that remembers whether its write pragmas were applied."""

    write_ready: bool = False


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


def _is_busy(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc)
    return "locked" in text or "busy" in text


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; ROLLBACK on any exception (spec 01 rule 5)."""
    prepare_for_writes(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        try:
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


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
    """
    for attempt in range(1, tries + 1):
        try:
            with transaction(conn):
                return work(conn)
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or attempt == tries:
                if _is_busy(exc):
                    raise Busy(tries) from exc
                raise
            sleep(backoff_s * attempt)
    raise Busy(tries)  # pragma: no cover - the loop always returns or raises
