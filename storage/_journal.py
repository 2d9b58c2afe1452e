"""The completion receipt journal (spec 03): `pending` while a receipt may appear,
`quarantined` while an invalid one waits for purge. Resolving deletes the row."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ._connection import in_transaction


@dataclass(frozen=True)
class JournalRow:
    attempt_id: str
    run_id: str
    state: str
    quarantine_ref: str | None
    purge_after_ms: int | None
    registered_at_ms: int
    updated_at_ms: int


def journal_get(conn: sqlite3.Connection, attempt_id: str) -> JournalRow | None:
    row = conn.execute(
        "SELECT attempt_id, run_id, state, quarantine_ref, purge_after_ms, registered_at_ms, "
        'updated_at_ms FROM "LocalCompletionReceiptJournal" WHERE attempt_id = ?',
        (attempt_id,),
    ).fetchone()
    return JournalRow(*tuple(row)) if row else None


def journal_register(conn: sqlite3.Connection, attempt_id: str, run_id: str, at_ms: int) -> None:
    """Register `pending` inside the caller's transaction (the launcher, before spawning)."""
    conn.execute(
        'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
        "registered_at_ms, updated_at_ms) VALUES (?, ?, 'pending', ?, ?) "
        "ON CONFLICT (attempt_id) DO NOTHING",
        (attempt_id, run_id, at_ms, at_ms),
    )


def journal_quarantine(
    conn: sqlite3.Connection,
    attempt_id: str,
    run_id: str,
    quarantine_ref: str,
    at_ms: int,
    purge_after_ms: int,
) -> None:
    """Record the quarantine INTENT first (spec 03): its own committed transaction, before the
    file is moved, so a crash between the two leaves a journal row that names the move."""

    def work(c: sqlite3.Connection) -> None:
        row = journal_get(c, attempt_id)
        registered = row.registered_at_ms if row else at_ms
        updated = max(at_ms, registered)
        c.execute(
            'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
            "quarantine_ref, purge_after_ms, registered_at_ms, updated_at_ms) "
            "VALUES (?, ?, 'quarantined', ?, ?, ?, ?) ON CONFLICT (attempt_id) DO UPDATE SET "
            "state = 'quarantined', quarantine_ref = excluded.quarantine_ref, "
            "purge_after_ms = excluded.purge_after_ms, updated_at_ms = excluded.updated_at_ms",
            (attempt_id, run_id, quarantine_ref, max(purge_after_ms, updated), registered, updated),
        )

    in_transaction(conn, work)


def journal_resolve(conn: sqlite3.Connection, attempt_id: str) -> None:
    """Resolve = delete, only after the receipt's terminal transition committed."""

    def work(c: sqlite3.Connection) -> None:
        c.execute(
            'DELETE FROM "LocalCompletionReceiptJournal" '
            "WHERE attempt_id = ? AND state = 'pending'",
            (attempt_id,),
        )

    in_transaction(conn, work)
