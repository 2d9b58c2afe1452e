"""ADR-0068's decision table (spec 04 "Per candidate"), once, as data.

Every row of spec 04 is here exactly once, with each place it applies in (a :class:`Case`):
the evidence state, the guard (a named predicate of ``fsm/_guards.py``, evaluated on observed
facts only), and what follows: the next evidence to gather, or the decision (decision state,
reason code, write, Run/Attempt trigger). Two evidence steps of ADR-0068 §2 that are not rows of
spec 04's table (read the receipt; probe the process) are rows here too, named by their section.

The evidence states are the order of ADR-0068 §2, each named by the evidence it waits for:
``read_run`` (§2 step 1), ``read_receipt`` (steps 2-4), ``probe`` (step 5), ``pay_grace``,
``reread_receipt`` and ``recheck_run`` (step 6, spec 04 row 13). The only case into ``lost``
after a probe leaves ``recheck_run``, which only ``reread_receipt`` reaches, which only
``pay_grace`` reaches: a `not_running` verdict cannot give `lost` without the grace and the
second read (``fsm/_primary.py`` also checks this when the machine is built).

Reason codes are those of the summary (spec 04 "Summary", docs/decisions.md D-3a); ``{...}``
is filled from the facts (``{terminal}``: the receipt's terminal status by spec 04's mapping).
Writes: ``complete`` (row 5: Attempt + Run to the receipt's terminal, then delete the receipt),
``quarantine`` (row 6: journal intent, then move the file), ``lose_missing_attempt`` (row 3:
one Run edge), ``lose`` (rows 4b, 7 and 13: Attempt + Run to `lost`), ``adopt_running`` (row 12:
`starting -> running` / `dispatching -> running` where needed). None: no write.
"""

from __future__ import annotations

from ._decision import Case, DecisionRow, DecisionTable

# Evidence states in ADR-0068 §2 order; the first is the initial state.
PRIMARY_EVIDENCE: tuple[str, ...] = (
    "read_run",
    "read_receipt",
    "probe",
    "pay_grace",
    "reread_receipt",
    "recheck_run",
)

# Decision state -> the summary outcome it counts as (spec 04 "Summary").
PRIMARY_DECISIONS: dict[str, str] = {
    "completed": "recovered",  # rows 5, 13: a trusted receipt terminalized the candidate
    "lost": "recovered",  # rows 3, 4b, 7, 13
    "retained": "remaining",  # row 12 (proven again by the final verifier)
    "quarantined": "unresolved",  # rows 6, 13: an invalid receipt was moved aside
    "unresolved": "unresolved",  # rows 1, 2, 3b, 4, 4b, 6 (quarantined earlier), 8, 10, 11, 13
    "failed": "failed",  # rows 9, 14
}


def _decide(
    state: str,
    guard: str,
    then: str,
    reason: str,
    write: str | None = None,
    trigger: str | None = None,
) -> Case:
    return Case(state, guard, then, reason, write, trigger)


def _hold(state: str, guard: str, reason: str) -> Case:
    return Case(state, guard, "unresolved", reason)


def _row(row: str, facts: str, *cases: Case) -> DecisionRow:
    return DecisionRow(row, facts, f"ADR-0068 row {row}", cases)


# Which facts each evidence step fills (PrimaryCore.observe refuses any other).
PRIMARY_EVIDENCE_FIELDS: dict[str, frozenset[str]] = {
    "read_run": frozenset(
        {
            "run_present",
            "run_owner",
            "run_status",
            "attempt_count",
            "active_attempts",
            "attempt_status",
            "executor_type",
            "handle_present",
            "pid_valid",
            "cancel_requested",
            "cancel_reason",
        }
    ),
    "read_receipt": frozenset({"first_receipt", "receipt_problem", "receipt_exit_code"}),
    "probe": frozenset({"process", "probe_reason", "handle_pid_matches"}),
    "pay_grace": frozenset({"grace_paid"}),
    "reread_receipt": frozenset({"second_receipt", "receipt_problem", "receipt_exit_code"}),
    "recheck_run": frozenset({"unchanged_on_recheck"}),
}


PRIMARY_TABLE = DecisionTable(
    name="primary_decision",
    evidence=PRIMARY_EVIDENCE,
    decisions=PRIMARY_DECISIONS,
    observes=PRIMARY_EVIDENCE_FIELDS,
    rows=(
        _row(
            "1",
            "more than one active Attempt",
            _hold("read_run", "several_active_attempts", "multiple_active_attempts"),
        ),
        _row(
            "2",
            "Run gone, not runtime-owned, or status changed since the page",
            _hold("read_run", "run_gone", "run_gone"),
            _hold("read_run", "not_runtime_owned", "not_runtime_owned"),
            _hold("read_run", "status_changed", "status_changed"),
        ),
        _row(
            "3",
            "no Attempt at all and Run `dispatching`",
            _decide(
                "read_run",
                "attempt_missing_before_start",
                "lost",
                "attempt_missing_before_start",
                "lose_missing_attempt",
                "lose_missing_attempt",
            ),
        ),
        _row(
            "3b",
            "no active Attempt otherwise",
            _hold("read_run", "no_active_attempt_otherwise", "no_active_attempt"),
        ),
        _row(
            "4",
            "latest Attempt not `claimed/starting/running`",
            _hold("read_run", "latest_attempt_not_active", "latest_attempt_not_active"),
        ),
        _row(
            "4b",
            "the active Attempt's executor type is not `local_process` (checked before any "
            "receipt is read: local evidence never stands in for another executor's facts)",
            # `claimed`: as QingLong's coordinator, lost on the unstarted claim alone (§2 step
            # 5), the receipt never read; otherwise unresolved (docs/decisions.md D-18).
            _decide(
                "read_run",
                "claimed_not_local_process",
                "lost",
                "unstarted_claim",
                "lose",
                "lose_nonlocal_claim",
            ),
            _hold("read_run", "executor_not_local_process", "executor_not_local_process"),
        ),
        DecisionRow(
            "step 2.2",
            "one active Attempt, the latest: read exactly one receipt path, before any process "
            "evidence",
            "ADR-0068 §2 step 2",
            (Case("read_run", "one_active_latest_attempt", "read_receipt"),),
        ),
        _row(
            "5",
            "trusted receipt (read exactly one path)",
            _decide(
                "read_receipt", "trusted_receipt", "completed", "receipt_{terminal}", "complete"
            ),
        ),
        _row(
            "6",
            "invalid receipt",
            _decide(
                "read_receipt",
                "invalid_receipt",
                "quarantined",
                "invalid_receipt:{receipt_problem}",
                "quarantine",
            ),
            # An earlier pass quarantined it: the invalid fact stands, nothing is written again.
            _hold("read_receipt", "quarantined_earlier", "receipt_quarantined_earlier"),
        ),
        _row(
            "7",
            "no receipt, Attempt `claimed`",
            _decide(
                "read_receipt",
                "unstarted_claim",
                "lost",
                "unstarted_claim",
                "lose",
                "lose_unstarted_claim",
            ),
        ),
        _row(
            "8",
            "no handle, or pid not a positive integer (executor type: row 4b)",
            _hold("read_receipt", "handle_missing", "handle_missing"),
            _hold("read_receipt", "pid_invalid", "pid_invalid"),
        ),
        DecisionRow(
            "step 2.5",
            "no receipt, Attempt `starting/running` with a durable local-process identity: "
            "probe that exact identity",
            "ADR-0068 §2 step 5",
            (Case("read_receipt", "durable_identity_stored", "probe"),),
        ),
        _row(
            "9",
            "probe: `unknown / provider_unavailable`",
            Case("probe", "provider_unavailable", "failed", "provider_unavailable"),
        ),
        _row(
            "10",
            "probe: `unknown / invalid_handle` or `unsupported_platform`",
            _hold("probe", "identity_unknown", "{probe_reason}"),
        ),
        _row(
            "11",
            "handle pid ≠ `RunAttempts.pid`",
            _hold("probe", "handle_pid_mismatch", "handle_pid_mismatch"),
        ),
        _row(
            "12",
            "probe: `running`",
            _decide(
                "probe",
                "exact_process_running",
                "retained",
                "process_running",
                "adopt_running",
                "adopt_running",
            ),
        ),
        _row(
            "13",
            "probe: `not_running`: wait for the grace, then read the receipt again: trusted → as "
            "row 5; invalid → as row 6; still none → re-read the Run/Attempt, nothing changed, "
            "then Attempt + Run → `lost`",
            Case("probe", "trusted_not_running", "pay_grace"),
            Case("pay_grace", "grace_elapsed", "reread_receipt"),
            _decide(
                "reread_receipt",
                "trusted_receipt",
                "completed",
                "receipt_{terminal}_after_grace",
                "complete",
            ),
            _decide(
                "reread_receipt",
                "invalid_receipt",
                "quarantined",
                "invalid_receipt:{receipt_problem}",
                "quarantine",
            ),
            Case("reread_receipt", "receipt_still_missing", "recheck_run"),
            _hold("recheck_run", "changed_on_recheck", "changed_before_lost"),
            _decide(
                "recheck_run",
                "not_running_after_grace",
                "lost",
                "process_not_running:{probe_reason}",
                "lose",
                "lose_after_grace",
            ),
        ),
        DecisionRow(
            "14",
            "any exception while handling the candidate",
            "ADR-0068 row 14",
            tuple(Case(s, "error_raised", "failed", "error:{error}") for s in PRIMARY_EVIDENCE),
            on_exception=True,
        ),
    ),
)
