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

The engine owns the one memo: which case a state's guards choose for given facts (facts are
frozen and hashable, a choice a function of them alone), bounded by ``memo``, not filled while
anyone listens (a hit would decide without the machine's callbacks); :meth:`DecisionEngine.forget`
empties it.

Pure: no I/O, no clock. The one callback (``after``) records which case `transitions` took;
a machine built while someone listens (``fsm.listen``) also reports each case and each
guard's outcome to the listeners, through the same callbacks and conditions.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, Self, TypeVar

from transitions.core import EventData, Machine, MachineError

from ._errors import EvidenceError, GuardRefused, IllegalTransition, MachineDefinitionError
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
    if table.observes and set(table.observes) != evidence:
        raise bad(
            f"observes must name each evidence state: {sorted(set(table.observes) ^ evidence)}"
        )
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


F = TypeVar("F", bound=Hashable)  # a record's facts: frozen, hashable
D = TypeVar("D")  # a record's decision, made by its ``conclude`` from the case taken
TYPE_CHECKING = False  # the aliases below are for the type checker: no typing work at import
if TYPE_CHECKING:
    Conclude = Callable[[Taken, F, tuple[str, ...]], D]
    Evolve = Callable[[Any, Mapping[str, object]], Any]

# How many (event, state, facts) choices an engine remembers: a pass over many candidates of
# the same shape (256 dead ones) asks the machine once per shape and otherwise pays one dict
# lookup; a pathological variety of shapes only stops the memo growing.
MEMO_MAX = 4096


def _replace(facts: Any, fields: Mapping[str, object]) -> Any:
    return dataclasses.replace(facts, **fields)


class DecisionEngine:
    """The validated `transitions` machine of one decision table, and its memo of choices.

    ``evolve(facts, fields)``: the facts with ``fields`` observed (default
    ``dataclasses.replace``); ``memo``: how many choices to remember (0: none).
    """

    def __init__(
        self,
        table: DecisionTable,
        predicates: Mapping[str, Predicate],
        *,
        evolve: Evolve = _replace,
        memo: int = MEMO_MAX,
    ) -> None:
        validate_table(table, predicates)
        self.table = table
        self.evolve = evolve
        self._memo_max = memo
        # (event, state, facts) -> [the case taken, the Need it leads to (None: a decision),
        # and the last decision concluded from it: (conclude, path), decision].
        self._chosen: dict[tuple[str, str, object], list[Any]] = {}
        # (id of a core's state, evidence, the fields observed) -> (that state, the state of
        # the core that observation made): DecisionCore.observe answers an observation already
        # made on the very same state without checking, evolving and choosing again.
        self._hops: dict[tuple[int, str, tuple[tuple[str, object], ...]], tuple[Any, ...]] = {}
        # A caller's key (ADR-0068: the page status) -> the start state of its cores: every
        # core started under one key shares one facts object, so `_hops` answers their
        # identical observations.
        self.begun: dict[object, tuple[Any, ...]] = {}
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

    def forget(self) -> None:
        """Empty the memos: choices, observations and start states."""
        self._chosen.clear()
        self._hops.clear()
        self.begun.clear()

    def start(self, facts: F, conclude: Conclude[F, D]) -> DecisionCore[F, D]:
        """A core in the initial state over ``facts`` (what is known before any evidence),
        whose decisions ``conclude`` makes from the case taken, the facts and the path."""
        if not self.table.observes:
            raise MachineDefinitionError(self.table.name, "a core needs the table's observes")
        return DecisionCore(self, facts, conclude)

    def choose(self, state: str, facts: object, event: str = DECIDE) -> Taken:
        """Fire ``event`` from ``state`` on the facts: the first case whose guard holds.

        IllegalTransition when nothing may leave ``state`` (a decision state or an unknown
        one); GuardRefused when the facts satisfy no row there (the facts contradict
        themselves, or the table misses a case). Remembered by (event, state, facts).
        """
        taken: Taken = self._entry(event, state, facts)[0]
        return taken

    def _entry(self, event: str, state: str, facts: object) -> list[Any]:
        key = (event, state, facts)
        found = self._chosen.get(key)
        if found is None:
            taken = self._choose(state, facts, event)
            then = taken.case.then
            need = None if then in self.table.decisions else Need(then, taken.row.row)
            found = [taken, need, None, None]
            if len(self._chosen) < self._memo_max and not LISTENERS:
                self._chosen[key] = found
        return found

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


class DecisionCore(Generic[F, D]):
    """One candidate's way through a decision machine (see the module docstring): immutable,
    every observation a new core."""

    # One slot, one tuple: (engine, facts, conclude, state, path, taken, answer). A core is
    # made once per observation of every candidate, so it is made with one assignment.
    __slots__ = ("_s",)
    _s: tuple[DecisionEngine, F, Conclude[F, D], str, tuple[str, ...], Taken | None, Need | D]

    def __init__(self, engine: DecisionEngine, facts: F, conclude: Conclude[F, D]) -> None:
        initial = engine.table.evidence[0]
        object.__setattr__(
            self, "_s", (engine, facts, conclude, initial, (), None, Need(initial, None))
        )

    @property
    def engine(self) -> DecisionEngine:
        return self._s[0]

    @property
    def facts(self) -> F:
        return self._s[1]

    @property
    def state(self) -> str:
        """The evidence state the core is in (where a decision was taken, once decided)."""
        return self._s[3]

    @property
    def path(self) -> tuple[str, ...]:
        """The rows and steps taken, the deciding row last."""
        return self._s[4]

    @property
    def taken(self) -> Taken | None:
        """The deciding case, once decided."""
        return self._s[5]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a {type(self).__name__} is immutable: observe returns a new one")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a {type(self).__name__} is immutable")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.state!r}, path={self.path!r})"

    def next(self) -> Need | D:
        """The evidence to gather next, or the decision (asking twice gives the same answer)."""
        return self._s[6]

    def observe(self, evidence: str, **fields: object) -> Self:
        """A new core with what gathering ``evidence`` showed: only the evidence asked for,
        only the fields it fills, one step on (or this core, when the table says that value
        leaves the evidence unobserved: it is asked for again)."""
        here = self._s
        engine = here[0]
        # The same observation on the same core state (the next candidate of the same shape,
        # every one of them started on one state): its fields were checked, its facts evolved
        # and its step taken when it was first made; the new core shares that step's state.
        hop_key: tuple[int, str, tuple[tuple[str, object], ...]] | None
        hop_key = (id(here), evidence, tuple(fields.items()))
        try:
            hop = engine._hops.get(hop_key)
        except TypeError:  # a value that cannot be a memo key: observed the long way
            hop, hop_key = None, None
        if hop is not None and hop[0] is here:
            new = object.__new__(type(self))
            object.__setattr__(new, "_s", hop[1])
            return new
        _, facts, _, state, path, taken, asked = here
        if taken is not None or not isinstance(asked, Need) or asked.evidence != evidence:
            raise IllegalTransition(engine.table.name, state, evidence)
        table = engine.table
        allowed = table.observes[evidence]
        if not allowed.issuperset(fields):
            unknown = sorted(set(fields) - allowed)
            raise EvidenceError(
                table.name,
                state,
                f"{evidence} does not observe {unknown}; it observes {sorted(allowed)}",
            )
        again = table.ask_again.get(evidence)
        if again is not None and fields.get(again[0], again[1]) == again[1]:
            return self
        observed = engine.evolve(facts, fields)
        entry = engine._chosen.get((DECIDE, evidence, observed)) or engine._entry(
            DECIDE, evidence, observed
        )
        stepped = self._step(observed, entry, path)
        if hop_key is not None and len(engine._hops) < engine._memo_max and not LISTENERS:
            # The state is kept in the value, so its id stays its own while the entry lives.
            engine._hops[hop_key] = (here, stepped._s)
        return stepped

    def fail(self, error: object) -> Self:
        """spec 04 row 14 / spec 05 row 12: handling the candidate raised (a gather, or the
        write of the decision); ``error`` fills the facts' ``error``. A new core, decided by
        the exception row from the evidence state this one is in."""
        engine, facts, _, state, path, taken, _ = self._s
        facts = engine.evolve(facts, {"error": error})
        # A failed write replaces its decision: the path is the one that led to the decision.
        base = path if taken is None else path[:-1]
        return self._step(facts, engine._entry(FAIL, state, facts), base)

    def _step(self, facts: F, entry: list[Any], base: tuple[str, ...]) -> Self:
        engine, _, conclude, state, _, _, _ = self._s
        step, need, made, decided = entry
        new = object.__new__(type(self))
        path = (*base, step.row.row)
        if need is None:
            # A decision is a function of the case, the facts and the path: the one of the
            # last core that took this case on these facts by this path is this one's too.
            if made != (conclude, path):
                decided = conclude(step, facts, path)
                entry[2:] = (conclude, path), decided
            object.__setattr__(new, "_s", (engine, facts, conclude, state, path, step, decided))
        else:
            object.__setattr__(
                new, "_s", (engine, facts, conclude, need.evidence, path, None, need)
            )
        return new


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
