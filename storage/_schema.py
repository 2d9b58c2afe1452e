"""`db init`: create the schema of spec 02, or check/upgrade an existing one (idempotent)."""

from __future__ import annotations

import sqlite3
import time

from ._candidates import PRIMARY_CANDIDATES_INDEX
from ._connection import busy_wait_s, database_error, in_transaction
from ._ddl import LEGACY_TABLES, QL3_HISTORY_DDL, QL3_MIGRATIONS, QLFSM_INDEXES
from ._errors import ForeignDatabase, NotAQingLongDatabase
from ._journal import JOURNAL_COLUMNS
from ._rows import AttemptRow, EventRow, RunRow, columns

QL3_STREAM = "ql3-local-sqlite"
_BOUNDARY = "\n-- ql3-statement-boundary --\n"

# qlfsm's own additions are recorded in a table of their own: QingLong verifies its history
# table against a reviewed manifest, and a foreign row there could stop a real node.
QLFSM_HISTORY_DDL = """CREATE TABLE IF NOT EXISTS "QlfsmSchemaMigrations" (
  migration_id TEXT PRIMARY KEY,
  checksum TEXT NOT NULL,
  applied_at_ms INTEGER NOT NULL CHECK (applied_at_ms >= 0)
)"""
QLFSM_MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("qlfsm-0001-legacy-tables", LEGACY_TABLES),
    ("qlfsm-0002-reconciler-indexes", QLFSM_INDEXES),
    ("qlfsm-0003-primary-candidates-index", (PRIMARY_CANDIDATES_INDEX,)),
)


# Where each migration is recorded, and the columns its row has besides id, checksum and time.
_HISTORIES: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...], tuple[str, ...]], ...] = (
    ("QingLong3SchemaMigrations", QL3_MIGRATIONS, (QL3_STREAM, "sqlite")),
    ("QlfsmSchemaMigrations", QLFSM_MIGRATIONS, ()),
)
_RECORD = {
    "QingLong3SchemaMigrations": 'INSERT INTO "QingLong3SchemaMigrations" (migration_id, '
    "stream_id, dialect, checksum, applied_at_ms) VALUES (?, ?, ?, ?, ?)",
    "QlfsmSchemaMigrations": 'INSERT INTO "QlfsmSchemaMigrations" (migration_id, checksum, '
    "applied_at_ms) VALUES (?, ?, ?)",
}


# Every column qlfsm reads (the row types of _rows.py) or writes (Run/Attempt creation, the
# journal): a database lacking one is refused up front, not half-way through a pass.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "Runs": (
        *columns(RunRow),
        "task_revision",
        "trigger_type",
        "priority",
    ),
    "RunAttempts": columns(AttemptRow),
    "RunEvents": columns(EventRow),
    "LocalCompletionReceiptJournal": JOURNAL_COLUMNS,
}


def checksum(statements: tuple[str, ...]) -> str:
    """QingLong's rule: sha256 over the trimmed statements joined by a fixed boundary."""
    import hashlib  # here, not at import: the start-up pass checks the schema without it

    return hashlib.sha256(_BOUNDARY.join(s.strip() for s in statements).encode()).hexdigest()


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def init_schema(conn: sqlite3.Connection, *, path: str = "<db>", force: bool = False) -> list[str]:
    """Apply what is missing; return the migration ids applied now (empty: nothing to do).

    A file that holds tables and none of QingLong's (another application's database) is
    refused with ForeignDatabase before anything is written, unless ``force`` (D-15).
    A SQLite failure is raised as the storage error that names it (locked, read-only,
    corrupt, not QingLong's: ``database_error``), never as a bare driver error."""
    try:
        return _init_schema(conn, path, force)
    except sqlite3.DatabaseError as exc:
        raise database_error(path, exc, waited_s=busy_wait_s(conn)) from exc


def qinglong_tables() -> frozenset[str]:
    """The tables whose presence makes a file QingLong's: the 3.0 migrations', both migration
    histories and the 2.x tables (spec 02: `db init` adds the 3.0 schema to a 2.x node's
    database; that upgrade in place is what it is for)."""
    created = {
        t
        for _, stmts in (*QL3_MIGRATIONS, ("", LEGACY_TABLES))
        for s in stmts
        if (t := _created_table(s))
    }
    return frozenset({"QingLong3SchemaMigrations", "QlfsmSchemaMigrations"} | created)


def _init_schema(conn: sqlite3.Connection, path: str, force: bool = False) -> list[str]:
    tables = _tables(conn)
    others = sorted(t for t in tables if not t.startswith("sqlite_"))
    if others and not force and not tables & qinglong_tables():
        raise ForeignDatabase(path, others)  # D-15: read only so far, nothing written
    # The write pragmas (WAL above all) are applied by the first transaction below, inside
    # its bounded retry: switching a new file to WAL needs the lock that a racing `db init`
    # may hold for a moment, and SQLite answers that switch BUSY at once, without waiting.
    applied_now: list[str] = []

    def histories(c: sqlite3.Connection) -> None:
        # Both are `IF NOT EXISTS`: on a QingLong node the first is already there.
        c.execute(QL3_HISTORY_DDL)
        c.execute(QLFSM_HISTORY_DDL)

    in_transaction(conn, histories)
    now_ms = int(time.time() * 1000)
    # Each migration decides inside its own BEGIN IMMEDIATE whether it is still missing: two
    # `db init` (or two start-ups) racing on one new file apply each migration exactly once.
    for history, migrations, extra in _HISTORIES:
        for mig_id, statements in migrations:

            def apply(
                c: sqlite3.Connection,
                mig_id: str = mig_id,
                stmts: tuple[str, ...] = statements,
                history: str = history,
                extra: tuple[str, ...] = extra,
            ) -> bool:
                done = f'SELECT 1 FROM "{history}" WHERE migration_id = ?'
                if c.execute(done, (mig_id,)).fetchone() is not None:
                    return False
                creates = {_created_table(s) for s in stmts} - {None}
                if history == "QingLong3SchemaMigrations" and creates & _tables(c):
                    # Tables exist without a history row: a database made by another tool. It
                    # is accepted only if it has what qlfsm reads (check_schema below); never
                    # re-created or altered.
                    return False
                for s in stmts:
                    c.execute(s)
                c.execute(_RECORD[history], (mig_id, *extra, checksum(stmts), now_ms))
                return True

            if in_transaction(conn, apply):
                applied_now.append(mig_id)
    check_schema(conn, path=path)
    return applied_now


def _created_table(statement: str) -> str | None:
    head = statement.split("(", 1)[0].split()
    if len(head) >= 3 and head[0].upper() == "CREATE" and head[1].upper() == "TABLE":
        return head[-1].strip('"`')
    return None


def check_schema(conn: sqlite3.Connection, *, path: str = "<db>") -> None:
    """Raise NotAQingLongDatabase unless every table and column qlfsm reads is there."""
    try:
        tables = _tables(conn)
        for table, columns in REQUIRED_COLUMNS.items():
            if table not in tables:
                raise NotAQingLongDatabase(path, f"table {table} is missing")
            have = {str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')}
            lacking = [c for c in columns if c not in have]
            if lacking:
                raise NotAQingLongDatabase(path, f"table {table} lacks columns {lacking}")
    except sqlite3.DatabaseError as exc:
        raise database_error(path, exc, waited_s=busy_wait_s(conn)) from exc
