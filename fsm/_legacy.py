"""ADR-0448's decision table (spec 05 "Per candidate"), once, as data.

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

The facts and the rows' own predicates are in ``_legacy_facts.py``; evidence selection (spec 05
"Evidence selection") in ``_selection.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import cache

from ._decision import Case, DecisionEngine, DecisionRow, DecisionTable, Need, drawn_spec
from ._errors import MachineDefinitionError
from ._legacy_facts import LEGACY_ROW_FACTS, LegacyFacts, _on_legacy_facts
from ._observe import LISTENERS
from ._tables import Edge, MachineSpec

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


def build_legacy_table() -> DecisionTable:
    """ADR-0448's table, built afresh and checked (one trigger and one write per outcome).

    Called once at import (:data:`LEGACY_TABLE`), and again by the tests that compare each
    field with spec 05: code that runs only at import cannot be seen failing by mutation
    testing (the mutant is switched on after the import), a call inside a test can.
    """
    # spec 05 "Per candidate": first matching row wins. ``write`` names what the pass commits:
    # ``repair`` one Run edge to the latest Attempt's status; ``cancel`` and ``complete`` one
    # shadow-writer transaction (Attempt + Run); ``abandon`` / ``mark_lost`` the Attempt, commit,
    # then the Run, commit (two transactions, ADR-0448 §6). No write for the others.
    table = DecisionTable(
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
                "5",
                "selection ambiguous",
                "read_evidence",
                "ambiguous_selection",
                "ambiguous",
                "hold",
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
    check_one_trigger_per_outcome(table)
    return table


def _deciding(table: DecisionTable) -> tuple[DecisionRow, ...]:
    # The rows that decide (an outcome), as opposed to the two steps of the evidence order.
    return tuple(r for r in table.rows if r.cases[0].then in table.decisions)


def check_one_trigger_per_outcome(table: DecisionTable) -> None:
    """The pass and the legacy_shadow lifecycle map an outcome to ONE trigger and ONE write:
    MachineDefinitionError naming the outcomes that have two."""
    pairs = {(c.then, c.trigger, c.write) for r in _deciding(table) for c in r.cases}
    outcomes = [outcome for outcome, _, _ in pairs]
    twice = sorted({o for o in outcomes if outcomes.count(o) > 1})
    if twice:
        raise MachineDefinitionError(table.name, f"outcomes with two triggers: {twice}")


LEGACY_TABLE = build_legacy_table()

_DECIDING = _deciding(LEGACY_TABLE)

# --- Views of the table (what the pass, the guards and the diagrams read) --------------------

# The name each legacy guard carries on the diagram -> the spec 05 row it stands for.
LEGACY_GUARD_ROWS: Mapping[str, str] = {r.cases[0].guard: r.row for r in _DECIDING}
# outcome -> the legacy_shadow trigger that leads there (one per outcome: checked when built).
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


def build_legacy_step_guards(table: DecisionTable) -> Mapping[str, Callable[[object], bool]]:
    """The guards of the two steps of the evidence order (no row of their own), each over its
    own facts and named as on the diagram. Built at import; the tests build them again."""
    steps = [r for r in table.rows if r not in _deciding(table)]
    return {c.guard: _step_guard(c.guard) for r in steps for c in r.cases}


LEGACY_STEP_GUARDS: Mapping[str, Callable[[object], bool]] = build_legacy_step_guards(LEGACY_TABLE)


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


_CLASSIFIED_MAX = 256
_classified: dict[LegacyFacts, LegacyDecision] = {}


def forget_classifications() -> None:
    """Empty the memo of :func:`classify_legacy` (``fsm.listen``)."""
    _classified.clear()


def classify_legacy(f: LegacyFacts) -> LegacyDecision:
    """spec 05 "Per candidate": the first matching row wins (every fact gathered).

    Memoized (the facts are frozen, the answer is a function of them alone): the
    legacy_shadow guards ask it once per guarded edge tried, up to six times per candidate.
    Not while someone listens (``fsm.listen``): a memo hit would decide without the machine.
    """
    found = _classified.get(f)
    if found is None:
        decided = decide_legacy(f)
        assert isinstance(decided, LegacyDecision)
        found = decided
        if len(_classified) < _CLASSIFIED_MAX and not LISTENERS:
            _classified[f] = found
    return found
