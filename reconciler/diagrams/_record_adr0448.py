"""ADR-0448's decision table (spec 05 "Per candidate", rows 1..12, and the record's §5, §6),
with each row's edge on the ADR-0448 decision machine over spec 05's evidence order.

Transcribed by hand from the record, never imported from ``fsm`` (see ``_records.py``).
"""

from __future__ import annotations

from reconciler.diagrams._record_rows import (
    DecisionRow,
    EdgeRef,
    EvidenceStep,
)

# --- ADR-0448 decision table (spec 05 "Per candidate") -------------------------------------
# The legacy-shadow machine is the per-candidate lifecycle of one pass (spec 07): a candidate
# starts as `candidate` and ends in one of the nine outcomes of the ADR-0449 report.
# The ADR-0448 decision machine draws the same rows over the evidence order of spec 05
# "Candidates": the Run (re-read at decision time), its Attempts, then the cron's
# RunningInstances and the selection.

ADR_0448_CITE = "ADR-0448"

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
) -> DecisionRow:
    # ``trigger``: the row's edge on the legacy_shadow lifecycle; ``write``: what the pass
    # commits for it (spec 05's outcome column; None: "no write").
    return DecisionRow(
        row,
        facts,
        outcome,
        (EdgeRef("legacy_shadow", "candidate", dest, guard),),
        decides=(EdgeRef("legacy_decision", tried_in, dest, guard, write=write, trigger=trigger),),
    )


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
    ),
    _legacy(
        "2b",
        "no active Attempt otherwise",
        "ambiguous",
        "ambiguous",
        "no_active_attempt",
        "read_attempts",
        trigger="hold",
    ),
    _legacy(
        "3",
        "more than one active Attempt",
        "ambiguous",
        "ambiguous",
        "multiple_active_attempts",
        "read_attempts",
        trigger="hold",
    ),
    _legacy(
        "4",
        "evidence truncated (more than 8 rows for the cron)",
        "ambiguous",
        "ambiguous",
        "evidence_truncated",
        "read_evidence",
        trigger="hold",
    ),
    _legacy(
        "5",
        "selection ambiguous",
        "ambiguous",
        "ambiguous",
        "ambiguous_selection",
        "read_evidence",
        trigger="hold",
    ),
    _legacy(
        "6",
        "matched row has `finished_at` and status stopped",
        "Attempt + Run → `cancelled`, reason `reconcile` → cancelled",
        "cancelled",
        "stopped_with_finished",
        "read_evidence",
        trigger="cancel",
        write="cancel",
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
    ),
    _legacy(
        "11",
        "anything else (an illegal combination)",
        "ambiguous",
        "ambiguous",
        "illegal_combination",
        "read_evidence",
        trigger="hold",
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
