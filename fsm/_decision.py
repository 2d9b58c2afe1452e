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

One candidate's way through the machine is a :class:`DecisionCore`, generic over the record's
facts type and its decision type, immutable (a value: safe to compute inside a transaction
that may be retried, and to keep as it stood at any step)::

    core = engine.start(initial_facts, conclude)
    while isinstance(step := core.next(), Need):
        core = core.observe(step.evidence, **what_gathering_it_showed)
    # step is the decision (``conclude`` of the case taken); if committing it raised:
    decision = core.fail(description).next()

- ``next()`` answers the :class:`Need` (the evidence state waiting, and the row that led
  there) or the decision; asking again gives the same answer, it never walks again;
- ``observe(evidence, **fields)`` accepts only the evidence ``next()`` asks for, and only the
  fields the table declares for that evidence (:attr:`DecisionTable.observes`; EvidenceError
  otherwise). It returns a NEW core that took exactly one step: the first case of that state
  whose guard holds on the facts observed so far. Facts are only ever added, in the evidence
  order, so a guard never sees what a later step observes;
- ``fail(error)`` (spec 04 row 14, spec 05 row 12) returns a new core decided by the ``fail``
  event from the evidence state the core is in (also after a decision: a decision never moves
  the core, so a failed write is decided where it was decided);
- ``state``, ``path`` (the rows taken, the deciding row last), ``facts`` and ``taken`` (the
  deciding :class:`Taken`, or None) are read-only.

The engine owns the one cache: which case a state's guards choose for given facts (facts are
frozen and hashable, a choice a function of them alone), bounded by ``memo``, not filled while
anyone listens (a hit would decide without the machine's callbacks); :meth:`DecisionEngine.forget`
empties it.

Pure: no I/O, no clock. The one callback (``after``) records which case `transitions` took;
an engine given listeners (or built while ``fsm.listen`` has some) also reports each case and
each guard's outcome to them, through the same callbacks and conditions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, Self, TypeVar

from transitions.core import EventData, MachineError

from ._errors import EvidenceError, GuardRefused, IllegalTransition, MachineDefinitionError
from ._machine import guard_condition, spec_problems, transitions_machine
from ._observe import LISTENERS, Listener, remembered, reporting, told
from ._spec import Edge, MachineSpec

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
    # Evidence state -> the facts its observation fills (DecisionCore.observe refuses others).
    # Empty: the table is only walked (DecisionEngine.walk), never driven by a core.
    observes: Mapping[str, frozenset[str]] = MappingProxyType({})
    # Evidence state -> (field, value): an observation with that value (or without the field)
    # is no observation of that evidence yet; the core asks for it again.
    ask_again: Mapping[str, tuple[str, object]] = MappingProxyType({})


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


@dataclass(slots=True)
class _Model:
    """The scratch model `transitions` moves while it chooses (never a real record)."""

    state: str
    taken: Taken | None = None


def validate_table(table: DecisionTable, predicates: Mapping[str, Predicate]) -> None:
    """Raise MachineDefinitionError on the first problem of a decision table."""
    for problem in _problems(table, predicates):
        raise MachineDefinitionError(table.name, problem)


def _problems(table: DecisionTable, predicates: Mapping[str, Predicate]) -> Iterator[str]:
    # In the order they are checked: only the first is ever asked for.
    evidence = set(table.evidence)
    if not table.evidence or len(evidence) != len(table.evidence):
        yield "evidence states must be given, each once"
    if evidence & set(table.decisions):
        yield f"states both evidence and decision: {sorted(evidence & set(table.decisions))}"
    ids = [r.row for r in table.rows]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        yield f"row ids declared twice: {twice}"
    states = evidence | set(table.decisions)
    seen: set[tuple[str, str]] = set()
    for r in table.rows:
        if not r.cases:
            yield f"row {r.row} applies nowhere"
        for c in r.cases:
            where = f"row {r.row} in {c.state!r}"
            if c.state not in evidence:
                yield f"{where}: {c.state!r} is not an evidence state"
            if c.then not in states:
                yield f"{where}: unknown state {c.then!r}"
            if c.guard not in predicates:
                yield f"{where}: unknown guard {c.guard!r}"
            if (c.state, c.guard) in seen:
                yield f"{where}: guard {c.guard!r} is tried twice in {c.state!r}"
            seen.add((c.state, c.guard))
            if c.then in evidence and (c.reason or c.write or c.trigger):
                yield f"{where}: a step to more evidence decides nothing"
    sources = {c.state for r in table.rows if not r.on_exception for c in r.cases}
    idle = [s for s in table.evidence if s not in sources]
    if idle:
        yield f"evidence states no row decides from: {idle}"
    if table.observes and set(table.observes) != evidence:
        yield f"observes must name each evidence state: {sorted(set(table.observes) ^ evidence)}"
    # Reachable from the initial state (the general checks of the drawn machine: with the
    # table's checks above passed, unreachable states are the only problem they can find), and
    # acyclic: evidence is only ever added.
    yield from spec_problems(drawn_spec(table))
    order = {s: i for i, s in enumerate(table.evidence)}
    back = sorted(
        f"{c.state} -> {c.then}"
        for r in table.rows
        for c in r.cases
        if c.then in order and order[c.then] <= order[c.state]
    )
    if back:
        yield f"evidence must only be added, in the declared order: {back}"


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


F = TypeVar("F", bound=Hashable)  # a record's facts: frozen, hashable
D = TypeVar("D")  # a record's decision, made by its ``conclude`` from the case taken
Conclude = Callable[[Taken, F, tuple[str, ...]], D]
Evolve = Callable[[Any, Mapping[str, object]], Any]

# How many (event, state, facts) choices an engine remembers: a pass over many candidates of
# the same shape (256 dead ones) asks the machine once per shape and otherwise pays one dict
# lookup; a pathological variety of shapes only stops the cache growing.
MEMO_MAX = 4096


def _replace(facts: Any, fields: Mapping[str, object]) -> Any:
    return dataclasses.replace(facts, **fields)


class DecisionEngine:
    """The validated `transitions` machine of one decision table, and its cache of choices.

    ``predicates``: the table's guards by name (pure predicates over the facts), this engine's
    own; ``evolve(facts, fields)``: the facts with ``fields`` observed (default
    ``dataclasses.replace``); ``memo``: how many choices to remember (0: none); ``listeners``
    are told every case taken and every guard evaluated.
    """

    def __init__(
        self,
        table: DecisionTable,
        predicates: Mapping[str, Predicate],
        *,
        evolve: Evolve = _replace,
        memo: int = MEMO_MAX,
        listeners: Sequence[Listener] = (),
    ) -> None:
        validate_table(table, predicates)
        self.table = table
        self.predicates: Mapping[str, Predicate] = MappingProxyType(
            {c.guard: predicates[c.guard] for r in table.rows for c in r.cases}
        )
        self.evolve = evolve
        self.listeners: tuple[Listener, ...] = tuple(listeners)
        self._memo_max = memo
        # (event, state, facts) -> the case taken: the engine's one cache.
        self._chosen: dict[tuple[str, str, object], Taken] = {}
        self._reports = bool(self.listeners or LISTENERS)
        transitions: list[dict[str, Any]] = []
        self._guards: dict[tuple[str, str], list[str]] = {}
        for row in table.rows:
            event = FAIL if row.on_exception else DECIDE
            for case in row.cases:
                taken = Taken(row, case)
                self._guards.setdefault((event, case.state), []).append(case.guard)
                condition = guard_condition(case.guard, self.predicates[case.guard], "facts")
                after = [_record(taken)]
                if self._reports:
                    condition = reporting(table.name, case.guard, condition, self.listeners)
                    after.append(told(self.listeners, self._case_report(taken)))
                transitions.append(
                    {
                        "trigger": event,
                        "source": case.state,
                        "dest": case.then,
                        "conditions": [condition],
                        "after": after,
                    }
                )
        states = (*table.evidence, *table.decisions)
        self._events = dict(transitions_machine(states, table.evidence[0], transitions).events)

    def _case_report(self, taken: Taken) -> Callable[[Listener], None]:
        row, case = taken
        name = self.table.name
        return lambda listener: listener.case(name, row.row, case.state, case.then, case.guard)

    def forget(self) -> None:
        """Empty the cache of choices."""
        self._chosen.clear()

    def start(self, facts: F, conclude: Conclude[F, D]) -> DecisionCore[F, D]:
        """A core in the initial state over ``facts`` (what is known before any evidence),
        whose decisions ``conclude`` makes from the case taken, the facts and the path."""
        if not self.table.observes:
            raise MachineDefinitionError(self.table.name, "a core needs the table's observes")
        initial = self.table.evidence[0]
        return DecisionCore(self, facts, conclude, initial, (), None, Need(initial, None))

    def choose(self, state: str, facts: object, event: str = DECIDE) -> Taken:
        """Fire ``event`` from ``state`` on the facts: the first case whose guard holds.

        IllegalTransition when nothing may leave ``state`` (a decision state or an unknown
        one); GuardRefused when the facts satisfy no row there (the facts contradict
        themselves, or the table misses a case). Remembered by (event, state, facts).
        """
        compute = partial(self._choose, state, facts, event)
        return remembered(
            self._chosen, (event, state, facts), self._memo_max, self._reports, compute
        )

    def _choose(self, state: str, facts: object, event: str) -> Taken:
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

    def holding(self, state: str, facts: object, event: str = DECIDE) -> tuple[Taken, ...]:
        """Every case of ``state`` whose guard holds on ``facts``, in table order: the first
        is the one chosen; the others are rows the order hides on these facts."""
        return tuple(
            Taken(r, c)
            for r in self.table.rows
            if r.on_exception == (event == FAIL)
            for c in r.cases
            if c.state == state and self.predicates[c.guard](facts)
        )

    def walk(
        self, facts: object, observed: Observed, state: str | None = None, failed: bool = False
    ) -> Walk:
        """From ``state`` (default: the initial one), take rows while their evidence was
        observed; stop at the first evidence still missing or at the decision. ``failed``:
        handling the candidate raised; the exception row decides where it stands. For facts
        gathered all at once; a candidate gathered step by step is a :class:`DecisionCore`."""
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
            step = self.choose(at, facts)
            if step.case.then in self.table.decisions:
                return Walk(at, tuple(taken), None, step)
            taken.append(step)
            at = step.case.then


@dataclass(frozen=True, slots=True, repr=False)
class DecisionCore(Generic[F, D]):
    """One candidate's way through a decision machine (see the module docstring): immutable,
    every observation a new core. Made by :meth:`DecisionEngine.start`."""

    engine: DecisionEngine
    facts: F
    conclude: Conclude[F, D]
    state: str  # the evidence state it is in (where a decision was taken, once decided)
    path: tuple[str, ...]  # the rows and steps taken, the deciding row last
    taken: Taken | None  # the deciding case, once decided
    answer: Need | D  # what next() answers

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.state!r}, path={self.path!r})"

    def next(self) -> Need | D:
        """The evidence to gather next, or the decision (asking twice gives the same answer)."""
        return self.answer

    def observe(self, evidence: str, **fields: object) -> Self:
        """A new core with what gathering ``evidence`` showed: only the evidence asked for,
        only the fields it fills, one step on (or this core, when the table says that value
        leaves the evidence unobserved: it is asked for again)."""
        asked = self.answer
        table = self.engine.table
        if self.taken is not None or not isinstance(asked, Need) or asked.evidence != evidence:
            raise IllegalTransition(table.name, self.state, evidence)
        allowed = table.observes[evidence]
        if not allowed.issuperset(fields):
            unknown = sorted(set(fields) - allowed)
            raise EvidenceError(
                table.name,
                self.state,
                f"{evidence} does not observe {unknown}; it observes {sorted(allowed)}",
            )
        again = table.ask_again.get(evidence)
        if again is not None and fields.get(again[0], again[1]) == again[1]:
            return self
        observed = self.engine.evolve(self.facts, fields)
        return self._step(observed, self.engine.choose(evidence, observed), self.path)

    def fail(self, error: object) -> Self:
        """spec 04 row 14 / spec 05 row 12: handling the candidate raised (a gather, or the
        write of the decision); ``error`` fills the facts' ``error``. A new core, decided by
        the exception row from the evidence state this one is in."""
        facts = self.engine.evolve(self.facts, {"error": error})
        # A failed write replaces its decision: the path is the one that led to the decision.
        base = self.path if self.taken is None else self.path[:-1]
        return self._step(facts, self.engine.choose(self.state, facts, FAIL), base)

    def _step(self, facts: F, step: Taken, base: tuple[str, ...]) -> Self:
        path = (*base, step.row.row)
        then = step.case.then
        engine, conclude = self.engine, self.conclude
        # Built like dataclasses.replace builds it (every field by keyword, so a subclass's
        # __init__ sees what it would), without replace's walk over the fields.
        # A decision stays in the evidence state it was taken in; a step moves on and asks.
        decided = then in engine.table.decisions
        return type(self)(
            engine=engine,
            facts=facts,
            conclude=conclude,
            state=self.state if decided else then,
            path=path,
            taken=step if decided else None,
            answer=conclude(step, facts, path) if decided else Need(then, step.row.row),
        )


def _record(taken: Taken) -> Callable[[EventData], None]:
    def after(event: EventData) -> None:
        # Records the machine's own choice on the scratch model (no I/O).
        model = event.model
        assert isinstance(model, _Model)
        model.taken = taken

    return after
