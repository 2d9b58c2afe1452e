"""The write pragmas (``storage.transaction``, spec 02 "Connection rules"): applied by the first
write transaction of a connection, exactly once, and the journal switched to WAL only when it
is not WAL already. Seen statement by statement through the driver's trace callback."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from storage import connect, in_transaction

PRAGMAS = ["PRAGMA foreign_keys=ON", "PRAGMA synchronous=FULL", "PRAGMA journal_mode"]


def traced(conn: sqlite3.Connection) -> list[str]:
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    return seen


def write(c: sqlite3.Connection) -> None:
    c.execute("INSERT INTO t VALUES (1)")


def a_database(path: Path, journal: str) -> Path:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(f"PRAGMA journal_mode={journal}")
        conn.execute("CREATE TABLE t (x)")
    return path


def test_the_write_pragmas_run_once_per_connection_before_its_first_write(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db", "WAL")
    with contextlib.closing(connect(str(path))) as conn:
        seen = traced(conn)
        in_transaction(conn, write)
        assert seen == [*PRAGMAS, "BEGIN IMMEDIATE", "INSERT INTO t VALUES (1)", "COMMIT"]
        seen.clear()
        in_transaction(conn, write)
        assert seen == ["BEGIN IMMEDIATE", "INSERT INTO t VALUES (1)", "COMMIT"]
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_a_rollback_journal_is_switched_to_wal_by_the_first_write(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db", "DELETE")
    with contextlib.closing(connect(str(path))) as conn:
        seen = traced(conn)
        in_transaction(conn, write)
        assert seen == [
            *PRAGMAS,
            "PRAGMA journal_mode=WAL",
            "BEGIN IMMEDIATE",
            "INSERT INTO t VALUES (1)",
            "COMMIT",
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_plain_driver_connection_gets_the_write_pragmas_too(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db", "DELETE")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        in_transaction(conn, write)
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
