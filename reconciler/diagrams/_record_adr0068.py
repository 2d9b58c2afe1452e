"""ADR-0068's decision table (spec 04 "Per candidate", rows 1..14, and the record's §2, §4),
with each row's edges on the ADR-0068 decision machine and the evidence steps of §2.

Transcribed by hand from the record, never imported from ``fsm`` (see ``_records.py``).
"""

from __future__ import annotations

from functools import partial

from reconciler.diagrams._record_rows import DecisionRow, EdgeRef, EvidenceStep, RecordTable

# --- ADR-0068 decision table (spec 04 "Per candidate") -------------------------------------

# Row 5's receipt edges. The terminal mapping (spec 04, "Terminal mapping from a trusted
# receipt"; ADR-0068 §4) can land on any of the four; the Attempt takes the same status.
# A Run still `dispatching` / an Attempt still `claimed`/`starting` walks LEGAL edges through
# `running` (guarded `trusted_receipt` all the way): ADR-0001 has no dispatching -> succeeded
# (nor claimed -> succeeded) edge, and the reconciler never writes an illegal edge.
_RECEIPT_TERMINALS: tuple[str, ...] = ("succeeded", "failed", "cancelled", "timed_out")

_ROW_5_EDGES: tuple[EdgeRef, ...] = (
    EdgeRef("run", "dispatching", "running", "trusted_receipt"),
    *(EdgeRef("run", "running", dest, "trusted_receipt") for dest in _RECEIPT_TERMINALS),
    EdgeRef("attempt", "claimed", "starting", "trusted_receipt"),
    EdgeRef("attempt", "starting", "running", "trusted_receipt"),
    *(EdgeRef("attempt", "running", dest, "trusted_receipt") for dest in _RECEIPT_TERMINALS),
)


def _lost(guard: str, *attempt_sources: str) -> tuple[EdgeRef, ...]:
    """The edges of a `lost` write guarded ``guard``: the candidate Run from either state it
    can be in (`dispatching` or `running`, spec 04 §Candidates), its Attempt from each of
    ``attempt_sources``."""
    return (
        EdgeRef("run", "dispatching", "lost", guard),
        EdgeRef("run", "running", "lost", guard),
        *(EdgeRef("attempt", source, "lost", guard) for source in attempt_sources),
    )


# The ADR-0068 decision machine (spec 07: "the evidence order, every row of its table as an
# edge"). Its states are the evidence of ADR-0068 §2, in the record's order ("receipt, then
# process identity, then grace, then receipt again", spec 04), each named by what it waits
# for; and the decisions, each counted as one summary outcome (spec 04 "Summary").
PRIMARY_EVIDENCE_STATES: tuple[str, ...] = (
    "read_run",  # §2 step 1: the Run and its latest Attempt
    "read_receipt",  # §2 steps 2-4: exactly one receipt path
    "probe",  # §2 step 5: the exact durable process identity
    "pay_grace",  # §2 step 6: one grace after a trusted not_running
    "reread_receipt",  # §2 step 6: the receipt again
    "recheck_run",  # spec 04 row 13: "re-read the Run/Attempt, check nothing changed"
)
PRIMARY_DECISION_OUTCOMES: dict[str, str] = {
    "completed": "recovered",  # terminalized by a trusted receipt
    "lost": "recovered",  # terminalized as lost
    "retained": "remaining",  # proven running (again by the final verifier)
    "quarantined": "unresolved",  # an invalid receipt moved aside
    "unresolved": "unresolved",
    "failed": "failed",
}


# An edge on the ADR-0068 decision machine: _p(tried in, what follows, guard[, reason code
# [, write[, trigger]]]), written with keywords where the call spans several lines.
_p = partial(EdgeRef, "primary_decision")


ADR_0068_TABLE: tuple[DecisionRow, ...] = (
    DecisionRow(
        "1",
        "more than one active Attempt",
        "unresolved",
        decides=(
            _p("read_run", "unresolved", "several_active_attempts", "multiple_active_attempts"),
        ),
    ),
    DecisionRow(
        "2",
        "Run gone, not runtime-owned, or status changed since the page",
        "unresolved",
        decides=(
            _p("read_run", "unresolved", "run_gone", "run_gone"),
            _p("read_run", "unresolved", "not_runtime_owned", "not_runtime_owned"),
            _p("read_run", "unresolved", "status_changed", "status_changed"),
        ),
    ),
    DecisionRow(
        "3",
        "no Attempt at all and Run `dispatching`",
        "Run → `lost` (`RECOVERY_ATTEMPT_MISSING_BEFORE_START`), one `run.lost` event → recovered",
        (EdgeRef("run", "dispatching", "lost", "attempt_missing_before_start"),),
        error_code="RECOVERY_ATTEMPT_MISSING_BEFORE_START",
        decides=(
            _p(
                "read_run",
                "lost",
                "attempt_missing_before_start",
                reason="attempt_missing_before_start",
                write="lose_missing_attempt",
                trigger="lose_missing_attempt",
            ),
        ),
    ),
    DecisionRow(
        "3b",
        "no active Attempt otherwise",
        "unresolved",
        decides=(_p("read_run", "unresolved", "no_active_attempt_otherwise", "no_active_attempt"),),
    ),
    DecisionRow(
        "4",
        "latest Attempt not `claimed/starting/running`",
        "unresolved",
        decides=(
            _p("read_run", "unresolved", "latest_attempt_not_active", "latest_attempt_not_active"),
        ),
    ),
    DecisionRow(
        "4b",
        "the active Attempt's executor type is not `local_process` (ADR-0068 §2 step 1, §6: "
        "local evidence never stands in for a remote worker) — checked before any receipt is "
        "read; for a `claimed` one, do what QingLong's coordinator does",
        "unresolved, receipt and journal untouched; a `claimed` one: Attempt + Run → `lost` "
        "(`RECOVERY_UNSTARTED_CLAIM`), its receipt never read → recovered",
        _lost("claimed_not_local_process", "claimed"),
        note="The `claimed` case: the claim never crossed the start barrier (ADR-0068 §2 step "
        "5), a fact of the database, not local evidence; its receipt is never read. QingLong's "
        "coordinator does the same (docs/decisions.md D-18).",
        error_code="RECOVERY_UNSTARTED_CLAIM",
        decides=(
            _p(
                "read_run",
                "lost",
                "claimed_not_local_process",
                reason="unstarted_claim",
                write="lose",
                trigger="lose_nonlocal_claim",
            ),
            _p(
                "read_run",
                "unresolved",
                "executor_not_local_process",
                reason="executor_not_local_process",
            ),
        ),
    ),
    DecisionRow(
        "5",
        "trusted receipt (read exactly one path)",
        "Attempt + Run → terminal by the receipt mapping, two events, one transaction; "
        "then delete the receipt; then resolve the journal → recovered",
        _ROW_5_EDGES,
        note="A Run still `dispatching` (Attempt `claimed`/`starting`) walks the legal edges "
        "through `running`, each guarded `trusted_receipt`: ADR-0001 has no "
        "`dispatching -> succeeded` edge.",
        decides=(
            _p("read_receipt", "completed", "trusted_receipt", "receipt_{terminal}", "complete"),
        ),
    ),
    DecisionRow(
        "6",
        "invalid receipt",
        "quarantine (journal intent first, then move) → unresolved",
        note="A receipt an earlier pass quarantined (its journal row says so) stays invalid: "
        "unresolved, nothing written again (docs/decisions.md D-3a).",
        decides=(
            _p(
                "read_receipt",
                "quarantined",
                "invalid_receipt",
                reason="invalid_receipt:{receipt_problem}",
                write="quarantine",
            ),
            _p("read_receipt", "unresolved", "quarantined_earlier", "receipt_quarantined_earlier"),
        ),
    ),
    DecisionRow(
        "7",
        "no receipt, Attempt `claimed`",
        "Attempt + Run → `lost` (`RECOVERY_UNSTARTED_CLAIM`) WITHOUT probing any process "
        "→ recovered",
        _lost("unstarted_claim", "claimed"),
        note="The candidate Run is `dispatching` or `running` (spec 04 §Candidates), so "
        "both Run edges exist.",
        error_code="RECOVERY_UNSTARTED_CLAIM",
        decides=(
            _p(
                "read_receipt",
                "lost",
                "unstarted_claim",
                reason="unstarted_claim",
                write="lose",
                trigger="lose_unstarted_claim",
            ),
        ),
    ),
    DecisionRow(
        "8",
        "no handle, or pid not a positive integer (executor type: row 4b)",
        "unresolved",
        decides=(
            _p("read_receipt", "unresolved", "handle_missing", "handle_missing"),
            _p("read_receipt", "unresolved", "pid_invalid", "pid_invalid"),
        ),
    ),
    DecisionRow(
        "9",
        "probe: `unknown / provider_unavailable`",
        "failed",
        decides=(_p("probe", "failed", "provider_unavailable", "provider_unavailable"),),
    ),
    DecisionRow(
        "10",
        "probe: `unknown / invalid_handle` or `unsupported_platform`",
        "unresolved",
        decides=(_p("probe", "unresolved", "identity_unknown", "{probe_reason}"),),
    ),
    DecisionRow(
        "11",
        "handle pid ≠ `RunAttempts.pid`",
        "unresolved",
        decides=(_p("probe", "unresolved", "handle_pid_mismatch", "handle_pid_mismatch"),),
    ),
    DecisionRow(
        "12",
        "probe: `running`",
        "retained: Attempt `starting → running` and/or Run `dispatching → running` "
        "if needed (evidence `durable_process_identity`) → remaining",
        (
            EdgeRef("run", "dispatching", "running", "exact_process_running"),
            EdgeRef("attempt", "starting", "running", "exact_process_running"),
        ),
        decides=(
            _p(
                "probe",
                "retained",
                "exact_process_running",
                reason="process_running",
                write="adopt_running",
                trigger="adopt_running",
            ),
        ),
    ),
    DecisionRow(
        "13",
        "probe: `not_running`",
        "one grace, then read the receipt again: trusted → as row 5; invalid → as "
        "row 6; still none → re-read Run/Attempt unchanged, then Attempt + Run → "
        "`lost` (`RECOVERY_PROCESS_NOT_RUNNING`) → recovered",
        _lost("not_running_after_grace", "starting", "running"),
        note="A receipt found on the second read takes row 5's edges (listed under row 5).",
        error_code="RECOVERY_PROCESS_NOT_RUNNING",
        decides=(
            _p("probe", "pay_grace", "trusted_not_running"),
            _p("pay_grace", "reread_receipt", "grace_elapsed"),
            _p(
                "reread_receipt",
                "completed",
                "trusted_receipt",
                reason="receipt_{terminal}_after_grace",
                write="complete",
            ),
            _p(
                "reread_receipt",
                "quarantined",
                "invalid_receipt",
                reason="invalid_receipt:{receipt_problem}",
                write="quarantine",
            ),
            _p("reread_receipt", "recheck_run", "receipt_still_missing"),
            _p("recheck_run", "unresolved", "changed_on_recheck", "changed_before_lost"),
            _p(
                "recheck_run",
                "lost",
                "not_running_after_grace",
                reason="process_not_running:{probe_reason}",
                write="lose",
                trigger="lose_after_grace",
            ),
        ),
    ),
    DecisionRow(
        "14",
        "any exception while handling the candidate",
        "failed (the transaction rolls back)",
        on_exception=True,
        # "any exception while handling the candidate": in whichever evidence state.
        decides=tuple(
            _p(s, "failed", "error_raised", "error:{error}") for s in PRIMARY_EVIDENCE_STATES
        ),
    ),
)

# ADR-0068 §2's evidence order between the rows: the receipt is read only when rows 1-4b did
# not decide; the process is probed only when rows 5-8 did not.
ADR_0068_STEPS: tuple[EvidenceStep, ...] = (
    EvidenceStep(
        "step 2.2",
        "exactly one active Attempt, the latest: read its one receipt path",
        "ADR-0068 §2 step 2",
        _p("read_run", "read_receipt", "one_active_latest_attempt"),
        after="4b",
    ),
    EvidenceStep(
        "step 2.5",
        "no receipt, Attempt `starting/running` with a local-process handle and pid: probe "
        "the exact durable identity",
        "ADR-0068 §2 step 5",
        _p("read_receipt", "probe", "durable_identity_stored"),
        after="8",
    ),
)

# Rows whose facts `fsm` words differently from spec 04 (a paraphrase of the same condition).
PARAPHRASED_FACTS: frozenset[str] = frozenset({"4b", "13", "step 2.2", "step 2.5"})

ADR_0068 = RecordTable(
    cite="ADR-0068",
    machine="primary_decision",
    states_cite="ADR-0068 §2 evidence order and spec 04 §Summary",
    evidence=PRIMARY_EVIDENCE_STATES,
    decisions=PRIMARY_DECISION_OUTCOMES,
    rows=ADR_0068_TABLE,
    steps=ADR_0068_STEPS,
    paraphrased=PARAPHRASED_FACTS,
)
