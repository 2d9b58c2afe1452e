"""ADR-0448's decision table (spec 05 "Per candidate", rows 1..12, and the record's §5, §6),
with each row's edge on the ADR-0448 decision machine over spec 05's evidence order.

Transcribed by hand from the record, never imported from ``fsm`` (see ``_records.py``).
"""

from __future__ import annotations

from itertools import pairwise

from reconciler.diagrams._record_rows import DecisionRow, EdgeRef, EvidenceStep, RecordTable

# --- ADR-0448 decision table (spec 05 "Per candidate") -------------------------------------
# The legacy-shadow machine is the per-candidate lifecycle of one pass (spec 07): a candidate
# starts as `candidate` and ends in one of the nine outcomes of the ADR-0449 report.
# The ADR-0448 decision machine draws the same rows over the evidence order of spec 05
# "Candidates": the Run (re-read at decision time), its Attempts, then the cron's
# RunningInstances and the selection.

LEGACY_OUTCOMES: tuple[str, ...] = (
    "completed",
    "cancelled",
    "abandoned",
    "marked_lost",  # the report's `markedLost` (spec 05, ADR-0449 schemas)
    "repaired",
    "pending",
    "ambiguous",
    "skipped",
    "failed",
)
LEGACY_EVIDENCE_STATES: tuple[str, ...] = ("read_run", "read_attempts", "read_evidence")


# The Run and Attempt edges each writing row moves (spec 05's outcome column, ADR-0448 §5, §6),
# each guarded by the row's own guard: the write is taken only on facts that still make that row
# the first to match. Every one is a legal ADR-0001 pair; the Run never leaves a state row 1
# skips (terminal or `lost`).

# The Run states with a legal edge to `cancelled` that row 1 does not skip.
_CANCELLABLE: tuple[str, ...] = (
    "created",
    "queued",
    "dispatching",
    "running",
    "waiting_approval",
    "retry_wait",
)
# Row 2: "Run → the Attempt's status" for each terminal status an Attempt can have, from each
# Run state with a legal edge to it (`dispatching -> timed_out`: spec 01 (**), the
# RUN_TRANSITIONS amendment).
_ROW_2_EDGES: tuple[EdgeRef, ...] = tuple(
    EdgeRef("run", source, dest, "unique_terminal_attempt")
    for dest, sources in (
        ("succeeded", ("running",)),
        ("failed", ("dispatching", "running")),
        ("cancelled", _CANCELLABLE),
        ("timed_out", ("queued", "dispatching", "running", "waiting_approval", "retry_wait")),
        ("lost", ("dispatching", "running")),
    )
    for source in sources
)
# Row 6: "Attempt + Run → `cancelled`", from any active Attempt and any Run state with an edge
# to `cancelled`.
_ROW_6_EDGES: tuple[EdgeRef, ...] = tuple(
    EdgeRef(machine, source, "cancelled", "stopped_with_finished")
    for machine, sources in (("attempt", ("claimed", "starting", "running")), ("run", _CANCELLABLE))
    for source in sources
)
# Row 7: "Attempt + Run → `succeeded` / `failed`" along the legal chain QingLong's shadow writer
# writes (Run created → queued → dispatching → running; Attempt claimed → starting → running).
_ROW_7_EDGES: tuple[EdgeRef, ...] = tuple(
    EdgeRef(machine, source, dest, "unique_finished_evidence")
    for machine, chain in (
        ("run", ("created", "queued", "dispatching", "running")),
        ("attempt", ("claimed", "starting", "running")),
    )
    for source, dest in (*pairwise(chain), ("running", "succeeded"), ("running", "failed"))
)
# Rows 9 and 10: the Attempt's commit; "then Run → ..." is the second commit, which is row 2's
# repair of the Attempt just committed (ADR-0448 §6): its edges are row 2's.
_ROW_9_EDGES: tuple[EdgeRef, ...] = (
    EdgeRef("attempt", "claimed", "cancelled", "no_spawn_evidence"),
)
_ROW_10_EDGES: tuple[EdgeRef, ...] = tuple(
    EdgeRef("attempt", source, "lost", "no_terminal_evidence")
    for source in ("claimed", "starting", "running")
)


def _legacy(
    row: str,
    facts: str,
    outcome: str,
    dest: str,
    guard: str,
    tried_in: str,
    *,
    trigger: str,
    write: str | None = None,
    moves: tuple[EdgeRef, ...] = (),
    note: str = "",
) -> DecisionRow:
    # ``trigger``: the row's edge on the legacy_shadow lifecycle; ``write``: what the pass
    # commits for it (spec 05's outcome column; None: "no write"); ``moves``: the Run and
    # Attempt edges that write moves.
    return DecisionRow(
        row,
        facts,
        outcome,
        (EdgeRef("legacy_shadow", "candidate", dest, guard), *moves),
        note=note,
        decides=(EdgeRef("legacy_decision", tried_in, dest, guard, write=write, trigger=trigger),),
    )


def _ambiguous(row: str, facts: str, guard: str, tried_in: str) -> DecisionRow:
    # A row that holds the candidate: no write, outcome `ambiguous`.
    return _legacy(row, facts, "ambiguous", "ambiguous", guard, tried_in, trigger="hold")


ADR_0448_TABLE: tuple[DecisionRow, ...] = (
    _legacy(
        "1",
        "Run gone, not legacy-owned, origin not enabled, or Run already terminal/lost",
        "skipped",
        "skipped",
        "not_eligible",
        "read_run",
        trigger="skip",
    ),
    _legacy(
        "2",
        "no active Attempt, latest Attempt terminal, and Run → that status is legal",
        "Run → the Attempt's status (response-loss repair) → repaired",
        "repaired",
        "unique_terminal_attempt",
        "read_attempts",
        trigger="repair",
        write="repair",
        moves=_ROW_2_EDGES,
    ),
    _ambiguous("2b", "no active Attempt otherwise", "no_active_attempt", "read_attempts"),
    _ambiguous("3", "more than one active Attempt", "multiple_active_attempts", "read_attempts"),
    _ambiguous(
        "4",
        "evidence truncated (more than 8 rows for the cron)",
        "evidence_truncated",
        "read_evidence",
    ),
    _ambiguous("5", "selection ambiguous", "ambiguous_selection", "read_evidence"),
    _legacy(
        "6",
        "matched row has `finished_at` and status stopped",
        "Attempt + Run → `cancelled`, reason `reconcile` → cancelled",
        "cancelled",
        "stopped_with_finished",
        "read_evidence",
        trigger="cancel",
        write="cancel",
        moves=_ROW_6_EDGES,
    ),
    _legacy(
        "7",
        "matched row has `finished_at` and status finished / error",
        "Attempt + Run → `succeeded` / `failed` (exit code kept) → completed",
        "completed",
        "unique_finished_evidence",
        "read_evidence",
        trigger="complete",
        write="complete",
        moves=_ROW_7_EDGES,
    ),
    _legacy(
        "8",
        "otherwise, origin `scheduled_system`",
        "no write → pending (system crond will call back)",
        "pending",
        "awaiting_system_crond",
        "read_evidence",
        trigger="wait",
    ),
    _legacy(
        "9",
        "Run `queued` and Attempt `claimed` (no spawn evidence)",
        'Attempt → `cancelled`, then Run → `cancelled`, "acceptance abandoned" → abandoned',
        "abandoned",
        "no_spawn_evidence",
        "read_evidence",
        trigger="abandon",
        write="abandon",
        moves=_ROW_9_EDGES,
        note="the Run's commit is row 2's repair of the Attempt just cancelled (§6)",
    ),
    _legacy(
        "10",
        "Run `dispatching/running` and Attempt `claimed/starting/running`",
        "Attempt → `lost`, then Run → `lost` → markedLost",
        "marked_lost",
        "no_terminal_evidence",
        "read_evidence",
        trigger="mark_lost",
        write="mark_lost",
        moves=_ROW_10_EDGES,
        note="the Run's commit is row 2's repair of the Attempt just lost (§6)",
    ),
    _ambiguous(
        "11", "anything else (an illegal combination)", "illegal_combination", "read_evidence"
    ),
    DecisionRow(
        "12",
        "exception",
        "failed",
        (EdgeRef("legacy_shadow", "candidate", "failed", "error_raised"),),
        on_exception=True,
        # An exception fails the candidate whichever evidence was being read.
        decides=tuple(
            EdgeRef("legacy_decision", s, "failed", "error_raised", trigger="fail")
            for s in LEGACY_EVIDENCE_STATES
        ),
    ),
)

# spec 05 "Candidates": the Attempts are read only for an eligible Run (row 1 did not match),
# the cron's RunningInstances only for exactly one active Attempt (rows 2, 2b, 3 did not).
ADR_0448_STEPS: tuple[EvidenceStep, ...] = (
    EvidenceStep(
        "step 3",
        "an eligible legacy candidate: read its active Attempts",
        "ADR-0448 §3",
        EdgeRef("legacy_decision", "read_run", "read_attempts", "eligible_candidate"),
        after="1",
    ),
    EvidenceStep(
        "step 4",
        "exactly one active Attempt: read the cron's RunningInstances and select",
        "ADR-0448 §4",
        EdgeRef("legacy_decision", "read_attempts", "read_evidence", "one_active_attempt"),
        after="3",
    ),
)

ADR_0448 = RecordTable(
    cite="ADR-0448",
    machine="legacy_decision",
    states_cite="spec 05 §Candidates evidence order and §Per candidate outcomes",
    evidence=LEGACY_EVIDENCE_STATES,
    decisions={o: o for o in LEGACY_OUTCOMES},  # each outcome its own decision state
    rows=ADR_0448_TABLE,
    steps=ADR_0448_STEPS,
)
