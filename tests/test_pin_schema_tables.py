"""`db init` (``storage.init_schema``) tells QingLong's file from another application's by the
tables it holds (D-15): either migration history alone makes a file QingLong's, so it is
upgraded in place; a file with neither, nor any QingLong table, is refused unwritten."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from storage import ForeignDatabase, connect, init_schema

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
