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

from dataclasses import dataclass

from fsm import Case, DecisionRow, DecisionTable

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


def _hold(*, state: str, guard: str, reason: str) -> Case:
    return Case(state=state, guard=guard, then="unresolved", reason=reason)


def _row(*, row: str, facts: str, cases: tuple[Case, ...]) -> DecisionRow:
    return DecisionRow(row=row, facts=facts, cites=f"ADR-0068 row {row}", cases=cases)


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
    # spec 04 "The grace": a grace not yet whole (the pass measured too little) is not the
    # grace observed; the core asks for it again.
    ask_again={"pay_grace": ("grace_paid", False)},
    rows=(
        _row(
            row="1",
            facts="more than one active Attempt",
            cases=(
                _hold(
                    state="read_run",
                    guard="several_active_attempts",
                    reason="multiple_active_attempts",
                ),
            ),
        ),
        _row(
            row="2",
            facts="Run gone, not runtime-owned, or status changed since the page",
            cases=(
                _hold(state="read_run", guard="run_gone", reason="run_gone"),
                _hold(state="read_run", guard="not_runtime_owned", reason="not_runtime_owned"),
                _hold(state="read_run", guard="status_changed", reason="status_changed"),
            ),
        ),
        _row(
            row="3",
            facts="no Attempt at all and Run `dispatching`",
            cases=(
                Case(
                    state="read_run",
                    guard="attempt_missing_before_start",
                    then="lost",
                    reason="attempt_missing_before_start",
                    write="lose_missing_attempt",
                    trigger="lose_missing_attempt",
                ),
            ),
        ),
        _row(
            row="3b",
            facts="no active Attempt otherwise",
            cases=(
                _hold(
                    state="read_run",
                    guard="no_active_attempt_otherwise",
                    reason="no_active_attempt",
                ),
            ),
        ),
        _row(
            row="4",
            facts="latest Attempt not `claimed/starting/running`",
            cases=(
                _hold(
                    state="read_run",
                    guard="latest_attempt_not_active",
                    reason="latest_attempt_not_active",
                ),
            ),
        ),
        _row(
            row="4b",
            facts="the active Attempt's executor type is not `local_process` (checked before any "
            "receipt is read: local evidence never stands in for another executor's facts)",
            # `claimed`: as QingLong's coordinator, lost on the unstarted claim alone (§2 step
            # 5), the receipt never read; otherwise unresolved (docs/decisions.md D-18).
            cases=(
                Case(
                    state="read_run",
                    guard="claimed_not_local_process",
                    then="lost",
                    reason="unstarted_claim",
                    write="lose",
                    trigger="lose_nonlocal_claim",
                ),
                _hold(
                    state="read_run",
                    guard="executor_not_local_process",
                    reason="executor_not_local_process",
                ),
            ),
        ),
        DecisionRow(
            row="step 2.2",
            facts=(
                "one active Attempt, the latest: read exactly one receipt path, before any "
                "process evidence"
            ),
            cites="ADR-0068 §2 step 2",
            cases=(Case(state="read_run", guard="one_active_latest_attempt", then="read_receipt"),),
        ),
        _row(
            row="5",
            facts="trusted receipt (read exactly one path)",
            cases=(
                Case(
                    state="read_receipt",
                    guard="trusted_receipt",
                    then="completed",
                    reason="receipt_{terminal}",
                    write="complete",
                ),
            ),
        ),
        _row(
            row="6",
            facts="invalid receipt",
            cases=(
                Case(
                    state="read_receipt",
                    guard="invalid_receipt",
                    then="quarantined",
                    reason="invalid_receipt:{receipt_problem}",
                    write="quarantine",
                ),
                # An earlier pass quarantined it: the invalid fact stands, nothing is written again.
                _hold(
                    state="read_receipt",
                    guard="quarantined_earlier",
                    reason="receipt_quarantined_earlier",
                ),
            ),
        ),
        _row(
            row="7",
            facts="no receipt, Attempt `claimed`",
            cases=(
                Case(
                    state="read_receipt",
                    guard="unstarted_claim",
                    then="lost",
                    reason="unstarted_claim",
                    write="lose",
                    trigger="lose_unstarted_claim",
                ),
            ),
        ),
        _row(
            row="8",
            facts="no handle, or pid not a positive integer (executor type: row 4b)",
            cases=(
                _hold(state="read_receipt", guard="handle_missing", reason="handle_missing"),
                _hold(state="read_receipt", guard="pid_invalid", reason="pid_invalid"),
            ),
        ),
        DecisionRow(
            row="step 2.5",
            facts="no receipt, Attempt `starting/running` with a durable local-process identity: "
            "probe that exact identity",
            cites="ADR-0068 §2 step 5",
            cases=(Case(state="read_receipt", guard="durable_identity_stored", then="probe"),),
        ),
        _row(
            row="9",
            facts="probe: `unknown / provider_unavailable`",
            cases=(
                Case(
                    state="probe",
                    guard="provider_unavailable",
                    then="failed",
                    reason="provider_unavailable",
                ),
            ),
        ),
        _row(
            row="10",
            facts="probe: `unknown / invalid_handle` or `unsupported_platform`",
            cases=(_hold(state="probe", guard="identity_unknown", reason="{probe_reason}"),),
        ),
        _row(
            row="11",
            facts="handle pid ≠ `RunAttempts.pid`",
            cases=(
                _hold(state="probe", guard="handle_pid_mismatch", reason="handle_pid_mismatch"),
            ),
        ),
        _row(
            row="12",
            facts="probe: `running`",
            cases=(
                Case(
                    state="probe",
                    guard="exact_process_running",
                    then="retained",
                    reason="process_running",
                    write="adopt_running",
                    trigger="adopt_running",
                ),
            ),
        ),
        _row(
            row="13",
            facts=(
                "probe: `not_running`: wait for the grace, then read the receipt again: trusted → "
                "as row 5; invalid → as row 6; still none → re-read the Run/Attempt, nothing "
                "changed, then Attempt + Run → `lost`"
            ),
            cases=(
                Case(state="probe", guard="trusted_not_running", then="pay_grace"),
                Case(state="pay_grace", guard="grace_elapsed", then="reread_receipt"),
                Case(
                    state="reread_receipt",
                    guard="trusted_receipt",
                    then="completed",
                    reason="receipt_{terminal}_after_grace",
                    write="complete",
                ),
                Case(
                    state="reread_receipt",
                    guard="invalid_receipt",
                    then="quarantined",
                    reason="invalid_receipt:{receipt_problem}",
                    write="quarantine",
                ),
                Case(state="reread_receipt", guard="receipt_still_missing", then="recheck_run"),
                _hold(
                    state="recheck_run", guard="changed_on_recheck", reason="changed_before_lost"
                ),
                Case(
                    state="recheck_run",
                    guard="not_running_after_grace",
                    then="lost",
                    reason="process_not_running:{probe_reason}",
                    write="lose",
                    trigger="lose_after_grace",
                ),
            ),
        ),
        DecisionRow(
            row="14",
            facts="any exception while handling the candidate",
            cites="ADR-0068 row 14",
            cases=tuple(
                Case(state=s, guard="error_raised", then="failed", reason="error:{error}")
                for s in PRIMARY_EVIDENCE
            ),
            on_exception=True,
        ),
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PassRows:
    """The rows a pass names outside the machine's walk (spec 04 "Summary")."""

    # The exception row: a candidate no longer attempted once the database stopped taking
    # writes is counted there, with the reason naming why (docs/decisions.md "lock budget").
    exception: str
    # The rows from which the summary names the latest Attempt (row 4 on: they look at it).
    name_attempt: frozenset[str]
    # The summary's `row` for a candidate whose receipt root or shard is not a usable
    # directory: configuration, decided by no row of spec 04 (D-3c).
    receipt_root: str


PRIMARY_PASS_ROWS = PassRows(
    exception=next(r.row for r in PRIMARY_TABLE.rows if r.on_exception),
    name_attempt=frozenset({"4", "4b"}),
    receipt_root="receipt_root",
)
