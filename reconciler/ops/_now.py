"""The decision a start-up pass would take NOW for a run that is still active, for `explain`.

A pass writes no event for a run it keeps running, leaves pending or unresolved (spec 04 row
12, spec 05 row 8), so no stored event can say why such a run is where it is; the passes' own
reads and tables can. Reads only (docs/decisions.md D-12 "explain").
"""

from __future__ import annotations

import sqlite3
from typing import Any

from fsm.qinglong import LegacyEngine
from reconciler.ops._explain import ADR0448, ROW_FACTS
from storage import Repository, RunRow

# The statuses of a Run that a start-up pass still looks at (spec 04 / spec 05 candidates).
ACTIVE_RUN = frozenset({"queued", "dispatching", "running"})
# The legacy facts shown with a decision now: statuses, counts and verdicts only (spec 05
# privacy: never an id, a pid, a path or a command).
_LEGACY_FACT_KEYS = (
    "origin",
    "origin_enabled",
    "run_status",
    "active_attempts",
    "attempt_status",
    "latest_attempt_status",
    "evidence_truncated",
    "selection",
    "matched_status",
    "matched_finished",
)


def legacy_now(
    conn: sqlite3.Connection,
    run: RunRow,
    enabled: frozenset[str],
    engine: LegacyEngine | None = None,
) -> dict[str, Any]:
    """The ADR-0448 row the shadow pass would take for ``run`` now: the decision of the pass's
    own reads (``reconciler.shadow``'s ``gather``), taken by the candidate's legacy decision
    core as the pass takes it, so this view and the pass cannot disagree. Reads only.
    ``engine``: the decision table's, as the pass's ports give it (default: ADR-0448's)."""
    from reconciler.shadow import gather
    from storage import LegacyCandidate

    cand = LegacyCandidate(
        run_id=run.id,
        status=run.status,
        version=run.version,
        origin=run.execution_origin,
        legacy_cron_id=run.legacy_cron_id,
        created_at_ms=run.created_at_ms,
        active_attempts=0,  # gather re-reads everything it needs; only the id is used
        attempt=None,
    )
    facts, ctx = gather(conn, Repository(conn), cand, enabled, engine)
    decision = ctx.decision
    assert decision is not None  # the core decided before gather returned
    return {
        **decision_now(ADR0448, decision.row, decision.outcome, decision.guard),
        "evidence": {k: getattr(facts, k) for k in _LEGACY_FACT_KEYS},
    }


def decision_now(record: str, row: str, outcome: str, reason: str) -> dict[str, Any]:
    """A pass's decision now as `explain` shows it (``now`` in its JSON): the row's facts
    from the record's table."""
    return {
        "record": record,
        "row": row,
        "outcome": outcome,
        "reason": reason,
        "row_facts": ROW_FACTS.get((record, row)),
    }
