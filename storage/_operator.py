"""The operator's queries: a keyset page of Runs (`qlfsm inspect`), keyset pages of the receipt
journal (`qlfsm sweep`), and the compare-and-set deletes that settle a journal row.

Every page is keyset-paged (never OFFSET) and bounded by its caller; every delete names the
exact row it decided on in its ``WHERE`` and reports whether that row was still there (spec 01
rule 3 applied to the journal: a delete that finds the row changed does nothing).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from ._candidates import lenient
from ._connection import in_transaction
from ._rows import RunRow, columns

_Row = TypeVar("_Row")

# --- Runs, for `qlfsm inspect` -------------------------------------------------------------------


def run_position(conn: sqlite3.Connection, run_id: str) -> tuple[int, str] | None:
    """The keyset position ``(created_at_ms, id)`` of a Run, None when it does not exist."""
    row = conn.execute('SELECT created_at_ms, id FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    return (int(row[0]), str(row[1])) if row else None


def runs_page(
    conn: sqlite3.Connection,
    *,
    limit: int,
    after: str | None = None,
    status: str | None = None,
) -> tuple[list[RunRow], bool]:
    """Up to ``limit`` Runs in id order after the Run id ``after``, optionally of one
    ``status``; and whether more follow (limit + 1 are fetched).

    A page is an in-order range of an index QingLong itself creates (spec 02), so it costs the
    same however long the history: the primary key, or with ``status`` one range of
    `(execution_owner, status, id)` per owner merged in id order (`MERGE (UNION ALL)`). The
    order is the Run id's, not creation time's: no QingLong index orders all Runs by time
    (docs/decisions.md D-27). A Run whose id is NULL (SQLite lets a TEXT primary key hold one;
    QingLong never writes it) is on no page: it could not be named by ``--after`` or ``--run``.
    """
    key = "r.id > ?2" if after is not None else "r.id IS NOT NULL"
    if status is None:
        sql = f'SELECT {_RUN_COLUMNS_R} FROM "Runs" r WHERE {key} ORDER BY r.id LIMIT ?3'
    else:
        arm = f"SELECT {_RUN_COLUMNS_R} FROM \"Runs\" r WHERE r.execution_owner = '{{owner}}' "
        arm += f"AND r.status = ?1 AND {key}"
        sql = (
            " UNION ALL ".join(arm.format(owner=o) for o in ("legacy", "runtime"))
            + " ORDER BY 1 LIMIT ?3"  # column 1: r.id
        )
    rows = conn.execute(sql, (status, after, limit + 1)).fetchall()
    runs = [RunRow(*r) for r in rows]
    return runs[:limit], len(runs) > limit


_RUN_COLUMNS_R = ", ".join("r." + c for c in columns(RunRow))


# --- the receipt journal, for `qlfsm sweep` ------------------------------------------------------


class PendingRow(NamedTuple):
    """A `pending` journal row and what its Attempt is now (``attempt_status`` None: the
    Attempt row is gone).

    ``problem`` (docs/decisions.md D-16 "the unusable journal row"): why a value a foreign
    writer left cannot be acted on (an id that is not text, text that is not UTF-8, a time
    that is not an integer), None when the row is as the schema says; ``key`` is the row's
    keyset position exactly as stored, the next page's cursor."""

    attempt_id: str
    run_id: str
    updated_at_ms: int
    attempt_status: str | None
    executor_handle: str | None
    pid: int | None
    problem: str | None = None
    key: tuple[Any, Any] = (-1, "")


class QuarantinedRow(NamedTuple):
    """A `quarantined` journal row past its purge time (``problem``, ``key``: as PendingRow)."""

    attempt_id: str
    run_id: str
    quarantine_ref: str
    purge_after_ms: int
    attempt_status: str | None
    problem: str | None = None
    key: tuple[Any, Any] = (-1, "")


class ForeignStateRow(NamedTuple):
    """A journal row whose state is neither `pending` nor `quarantined` (a writer that bypassed
    the CHECKs): no page reads it, and nothing may act on it (D-16 "the unusable journal
    row")."""

    attempt_id: str
    run_id: str
    state: str


# Both pages walk an index of the journal in its own order (spec 02: `(state, updated_at_ms,
# attempt_id)`; `(purge_after_ms, attempt_id) WHERE state='quarantined'`), so a page costs the
# same however large the journal is; the Attempt is joined by its primary key.
PENDING_PAGE_SQL = (
    "SELECT j.attempt_id, j.run_id, j.updated_at_ms, a.status, a.executor_handle, a.pid "
    'FROM "LocalCompletionReceiptJournal" j LEFT JOIN "RunAttempts" a ON a.id = j.attempt_id '
    "WHERE j.state = 'pending' AND (j.updated_at_ms, j.attempt_id) > (?, ?) "
    "ORDER BY j.updated_at_ms, j.attempt_id LIMIT ?"
)
# SQLite prefers the `state` index for this one and sorts (the partial index's WHERE is not
# weighed): `INDEXED BY` names QingLong's own purge index (its migration 0003), so a page is an
# in-order range of the rows that are due. A database without that index gets the same
# statement without the hint (sorted, still correct) rather than an error.
_PURGE_INDEX = "ql3_local_receipt_journal_purge_idx"
QUARANTINED_PAGE_SQL = (
    "SELECT j.attempt_id, j.run_id, j.quarantine_ref, j.purge_after_ms, a.status "
    f'FROM "LocalCompletionReceiptJournal" j INDEXED BY {_PURGE_INDEX} '
    'LEFT JOIN "RunAttempts" a ON a.id = j.attempt_id '
    "WHERE j.state = 'quarantined' AND j.purge_after_ms <= ? "
    "AND (j.purge_after_ms, j.attempt_id) > (?, ?) "
    "ORDER BY j.purge_after_ms, j.attempt_id LIMIT ?"
)
# Rows in a state the schema forbids: three ranges of the `(state, updated_at_ms, attempt_id)`
# index around the two allowed states (numbers sort before text, BLOBs after), so a pass
# reads only such rows, however large the journal (spec 02).
_FOREIGN_SELECT = 'SELECT attempt_id, run_id, state FROM "LocalCompletionReceiptJournal" WHERE '
FOREIGN_STATE_SQL = (
    " UNION ALL ".join(
        _FOREIGN_SELECT + where
        for where in (
            "state < 'pending'",
            "state > 'pending' AND state < 'quarantined'",
            "state > 'quarantined'",
        )
    )
    + " LIMIT ?"
)
# The first page starts before every row: times are CHECKed >= 0 (spec 02).
FIRST: tuple[Any, Any] = (-1, "")


def _decode(data: bytes) -> str:
    # A foreign writer's TEXT need not be UTF-8 (D-16 "the unusable journal row"): read it,
    # never raise on it; the bytes that are not UTF-8 come back as lone surrogates, which
    # `_not_utf8` names.
    return data.decode("utf-8", "surrogateescape")


def _not_utf8(value: object) -> bool:
    if not isinstance(value, str) or value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _shown(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


def _problem(columns: Sequence[tuple[str, object]], time: tuple[str, object]) -> str | None:
    """Why a page row's stored values cannot be acted on (D-16 "the unusable journal row"), or
    None."""
    for name, value in columns:
        if value is not None and not isinstance(value, str):
            return f"has a non-text {name} ({type(value).__name__})"
        if _not_utf8(value):
            return f"has a non-UTF-8 {name}"
    name, value = time
    if type(value) is not int:
        return f"has a non-integer {name} ({ascii(_shown(value))[:40]})"
    return None


def _param(value: object) -> tuple[str, object]:
    """A stored key value as an SQL placeholder and the value to bind to it: text that is not
    UTF-8 is bound as its bytes and cast back to TEXT, so it compares as stored."""
    if isinstance(value, str) and _not_utf8(value):
        return "CAST(? AS TEXT)", value.encode("utf-8", "surrogateescape")
    return "?", value


def _page(conn: sqlite3.Connection, sql: str, head: tuple[object, ...], after: tuple[Any, Any],
          limit: int, row: Callable[[Any], _Row]) -> tuple[list[_Row], bool]:  # fmt: skip
    """One keyset page after ``after``, each row made by ``row``; and whether more follow."""
    (p1, v1), (p2, v2) = _param(after[0]), _param(after[1])
    if (p1, p2) != ("?", "?"):
        sql = sql.replace(") > (?, ?)", f") > ({p1}, {p2})")
    with lenient(conn, _decode):
        rows = conn.execute(sql, (*head, v1, v2, limit + 1)).fetchall()
    return [row(r) for r in rows[:limit]], len(rows) > limit


def journal_shards(conn: sqlite3.Connection) -> list[str]:
    """The distinct shard names (first two characters) of the journal's Attempt ids: the
    directories a sweep may touch, checked before it touches any (docs/decisions.md D-16)."""
    with lenient(conn, _decode):
        rows = conn.execute(
            'SELECT DISTINCT substr(attempt_id, 1, 2) FROM "LocalCompletionReceiptJournal" '
            "WHERE typeof(attempt_id) = 'text'"
        ).fetchall()
    return [r[0] for r in rows if isinstance(r[0], str) and not _not_utf8(r[0])]


def pending_page(
    conn: sqlite3.Connection, after: tuple[Any, Any], limit: int
) -> tuple[list[PendingRow], bool]:
    return _page(conn, PENDING_PAGE_SQL, (), after, limit, _pending_row)


def _pending_row(r: Any) -> PendingRow:
    problem = _problem(
        [("attempt_id", r[0]), ("run_id", r[1]), ("Attempt status", r[3]),
         ("executor_handle", r[4])],
        ("updated_at_ms", r[2]),
    )  # fmt: skip
    return PendingRow(
        _shown(r[0]),
        _shown(r[1]),
        r[2] if type(r[2]) is int else -1,
        r[3] if isinstance(r[3], str) else None,
        r[4] if isinstance(r[4], str) else None,
        r[5] if type(r[5]) is int else None,
        problem,
        (r[2], r[0]),
    )


def quarantined_page(
    conn: sqlite3.Connection, now_ms: int, after: tuple[Any, Any], limit: int
) -> tuple[list[QuarantinedRow], bool]:
    try:
        return _page(conn, QUARANTINED_PAGE_SQL, (now_ms,), after, limit, _quarantined_row)
    except sqlite3.OperationalError as exc:
        if _PURGE_INDEX not in str(exc):
            raise
        plain = QUARANTINED_PAGE_SQL.replace(f" INDEXED BY {_PURGE_INDEX}", "")
        return _page(conn, plain, (now_ms,), after, limit, _quarantined_row)


def _quarantined_row(r: Any) -> QuarantinedRow:
    problem = _problem(
        [("attempt_id", r[0]), ("run_id", r[1]), ("quarantine_ref", r[2]),
         ("Attempt status", r[4])],
        ("purge_after_ms", r[3]),
    )  # fmt: skip
    if problem is None and r[2] is None:
        problem = "is quarantined with no quarantine_ref"
    return QuarantinedRow(
        _shown(r[0]),
        _shown(r[1]),
        r[2] if isinstance(r[2], str) else "",
        r[3] if type(r[3]) is int else -1,
        r[4] if isinstance(r[4], str) else None,
        problem,
        (r[3], r[0]),
    )


def foreign_state_rows(conn: sqlite3.Connection, limit: int) -> list[ForeignStateRow]:
    """Up to ``limit`` journal rows in a state the schema forbids (D-16 "the unusable journal
    row")."""
    with lenient(conn, _decode):
        rows = conn.execute(FOREIGN_STATE_SQL, (limit,)).fetchall()
    return [ForeignStateRow(_shown(r[0]), _shown(r[1]), _shown(r[2])) for r in rows]


def _delete_if_ended(conn: sqlite3.Connection, where: str, params: tuple[object, ...]) -> bool:
    """Delete the journal row of ``params[0]`` in one transaction, only while it still matches
    ``where`` and its Attempt is not active (terminal, or gone); False when it does not."""
    sql = (
        'DELETE FROM "LocalCompletionReceiptJournal" WHERE attempt_id = ? AND '
        + where
        + ' AND NOT EXISTS (SELECT 1 FROM "RunAttempts" a WHERE a.id = ? '
        "AND a.status IN ('claimed','starting','running'))"
    )
    return in_transaction(conn, lambda c: c.execute(sql, (*params, params[0])).rowcount == 1)


def delete_pending_of_ended(conn: sqlite3.Connection, row: PendingRow) -> bool:
    """Delete the `pending` row ``row`` named, only while it is unchanged and its Attempt is
    not active (terminal, or gone); one transaction; False when either no longer holds."""
    where = "state = 'pending' AND updated_at_ms = ?"
    return _delete_if_ended(conn, where, (row.attempt_id, row.updated_at_ms))


def delete_quarantined_of_ended(conn: sqlite3.Connection, row: QuarantinedRow) -> bool:
    """Delete the `quarantined` row ``row`` named (same ref, same purge time), only while its
    Attempt is not active (terminal, or gone); one transaction; False when the row changed."""
    where = "state = 'quarantined' AND quarantine_ref = ? AND purge_after_ms = ?"
    return _delete_if_ended(conn, where, (row.attempt_id, row.quarantine_ref, row.purge_after_ms))
