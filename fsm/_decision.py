"""A reconciler's decision table as data, and the `transitions` machine that decides from it.

Both reconcilers decide the same way (spec 04 and 05: "first matching row wins"), so both tables
have the same shape and one engine serves them:

- a :class:`DecisionRow` is one row of the record's table (or one step of its evidence order);
  its :class:`Case`\\ s say, per evidence state, which named guard makes the row match there and
  what follows: the next evidence to gather (another evidence state) or the decision (a
  terminal decision state, with its reason code, write and lifecycle trigger);
- the machine's states are the evidence states (each named by the evidence it waits for) and
  the decision states; every case is one transition of the single event ``decide``, whose
  condition is the case's guard. `transitions` tries the transitions of a state in order and
  takes the first whose condition holds, which is exactly "first matching row wins";
- the walk (:meth:`DecisionEngine.walk`) fires ``decide`` from a state only once that state's
  evidence was observed; before that it answers with a :class:`Need`. The guards therefore
  only ever see facts that were observed, and the only way into a state is through a row;
- an exception while handling the candidate (spec 04 row 14, spec 05 row 12) is its own
  event, ``fail``, fired from whichever evidence state the candidate is in: the rows marked
  ``on_exception`` are its transitions, so the ordinary rows never test for it.

Pure: no I/O, no clock. The one callback (``after``) records which case `transitions` took;
a machine built while someone listens (``fsm.listen``) also reports each case and each
guard's outcome to the listeners, through the same callbacks and conditions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from transitions.core import EventData, Machine, MachineError

from ._errors import GuardRefused, IllegalTransition, MachineDefinitionError
from ._observe import LISTENERS
from ._tables import Edge, MachineSpec

Predicate = Callable[[Any], bool]

# The events of every decision machine: "decide what follows from the facts so far", and
# "handling the candidate raised".
DECIDE = "decide"
FAIL = "fail"


class Case(NamedTuple):
    """Where a row applies, the guard that makes it match there, and what follows."""

    state: str  # the evidence state the row is tried in
    guard: str  # a named pure predicate over the observed facts
    then: str  # the next evidence state to gather, or a decision state
    reason: str = ""  # reason code of a decision; ``{field}`` is filled from the facts
    write: str | None = None  # what the pass commits for this decision (None: nothing)
    trigger: str | None = None  # the Run/Attempt (or legacy_shadow) trigger of that write


class DecisionRow(NamedTuple):
    """One row of a record's decision table, or one step of its evidence order."""

    row: str  # the record's row id ("13", "3b") or an evidence step ("step 2.2")
    facts: str  # the record's words for the row
    cites: str  # record and section, e.g. "ADR-0068 row 13"
    cases: tuple[Case, ...]
    # The row of an exception (spec 04 row 14, spec 05 row 12): it answers the ``fail`` event
    # in every state it applies in, wherever the candidate was when handling it raised.
    on_exception: bool = False

    @property
    def label(self) -> str:
        """How the row is named on its diagram edge: ``row 13``, or the step id."""
        return f"row {self.row}" if self.row[:1].isdigit() else self.row


class DecisionTable(NamedTuple):
    name: str  # the machine's name (and its diagram's file name)
    evidence: tuple[str, ...]  # evidence states; the first one is the initial state
    decisions: Mapping[str, str]  # decision state -> the summary outcome it counts as
    rows: tuple[DecisionRow, ...]


class Need(NamedTuple):
    """The next piece of evidence the machine needs; ``asked_by`` is the row that led here."""

    evidence: str
    asked_by: str | None = None


class Taken(NamedTuple):
    row: DecisionRow
    case: Case


class Walk(NamedTuple):
    """Where a walk stopped: the last evidence state, the rows taken, and a need or a decision."""

    state: str
    taken: tuple[Taken, ...]
    need: Need | None
    decided: Taken | None


Observed = Callable[[str, Any], bool]


class _Model:
    __slots__ = ("state", "taken")

    def __init__(self, state: str) -> None:
        self.state = state
        self.taken: Taken | None = None


def validate_table(table: DecisionTable, predicates: Mapping[str, Predicate]) -> None:
    """Raise MachineDefinitionError on the first problem of a decision table."""

    def bad(problem: str) -> MachineDefinitionError:
        return MachineDefinitionError(table.name, problem)

    evidence = set(table.evidence)
    if not table.evidence or len(evidence) != len(table.evidence):
        raise bad("evidence states must be given, each once")
    if evidence & set(table.decisions):
        raise bad(f"states both evidence and decision: {sorted(evidence & set(table.decisions))}")
    ids = [r.row for r in table.rows]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise bad(f"row ids declared twice: {twice}")
    states = evidence | set(table.decisions)
    seen: set[tuple[str, str]] = set()
    for r in table.rows:
        if not r.cases:
            raise bad(f"row {r.row} applies nowhere")
        for c in r.cases:
            where = f"row {r.row} in {c.state!r}"
            if c.state not in evidence:
                raise bad(f"{where}: {c.state!r} is not an evidence state")
            if c.then not in states:
                raise bad(f"{where}: unknown state {c.then!r}")
            if c.guard not in predicates:
                raise bad(f"{where}: unknown guard {c.guard!r}")
            if (c.state, c.guard) in seen:
                raise bad(f"{where}: guard {c.guard!r} is tried twice in {c.state!r}")
            seen.add((c.state, c.guard))
            if c.then in evidence and (c.reason or c.write or c.trigger):
                raise bad(f"{where}: a step to more evidence decides nothing")
    sources = {c.state for r in table.rows if not r.on_exception for c in r.cases}
    idle = [s for s in table.evidence if s not in sources]
    if idle:
        raise bad(f"evidence states no row decides from: {idle}")
    # Reachable from the initial state, and acyclic: evidence is only ever added.
    nexts: dict[str, set[str]] = {}
    for r in table.rows:
        for c in r.cases:
            nexts.setdefault(c.state, set()).add(c.then)
    reached = {table.evidence[0]}
    todo = deque([table.evidence[0]])
    while todo:
        for n in nexts.get(todo.popleft(), ()):
            if n not in reached:
                reached.add(n)
                todo.append(n)
    unreachable = [s for s in (*table.evidence, *table.decisions) if s not in reached]
    if unreachable:
        raise bad(f"unreachable states {unreachable}")
    order = {s: i for i, s in enumerate(table.evidence)}
    back = sorted(
        f"{c.state} -> {c.then}"
        for r in table.rows
        for c in r.cases
        if c.then in order and order[c.then] <= order[c.state]
    )
    if back:
        raise bad(f"evidence must only be added, in the declared order: {back}")


def drawn_spec(table: DecisionTable) -> MachineSpec:
    """The machine as a :class:`MachineSpec` for the diagrams: one edge per case, named by its
    row (``row 13 [guard]``); the states, guards and order are the table's."""
    edges = tuple(
        Edge(r.label, c.state, c.then, c.guard, r.cites) for r in table.rows for c in r.cases
    )
    return MachineSpec(
        name=table.name,
        states=(*table.evidence, *table.decisions),
        initial=table.evidence[0],
        terminal=frozenset(table.decisions),
        edges=edges,
    )


class DecisionEngine:
    """The validated `transitions` machine of one decision table."""

    def __init__(self, table: DecisionTable, predicates: Mapping[str, Predicate]) -> None:
        validate_table(table, predicates)
        self.table = table
        transitions: list[dict[str, Any]] = []
        self._guards: dict[tuple[str, str], list[str]] = {}
        for row in table.rows:
            event = FAIL if row.on_exception else DECIDE
            for case in row.cases:
                taken = Taken(row, case)
                self._guards.setdefault((event, case.state), []).append(case.guard)
                condition = _condition(case.guard, predicates[case.guard])
                after = [_record(taken)]
                if LISTENERS:
                    condition = _reporting_condition(table.name, case.guard, condition)
                    after.append(_report_case(table.name, taken))
                transitions.append(
                    {
                        "trigger": event,
                        "source": case.state,
                        "dest": case.then,
                        "conditions": [condition],
                        "after": after,
                    }
                )
        machine = Machine(
            model=None,
            states=[*table.evidence, *table.decisions],
            initial=table.evidence[0],
            transitions=transitions,
            auto_transitions=False,
            ignore_invalid_triggers=False,
            send_event=True,
        )
        self._events = dict(machine.events)

    def choose(self, state: str, facts: object, event: str = DECIDE) -> Taken:
        """Fire ``event`` from ``state`` on the facts: the first case whose guard holds.

        IllegalTransition when nothing may leave ``state`` (a decision state or an unknown
        one); GuardRefused when the facts satisfy no row there (the facts contradict
        themselves, or the table misses a case).
        """
        if state not in self.table.evidence:
            # transitions itself answers an unknown state with a ValueError of its own.
            raise IllegalTransition(self.table.name, state, event)
        model = _Model(state)
        try:
            moved = bool(self._events[event].trigger(model, facts=facts))
        except (MachineError, KeyError) as exc:
            raise IllegalTransition(self.table.name, state, event) from exc
        if not moved or model.taken is None:
            guards = " | ".join(self._guards.get((event, state), ()))
            raise GuardRefused(self.table.name, state, event, guards or None)
        return model.taken

    def walk(
        self,
        facts: object,
        observed: Observed,
        state: str | None = None,
        failed: bool = False,
        view: Callable[[str, object], object] | None = None,
    ) -> Walk:
        """From ``state`` (default: the initial one), take rows while their evidence was
        observed; stop at the first evidence still missing or at the decision. ``failed``:
        handling the candidate raised; the exception row decides where it stands. ``view``:
        the facts as they stood at a state (a replay of facts gathered further on must not
        let a later observation decide an earlier row)."""
        at = self.table.evidence[0] if state is None else state
        if failed:
            return Walk(at, (), None, self.choose(at, facts, FAIL))
        taken: list[Taken] = []
        while True:
            if at in self.table.decisions:
                raise IllegalTransition(self.table.name, at, DECIDE)
            if not observed(at, facts):
                asked = taken[-1].row.row if taken else None
                return Walk(at, tuple(taken), Need(at, asked), None)
            step = self.choose(at, facts if view is None else view(at, facts))
            if step.case.then in self.table.decisions:
                return Walk(at, tuple(taken), None, step)
            taken.append(step)
            at = step.case.then


def _condition(name: str, predicate: Predicate) -> Callable[[EventData], bool]:
    def condition(event: EventData) -> bool:
        return predicate(event.kwargs.get("facts"))

    # transitions names a condition by its callable: keep the guard's name.
    condition.__name__ = name
    condition.__qualname__ = name
    return condition


def _record(taken: Taken) -> Callable[[EventData], None]:
    def after(event: EventData) -> None:
        # Records the machine's own choice on the scratch model (no I/O).
        model = event.model
        assert isinstance(model, _Model)
        model.taken = taken

    return after


def _reporting_condition(
    machine: str, name: str, condition: Callable[[EventData], bool]
) -> Callable[[EventData], bool]:
    # Built only while someone listens (fsm._observe): the guard's outcome, as tried.
    def reporting(event: EventData) -> bool:
        held = condition(event)
        for listener in LISTENERS:
            listener.guard(machine, name, held)
        return held

    reporting.__name__ = name
    reporting.__qualname__ = name
    return reporting


def _report_case(machine: str, taken: Taken) -> Callable[[EventData], None]:
    def after(event: EventData) -> None:
        for listener in LISTENERS:
            case = taken.case
            listener.case(machine, taken.row.row, case.state, case.then, case.guard)

    return after
