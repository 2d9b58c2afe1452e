"""Helpers for long histories (issue 29): a late-callback storm written quickly in one
transaction, as the repository's `append_event` would write each event (spec 01: an event that
moves no state bumps the Run's version and event sequence)."""

from __future__ import annotations

import json
import sqlite3
import uuid

STORM_TYPES = ("attempt.late_callback_ignored", "run.reconciled")


def add_storm(
    conn: sqlite3.Connection, run_id: str, attempt_id: str, count: int, at_ms: int
) -> int:
    """``count`` events that move no state, alternating the two storm types, appended after the
    run's last event with one ``executemany`` in one transaction; returns the last sequence."""
    version, sequence = conn.execute(
        'SELECT version, event_sequence FROM "Runs" WHERE id = ?', (run_id,)
    ).fetchone()
    rows = []
    for i in range(1, count + 1):
        kind = STORM_TYPES[(i - 1) % 2]
        body: dict[str, object] = {"version": version + i}
        if kind.startswith("attempt."):
            body["attempt_id"] = attempt_id
            body["callback_sequence"] = i
        rows.append(
            (
                str(uuid.UUID(int=(sequence + i) | (1 << 100))),
                run_id,
                sequence + i,
                kind,
                "reconciler" if kind == "run.reconciled" else "executor",
                "local-startup" if kind == "run.reconciled" else "local-process",
                attempt_id if kind.startswith("attempt.") else None,
                json.dumps(body),
                at_ms,
            )
        )
    # One transaction (the connection may be in autocommit mode): one fsync, not one per row.
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(
            'INSERT INTO "RunEvents" (id, run_id, sequence, type, actor_type, actor_id, '
            "attempt_id, payload, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute(
            'UPDATE "Runs" SET version = version + ?, event_sequence = event_sequence + ? '
            "WHERE id = ?",
            (count, count, run_id),
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    last: int = sequence + count
    return last
