"""A lifecycle machine built from its table with `transitions` core, validated when built.

A machine is given everything it decides with when it is built: its spec (states and edges),
its guards (a mapping of name -> pure predicate over the evidence) and, optionally, extra rules
(checks of the spec beyond the general ones) and listeners. Nothing global is consulted, so a
guard given to one machine never changes another.

Only ``transitions.core`` is imported: the extensions pull in asyncio and diagrams are drawn
elsewhere (``fsm/_draw.py`` makes text; ``reconciler.diagrams`` runs `dot`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from types import MappingProxyType, SimpleNamespace
from typing import Any, NamedTuple

from transitions.core import EventData, Machine, MachineError

from ._errors import GuardRefused, IllegalTransition, MachineDefinitionError
from ._observe import LISTENERS, Listener, named, remembered, reporting, told
from ._spec import Edge, MachineSpec

# A guard: a pure predicate over the evidence handed to ``plan``/``fire`` (no I/O).
Guard = Callable[[Any], bool]
# An extra rule of a family of machines: every problem it finds in a spec, as text.
Rule = Callable[[MachineSpec], Iterable[str]]

NO_GUARDS: Mapping[str, Guard] = MappingProxyType({})


def show_edge(e: Edge) -> str:
    """How an error names an edge: ``source -> dest (trigger) [guard]``."""
    guard = f" [{e.guard}]" if e.guard else ""
    return f"{e.source} -> {e.dest} ({e.trigger}){guard}"


def validate_spec(
    spec: MachineSpec, guards: Mapping[str, Guard] | None = None, rules: Sequence[Rule] = ()
) -> None:
    """The checks `transitions` does not do, for every machine: MachineDefinitionError on the
    first problem. ``guards``: the machine's guards (None: guard names are not looked up);
    ``rules``: a family's extra rules (each yields its problems as text)."""
    for problem in spec_problems(spec, guards, rules):
        raise MachineDefinitionError(spec.name, problem)


def spec_problems(
    spec: MachineSpec, guards: Mapping[str, Guard] | None = None, rules: Sequence[Rule] = ()
) -> Iterator[str]:
    """Every problem of ``spec`` as text, in the order checked (only the first is ever asked
    for): :func:`validate_spec`'s, and a decision table's once it is drawn."""
    states = set(spec.states)
    if len(states) != len(spec.states):
        yield "a state is declared twice"
    if spec.initial not in states:
        yield f"initial state {spec.initial!r} is unknown"
    if not spec.terminal <= states:
        yield f"unknown terminal states {sorted(spec.terminal - states)}"
    for e in spec.edges:
        for s in (e.source, e.dest):
            if s not in states:
                yield f"edge {show_edge(e)} names unknown state {s!r}"
        if e.source in spec.terminal:
            yield f"edge {show_edge(e)} leaves terminal {e.source!r}"
        if guards is not None and e.guard is not None and e.guard not in guards:
            yield f"edge {show_edge(e)} has unknown guard {e.guard!r}"
    # A family's own rules come before the general structure checks: its words for a problem
    # both would find (one unguarded edge per pair before "declared twice") are its own.
    for rule in rules:
        yield from rule(spec)
    keys = [(e.trigger, e.source, e.dest, e.guard) for e in spec.edges]
    if len(set(keys)) != len(keys):
        yield "an edge is declared twice"
    # One trigger, one source and one guard (or none) must lead to ONE place: otherwise
    # `transitions` silently takes whichever edge is listed first.
    dests: dict[tuple[str, str, str | None], set[str]] = {}
    for e in spec.edges:
        dests.setdefault((e.trigger, e.source, e.guard), set()).add(e.dest)
    forks = sorted(
        f"{source} --{trigger}{f' [{guard}]' if guard else ''}--> {' | '.join(sorted(ds))}"
        for (trigger, source, guard), ds in dests.items()
        if len(ds) > 1
    )
    if forks:
        yield f"ambiguous triggers: {'; '.join(forks)}"
    # A trigger shared by an unguarded and a guarded edge from one source would let the
    # unguarded one win silently: refuse the table instead.
    kinds = Counter((t, s) for t, s, unguarded in {(t, s, g is None) for t, s, g in dests})
    mixed = sorted(k for k, n in kinds.items() if n > 1)
    if mixed:
        yield f"trigger mixes guarded and unguarded {mixed}"
    reached = reachable(spec)
    unreachable = [s for s in spec.states if s not in reached]
    if unreachable:
        yield f"unreachable states {unreachable}"
    sources = {e.source for e in spec.edges}
    dead = [s for s in spec.states if s not in spec.terminal and s not in sources]
    if dead:
        yield f"non-terminal dead ends {dead}"


def reachable(spec: MachineSpec) -> set[str]:
    """The states reached from the initial one along any edge (guards not consulted)."""
    seen = {spec.initial}
    todo = deque([spec.initial])
    while todo:
        s = todo.popleft()
        for e in spec.edges:
            if e.source == s and e.dest not in seen:
                seen.add(e.dest)
                todo.append(e.dest)
    return seen


def transitions_config(
    spec: MachineSpec, guards: Mapping[str, Guard] | None = None
) -> list[dict[str, Any]]:
    """The `transitions` transition list for a spec. Without ``guards`` a guarded edge's
    condition is a placeholder named as the guard (enough for drawing, never for deciding)."""
    out: list[dict[str, Any]] = []
    for e in spec.edges:
        item: dict[str, Any] = {"trigger": e.trigger, "source": e.source, "dest": e.dest}
        if e.guard is not None:
            predicate = guards[e.guard] if guards is not None else _unknown(e.guard)
            item["conditions"] = [guard_condition(e.guard, predicate)]
        out.append(item)
    return out


def _unknown(name: str) -> Guard:
    def unknown(evidence: object) -> bool:
        raise MachineDefinitionError("<drawing>", f"guard {name!r} is drawn, not evaluated")

    return unknown


def guard_condition(
    name: str, predicate: Guard, argument: str = "evidence"
) -> Callable[[EventData], bool]:
    """A `transitions` condition named ``name``: ``predicate`` of the trigger's keyword
    ``argument`` (a lifecycle's evidence; a decision machine's facts)."""

    def condition(event: EventData) -> bool:
        return bool(predicate(event.kwargs.get(argument)))

    return named(name, condition)


def transitions_machine(
    states: Sequence[str], initial: str, transitions: list[dict[str, Any]]
) -> Machine:
    """The `transitions` machine of a validated table: no model, no automatic triggers, an
    unknown trigger an error, every callback given the event."""
    return Machine(
        model=None,
        states=list(states),
        initial=initial,
        transitions=transitions,
        auto_transitions=False,
        ignore_invalid_triggers=False,
        send_event=True,
    )


class Step(NamedTuple):
    """The effect of one edge: the commit at the edge is what makes it real."""

    machine: str
    trigger: str
    source: str
    dest: str
    guard: str | None


# Bound on the distinct (state, trigger, evidence) plans a machine keeps: a pass sees a few
# evidence shapes; unusual facts (an error text, a receipt problem) only add entries up to here.
PLAN_MEMO_MAX = 4096


class Lifecycle:
    """One validated machine: ``spec`` with its own ``guards`` (name -> pure predicate),
    checked by the general rules and by the given extra ``rules``; ``listeners`` are told
    every edge it takes and every guard it evaluates (:class:`fsm.Listener`).

    Models are attached only while an edge fires; :meth:`plan` moves none.
    """

    def __init__(
        self,
        spec: MachineSpec,
        guards: Mapping[str, Guard] = NO_GUARDS,
        *,
        rules: Sequence[Rule] = (),
        listeners: Sequence[Listener] = (),
    ) -> None:
        validate_spec(spec, guards, rules)
        self.spec = spec
        # The machine's own copy: changing the caller's mapping later changes nothing here.
        self.guards: Mapping[str, Guard] = MappingProxyType(
            {e.guard: guards[e.guard] for e in spec.edges if e.guard is not None}
        )
        self.listeners: tuple[Listener, ...] = tuple(listeners)
        self._planned: dict[tuple[str, str, object], Step] = {}
        self._edges: dict[tuple[str, str], tuple[Edge, ...]] = {}
        for e in spec.edges:
            self._edges[(e.trigger, e.source)] = (*self._edges.get((e.trigger, e.source), ()), e)
        config = transitions_config(spec, self.guards)
        # Report through the machine's own callbacks only when someone listens at build time
        # (its own listeners, or fsm.listen's): a machine nobody listens to has none.
        self._reports = bool(self.listeners or LISTENERS)
        if self._reports:
            for e, item in zip(spec.edges, config, strict=True):
                item["after"] = [told(self.listeners, self._edge_report(e))]
                if e.guard is not None:
                    guarded = item["conditions"][0]
                    item["conditions"] = [reporting(self.name, e.guard, guarded, self.listeners)]
        self._machine = transitions_machine(spec.states, spec.initial, config)

    @property
    def name(self) -> str:
        return self.spec.name

    def _edge_report(self, e: Edge) -> Callable[[Listener], None]:
        return lambda listener: listener.edge(self.name, e.source, e.trigger, e.dest, e.guard)

    def is_legal(self, source: str, dest: str) -> bool:
        """Is ``source -> dest`` an edge of this machine (any trigger, any guard)?"""
        return any(e.source == source and e.dest == dest for e in self.spec.edges)

    def edges_from(self, state: str) -> tuple[Edge, ...]:
        if state not in self.spec.states:
            raise IllegalTransition(self.name, state, "<any>")
        return tuple(e for e in self.spec.edges if e.source == state)

    def triggers_from(self, state: str) -> tuple[str, ...]:
        """The triggers that leave ``state``, in table order, each once."""
        return tuple(dict.fromkeys(e.trigger for e in self.edges_from(state)))

    def holding(self, state: str, trigger: str, evidence: object = None) -> tuple[Edge, ...]:
        """Every edge ``trigger`` could take from ``state`` on ``evidence``: the unguarded ones
        and each guarded one whose guard holds. More than one guarded edge is an overlap:
        `transitions` would take the first listed (an exploration reports it)."""
        return tuple(
            e
            for e in self._edges.get((trigger, state), ())
            if e.guard is None or self.guards[e.guard](evidence)
        )

    def lifecycle_trigger(self, source: str, dest: str) -> str:
        """The unguarded trigger for ``source -> dest``; IllegalTransition if none."""
        for e in self.spec.edges:
            if e.guard is None and e.source == source and e.dest == dest:
                return e.trigger
        raise IllegalTransition(self.name, source, f"-> {dest}")

    def plan(self, state: str, trigger: str, evidence: object = None) -> Step:
        """Decide what firing ``trigger`` from ``state`` would do, moving no real model.

        Raises IllegalTransition when no such edge leaves ``state`` and GuardRefused when its
        guard does not hold: a refusal is an explicit outcome, never a silent no-op.
        """
        # A plan is a pure function of (state, trigger, evidence) when the evidence is frozen
        # and hashable: kept, bounded, unless someone listens (a kept plan would not report).
        # A scratch model is fired through the machine's own Event (so `transitions` decides)
        # but never registered with it; a state that is not the machine's has no edges, so it
        # is refused there (IllegalTransition) like a trigger that does not leave ``state``.
        compute = partial(self._fire_on, SimpleNamespace(state=state), state, trigger, evidence)
        return remembered(
            self._planned, (state, trigger, evidence), PLAN_MEMO_MAX, self._reports, compute
        )

    def fire(self, model: Any, trigger: str, evidence: object = None) -> Step:
        """Fire on a model already attached with :meth:`attach` (after its commit)."""
        return self._fire_on(model, str(model.state), trigger, evidence)

    def attach(self, model: Any, state: str) -> None:
        if state not in self.spec.states:
            raise IllegalTransition(self.name, state, "<attach>")
        self._machine.add_model(model, initial=state)

    def detach(self, model: Any) -> None:
        self._machine.remove_model(model)

    def _fire_on(self, model: Any, state: str, trigger: str, evidence: object) -> Step:
        candidates = self._edges.get((trigger, state), ())
        if not candidates:
            raise IllegalTransition(self.name, state, trigger)
        try:
            moved = bool(self._machine.events[trigger].trigger(model, evidence=evidence))
        except MachineError as exc:
            raise IllegalTransition(self.name, state, trigger) from exc
        if not moved:
            guards = sorted({e.guard for e in candidates if e.guard is not None})
            raise GuardRefused(self.name, state, trigger, " | ".join(guards) or None)
        dest = str(model.state)
        # Several guarded edges may share a trigger and a destination (the legacy `hold`):
        # report the guard that actually held, in table order as transitions tried them.
        edge = next(
            e
            for e in candidates
            if e.dest == dest and (e.guard is None or self.guards[e.guard](evidence))
        )
        return Step(self.name, trigger, state, dest, edge.guard)
