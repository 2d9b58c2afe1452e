"""`db init` (``storage.init_schema``): the errors it names, its --force, the migrations it
records (and when), and the tables of another tool it accepts without recreating them."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest

from storage import Busy, ForeignDatabase, NotAQingLongDatabase, connect, init_schema


def foreign(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    return path


def test_a_foreign_file_is_named_by_the_path_given_or_as_db(tmp_path: Path) -> None:
    path = foreign(tmp_path / "ql.db")
    with contextlib.closing(connect(str(path))) as conn:
        with pytest.raises(ForeignDatabase) as unnamed:
            init_schema(conn)
        with pytest.raises(ForeignDatabase) as named:
            init_schema(conn, path=str(path))
    assert str(unnamed.value).startswith("'<db>' is not a QingLong 3.0 database (it holds 1 ")
    assert str(named.value).startswith(f"{str(path)!r} is not a QingLong 3.0 database (it ")


def test_force_adds_the_schema_beside_a_foreign_applications_tables(tmp_path: Path) -> None:
    path = foreign(tmp_path / "ql.db")
    with contextlib.closing(connect(str(path))) as conn:
        assert init_schema(conn, path=str(path), force=True)
        assert init_schema(conn, path=str(path), force=True) == []


def test_sqlites_own_tables_do_not_make_a_file_foreign(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE gone (id INTEGER PRIMARY KEY AUTOINCREMENT)")
        conn.execute("INSERT INTO gone DEFAULT VALUES")
        conn.execute("DROP TABLE gone")  # leaves sqlite_sequence behind
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    assert names == ["sqlite_sequence"]
    with contextlib.closing(connect(str(path))) as conn:
        assert init_schema(conn, path=str(path))


def test_each_migration_is_recorded_with_the_time_it_was_applied(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"
    before = int(time.time() * 1000)
    with contextlib.closing(connect(str(path), create=True)) as conn:
        applied = init_schema(conn, path=str(path))
    after = int(time.time() * 1000)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            'SELECT migration_id, applied_at_ms FROM "QingLong3SchemaMigrations" UNION ALL '
            'SELECT migration_id, applied_at_ms FROM "QlfsmSchemaMigrations"'
        ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(applied)
    assert all(before <= r[1] <= after for r in rows)


def test_qinglong_tables_without_their_history_rows_are_accepted_not_recreated(
    db_path: Path,
) -> None:
    with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        conn.execute('DELETE FROM "QingLong3SchemaMigrations"')
    with contextlib.closing(connect(str(db_path))) as conn:
        assert init_schema(conn, path=str(db_path)) == []
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        left = conn.execute('SELECT COUNT(*) FROM "QingLong3SchemaMigrations"').fetchone()[0]
    assert left == 0


def test_a_database_locked_against_readers_is_named_busy_with_the_wait(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("CREATE TABLE t (x)")  # the exclusive lock is kept after this write
    try:
        with (
            contextlib.closing(connect(str(path), busy_timeout_s=0.1)) as conn,
            pytest.raises(Busy) as raised,
        ):
            init_schema(conn, path=str(path))
    finally:
        holder.close()
    assert str(raised.value) == (
        f"database {str(path)!r} is locked by another process (waited 0.1 s); try again when "
        "that process has finished writing"
    )


def test_a_qinglong_file_lacking_a_table_is_refused_naming_the_path_and_the_table(
    db_path: Path,
) -> None:
    with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        conn.execute('DROP TABLE "RunEvents"')
    with (
        contextlib.closing(connect(str(db_path))) as conn,
        pytest.raises(NotAQingLongDatabase) as raised,
    ):
        init_schema(conn, path=str(db_path))
    assert str(raised.value) == (
        f"{str(db_path)!r} is not a QingLong 3.0 database (table RunEvents is missing); point "
        "--db at the node's SQLite file"
    )


def test_db_init_on_a_current_database_reads_the_table_list_first(db_path: Path) -> None:
    with contextlib.closing(connect(str(db_path))) as conn:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        assert init_schema(conn, path=str(db_path)) == []
    assert seen[0] == "SELECT name FROM sqlite_master WHERE type = 'table'"


def test_a_file_holding_only_a_2x_crontabs_table_is_taken_as_qinglongs(tmp_path: Path) -> None:
    # Crontabs has no index in the migrations: its CREATE TABLE alone names it QingLong's.
    conn = sqlite3.connect(tmp_path / "ql.db")
    try:
        conn.execute('CREATE TABLE "Crontabs" (id INTEGER PRIMARY KEY)')
        conn.commit()
        init_schema(conn)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert {"Crontabs", "Runs", "RunAttempts", "RunEvents"} <= tables
