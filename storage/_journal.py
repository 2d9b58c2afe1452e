"""The completion receipt journal (spec 03): `pending` while a receipt may appear,
`quarantined` while an invalid one waits for purge. Resolving deletes the row."""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from ._connection import in_transaction
from ._errors import Conflict, RowNotInserted
from ._rows import columns


class JournalRow(NamedTuple):
    """A receipt journal row as selected by ``JOURNAL_COLUMNS`` (a tuple, like every row read)."""

    attempt_id: str
    run_id: str
    state: str
    quarantine_ref: str | None
    purge_after_ms: int | None
    registered_at_ms: int
    updated_at_ms: int


# The journal's columns qlfsm reads (spec 03).
JOURNAL_COLUMNS = columns(JournalRow)


class RegistrationConflict(Conflict):
    """The Attempt already has a journal row that is not this very registration (another run,
    another time, or a quarantine): the launcher must not spawn (QingLong refuses the same way,
    "registration conflicts with durable state")."""

    def __init__(self, row: JournalRow) -> None:
        super().__init__("receipt journal row of Attempt", row.attempt_id, "absent")
        self.row = row

    def __str__(self) -> str:
        row = self.row
        return (
            f"Attempt {row.attempt_id} already has a completion-receipt journal row "
            f"({row.state}, run {row.run_id}, registered at {row.registered_at_ms} ms): a new "
            "registration conflicts with it; inspect the run (`qlfsm inspect --run "
            f"{row.run_id}`) and settle that row before launching"
        )


_GET_SQL = (
    f'SELECT {", ".join(JOURNAL_COLUMNS)} FROM "LocalCompletionReceiptJournal" WHERE attempt_id = ?'
)


def journal_get(conn: sqlite3.Connection, attempt_id: str) -> JournalRow | None:
    row = conn.execute(_GET_SQL, (attempt_id,)).fetchone()
    return JournalRow(*tuple(row)) if row else None


def journal_register(conn: sqlite3.Connection, attempt_id: str, run_id: str, at_ms: int) -> None:
    """Register `pending` inside the caller's transaction (the launcher, before spawning).

    Idempotent for the very same registration (same run, `pending`, same time); any other
    existing row raises RegistrationConflict, so the caller's transaction rolls back and
    nothing is spawned (QingLong's register does the same).
    """
    inserted = conn.execute(
        'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
        "registered_at_ms, updated_at_ms) VALUES (?, ?, 'pending', ?, ?) "
        "ON CONFLICT (attempt_id) DO NOTHING",
        (attempt_id, run_id, at_ms, at_ms),
    ).rowcount
    if inserted == 1:
        return
    row = journal_get(conn, attempt_id)
    if row is None or (row.run_id, row.state, row.registered_at_ms) != (run_id, "pending", at_ms):
        raise RegistrationConflict(
            row or JournalRow(attempt_id, run_id, "unknown", None, None, at_ms, at_ms)
        )


def journal_quarantine(
    conn: sqlite3.Connection,
    attempt_id: str,
    run_id: str,
    quarantine_ref: str,
    at_ms: int,
    purge_after_ms: int,
) -> int:
    """Record the quarantine INTENT first (spec 03): its own committed transaction, before the
    file is moved, so a crash between the two leaves a journal row that names the move.

    A later quarantine of the same Attempt (a second invalid receipt, D-3c) points the row at
    the newest copy; the purge time is never moved earlier, so every copy the row stands for
    stays until it.

    D-16: the retention (``purge_after_ms - at_ms``) is counted from the latest moment the
    quarantine can have happened by any clock the database shows: never before ``at_ms``, the
    newest time recorded for the Run, its Attempts, its events or this journal row. A clock
    far behind (a dead RTC, `faketime -30y`) then cannot put the purge time in the past of a
    correct clock. Returns that moment; the caller names a clock that ran behind it."""
    retention = max(0, purge_after_ms - at_ms)

    def work(c: sqlite3.Connection) -> int:
        row = journal_get(c, attempt_id)
        registered = row.registered_at_ms if row else at_ms
        happened = max(at_ms, registered, row.updated_at_ms if row else 0, _newest_ms(c, run_id))
        updated = max(at_ms, registered)
        cur = c.execute(
            'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
            "quarantine_ref, purge_after_ms, registered_at_ms, updated_at_ms) "
            "VALUES (?, ?, 'quarantined', ?, ?, ?, ?) ON CONFLICT (attempt_id) DO UPDATE SET "
            "state = 'quarantined', quarantine_ref = excluded.quarantine_ref, "
            "purge_after_ms = MAX(COALESCE(purge_after_ms, 0), excluded.purge_after_ms), "
            "updated_at_ms = excluded.updated_at_ms",
            (
                attempt_id,
                run_id,
                quarantine_ref,
                max(purge_after_ms, happened + retention),
                registered,
                updated,
            ),
        )
        if cur.rowcount != 1:
            # spec 03: the intent is recorded before the file moves; a dropped row (a trigger)
            # must stop the move, or the quarantined copy would stand on no journal row.
            raise RowNotInserted("LocalCompletionReceiptJournal", f"quarantine of {attempt_id}")
        return happened

    return in_transaction(conn, work)


# The newest time the database recorded for a Run: its own times, its Attempts', its events'
# (each an integer by the schema's CHECKs; a future deadline or lease is not a recorded event).
_NEWEST_SQL = (
    "SELECT MAX(COALESCE(MAX(r.created_at_ms, COALESCE(r.queued_at_ms, 0), "
    "COALESCE(r.started_at_ms, 0), COALESCE(r.finished_at_ms, 0), "
    "COALESCE(r.cancel_requested_at_ms, 0)), 0), "
    "COALESCE((SELECT MAX(MAX(a.created_at_ms, COALESCE(a.started_at_ms, 0), "
    'COALESCE(a.finished_at_ms, 0))) FROM "RunAttempts" a WHERE a.run_id = r.id), 0), '
    'COALESCE((SELECT MAX(e.created_at_ms) FROM "RunEvents" e WHERE e.run_id = r.id), 0)) '
    'FROM "Runs" r WHERE r.id = ?'
)


def _newest_ms(conn: sqlite3.Connection, run_id: str) -> int:
    row = conn.execute(_NEWEST_SQL, (run_id,)).fetchone()
    value = row[0] if row else None
    return value if type(value) is int else 0


def journal_withdraw_quarantine(
    conn: sqlite3.Connection,
    attempt_id: str,
    quarantine_ref: str,
    restore: JournalRow | None,
) -> bool:
    """Take back a quarantine claim that did not happen: the row naming ``quarantine_ref`` is
    put back to ``restore`` (None: the row is deleted). Compare-and-set on the claimed ref;
    False when the row no longer names it (someone else moved it: left alone).

    Used when the move after a committed intent failed, and for a row whose quarantined file
    does not exist (spec 03: no row may claim a quarantine that did not happen).
    """

    def work(c: sqlite3.Connection) -> bool:
        where = "WHERE attempt_id = ? AND state = 'quarantined' AND quarantine_ref = ?"
        if restore is None:
            cur = c.execute(
                f'DELETE FROM "LocalCompletionReceiptJournal" {where}',
                (attempt_id, quarantine_ref),
            )
        else:
            cur = c.execute(
                'UPDATE "LocalCompletionReceiptJournal" SET state = ?, quarantine_ref = ?, '
                f"purge_after_ms = ?, registered_at_ms = ?, updated_at_ms = ? {where}",
                (
                    restore.state,
                    restore.quarantine_ref,
                    restore.purge_after_ms,
                    restore.registered_at_ms,
                    restore.updated_at_ms,
                    attempt_id,
                    quarantine_ref,
                ),
            )
        return cur.rowcount == 1

    return in_transaction(conn, work)


def journal_resolve(conn: sqlite3.Connection, attempt_id: str) -> None:
    """Resolve = delete, only after the receipt's terminal transition committed."""

    def work(c: sqlite3.Connection) -> None:
        c.execute(
            'DELETE FROM "LocalCompletionReceiptJournal" '
            "WHERE attempt_id = ? AND state = 'pending'",
            (attempt_id,),
        )

    in_transaction(conn, work)
