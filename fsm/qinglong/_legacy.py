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
from dataclasses import dataclass, field

from fsm import (
    Case,
    DecisionCore,
    DecisionEngine,
    DecisionRow,
    DecisionTable,
    Edge,
    MachineDefinitionError,
    MachineSpec,
    Need,
    Taken,
    drawn_spec,
    rebuilt_on_listen,
)

from ._legacy_facts import LEGACY_EVIDENCE_FIELDS, LEGACY_ROW_FACTS, LegacyFacts, _on_legacy_facts

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
    *,
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


def _step(*, row: str, facts: str, cites: str, state: str, guard: str, then: str) -> DecisionRow:
    return DecisionRow(row, facts, cites, (Case(state, guard, then),))


# spec 05 "Per candidate": first matching row wins. ``write`` names what the pass commits:
# ``repair`` one Run edge to the latest Attempt's status; ``cancel`` and ``complete`` one
# shadow-writer transaction (Attempt + Run); ``abandon`` / ``mark_lost`` the Attempt, commit,
# then the Run, commit (two transactions, ADR-0448 §6). No write for the others.
LEGACY_TABLE = DecisionTable(
    name="legacy_decision",
    evidence=LEGACY_EVIDENCE,
    decisions={outcome: outcome for outcome in LEGACY_OUTCOMES},
    observes=LEGACY_EVIDENCE_FIELDS,
    rows=(
        _row(
            row="1",
            facts="Run gone, not legacy-owned, origin not enabled, or Run already terminal/lost",
            state="read_run",
            guard="not_eligible",
            outcome="skipped",
            trigger="skip",
        ),
        _step(
            row="step 3",
            facts="an eligible legacy candidate: read its active Attempts",
            cites="ADR-0448 §3",
            state="read_run",
            guard="eligible_candidate",
            then="read_attempts",
        ),
        _row(
            row="2",
            facts="no active Attempt, latest Attempt terminal, and Run → that status is legal",
            state="read_attempts",
            guard="unique_terminal_attempt",
            outcome="repaired",
            trigger="repair",
            write="repair",
        ),
        _row(
            row="2b",
            facts="no active Attempt otherwise",
            state="read_attempts",
            guard="no_active_attempt",
            outcome="ambiguous",
            trigger="hold",
        ),
        _row(
            row="3",
            facts="more than one active Attempt",
            state="read_attempts",
            guard="multiple_active_attempts",
            outcome="ambiguous",
            trigger="hold",
        ),
        _step(
            row="step 4",
            facts="exactly one active Attempt: read the cron's RunningInstances and select",
            cites="ADR-0448 §4",
            state="read_attempts",
            guard="one_active_attempt",
            then="read_evidence",
        ),
        _row(
            row="4",
            facts="evidence truncated (more than 8 rows for the cron)",
            state="read_evidence",
            guard="evidence_truncated",
            outcome="ambiguous",
            trigger="hold",
        ),
        _row(
            row="5",
            facts="selection ambiguous",
            state="read_evidence",
            guard="ambiguous_selection",
            outcome="ambiguous",
            trigger="hold",
        ),
        _row(
            row="6",
            facts="matched row has `finished_at` and status stopped",
            state="read_evidence",
            guard="stopped_with_finished",
            outcome="cancelled",
            trigger="cancel",
            write="cancel",
        ),
        _row(
            row="7",
            facts="matched row has `finished_at` and status finished / error",
            state="read_evidence",
            guard="unique_finished_evidence",
            outcome="completed",
            trigger="complete",
            write="complete",
        ),
        _row(
            row="8",
            facts="otherwise, origin `scheduled_system`",
            state="read_evidence",
            guard="awaiting_system_crond",
            outcome="pending",
            trigger="wait",
        ),
        _row(
            row="9",
            facts="Run `queued` and Attempt `claimed` (no spawn evidence)",
            state="read_evidence",
            guard="no_spawn_evidence",
            outcome="abandoned",
            trigger="abandon",
            write="abandon",
        ),
        _row(
            row="10",
            facts="Run `dispatching/running` and Attempt `claimed/starting/running`",
            state="read_evidence",
            guard="no_terminal_evidence",
            outcome="marked_lost",
            trigger="mark_lost",
            write="mark_lost",
        ),
        _row(
            row="11",
            facts="anything else (an illegal combination)",
            state="read_evidence",
            guard="illegal_combination",
            outcome="ambiguous",
            trigger="hold",
        ),
        DecisionRow(
            row="12",
            facts="exception",
            cites="ADR-0448 row 12",
            cases=tuple(
                Case(state=s, guard="error_raised", then="failed", trigger="fail")
                for s in LEGACY_EVIDENCE
            ),
            on_exception=True,
        ),
    ),
)


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


# --- Views of the table (what the pass, the guards and the diagrams read) --------------------


@dataclass(frozen=True, slots=True)
class LegacyViews:
    """Everything read from one ADR-0448 table: built by :func:`legacy_views`, which checks the
    table first, so a table is never used without its check."""

    table: DecisionTable
    # The name each legacy guard carries on the diagram -> the spec 05 row it stands for.
    guard_rows: Mapping[str, str]
    # outcome -> the legacy_shadow trigger that leads there (one per outcome: checked).
    triggers: Mapping[str, str]
    # outcome -> what the pass writes for it (None: nothing; spec 05 "never write anything").
    writes: Mapping[str, str | None]
    # row id -> its row.
    rows: Mapping[str, DecisionRow]
    # The guards of the steps of the evidence order (no row of their own), each over its own
    # facts and named as on the diagram.
    step_guards: Mapping[str, Callable[[object], bool]]
    # The per-candidate legacy_shadow lifecycle (spec 07): one edge per row, `candidate` ->
    # outcome, guarded by "this row is the first that matches" (fsm._guards).
    spec: MachineSpec
    # The ADR-0448 decision machine as drawn (spec 07): every row an edge, `row 6 [guard]`.
    decision_spec: MachineSpec


def legacy_views(table: DecisionTable) -> LegacyViews:
    """The views of ``table``, once it passed its check (MachineDefinitionError otherwise)."""
    check_one_trigger_per_outcome(table)
    deciding = _deciding(table)
    # Each deciding row and its first case (an outcome's trigger and write are one: checked).
    firsts = [(r, r.cases[0]) for r in deciding]
    steps = [c.guard for r in table.rows if r not in deciding for c in r.cases]
    return LegacyViews(
        table=table,
        guard_rows={c.guard: r.row for r, c in firsts},
        triggers={c.then: c.trigger or "" for _, c in firsts},
        writes={c.then: c.write for _, c in firsts},
        rows={r.row: r for r in table.rows},
        step_guards={name: _on_legacy_facts(name) for name in steps},
        spec=MachineSpec(
            name="legacy_shadow",
            states=("candidate", *table.decisions),
            initial="candidate",
            terminal=frozenset(table.decisions),
            edges=tuple(
                Edge(c.trigger or "", "candidate", c.then, c.guard, r.cites) for r, c in firsts
            ),
        ),
        decision_spec=drawn_spec(table),
    )


# Checked once, here, where the table is built.
LEGACY_VIEWS = legacy_views(LEGACY_TABLE)
LEGACY_GUARD_ROWS: Mapping[str, str] = LEGACY_VIEWS.guard_rows
LEGACY_TRIGGERS: Mapping[str, str] = LEGACY_VIEWS.triggers
LEGACY_WRITES: Mapping[str, str | None] = LEGACY_VIEWS.writes
LEGACY_ROWS: Mapping[str, DecisionRow] = LEGACY_VIEWS.rows
LEGACY_STEP_GUARDS: Mapping[str, Callable[[object], bool]] = LEGACY_VIEWS.step_guards
LEGACY_SPEC = LEGACY_VIEWS.spec
LEGACY_DECISION_SPEC = LEGACY_VIEWS.decision_spec


# --- Deciding ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegacyDecision:
    """The row that matched, the outcome it leads to, and its guard's name; with the row's
    legacy_shadow trigger and write, as the table the deciding engine was built from says."""

    row: str
    outcome: str  # a legacy_shadow machine state
    guard: str
    # The legacy_shadow trigger of this row's edge.
    trigger: str = field(default="", compare=False)
    # What the pass commits for this row (None: nothing).
    write: str | None = field(default=None, compare=False)


# One candidate's way through ADR-0448's decision machine: the one immutable decision core of
# ``fsm/_decision.py`` over LegacyFacts. It asks for one evidence state at a time (the Run, its
# Attempts, the cron's RunningInstances: spec 05 "Candidates"), takes only the fields that
# state fills (``LEGACY_TABLE.observes``), and decides from the state it is in, never walking
# again from the start; every observation is a new core.
LegacyCore = DecisionCore[LegacyFacts, LegacyDecision]


class LegacyEngine:
    """The ADR-0448 decision machine of one table's views (validated when built); the
    machine owns the one bounded memo of choices (``fsm/_decision.py``)."""

    def __init__(self, views: LegacyViews = LEGACY_VIEWS) -> None:
        predicates = {name: _on_legacy_facts(name) for name in LEGACY_ROW_FACTS}
        self.views = views
        self.machine = DecisionEngine(views.table, predicates)

    def start(self) -> LegacyCore:
        """A candidate's core before anything was read: it asks for ``read_run``."""
        return self.machine.start(LegacyFacts(run_present=False), _decision)

    def classify(self, f: LegacyFacts) -> LegacyDecision:
        """spec 05 "Per candidate": the first matching row wins (every fact gathered)."""
        decided = self.decide(f, LEGACY_EVIDENCE)
        assert isinstance(decided, LegacyDecision)
        return decided

    def decide(self, facts: LegacyFacts, gathered: Collection[str]) -> Need | LegacyDecision:
        """The row that decides ``facts`` gathered all at once, or the evidence it needs first
        (see :func:`decide_legacy`); a candidate gathered step by step is a core
        (:meth:`start`)."""

        def observed(state: str, f: object) -> bool:
            return state == "read_run" or state in gathered

        walk = self.machine.walk(facts, observed, failed=facts.error)
        if walk.need is not None:
            return walk.need
        assert walk.decided is not None
        return _decision(walk.decided)


def _decision(step: Taken, *facts_and_path: object) -> LegacyDecision:
    # The case alone decides: a core's conclude is also given the facts and the path.
    row, case = step
    return LegacyDecision(
        row.row, case.then, case.guard, trigger=case.trigger or "", write=case.write
    )


@rebuilt_on_listen
def legacy_engine() -> LegacyEngine:
    """The ADR-0448 decision engine, built once (``fsm.listen`` builds it again)."""
    return LegacyEngine()


def decide_legacy(
    facts: LegacyFacts, gathered: Collection[str] = LEGACY_EVIDENCE
) -> Need | LegacyDecision:
    """The row of spec 05 that decides ``facts``, or the evidence it needs first.

    ``gathered`` names the evidence the caller has read (``read_run`` always: LegacyFacts
    always says whether the Run is there). An exception (``facts.error``) decides at once.
    """
    return legacy_engine().decide(facts, gathered)


def classify_legacy(f: LegacyFacts) -> LegacyDecision:
    """spec 05 "Per candidate": the first matching row wins (every fact gathered)."""
    return legacy_engine().classify(f)
