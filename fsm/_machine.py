"""Machines built from the tables with `transitions` core, validated when built.

Only ``transitions.core`` is imported here: the extensions pull in asyncio (~20 ms) and the
reconcile path must not pay for diagrams. Each machine is built, and validated, when first asked
for; the ADR-0448 tables (the legacy_shadow lifecycle, its guards, :data:`ALL_SPECS`' drawn
decision machines) are imported only then (PEP 562), not by the ADR-0068 pass.
"""

from __future__ import annotations

from collections import Counter, deque
from functools import cache
from typing import Any, NamedTuple

from transitions.core import EventData, Machine, MachineError

from ._errors import GuardRefused, IllegalTransition, MachineDefinitionError
from ._guards import guard_named
from ._observe import LISTENERS
from ._tables import ATTEMPT_SPEC, RUN_SPEC, Edge, MachineSpec

TYPE_CHECKING = False  # the lazy name below, for the type checker
if TYPE_CHECKING:
    ALL_SPECS: tuple[MachineSpec, ...]


def _all_specs() -> tuple[MachineSpec, ...]:
    # Every machine that is drawn and checked (spec 07): the two lifecycles, the legacy-shadow
    # per-candidate lifecycle, and the two decision machines.
    from ._legacy import LEGACY_DECISION_SPEC, LEGACY_SPEC
    from ._primary import PRIMARY_DECISION_SPEC

    return (RUN_SPEC, ATTEMPT_SPEC, LEGACY_SPEC, PRIMARY_DECISION_SPEC, LEGACY_DECISION_SPEC)


def __getattr__(name: str) -> object:
    if name != "ALL_SPECS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    specs = globals()["ALL_SPECS"] = _all_specs()  # from now on a plain attribute
    return specs


def validate_spec(spec: MachineSpec) -> None:
    """Checks `transitions` does not do: raise MachineDefinitionError on the first problem."""
    states = set(spec.states)
    if len(states) != len(spec.states):
        raise MachineDefinitionError(spec.name, "a state is declared twice")
    if spec.initial not in states:
        raise MachineDefinitionError(spec.name, f"initial state {spec.initial!r} is unknown")
    if not spec.terminal <= states:
        unknown = sorted(spec.terminal - states)
        raise MachineDefinitionError(spec.name, f"unknown terminal states {unknown}")
    for e in spec.edges:
        for s in (e.source, e.dest):
            if s not in states:
                raise MachineDefinitionError(
                    spec.name, f"edge {_show(e)} names unknown state {s!r}"
                )
        if e.source in spec.terminal:
            raise MachineDefinitionError(spec.name, f"edge {_show(e)} leaves terminal {e.source!r}")
        if e.guard is not None and guard_named(e.guard) is None:
            raise MachineDefinitionError(
                spec.name, f"edge {_show(e)} has unknown guard {e.guard!r}"
            )
    unguarded = Counter((e.source, e.dest) for e in spec.edges if e.guard is None)
    twice = sorted(pair for pair, n in unguarded.items() if n > 1)
    if twice:
        raise MachineDefinitionError(spec.name, f"duplicate unguarded edges {twice}")
    same = Counter((e.trigger, e.source, e.dest, e.guard) for e in spec.edges)
    if any(n > 1 for n in same.values()):
        raise MachineDefinitionError(spec.name, "an edge is declared twice")
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
        raise MachineDefinitionError(spec.name, f"ambiguous triggers: {'; '.join(forks)}")
    # A trigger shared by an unguarded and a guarded edge from one source would let the
    # unguarded one win silently: refuse the table instead.
    by_trigger_source: dict[tuple[str, str], set[bool]] = {}
    for e in spec.edges:
        by_trigger_source.setdefault((e.trigger, e.source), set()).add(e.guard is None)
    mixed = sorted(k for k, kinds in by_trigger_source.items() if len(kinds) > 1)
    if mixed:
        raise MachineDefinitionError(spec.name, f"trigger mixes guarded and unguarded {mixed}")
    lifecycle = {(e.source, e.dest) for e in spec.edges if e.guard is None}
    if lifecycle:
        # Reconciler edges are decisions ALONG the lifecycle, never new lifecycle edges.
        for e in spec.edges:
            if e.guard is not None and (e.source, e.dest) not in lifecycle:
                raise MachineDefinitionError(
                    spec.name, f"guarded edge {_show(e)} is not a legal lifecycle pair"
                )
    reached = _reachable(spec)
    unreachable = [s for s in spec.states if s not in reached]
    if unreachable:
        raise MachineDefinitionError(spec.name, f"unreachable states {unreachable}")
    sources = {e.source for e in spec.edges}
    dead = [s for s in spec.states if s not in spec.terminal and s not in sources]
    if dead:
        raise MachineDefinitionError(spec.name, f"non-terminal dead ends {dead}")


def _reachable(spec: MachineSpec) -> set[str]:
    seen = {spec.initial}
    todo = deque([spec.initial])
    while todo:
        s = todo.popleft()
        for e in spec.edges:
            if e.source == s and e.dest not in seen:
                seen.add(e.dest)
                todo.append(e.dest)
    return seen


def _show(e: Edge) -> str:
    guard = f" [{e.guard}]" if e.guard else ""
    return f"{e.source} -> {e.dest} ({e.trigger}){guard}"


def transitions_config(spec: MachineSpec) -> list[dict[str, Any]]:
    """The `transitions` transition list for a spec (also used by the diagram renderer)."""
    out: list[dict[str, Any]] = []
    for e in spec.edges:
        item: dict[str, Any] = {"trigger": e.trigger, "source": e.source, "dest": e.dest}
        if e.guard is not None:
            item["conditions"] = [_condition(e.guard)]
        out.append(item)
    return out


def _condition(guard: str) -> Any:
    predicate = guard_named(guard)
    assert predicate is not None  # validate_spec refused the spec otherwise

    def condition(event: EventData) -> bool:
        return predicate(event.kwargs.get("evidence"))

    # transitions labels a condition with the callable's name: keep the guard's.
    condition.__name__ = guard
    condition.__qualname__ = guard
    return condition


def _reporting(spec: MachineSpec, config: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``config`` with an ``after`` callback per edge and each guard's condition reporting
    its outcome to the listeners (fsm._observe). Built only while someone listens."""
    out: list[dict[str, Any]] = []
    for e, item in zip(spec.edges, config, strict=True):
        item = dict(item)
        item["after"] = [_report_edge(spec.name, e)]
        if e.guard is not None:
            item["conditions"] = [_reporting_condition(spec.name, e.guard, item["conditions"][0])]
        out.append(item)
    return out


def _report_edge(machine: str, e: Edge) -> Any:
    def after(event: EventData) -> None:
        for listener in LISTENERS:
            listener.edge(machine, e.source, e.trigger, e.dest, e.guard)

    return after


def _reporting_condition(machine: str, guard: str, condition: Any) -> Any:
    def reporting(event: EventData) -> bool:
        held = bool(condition(event))
        for listener in LISTENERS:
            listener.guard(machine, guard, held)
        return held

    reporting.__name__ = guard
    reporting.__qualname__ = guard
    return reporting


class Step(NamedTuple):
    """The effect of one edge: the commit at the edge is what makes it real. A named tuple
    (immutable, compared and hashed by value), not a dataclass: the ADR-0068 pass imports it
    before its first candidate and a dataclass's generated methods are compiled at import."""

    machine: str
    trigger: str
    source: str
    dest: str
    guard: str | None


# Bound on the distinct (state, trigger, evidence) plans kept per machine: a pass sees a few
# evidence shapes; unusual facts (an error text, a receipt problem) only add entries up to here.
_PLAN_MEMO_MAX = 4096


class _Scratch:
    state: str


class Lifecycle:
    """One validated machine of one kind; models are attached only while an edge fires."""

    def __init__(self, spec: MachineSpec) -> None:
        validate_spec(spec)
        self.spec = spec
        self._planned: dict[tuple[str, str, object], Step] = {}
        self._edges: dict[tuple[str, str], tuple[Edge, ...]] = {}
        for e in spec.edges:
            self._edges[(e.trigger, e.source)] = (*self._edges.get((e.trigger, e.source), ()), e)
        config = transitions_config(spec)
        if LISTENERS:
            # Someone listens (fsm.listen): report through the machine's own callbacks.
            config = _reporting(spec, config)
        self._machine = Machine(
            model=None,
            states=list(spec.states),
            initial=spec.initial,
            transitions=config,
            auto_transitions=False,
            ignore_invalid_triggers=False,
            send_event=True,
        )

    @property
    def name(self) -> str:
        return self.spec.name

    def is_legal(self, source: str, dest: str) -> bool:
        """Is ``source -> dest`` an edge of this machine (any trigger, any guard)?"""
        return any(e.source == source and e.dest == dest for e in self.spec.edges)

    def edges_from(self, state: str) -> tuple[Edge, ...]:
        if state not in self.spec.states:
            raise IllegalTransition(self.name, state, "<any>")
        return tuple(e for e in self.spec.edges if e.source == state)

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
        # A plan is a pure function of (state, trigger, evidence): the guards read only the
        # evidence, which is a frozen, hashable facts object (no ids in it). So each distinct
        # edge is decided through `transitions` once per process and then looked up: the
        # ADR-0068 pass plans the same two edges for every dead candidate. Refusals are not
        # kept (each raises anew); unhashable evidence is simply planned every time.
        try:
            key: tuple[str, str, object] | None = (state, trigger, evidence)
            found = self._planned.get(key)  # type: ignore[arg-type]
        except TypeError:
            key, found = None, None
        if found is not None:
            return found
        if state not in self.spec.states:
            raise IllegalTransition(self.name, state, trigger)
        # The scratch model is fired through the machine's own Event (so `transitions` still
        # decides) but never registered with it: add_model/remove_model bind every trigger
        # and cost more than the decision itself, twice per edge on the reconcile path.
        scratch = _Scratch()
        scratch.state = state
        step = self._fire_on(scratch, state, trigger, evidence)
        if key is not None and len(self._planned) < _PLAN_MEMO_MAX and not LISTENERS:
            self._planned[key] = step
        return step

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
            if e.dest == dest and (e.guard is None or _holds(e.guard, evidence))
        )
        return Step(self.name, trigger, state, dest, edge.guard)


def _holds(guard: str, evidence: object) -> bool:
    predicate = guard_named(guard)
    assert predicate is not None  # validate_spec refused the spec otherwise
    return predicate(evidence)


@cache
def run_machine() -> Lifecycle:
    return Lifecycle(RUN_SPEC)


@cache
def attempt_machine() -> Lifecycle:
    return Lifecycle(ATTEMPT_SPEC)


@cache
def legacy_machine() -> Lifecycle:
    from ._legacy import LEGACY_SPEC

    return Lifecycle(LEGACY_SPEC)


def validate_all() -> None:
    for spec in _all_specs():
        validate_spec(spec)
