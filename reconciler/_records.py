"""The design records' tables, transcribed by hand as data (spec 07 "The tables").

This is what the records SAY. What the code DOES is ``fsm/_tables.py``; ``qlfsm diagrams
check`` compares the rendered diagrams of the code against these tables. So that the check
compares two independent things, nothing here is imported from, generated from, or copied
programmatically out of ``fsm``: every row below was typed from the record it cites.

Sources:
- ADR-0001 (QingLong 3.0, "Run state model and transaction boundaries"), restated in spec
  01 "Run" and "Attempt (RunAttempt)", with the ADR-0380 amendment ``lost -> retry_wait``.
- ADR-0068 decision table: spec 04 "Per candidate", rows 1..14 (and the record's §2, §4).
- ADR-0448 decision table: spec 05 "Per candidate", rows 1..12 (and the record's §5, §6).

Guard names: spec 07 fixes eight (``trusted_receipt``, ``not_running_after_grace``,
``unstarted_claim``, ``stopped_with_finished``, ``unique_finished_evidence``,
``no_spawn_evidence``, ``no_terminal_evidence``, ``unique_terminal_attempt``) and allows more.
The others used below are the project's agreed vocabulary for the remaining rows (one name
per row: the row's facts in a few words); the records fix which row leads where.
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

    machine: str  # "run" | "attempt" | "legacy_shadow"
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


@dataclass(frozen=True)
class ExpectedEdge:
    """An edge the diagram of one machine must show, and the record row it comes from."""

    source: str
    dest: str
    guard: str | None
    cites: str

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

ADR_0068_TABLE: tuple[DecisionRow, ...] = (
    DecisionRow("1", "more than one active Attempt", "unresolved"),
    DecisionRow("2", "Run gone, not runtime-owned, or status changed since the page", "unresolved"),
    DecisionRow(
        "3",
        "no Attempt at all and Run `dispatching`",
        "Run → `lost` (`RECOVERY_ATTEMPT_MISSING_BEFORE_START`), one `run.lost` event → recovered",
        (EdgeRef("run", "dispatching", "lost", "attempt_missing_before_start"),),
    ),
    DecisionRow("3b", "no active Attempt otherwise", "unresolved"),
    DecisionRow("4", "latest Attempt not `claimed/starting/running`", "unresolved"),
    DecisionRow(
        "5",
        "trusted receipt (read exactly one path)",
        "Attempt + Run → terminal by the receipt mapping, two events, one transaction; "
        "then delete the receipt; then resolve the journal → recovered",
        _ROW_5_EDGES,
        note="A Run still `dispatching` (Attempt `claimed`/`starting`) walks the legal edges "
        "through `running`, each guarded `trusted_receipt`: ADR-0001 has no "
        "`dispatching -> succeeded` edge.",
    ),
    DecisionRow(
        "6",
        "invalid receipt",
        "quarantine (journal intent first, then move) → unresolved",
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
    ),
    DecisionRow(
        "8",
        "executor type not `local_process`, no handle, or pid not a positive integer",
        "unresolved",
    ),
    DecisionRow("9", "probe: `unknown / provider_unavailable`", "failed"),
    DecisionRow("10", "probe: `unknown / invalid_handle` or `unsupported_platform`", "unresolved"),
    DecisionRow("11", "handle pid ≠ `RunAttempts.pid`", "unresolved"),
    DecisionRow(
        "12",
        "probe: `running`",
        "retained: Attempt `starting → running` and/or Run `dispatching → running` "
        "if needed (evidence `durable_process_identity`) → remaining",
        (
            EdgeRef("run", "dispatching", "running", "exact_process_running"),
            EdgeRef("attempt", "starting", "running", "exact_process_running"),
        ),
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
    ),
    DecisionRow(
        "14",
        "any exception while handling the candidate",
        "failed (the transaction rolls back)",
    ),
)

# --- ADR-0448 decision table (spec 05 "Per candidate") -------------------------------------
# The legacy-shadow machine is the per-candidate lifecycle of one pass (spec 07): a candidate
# starts as `candidate` and ends in one of the nine outcomes of the ADR-0449 report.

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


def _legacy(row: str, facts: str, outcome: str, dest: str, guard: str) -> DecisionRow:
    return DecisionRow(row, facts, outcome, (EdgeRef("legacy_shadow", "candidate", dest, guard),))


ADR_0448_TABLE: tuple[DecisionRow, ...] = (
    _legacy(
        "1",
        "Run gone, not legacy-owned, origin not enabled, or Run already terminal/lost",
        "skipped",
        "skipped",
        "not_eligible",
    ),
    _legacy(
        "2",
        "no active Attempt, latest Attempt terminal, and Run → that status is legal",
        "Run → the Attempt's status (response-loss repair) → repaired",
        "repaired",
        "unique_terminal_attempt",
    ),
    _legacy("2b", "no active Attempt otherwise", "ambiguous", "ambiguous", "no_active_attempt"),
    _legacy(
        "3", "more than one active Attempt", "ambiguous", "ambiguous", "multiple_active_attempts"
    ),
    _legacy(
        "4",
        "evidence truncated (more than 8 rows for the cron)",
        "ambiguous",
        "ambiguous",
        "evidence_truncated",
    ),
    _legacy("5", "selection ambiguous", "ambiguous", "ambiguous", "ambiguous_selection"),
    _legacy(
        "6",
        "matched row has `finished_at` and status stopped",
        "Attempt + Run → `cancelled`, reason `reconcile` → cancelled",
        "cancelled",
        "stopped_with_finished",
    ),
    _legacy(
        "7",
        "matched row has `finished_at` and status finished / error",
        "Attempt + Run → `succeeded` / `failed` (exit code kept) → completed",
        "completed",
        "unique_finished_evidence",
    ),
    _legacy(
        "8",
        "otherwise, origin `scheduled_system`",
        "no write → pending (system crond will call back)",
        "pending",
        "awaiting_system_crond",
    ),
    _legacy(
        "9",
        "Run `queued` and Attempt `claimed` (no spawn evidence)",
        'Attempt → `cancelled`, then Run → `cancelled`, "acceptance abandoned" → abandoned',
        "abandoned",
        "no_spawn_evidence",
    ),
    _legacy(
        "10",
        "Run `dispatching/running` and Attempt `claimed/starting/running`",
        "Attempt → `lost`, then Run → `lost` → markedLost",
        "marked_lost",
        "no_terminal_evidence",
    ),
    _legacy(
        "11",
        "anything else (an illegal combination)",
        "ambiguous",
        "ambiguous",
        "illegal_combination",
    ),
    _legacy("12", "exception", "failed", "failed", "error_raised"),
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

RECORDS: tuple[MachineRecord, ...] = (RUN_RECORD, ATTEMPT_RECORD, LEGACY_RECORD)
RECORDS_BY_MACHINE: dict[str, MachineRecord] = {r.machine: r for r in RECORDS}
