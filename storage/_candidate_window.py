"""Windows of the primary candidates in Run id order, for `qlfsm drain` (docs/decisions.md
D-26): the same candidates as spec 04's query (``storage._candidates``, whose statement is
start-up's own and is not changed here), taken page after page by a keyset on ``Runs.id``.

A window is ``(after, upto]`` in id order, each bound given as the ``rowid`` of the Run whose
id bounds it (``None``: unbounded). Comparing with that row's own stored id, rather than a
value carried through Python, keeps the order exact for an id the driver cannot give back as
it is stored (text that is not UTF-8 comes back as bytes, which would compare as a blob).
"""

from __future__ import annotations

import sqlite3

from ._candidates import PRIMARY_PAGE, PrimaryCandidate, _candidate, lenient

# spec 04 "Candidates": the WHERE and the order of start-up's query, plus the window's bounds.
_SELECT = (
    "SELECT r.id, r.status, r.version, "
    '(SELECT COUNT(*) FROM "RunAttempts" a WHERE a.run_id = r.id '
    "AND a.status IN ('claimed','starting','running')) AS active, r.rowid "
    'FROM "Runs" r '
    "WHERE r.execution_owner = 'runtime' AND r.status IN ('dispatching','running')"
)
_AFTER = ' AND r.id > (SELECT b.id FROM "Runs" b WHERE b.rowid = ?)'
_UPTO = ' AND r.id <= (SELECT b.id FROM "Runs" b WHERE b.rowid = ?)'
_ORDER = " ORDER BY r.id LIMIT ?"


def candidate_window(
    conn: sqlite3.Connection,
    after: int | None = None,
    upto: int | None = None,
    limit: int = PRIMARY_PAGE,
) -> tuple[list[PrimaryCandidate], bool, int | None]:
    """Up to ``limit`` candidates whose id is after the id of the Run with rowid ``after`` and
    at most that of the Run with rowid ``upto`` (either ``None``: no bound), in id order;
    whether more exist in the window (fetch limit + 1); and the rowid of the last one returned
    (the next window's ``after``), ``None`` when none is. One statement."""
    sql, args = _SELECT, []
    if after is not None:
        sql += _AFTER
        args.append(after)
    if upto is not None:
        sql += _UPTO
        args.append(upto)
    with lenient(conn):
        rows = conn.execute(sql + _ORDER, (*args, limit + 1)).fetchall()
    page = rows[:limit]
    last = page[-1][4] if page else None
    return [_candidate(r[:4]) for r in page], len(rows) > limit, last


_LAST = (
    'SELECT r.rowid FROM "Runs" r '
    "WHERE r.execution_owner = 'runtime' AND r.status IN ('dispatching','running') "
    "ORDER BY r.id DESC LIMIT 1"
)


def last_candidate(conn: sqlite3.Connection) -> int | None:
    """The rowid of the candidate with the greatest id now (``None``: no candidate): where a
    drain stops, so that Runs created while it runs cannot keep it going (D-26)."""
    row = conn.execute(_LAST).fetchone()
    return None if row is None else int(row[0])
