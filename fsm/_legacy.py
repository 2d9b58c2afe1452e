"""ADR-0448's decision table (spec 05 "Per candidate"), once, as data; and evidence selection.

Each row of :data:`LEGACY_TABLE` carries everything that is said about it anywhere: its id, the
record's words, the evidence state it is tried in, its guard (the name on the diagrams, a pure
predicate over the row's own facts, :data:`LEGACY_ROW_FACTS`), the outcome (a legacy_shadow
state, i.e. the report's counter), the legacy_shadow trigger that leads there, and the write
the pass makes (:data:`LEGACY_WRITES`). Classification, the guards of the legacy_shadow
lifecycle, the lifecycle itself (:data:`LEGACY_SPEC`), and both diagrams are built from it.

The decision machine's evidence states follow the order in which the pass reads (spec 05
"Candidates"): the Run first (row 1 needs nothing else), then its Attempts (rows 2, 2b, 3),
then the cron's RunningInstances and the selection (rows 4-11). An exception (row 12) ends the
candidate in any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Literal

from ._decision import Case, DecisionEngine, DecisionRow, DecisionTable, Need, drawn_spec
from ._errors import MachineDefinitionError
from ._tables import ATTEMPT_TERMINAL, RUN_LIFECYCLE_EDGES, RUN_TERMINAL, Edge, MachineSpec

Selection = Literal["matched", "ambiguous", "none"]
InstanceStatus = Literal["running", "succeeded", "stopped", "failed"]

_RUN_LEGAL = frozenset((e.source, e.dest) for e in RUN_LIFECYCLE_EDGES)


@dataclass(frozen=True)
class LegacyFacts:
    """Everything spec 05's table looks at for one candidate, gathered at the edge."""

    run_present: bool
    run_owner: str | None = None
    origin: str | None = None
    origin_enabled: bool = False
    run_status: str | None = None
    active_attempts: int = 0
    attempt_status: str | None = None  # the single active Attempt, when exactly one
    latest_attempt_status: str | None = None  # the latest Attempt, when none is active
    evidence_truncated: bool = False
    selection: Selection = "none"
    matched_status: InstanceStatus | None = None
    matched_finished: bool = False
    error: bool = False


# --- The rows' own facts (each predicate says only what its row says) ------------------------


def _error_raised(f: LegacyFacts) -> bool:
    return f.error  # row 12


def _not_eligible(f: LegacyFacts) -> bool:
    return (  # row 1
        not f.run_present
        or f.run_owner != "legacy"
        or not f.origin_enabled
        or f.run_status is None
        or f.run_status in RUN_TERMINAL
        or f.run_status == "lost"
    )


def _eligible_candidate(f: LegacyFacts) -> bool:
    return not _not_eligible(f)  # read its Attempts


def _unique_terminal_attempt(f: LegacyFacts) -> bool:
    # ADR-0448 §6: the Attempt committed, the Run's response was lost; heal the Run.
    latest = f.latest_attempt_status
    return (
        f.active_attempts == 0
        and latest in ATTEMPT_TERMINAL
        and (f.run_status, latest) in _RUN_LEGAL
    )  # row 2


def _no_active_attempt(f: LegacyFacts) -> bool:
    return f.active_attempts == 0  # row 2b


def _multiple_active_attempts(f: LegacyFacts) -> bool:
    return f.active_attempts > 1  # row 3


def _one_active_attempt(f: LegacyFacts) -> bool:
    return f.active_attempts == 1  # read the cron's RunningInstances


def _evidence_truncated(f: LegacyFacts) -> bool:
    return f.evidence_truncated  # row 4


def _ambiguous_selection(f: LegacyFacts) -> bool:
    return f.selection == "ambiguous"  # row 5


# A matched row WITHOUT finished_at was reset by 2.x initData or is still running: it is no
# terminal evidence (spec 02 "Legacy 2.x tables").
def _stopped_with_finished(f: LegacyFacts) -> bool:
    return f.selection == "matched" and f.matched_finished and f.matched_status == "stopped"


def _unique_finished_evidence(f: LegacyFacts) -> bool:
    return (
        f.selection == "matched"
        and f.matched_finished
        and f.matched_status in ("succeeded", "failed")
    )  # row 7


def _awaiting_system_crond(f: LegacyFacts) -> bool:
    # System crond outlives the HTTP worker and will call back with a stable id.
    return f.origin == "scheduled_system"  # row 8


def _no_spawn_evidence(f: LegacyFacts) -> bool:
    return f.run_status == "queued" and f.attempt_status == "claimed"  # row 9


def _no_terminal_evidence(f: LegacyFacts) -> bool:
    return f.run_status in ("dispatching", "running") and f.attempt_status in (
        "claimed",
        "starting",
        "running",
    )  # row 10


def _illegal_combination(f: LegacyFacts) -> bool:
    return True  # row 11: "anything else" reaching the end of the table


LegacyPredicate = Callable[[LegacyFacts], bool]

# guard name -> the row's own facts (the decision machine's conditions).
LEGACY_ROW_FACTS: Mapping[str, LegacyPredicate] = {
    "error_raised": _error_raised,
    "not_eligible": _not_eligible,
    "eligible_candidate": _eligible_candidate,
    "unique_terminal_attempt": _unique_terminal_attempt,
    "no_active_attempt": _no_active_attempt,
    "multiple_active_attempts": _multiple_active_attempts,
    "one_active_attempt": _one_active_attempt,
    "evidence_truncated": _evidence_truncated,
    "ambiguous_selection": _ambiguous_selection,
    "stopped_with_finished": _stopped_with_finished,
    "unique_finished_evidence": _unique_finished_evidence,
    "awaiting_system_crond": _awaiting_system_crond,
    "no_spawn_evidence": _no_spawn_evidence,
    "no_terminal_evidence": _no_terminal_evidence,
    "illegal_combination": _illegal_combination,
}


def _on_legacy_facts(own: LegacyPredicate) -> Callable[[object], bool]:
    def predicate(facts: object) -> bool:
        return isinstance(facts, LegacyFacts) and own(facts)

    return predicate


# --- The table -----------------------------------------------------------------------------

# Evidence states, in the order the pass reads (each named by the evidence it waits for).
LEGACY_EVIDENCE: tuple[str, ...] = ("read_run", "read_attempts", "read_evidence")

LEGACY_OUTCOMES: tuple[str, ...] = (
    "completed",
    "cancelled",
    "abandoned",
    "marked_lost",
    "repaired",
    "pending",
    "ambiguous",
    "skipped",
    "failed",
)


def _row(
    row: str,
    facts: str,
    state: str,
    guard: str,
    outcome: str,
    trigger: str,
    write: str | None = None,
) -> DecisionRow:
    case = Case(state, guard, outcome, write=write, trigger=trigger)
    return DecisionRow(row, facts, f"ADR-0448 row {row}", (case,))


def _step(row: str, facts: str, cites: str, state: str, guard: str, then: str) -> DecisionRow:
    return DecisionRow(row, facts, cites, (Case(state, guard, then),))


# spec 05 "Per candidate": first matching row wins. ``write`` names what the pass commits:
# ``repair`` one Run edge to the latest Attempt's status; ``cancel`` and ``complete`` one
# shadow-writer transaction (Attempt + Run); ``abandon`` / ``mark_lost`` the Attempt, commit,
# then the Run, commit (two transactions, ADR-0448 §6). No write for the others.
LEGACY_TABLE = DecisionTable(
    name="legacy_decision",
    evidence=LEGACY_EVIDENCE,
    decisions={outcome: outcome for outcome in LEGACY_OUTCOMES},
    rows=(
        _row(
            "1",
            "Run gone, not legacy-owned, origin not enabled, or Run already terminal/lost",
            "read_run",
            "not_eligible",
            "skipped",
            "skip",
        ),
        _step(
            "step 3",
            "an eligible legacy candidate: read its active Attempts",
            "ADR-0448 §3",
            "read_run",
            "eligible_candidate",
            "read_attempts",
        ),
        _row(
            "2",
            "no active Attempt, latest Attempt terminal, and Run → that status is legal",
            "read_attempts",
            "unique_terminal_attempt",
            "repaired",
            "repair",
            "repair",
        ),
        _row(
            "2b",
            "no active Attempt otherwise",
            "read_attempts",
            "no_active_attempt",
            "ambiguous",
            "hold",
        ),
        _row(
            "3",
            "more than one active Attempt",
            "read_attempts",
            "multiple_active_attempts",
            "ambiguous",
            "hold",
        ),
        _step(
            "step 4",
            "exactly one active Attempt: read the cron's RunningInstances and select",
            "ADR-0448 §4",
            "read_attempts",
            "one_active_attempt",
            "read_evidence",
        ),
        _row(
            "4",
            "evidence truncated (more than 8 rows for the cron)",
            "read_evidence",
            "evidence_truncated",
            "ambiguous",
            "hold",
        ),
        _row(
            "5", "selection ambiguous", "read_evidence", "ambiguous_selection", "ambiguous", "hold"
        ),
        _row(
            "6",
            "matched row has `finished_at` and status stopped",
            "read_evidence",
            "stopped_with_finished",
            "cancelled",
            "cancel",
            "cancel",
        ),
        _row(
            "7",
            "matched row has `finished_at` and status finished / error",
            "read_evidence",
            "unique_finished_evidence",
            "completed",
            "complete",
            "complete",
        ),
        _row(
            "8",
            "otherwise, origin `scheduled_system`",
            "read_evidence",
            "awaiting_system_crond",
            "pending",
            "wait",
        ),
        _row(
            "9",
            "Run `queued` and Attempt `claimed` (no spawn evidence)",
            "read_evidence",
            "no_spawn_evidence",
            "abandoned",
            "abandon",
            "abandon",
        ),
        _row(
            "10",
            "Run `dispatching/running` and Attempt `claimed/starting/running`",
            "read_evidence",
            "no_terminal_evidence",
            "marked_lost",
            "mark_lost",
            "mark_lost",
        ),
        _row(
            "11",
            "anything else (an illegal combination)",
            "read_evidence",
            "illegal_combination",
            "ambiguous",
            "hold",
        ),
        DecisionRow(
            "12",
            "exception",
            "ADR-0448 row 12",
            tuple(Case(s, "error_raised", "failed", trigger="fail") for s in LEGACY_EVIDENCE),
            on_exception=True,
        ),
    ),
)

_DECIDING = tuple(r for r in LEGACY_TABLE.rows if r.cases[0].then in LEGACY_TABLE.decisions)

# --- Views of the table (what the pass, the guards and the diagrams read) --------------------

# The name each legacy guard carries on the diagram -> the spec 05 row it stands for.
LEGACY_GUARD_ROWS: Mapping[str, str] = {r.cases[0].guard: r.row for r in _DECIDING}
# outcome -> the legacy_shadow trigger that leads there (one per outcome: checked below).
LEGACY_TRIGGERS: Mapping[str, str] = {r.cases[0].then: r.cases[0].trigger or "" for r in _DECIDING}
# outcome -> what the pass writes for it (None: nothing; spec 05 "never write anything").
LEGACY_WRITES: Mapping[str, str | None] = {r.cases[0].then: r.cases[0].write for r in _DECIDING}
# row id -> its row.
LEGACY_ROWS: Mapping[str, DecisionRow] = {r.row: r for r in LEGACY_TABLE.rows}


def _step_guard(name: str) -> Callable[[object], bool]:
    guard = _on_legacy_facts(LEGACY_ROW_FACTS[name])
    # transitions labels a condition by its callable's __name__: the diagram shows the guard.
    guard.__name__ = name
    guard.__qualname__ = name
    return guard


# The two steps of the evidence order (no row of their own): guards over their own facts.
LEGACY_STEP_GUARDS: Mapping[str, Callable[[object], bool]] = {
    c.guard: _step_guard(c.guard) for r in LEGACY_TABLE.rows if r not in _DECIDING for c in r.cases
}


def _one_per_outcome() -> None:
    # The pass and the legacy_shadow lifecycle map an outcome to ONE trigger and ONE write.
    pairs = {(c.then, c.trigger, c.write) for r in _DECIDING for c in r.cases}
    outcomes = [outcome for outcome, _, _ in pairs]
    twice = sorted({o for o in outcomes if outcomes.count(o) > 1})
    if twice:
        raise MachineDefinitionError(LEGACY_TABLE.name, f"outcomes with two triggers: {twice}")


_one_per_outcome()

# The per-candidate legacy_shadow lifecycle (spec 07): one edge per row, `candidate` -> outcome,
# guarded by "this row is the first that matches" (fsm._guards).
LEGACY_SPEC = MachineSpec(
    name="legacy_shadow",
    states=("candidate", *LEGACY_OUTCOMES),
    initial="candidate",
    terminal=frozenset(LEGACY_OUTCOMES),
    edges=tuple(
        Edge(r.cases[0].trigger or "", "candidate", r.cases[0].then, r.cases[0].guard, r.cites)
        for r in _DECIDING
    ),
)

# The ADR-0448 decision machine as drawn (spec 07): every row an edge, `row 6 [guard]`.
LEGACY_DECISION_SPEC = drawn_spec(LEGACY_TABLE)


# --- Deciding ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LegacyDecision:
    """The row that matched, the outcome it leads to, and its guard's name."""

    row: str
    outcome: str  # a legacy_shadow machine state
    guard: str

    @property
    def trigger(self) -> str:
        """The legacy_shadow trigger of this row's edge."""
        return LEGACY_TRIGGERS[self.outcome]

    @property
    def write(self) -> str | None:
        """What the pass commits for this row (None: nothing)."""
        return LEGACY_WRITES[self.outcome]


@cache
def legacy_engine() -> DecisionEngine:
    """The ADR-0448 decision machine (validated when built)."""
    predicates = {name: _on_legacy_facts(own) for name, own in LEGACY_ROW_FACTS.items()}
    return DecisionEngine(LEGACY_TABLE, predicates)


def decide_legacy(
    facts: LegacyFacts, gathered: Collection[str] = LEGACY_EVIDENCE
) -> Need | LegacyDecision:
    """The row of spec 05 that decides ``facts``, or the evidence it needs first.

    ``gathered`` names the evidence the caller has read (``read_run`` always: LegacyFacts
    always says whether the Run is there). An exception (``facts.error``) decides at once.
    """

    def observed(state: str, f: object) -> bool:
        return state == "read_run" or state in gathered

    walk = legacy_engine().walk(facts, observed, failed=facts.error)
    if walk.need is not None:
        return walk.need
    assert walk.decided is not None
    row, case = walk.decided
    return LegacyDecision(row.row, case.then, case.guard)


@lru_cache(maxsize=256)
def classify_legacy(f: LegacyFacts) -> LegacyDecision:
    """spec 05 "Per candidate": the first matching row wins (every fact gathered).

    Memoized (the facts are frozen, the answer is a function of them alone): the
    legacy_shadow guards ask it once per guarded edge tried, up to six times per candidate.
    """
    decided = decide_legacy(f)
    assert isinstance(decided, LegacyDecision)
    return decided


# --- Evidence selection (spec 05 "Evidence selection") ----------------------------------------


@dataclass(frozen=True)
class InstanceEvidence:
    """One RunningInstances row as the adapter hands it over: no raw log path, ever."""

    pid: int | None
    log_id: str | None  # opaque `legacy-log:` id
    status: InstanceStatus
    finished_at_ms: int | None
    exit_code: int | None


def select_evidence(
    attempt_pid: int | None,
    attempt_log_id: str | None,
    rows: Sequence[InstanceEvidence],
) -> tuple[Selection, InstanceEvidence | None]:
    """spec 05 "Evidence selection", exactly."""
    if attempt_pid is not None and attempt_log_id is not None:
        both = [r for r in rows if r.pid == attempt_pid and r.log_id == attempt_log_id]
        by_log = [r for r in rows if r.log_id == attempt_log_id]
        by_pid = [r for r in rows if r.pid == attempt_pid]
        if len(both) == 1:
            return "matched", both[0]
        if len(both) > 1 or len(by_log) > 1 or len(by_pid) > 1:
            return "ambiguous", None
        if by_log and by_pid and by_log[0] is not by_pid[0]:
            return "ambiguous", None
        if len(by_log) == 1:
            return "matched", by_log[0]
        if len(by_pid) == 1:
            return "matched", by_pid[0]
        return "none", None
    if attempt_pid is not None or attempt_log_id is not None:
        hits = [
            r
            for r in rows
            if (attempt_pid is not None and r.pid == attempt_pid)
            or (attempt_log_id is not None and r.log_id == attempt_log_id)
        ]
        if len(hits) == 1:
            return "matched", hits[0]
        return ("ambiguous", None) if hits else ("none", None)
    if len(rows) == 1:
        return "matched", rows[0]
    return ("ambiguous", None) if rows else ("none", None)
