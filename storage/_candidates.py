"""The primary reconciler's bounded candidate query (spec 04 "Candidates")."""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

PRIMARY_PAGE = 256

# One statement: the zero-candidate start-up pays exactly this and nothing else (spec 04).
PRIMARY_CANDIDATES_SQL = (
    "SELECT r.id, r.status, r.version, "
    '(SELECT COUNT(*) FROM "RunAttempts" a WHERE a.run_id = r.id '
    "AND a.status IN ('claimed','starting','running')) AS active "
    'FROM "Runs" r '
    "WHERE r.execution_owner = 'runtime' AND r.status IN ('dispatching','running') "
    "ORDER BY r.id LIMIT ?"
)


# qlfsm's own index for the query above (applied by `db init`, migration
# qlfsm-0003-primary-candidates-index): it holds exactly the candidates, in id order, so a page
# is an in-order index range, with no sort and no scan of Runs even after ANALYZE (where
# QingLong's (execution_owner, status, id) index loses to a scan of the primary key on a small
# table). Its status list must repeat the query's WHERE verbatim for SQLite to use it. Without
# it (a node `db init` never touched) the query still searches QingLong's status index.
PRIMARY_CANDIDATES_INDEX = (
    "CREATE INDEX IF NOT EXISTS qlfsm_runs_primary_candidates_idx "
    "ON \"Runs\" (execution_owner, id) WHERE status IN ('dispatching','running')"
)


class PrimaryCandidate(NamedTuple):
    # A NamedTuple, not a dataclass: `dataclasses` imports `inspect` (~15 ms), which the
    # zero-candidate start-up path has no use for.

    run_id: str
    status: str
    version: int
    active_attempts: int


def primary_candidates(
    conn: sqlite3.Connection, limit: int = PRIMARY_PAGE
) -> tuple[list[PrimaryCandidate], bool]:
    """Up to ``limit`` candidates in Run id order, and whether more exist (fetch limit + 1)."""
    rows = conn.execute(PRIMARY_CANDIDATES_SQL, (limit + 1,)).fetchall()
    found = [PrimaryCandidate(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]
    return found[:limit], len(found) > limit
