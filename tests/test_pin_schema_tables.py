"""`db init` (``storage.init_schema``) tells QingLong's file from another application's by the
tables it holds (D-15): either migration history alone makes a file QingLong's, so it is
upgraded in place; a file with neither, nor any QingLong table, is refused unwritten."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from storage import Busy, ForeignDatabase, NotAQingLongDatabase, check_schema, connect, init_schema

# Each history table as another tool (or an older qlfsm) might have made it, alone in a file.
HISTORIES = {
    "QingLong3SchemaMigrations": (
        'CREATE TABLE "QingLong3SchemaMigrations" (migration_id TEXT PRIMARY KEY, stream_id '
        "TEXT NOT NULL, dialect TEXT NOT NULL, checksum TEXT NOT NULL, applied_at_ms INTEGER "
        "NOT NULL)"
    ),
    "QlfsmSchemaMigrations": (
        'CREATE TABLE "QlfsmSchemaMigrations" (migration_id TEXT PRIMARY KEY, checksum TEXT '
        "NOT NULL, applied_at_ms INTEGER NOT NULL)"
    ),
}


def holding(path: Path, ddl: str) -> Path:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(ddl)
    return path


def tables(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.mark.parametrize("history", sorted(HISTORIES))
def test_a_file_holding_only_a_migration_history_is_qinglongs_and_gets_the_schema(
    tmp_path: Path, history: str
) -> None:
    path = holding(tmp_path / "ql.db", HISTORIES[history])
    with contextlib.closing(connect(str(path))) as conn:
        applied = init_schema(conn, path=str(path))
    assert applied  # upgraded in place, not refused as another application's
    assert {"Runs", "RunAttempts", "RunEvents", history} <= tables(path)


def test_the_same_table_under_another_name_is_another_applications_and_is_refused(
    tmp_path: Path,
) -> None:
    ddl = HISTORIES["QlfsmSchemaMigrations"].replace("QlfsmSchemaMigrations", "Migrations")
    path = holding(tmp_path / "ql.db", ddl)
    with contextlib.closing(connect(str(path))) as conn, pytest.raises(ForeignDatabase):
        init_schema(conn, path=str(path))
    assert tables(path) == {"Migrations"}


def test_the_schema_check_names_a_table_that_lacks_columns_and_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "ql.db")
    conn = sqlite3.connect(path)
    try:
        init_schema(conn)
        conn.execute('ALTER TABLE "RunEvents" RENAME COLUMN dedupe_key TO dedupe')
        with pytest.raises(NotAQingLongDatabase) as raised:
            check_schema(conn, path=path)
        assert raised.value.path == path
        assert raised.value.why == "table RunEvents lacks columns ['dedupe_key']"
        with pytest.raises(NotAQingLongDatabase) as unnamed:
            check_schema(conn)
        assert unnamed.value.path == "<db>"
    finally:
        conn.close()


def test_the_schema_check_of_a_file_that_is_no_database_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"
    path.write_bytes(b"this is not a database file" * 200)
    conn = sqlite3.connect(path)
    try:
        with pytest.raises(NotAQingLongDatabase) as raised:
            check_schema(conn, path=str(path))
    finally:
        conn.close()
    assert (raised.value.path, raised.value.why) == (str(path), "file is not a database")
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)


def test_a_schema_check_that_waits_out_another_writers_lock_says_how_long(tmp_path: Path) -> None:
    path = str(tmp_path / "ql.db")
    made = sqlite3.connect(path)
    init_schema(made)
    made.execute("PRAGMA journal_mode=DELETE")  # a reader waits for an exclusive writer
    made.close()
    locker = sqlite3.connect(path, isolation_level=None)
    conn = connect(path, busy_timeout_s=0.2)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(Busy) as raised:
            check_schema(conn, path=path)
    finally:
        conn.close()
        locker.close()
    assert str(raised.value) == (
        f"database {path!r} is locked by another process (waited 0.2 s); try again when that "
        "process has finished writing"
    )
