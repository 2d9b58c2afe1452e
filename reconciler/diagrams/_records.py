"""The design records' tables, transcribed by hand as data (spec 07 "The tables").

This is what the records SAY. What the code DOES is ``fsm/_tables.py``; ``qlfsm diagrams
check`` compares the rendered diagrams of the code against these tables. So that the check
compares two independent things, nothing here is imported from, generated from, or copied
programmatically out of ``fsm``: every row below was typed from the record it cites.

Sources:
- ADR-0001 (QingLong 3.0, "Run state model and transaction boundaries"), restated in spec
  01 "Run" and "Attempt (RunAttempt)", with the ADR-0380 amendment ``lost -> retry_wait``.
- ADR-0068 decision table: spec 04 "Per candidate", rows 1..14 (and the record's §2, §4),
  with each row's edges on the ADR-0068 decision machine (spec 07) and the evidence steps
  of ADR-0068 §2 between the rows.
- ADR-0448 decision table: spec 05 "Per candidate", rows 1..12 (and the record's §5, §6),
  with each row's edge on the ADR-0448 decision machine over spec 05's evidence order
  ("Candidates": Run, Attempts, the cron's RunningInstances).

Guard names: spec 07 fixes eight (``trusted_receipt``, ``not_running_after_grace``,
``unstarted_claim``, ``stopped_with_finished``, ``unique_finished_evidence``,
``no_spawn_evidence``, ``no_terminal_evidence``, ``unique_terminal_attempt``) and allows more.
The others used below are the project's agreed vocabulary for the remaining rows (one name
per row, or per variant of a row the summary tells apart: the facts in a few words); the
records fix which row leads where.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- Row shapes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LifecycleRow:
    """One line of an ADR-0001 "from | allowed to" table."""

    source: str
    allowed: tuple[str, ...]
    # Destinations added after ADR-0001 by a later record, with that record's id.
    amended: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EdgeRef:
    """A state move that a decision row produces on one machine."""

    machine: str  # "run" | "attempt" | "legacy_shadow" | "primary_decision" | "legacy_decision"
    source: str
    dest: str
    guard: str


@dataclass(frozen=True)
class DecisionRow:
    """One row of a reconciler's decision table: facts, outcome, and the edges it moves."""

    row: str
    facts: str
    outcome: str
    edges: tuple[EdgeRef, ...] = ()
    # Why the row's edges are these ones, when the record alone does not make it obvious.
    note: str = ""
    # The row on its record's decision machine (spec 07): one edge per place the row decides,
    # from the evidence state it is tried in to what follows (more evidence or the decision).
    decides: tuple[EdgeRef, ...] = ()


@dataclass(frozen=True)
class EvidenceStep:
    """A step of a record's evidence order that is not a row of its table (spec 07: the
    decision machine shows "the evidence order"): where it leads, and on which facts."""

    step: str  # the record's section, e.g. "step 2.2" for ADR-0068 §2 step 2
    facts: str
    cites: str
    edge: EdgeRef


@dataclass(frozen=True)
class ExpectedEdge:
    """An edge the diagram of one machine must show, and the record row it comes from."""

    source: str
    dest: str
    guard: str | None
    cites: str
    # On a decision machine the label must also name the row (``row 13``) or step (``step 2.2``).
    label: str | None = None

    def show(self) -> str:
        guard = f" [{self.guard}]" if self.guard is not None else ""
        return f"{self.source} -> {self.dest}{guard}"


@dataclass(frozen=True)
class MachineRecord:
    """Everything the records say one machine's diagram must show."""

    machine: str
    title: str
    states: tuple[str, ...]
    initial: str
    terminal: frozenset[str]
    states_cite: str
    edges: tuple[ExpectedEdge, ...]
    # A decision machine: each edge's label must carry its row id, checked like its guard.
    labelled: bool = False


# --- ADR-0001: Run (spec 01 "Run") --------------------------------------------------------

ADR_0001_RUN_CITE = "ADR-0001 Run table"  # spec 01 §Run

RUN_STATES: tuple[str, ...] = (
    "created",
    "queued",
    "dispatching",
    "running",
    "waiting_approval",
    "retry_wait",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
    "lost",
)
# spec 01: "lost is NOT terminal: it awaits a decision (requeue, fail or cancel)".
RUN_TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "timed_out"})

ADR_0001_RUN_TABLE: tuple[LifecycleRow, ...] = (
    LifecycleRow("created", ("queued", "cancelled")),
    LifecycleRow("queued", ("dispatching", "cancelled", "timed_out")),
    LifecycleRow("dispatching", ("running", "retry_wait", "failed", "cancelled", "lost")),
    LifecycleRow(
        "running",
        ("waiting_approval", "retry_wait", "succeeded", "failed", "cancelled", "timed_out", "lost"),
    ),
    LifecycleRow("waiting_approval", ("running", "cancelled", "timed_out")),
    LifecycleRow("retry_wait", ("queued", "cancelled", "timed_out")),
    # spec 01 (*): `lost -> retry_wait` is NOT in ADR-0001's table; the QingLong 3.0
    # implementation added it for lost-run retry (ADR-0380). Marked as an amendment.
    LifecycleRow("lost", ("queued", "failed", "cancelled"), amended=(("retry_wait", "ADR-0380"),)),
    LifecycleRow("succeeded", ()),
    LifecycleRow("failed", ()),
    LifecycleRow("cancelled", ()),
    LifecycleRow("timed_out", ()),
)

# --- ADR-0001: Attempt (spec 01 "Attempt (RunAttempt)") -----------------------------------

ADR_0001_ATTEMPT_CITE = "ADR-0001 Attempt table"  # spec 01 §Attempt (RunAttempt)

ATTEMPT_STATES: tuple[str, ...] = (
    "claimed",
    "starting",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
    "lost",
)
# spec 01: "Terminal (immutable): succeeded, failed, cancelled, timed_out, lost" -- unlike a
# Run, a lost Attempt is final (a retry makes a new Attempt).
ATTEMPT_TERMINAL: frozenset[str] = frozenset(
    {"succeeded", "failed", "cancelled", "timed_out", "lost"}
)

ADR_0001_ATTEMPT_TABLE: tuple[LifecycleRow, ...] = (
    LifecycleRow("claimed", ("starting", "cancelled", "lost")),
    LifecycleRow("starting", ("running", "failed", "cancelled", "timed_out", "lost")),
    LifecycleRow("running", ("succeeded", "failed", "cancelled", "timed_out", "lost")),
)

# --- ADR-0068 decision table (spec 04 "Per candidate") -------------------------------------

ADR_0068_CITE = "ADR-0068"

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


def _p(source: str, dest: str, guard: str) -> EdgeRef:
    return EdgeRef("primary_decision", source, dest, guard)


ADR_0068_TABLE: tuple[DecisionRow, ...] = (
    DecisionRow(
        "1",
        "more than one active Attempt",
        "unresolved",
        decides=(_p("read_run", "unresolved", "several_active_attempts"),),
    ),
    DecisionRow(
        "2",
        "Run gone, not runtime-owned, or status changed since the page",
        "unresolved",
        decides=(
            _p("read_run", "unresolved", "run_gone"),
            _p("read_run", "unresolved", "not_runtime_owned"),
            _p("read_run", "unresolved", "status_changed"),
        ),
    ),
    DecisionRow(
        "3",
        "no Attempt at all and Run `dispatching`",
        "Run → `lost` (`RECOVERY_ATTEMPT_MISSING_BEFORE_START`), one `run.lost` event → recovered",
        (EdgeRef("run", "dispatching", "lost", "attempt_missing_before_start"),),
        decides=(_p("read_run", "lost", "attempt_missing_before_start"),),
    ),
    DecisionRow(
        "3b",
        "no active Attempt otherwise",
        "unresolved",
        decides=(_p("read_run", "unresolved", "no_active_attempt_otherwise"),),
    ),
    DecisionRow(
        "4",
        "latest Attempt not `claimed/starting/running`",
        "unresolved",
        decides=(_p("read_run", "unresolved", "latest_attempt_not_active"),),
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
        decides=(_p("read_receipt", "completed", "trusted_receipt"),),
    ),
    DecisionRow(
        "6",
        "invalid receipt",
        "quarantine (journal intent first, then move) → unresolved",
        note="A receipt an earlier pass quarantined (its journal row says so) stays invalid: "
        "unresolved, nothing written again (docs/decisions.md D-3a).",
        decides=(
            _p("read_receipt", "quarantined", "invalid_receipt"),
            _p("read_receipt", "unresolved", "quarantined_earlier"),
        ),
    ),
    DecisionRow(
        "7",
        "no receipt, Attempt `claimed`",
        "Attempt + Run → `lost` (`RECOVERY_UNSTARTED_CLAIM`) WITHOUT probing any process "
        "→ recovered",
        (
            EdgeRef("run", "dispatching", "lost", "unstarted_claim"),
            EdgeRef("run", "running", "lost", "unstarted_claim"),
            EdgeRef("attempt", "claimed", "lost", "unstarted_claim"),
        ),
        note="The candidate Run is `dispatching` or `running` (spec 04 §Candidates), so "
        "both Run edges exist.",
        decides=(_p("read_receipt", "lost", "unstarted_claim"),),
    ),
    DecisionRow(
        "8",
        "executor type not `local_process`, no handle, or pid not a positive integer",
        "unresolved",
        decides=(
            _p("read_receipt", "unresolved", "executor_not_local_process"),
            _p("read_receipt", "unresolved", "handle_missing"),
            _p("read_receipt", "unresolved", "pid_invalid"),
        ),
    ),
    DecisionRow(
        "9",
        "probe: `unknown / provider_unavailable`",
        "failed",
        decides=(_p("probe", "failed", "provider_unavailable"),),
    ),
    DecisionRow(
        "10",
        "probe: `unknown / invalid_handle` or `unsupported_platform`",
        "unresolved",
        decides=(_p("probe", "unresolved", "identity_unknown"),),
    ),
    DecisionRow(
        "11",
        "handle pid ≠ `RunAttempts.pid`",
        "unresolved",
        decides=(_p("probe", "unresolved", "handle_pid_mismatch"),),
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
        decides=(_p("probe", "retained", "exact_process_running"),),
    ),
    DecisionRow(
        "13",
        "probe: `not_running`",
        "one grace, then read the receipt again: trusted → as row 5; invalid → as "
        "row 6; still none → re-read Run/Attempt unchanged, then Attempt + Run → "
        "`lost` (`RECOVERY_PROCESS_NOT_RUNNING`) → recovered",
        (
            EdgeRef("run", "dispatching", "lost", "not_running_after_grace"),
            EdgeRef("run", "running", "lost", "not_running_after_grace"),
            EdgeRef("attempt", "starting", "lost", "not_running_after_grace"),
            EdgeRef("attempt", "running", "lost", "not_running_after_grace"),
        ),
        note="A receipt found on the second read takes row 5's edges (listed under row 5).",
        decides=(
            _p("probe", "pay_grace", "trusted_not_running"),
            _p("pay_grace", "reread_receipt", "grace_elapsed"),
            _p("reread_receipt", "completed", "trusted_receipt"),
            _p("reread_receipt", "quarantined", "invalid_receipt"),
            _p("reread_receipt", "recheck_run", "receipt_still_missing"),
            _p("recheck_run", "unresolved", "changed_on_recheck"),
            _p("recheck_run", "lost", "not_running_after_grace"),
        ),
    ),
    DecisionRow(
        "14",
        "any exception while handling the candidate",
        "failed (the transaction rolls back)",
        # "any exception while handling the candidate": in whichever evidence state.
        decides=tuple(_p(s, "failed", "error_raised") for s in PRIMARY_EVIDENCE_STATES),
    ),
)

# ADR-0068 §2's evidence order between the rows: the receipt is read only when rows 1-4 did
# not decide; the process is probed only when rows 5-8 did not.
ADR_0068_STEPS: tuple[EvidenceStep, ...] = (
    EvidenceStep(
        "step 2.2",
        "exactly one active Attempt, the latest: read its one receipt path",
        "ADR-0068 §2 step 2",
        _p("read_run", "read_receipt", "one_active_latest_attempt"),
    ),
    EvidenceStep(
        "step 2.5",
        "no receipt, Attempt `starting/running` with a local-process handle and pid: probe "
        "the exact durable identity",
        "ADR-0068 §2 step 5",
        _p("read_receipt", "probe", "durable_identity_stored"),
    ),
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
    row: str, facts: str, outcome: str, dest: str, guard: str, tried_in: str
) -> DecisionRow:
    return DecisionRow(
        row,
        facts,
        outcome,
        (EdgeRef("legacy_shadow", "candidate", dest, guard),),
        decides=(EdgeRef("legacy_decision", tried_in, dest, guard),),
    )


ADR_0448_TABLE: tuple[DecisionRow, ...] = (
    _legacy(
        "1",
        "Run gone, not legacy-owned, origin not enabled, or Run already terminal/lost",
        "skipped",
        "skipped",
        "not_eligible",
        "read_run",
    ),
    _legacy(
        "2",
        "no active Attempt, latest Attempt terminal, and Run → that status is legal",
        "Run → the Attempt's status (response-loss repair) → repaired",
        "repaired",
        "unique_terminal_attempt",
        "read_attempts",
    ),
    _legacy(
        "2b",
        "no active Attempt otherwise",
        "ambiguous",
        "ambiguous",
        "no_active_attempt",
        "read_attempts",
    ),
    _legacy(
        "3",
        "more than one active Attempt",
        "ambiguous",
        "ambiguous",
        "multiple_active_attempts",
        "read_attempts",
    ),
    _legacy(
        "4",
        "evidence truncated (more than 8 rows for the cron)",
        "ambiguous",
        "ambiguous",
        "evidence_truncated",
        "read_evidence",
    ),
    _legacy(
        "5",
        "selection ambiguous",
        "ambiguous",
        "ambiguous",
        "ambiguous_selection",
        "read_evidence",
    ),
    _legacy(
        "6",
        "matched row has `finished_at` and status stopped",
        "Attempt + Run → `cancelled`, reason `reconcile` → cancelled",
        "cancelled",
        "stopped_with_finished",
        "read_evidence",
    ),
    _legacy(
        "7",
        "matched row has `finished_at` and status finished / error",
        "Attempt + Run → `succeeded` / `failed` (exit code kept) → completed",
        "completed",
        "unique_finished_evidence",
        "read_evidence",
    ),
    _legacy(
        "8",
        "otherwise, origin `scheduled_system`",
        "no write → pending (system crond will call back)",
        "pending",
        "awaiting_system_crond",
        "read_evidence",
    ),
    _legacy(
        "9",
        "Run `queued` and Attempt `claimed` (no spawn evidence)",
        'Attempt → `cancelled`, then Run → `cancelled`, "acceptance abandoned" → abandoned',
        "abandoned",
        "no_spawn_evidence",
        "read_evidence",
    ),
    _legacy(
        "10",
        "Run `dispatching/running` and Attempt `claimed/starting/running`",
        "Attempt → `lost`, then Run → `lost` → markedLost",
        "marked_lost",
        "no_terminal_evidence",
        "read_evidence",
    ),
    _legacy(
        "11",
        "anything else (an illegal combination)",
        "ambiguous",
        "ambiguous",
        "illegal_combination",
        "read_evidence",
    ),
    DecisionRow(
        "12",
        "exception",
        "failed",
        (EdgeRef("legacy_shadow", "candidate", "failed", "error_raised"),),
        # An exception fails the candidate whichever evidence was being read.
        decides=tuple(
            EdgeRef("legacy_decision", s, "failed", "error_raised") for s in LEGACY_EVIDENCE_STATES
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
    ),
    EvidenceStep(
        "step 4",
        "exactly one active Attempt: read the cron's RunningInstances and select",
        "ADR-0448 §4",
        EdgeRef("legacy_decision", "read_attempts", "read_evidence", "one_active_attempt"),
    ),
)

# --- What each machine's diagram must show ------------------------------------------------


def _lifecycle_edges(table: tuple[LifecycleRow, ...], cite: str) -> list[ExpectedEdge]:
    out: list[ExpectedEdge] = []
    for line in table:
        where = f"{cite}, row {line.source}"
        out.extend(ExpectedEdge(line.source, dest, None, where) for dest in line.allowed)
        out.extend(
            ExpectedEdge(line.source, dest, None, f"{record} amendment to {where}")
            for dest, record in line.amended
        )
    return out


def _decision_edges(
    machine: str, table: tuple[DecisionRow, ...], record: str
) -> list[ExpectedEdge]:
    out: list[ExpectedEdge] = []
    seen: set[tuple[str, str, str]] = set()
    for row in table:
        for e in row.edges:
            if e.machine != machine or (e.source, e.dest, e.guard) in seen:
                continue
            seen.add((e.source, e.dest, e.guard))
            out.append(ExpectedEdge(e.source, e.dest, e.guard, f"{record} row {row.row}"))
    return out


RUN_RECORD = MachineRecord(
    machine="run",
    title="Run",
    states=RUN_STATES,
    initial="created",
    terminal=RUN_TERMINAL,
    states_cite="ADR-0001 Run states (spec 01 §Run)",
    edges=(
        *_lifecycle_edges(ADR_0001_RUN_TABLE, ADR_0001_RUN_CITE),
        *_decision_edges("run", ADR_0068_TABLE, ADR_0068_CITE),
    ),
)

ATTEMPT_RECORD = MachineRecord(
    machine="attempt",
    title="Attempt",
    states=ATTEMPT_STATES,
    initial="claimed",
    terminal=ATTEMPT_TERMINAL,
    states_cite="ADR-0001 Attempt states (spec 01 §Attempt)",
    edges=(
        *_lifecycle_edges(ADR_0001_ATTEMPT_TABLE, ADR_0001_ATTEMPT_CITE),
        *_decision_edges("attempt", ADR_0068_TABLE, ADR_0068_CITE),
    ),
)

LEGACY_RECORD = MachineRecord(
    machine="legacy_shadow",
    title="Legacy-shadow candidate",
    states=("candidate", *LEGACY_OUTCOMES),
    initial="candidate",
    terminal=frozenset(LEGACY_OUTCOMES),
    states_cite="ADR-0448 outcomes (spec 05 §Per candidate)",
    edges=tuple(_decision_edges("legacy_shadow", ADR_0448_TABLE, ADR_0448_CITE)),
)


def _row_edges(
    table: tuple[DecisionRow, ...], steps: tuple[EvidenceStep, ...], record: str
) -> tuple[ExpectedEdge, ...]:
    """A decision machine's edges: every row where it decides, every step of the evidence
    order; each labelled ``row <id>`` (or the step's section) beside its guard."""
    out = [
        ExpectedEdge(e.source, e.dest, e.guard, f"{record} row {row.row}", f"row {row.row}")
        for row in table
        for e in row.decides
    ]
    out += [ExpectedEdge(s.edge.source, s.edge.dest, s.edge.guard, s.cites, s.step) for s in steps]
    return tuple(out)


PRIMARY_DECISION_RECORD = MachineRecord(
    machine="primary_decision",
    title="ADR-0068 decision",
    states=(*PRIMARY_EVIDENCE_STATES, *PRIMARY_DECISION_OUTCOMES),
    initial="read_run",
    terminal=frozenset(PRIMARY_DECISION_OUTCOMES),
    states_cite="ADR-0068 §2 evidence order and spec 04 §Summary",
    edges=_row_edges(ADR_0068_TABLE, ADR_0068_STEPS, ADR_0068_CITE),
    labelled=True,
)

LEGACY_DECISION_RECORD = MachineRecord(
    machine="legacy_decision",
    title="ADR-0448 decision",
    states=(*LEGACY_EVIDENCE_STATES, *LEGACY_OUTCOMES),
    initial="read_run",
    terminal=frozenset(LEGACY_OUTCOMES),
    states_cite="spec 05 §Candidates evidence order and §Per candidate outcomes",
    edges=_row_edges(ADR_0448_TABLE, ADR_0448_STEPS, ADR_0448_CITE),
    labelled=True,
)

RECORDS: tuple[MachineRecord, ...] = (
    RUN_RECORD,
    ATTEMPT_RECORD,
    LEGACY_RECORD,
    PRIMARY_DECISION_RECORD,
    LEGACY_DECISION_RECORD,
)
RECORDS_BY_MACHINE: dict[str, MachineRecord] = {r.machine: r for r in RECORDS}
