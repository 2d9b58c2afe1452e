"""The ADR-0068 decision core, sans I/O (like h11's connection object): what to gather next,
or the decision (spec 04 "Per candidate").

The table is :data:`fsm.PRIMARY_TABLE` (``fsm/_primary_table.py``); the machine built from it
chooses the row (``fsm/_decision.py``). The caller gathers only what the core asks for and
feeds back only what it saw:

    core = PrimaryCore(page_status)
    while isinstance(step := core.next(), Need):
        core.observe(step.evidence, **what_the_pass_saw(step.evidence))
    # step is a PrimaryDecision: commit its write, or core.fail(describe(exc)) if that raised

``decide_primary(facts)`` is the same answer as a pure function of the facts alone.

A decision never moves the core: if its write fails, ``fail()`` still decides row 14 from the
evidence state the decision was taken in. The one grace per pass fits the loop: a candidate
whose probe said `not_running` answers ``Need("pay_grace")``; the pass sets it aside, sleeps
once for all of them, then observes ``grace_paid`` for each and goes on (spec 04 "The grace").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from functools import cache
from typing import NamedTuple

from ._decision import DecisionEngine, DecisionTable, Need, Taken, drawn_spec
from ._errors import EvidenceError, IllegalTransition, MachineDefinitionError
from ._guards import PRIMARY_GUARDS, PrimaryFacts
from ._observe import LISTENERS
from ._primary_table import PRIMARY_EVIDENCE_FIELDS, PRIMARY_TABLE
from ._tables import RECEIPT_TRIGGERS

# The ADR-0068 decision machine as drawn (spec 07): every row an edge, `row 13 [guard]`.
PRIMARY_DECISION_SPEC = drawn_spec(PRIMARY_TABLE)


def _observed(state: str, facts: object) -> bool:
    """Has the evidence ``state`` waits for been observed?"""
    assert isinstance(facts, PrimaryFacts)
    if state == "read_run":
        return facts.run_present is not None
    if state == "read_receipt":
        return facts.first_receipt is not None
    if state == "probe":
        return facts.process is not None
    if state == "pay_grace":
        return facts.grace_paid
    if state == "reread_receipt":
        return facts.second_receipt is not None
    if state == "recheck_run":
        return facts.unchanged_on_recheck is not None
    raise IllegalTransition(PRIMARY_TABLE.name, state, "observe")


def paths_to(table: DecisionTable, dest: str) -> Iterator[tuple[Taken, ...]]:
    """Every path of cases from the initial state to ``dest`` (the machine is acyclic)."""

    def walk(state: str, path: tuple[Taken, ...]) -> Iterator[tuple[Taken, ...]]:
        for row in table.rows:
            for case in row.cases:
                if case.state != state:
                    continue
                taken = (*path, Taken(row, case))
                if case.then == dest:
                    yield taken
                elif case.then in table.evidence:
                    yield from walk(case.then, taken)

    yield from walk(table.evidence[0], ())


def check_lost_needs_grace(table: DecisionTable) -> None:
    """ADR-0068 §2 step 6 / spec 04: "A not_running verdict without the grace and the second
    receipt read must never produce lost." Refuse a table in which any path does."""
    for path in paths_to(table, "lost"):
        states = [t.case.state for t in path]
        if "probe" not in states:
            continue  # rows 3 and 7: decided before any probe
        if not ({"pay_grace", "reread_receipt", "recheck_run"} <= set(states)) or (
            path[-1].case.guard != "not_running_after_grace"
        ):
            shown = " -> ".join(f"{t.case.state}[{t.case.guard}]" for t in path)
            raise MachineDefinitionError(
                table.name, f"lost after a probe without the grace and re-reads: {shown}"
            )


@cache
def primary_engine() -> DecisionEngine:
    """The ADR-0068 decision machine (validated when built)."""
    engine = DecisionEngine(PRIMARY_TABLE, PRIMARY_GUARDS)
    check_lost_needs_grace(PRIMARY_TABLE)
    return engine


class PrimaryDecision(NamedTuple):
    """What one candidate comes to (spec 04): the row, the summary outcome and reason, and
    the write with its Run/Attempt trigger. ``facts`` are the observed facts it was decided
    on: the evidence to hand to the guarded Run/Attempt edges of that write."""

    row: str  # spec 04 row id ("13")
    state: str  # decision state (completed, lost, retained, quarantined, unresolved, failed)
    outcome: str  # recovered | remaining | unresolved | failed
    reason: str
    guard: str
    write: str | None  # complete | quarantine | lose_missing_attempt | lose | adopt_running
    trigger: str | None  # the guarded Run/Attempt trigger the write fires
    terminal: str | None  # the status the write moves the Run to (None: no move)
    facts: PrimaryFacts
    path: tuple[str, ...]  # rows and steps taken, the deciding row last


def receipt_terminal(facts: PrimaryFacts) -> str:
    """spec 04 "Terminal mapping from a trusted receipt": a requested cancel wins (timeout ->
    timed_out, else cancelled); otherwise exit code 0 -> succeeded, non-zero -> failed."""
    if facts.cancel_requested is None or (
        not facts.cancel_requested and facts.receipt_exit_code is None
    ):
        raise EvidenceError(
            PRIMARY_TABLE.name,
            "read_receipt",
            "the terminal mapping needs the Run's cancel request (read_run) and the "
            "receipt's exit code (read_receipt)",
        )
    if facts.cancel_requested:
        return "timed_out" if facts.cancel_reason == "timeout" else "cancelled"
    return "succeeded" if facts.receipt_exit_code == 0 else "failed"


def _decision(taken: Taken, facts: PrimaryFacts, path: tuple[str, ...]) -> PrimaryDecision:
    row, case = taken
    trigger = case.trigger
    terminal: str | None = None
    if case.write == "complete":
        terminal = receipt_terminal(facts)
        trigger = RECEIPT_TRIGGERS[terminal]
    elif case.then == "lost":
        terminal = "lost"
    elif case.write == "adopt_running":
        terminal = "running"
    reason = case.reason
    for name, value in (
        ("terminal", terminal),
        ("receipt_problem", facts.receipt_problem),
        ("probe_reason", facts.probe_reason),
        ("error", facts.error),
    ):
        key = "{" + name + "}"
        if key in reason:
            if value is None:
                raise EvidenceError(
                    PRIMARY_TABLE.name, case.state, f"row {row.row} names {name}, never observed"
                )
            reason = reason.replace(key, value)
    return PrimaryDecision(
        row=row.row,
        state=case.then,
        outcome=PRIMARY_TABLE.decisions[case.then],
        reason=reason,
        guard=case.guard,
        write=case.write,
        trigger=trigger,
        terminal=terminal,
        facts=facts,
        path=(*path, row.row),
    )


# Decisions are pure functions of the observed facts, which carry no ids: a pass over many
# candidates of the same shape (256 dead ones) asks the machine once per shape and otherwise
# pays one dict lookup. Bounded: a pathological variety of shapes only stops the memo growing.
_MEMO_MAX = 4096
_decided: dict[PrimaryFacts, Need | PrimaryDecision] = {}
_walked: dict[tuple[str, PrimaryFacts], tuple[str, tuple[str, ...], Need | None, object]] = {}


def forget_decisions() -> None:
    """Empty both memos (``fsm.listen``: a memo hit decides without the machine)."""
    _decided.clear()
    _walked.clear()


def decide_primary(facts: PrimaryFacts) -> Need | PrimaryDecision:
    """spec 04 for one candidate, as a pure function of the facts observed so far: the next
    evidence to gather, or the decision (memoized by the facts)."""
    found = _decided.get(facts)
    if found is None:
        found = _decide_primary(facts)
        if len(_decided) < _MEMO_MAX and not LISTENERS:
            _decided[facts] = found
    return found


def _decide_primary(facts: PrimaryFacts) -> Need | PrimaryDecision:
    if facts.page_status is None:
        raise EvidenceError(
            PRIMARY_TABLE.name,
            PRIMARY_TABLE.evidence[0],
            "page_status is missing: every candidate comes with its status on the page "
            "(spec 04 row 2 compares it)",
        )
    walk = primary_engine().walk(facts, _observed, failed=facts.error is not None, view=_as_of)
    if walk.need is not None:
        return walk.need
    assert walk.decided is not None
    return _decision(walk.decided, facts, tuple(t.row.row for t in walk.taken))


def _later_fields() -> dict[str, dict[str, object]]:
    # Each later field back at its default: what it is before that evidence is observed.
    defaults = {f.name: f.default for f in dataclasses.fields(PrimaryFacts)}
    order = PRIMARY_TABLE.evidence
    return {
        state: {
            f: defaults[f]
            for later in order[i + 1 :]
            for f in sorted(PRIMARY_EVIDENCE_FIELDS.get(later, ()))
        }
        for i, state in enumerate(order)
    }


_LATER_FIELDS: dict[str, dict[str, object]] = {}


def _as_of(state: str, facts: object) -> object:
    """``facts`` as they stood when the candidate was at ``state``: what later evidence fills
    is not seen yet (spec 04: rows are tried in the evidence order, so a receipt found on the
    second read decides row 13, never row 5)."""
    assert isinstance(facts, PrimaryFacts)
    if not _LATER_FIELDS:
        _LATER_FIELDS.update(_later_fields())
    later = _LATER_FIELDS.get(state, {})
    if all(facts.__dict__.get(f) == d for f, d in later.items()):
        return facts
    return observed_facts(facts, later)


def observed_facts(facts: PrimaryFacts, fields: Mapping[str, object]) -> PrimaryFacts:
    """``facts`` with ``fields`` observed. Not dataclasses.replace, which runs __init__ over
    every field again and costs more than the decision step itself; the caller passes only
    fields the evidence fills (:data:`fsm.PRIMARY_EVIDENCE_FIELDS`)."""
    new = object.__new__(PrimaryFacts)
    new.__dict__.update(facts.__dict__)
    new.__dict__.update(fields)
    return new


class PrimaryCore:
    """One candidate's walk through the ADR-0068 decision machine (see the module docstring).

    Keeps the evidence state reached so far, so each row is tried once per candidate however
    often ``next()`` is asked; refuses evidence it did not ask for (IllegalTransition) and
    fields that evidence does not fill (EvidenceError).
    """

    __slots__ = ("_answer", "_asked", "facts", "path", "state")

    def __init__(self, page_status: str) -> None:
        self.facts = PrimaryFacts(page_status=page_status)
        self.state: str = PRIMARY_TABLE.evidence[0]
        self.path: tuple[str, ...] = ()
        self._asked: Need | None = None  # what next() asked for, until it is observed
        # The answer of next() until new facts are observed: asking again is not walking again.
        self._answer: Need | PrimaryDecision | None = None

    def next(self) -> Need | PrimaryDecision:
        """The evidence to gather next, or the decision (asking twice gives the same answer)."""
        if self._answer is not None:
            return self._answer
        key = (self.state, self.facts)
        memo = _walked.get(key)
        if memo is None:
            failed = self.facts.error is not None
            walk = primary_engine().walk(self.facts, _observed, self.state, failed)
            memo = (walk.state, tuple(t.row.row for t in walk.taken), walk.need, walk.decided)
            if len(_walked) < _MEMO_MAX and not LISTENERS:
                _walked[key] = memo
        state, rows, need, decided = memo
        self.state = state
        self.path += rows
        if need is not None:
            # Resumed in the state that asked: name the row that led there all the same.
            self._asked = self._answer = Need(need.evidence, self.path[-1] if self.path else None)
            return self._asked
        assert isinstance(decided, Taken)
        self._asked = None
        self._answer = _decision(decided, self.facts, self.path)
        return self._answer

    def observe(self, evidence: str, **fields: object) -> None:
        """Record what gathering ``evidence`` showed; only the evidence asked for, once."""
        asked = self._asked if self._asked is not None else self.next()
        if not isinstance(asked, Need) or asked.evidence != evidence:
            raise IllegalTransition(PRIMARY_TABLE.name, self.state, evidence)
        allowed = PRIMARY_EVIDENCE_FIELDS[evidence]
        if not allowed.issuperset(fields):
            unknown = sorted(set(fields) - allowed)
            raise EvidenceError(
                PRIMARY_TABLE.name,
                self.state,
                f"{evidence} does not observe {unknown}; it observes {sorted(allowed)}",
            )
        self.facts = observed_facts(self.facts, fields)
        self._asked = self._answer = None

    def fail(self, error: str) -> PrimaryDecision:
        """spec 04 row 14: an exception while handling the candidate (a gather or the write
        of a decision raised). ``error`` is its description, already free of secrets."""
        self.facts = observed_facts(self.facts, {"error": error})
        self._asked = self._answer = None
        decided = self.next()
        assert isinstance(decided, PrimaryDecision)
        return decided
