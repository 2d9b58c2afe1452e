"""Exploration with coverage, for any machine built with the toolkit (``pip install
qlfsm[testing]``: needs `hypothesis`).

:func:`explore` walks a :class:`fsm.Lifecycle` from its initial state, firing only triggers its
current state allows, with evidence drawn from the caller's strategy, and returns a
:class:`Coverage`: the edges taken, each guard seen true and false, what was never taken, and
every pair of guards on one state and trigger that held together (an overlap: `transitions`
would silently take the edge listed first). :func:`explore_table` does the same for a
:class:`fsm.DecisionEngine`: the rows taken and the rows never taken.

:class:`Recording` is a :class:`fsm.Listener` that counts what machines report;
:func:`coverage_doc`, :func:`blind_spots` and :func:`summary_markdown` lay a recording over a
set of machines (QingLong's orderings suite records through them, docs/orderings.md).

Pure: no I/O; where a recording is kept (a file, a report) is the caller's business.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from itertools import combinations
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from ._decision import DecisionEngine, DecisionTable
from ._errors import GuardRefused
from ._machine import Lifecycle
from ._observe import listen
from ._spec import MachineSpec

# Evidence for an exploration: one strategy, or one per state the machine is in.
Facts = st.SearchStrategy[Any] | Callable[[str], st.SearchStrategy[Any]]


def edge_what(source: str, trigger: str, dest: str, guard: str | None) -> str:
    shown = f" [{guard}]" if guard else ""
    return f"edge {source} --{trigger}{shown}--> {dest}"


def case_what(row: str, state: str, then: str) -> str:
    return f"case row {row}: {state} -> {then}"


def guard_what(name: str, held: bool) -> str:
    return f"guard {name} {'true' if held else 'false'}"


@dataclass(frozen=True, slots=True)
class Coverage:
    """What one exploration took. ``edges``: each edge (a lifecycle) or case (a decision
    table) as ``edge_what``/``case_what`` text -> times taken; ``guards``: name -> (times
    true, times false); ``never``: every edge, case and guard outcome never seen, one line
    each; ``overlaps``: each pair of guards found holding together, one line each."""

    machine: str
    edges: Mapping[str, int]
    guards: Mapping[str, tuple[int, int]]
    never: tuple[str, ...]
    overlaps: tuple[str, ...]


def _run(body: Callable[[st.DataObject], None], examples: int, chosen: int | None) -> None:
    runner = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=chosen is None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )(given(st.data())(body))
    if chosen is not None:
        runner = seed(chosen)(runner)
    runner()


def explore(
    machine: Lifecycle,
    facts: Facts,
    *,
    examples: int = 200,
    steps: int = 20,
    seed: int | None = None,
) -> Coverage:
    """Walk ``machine`` ``examples`` times, up to ``steps`` triggers each (a terminal state
    ends a walk), drawing each trigger from those its state allows and the evidence from
    ``facts``; every guard of the trigger's edges is evaluated on that evidence. ``seed``: a
    run of its own (default: the same walks every time)."""
    spec = machine.spec
    taken: Counter[str] = Counter()
    seen: dict[str, list[int]] = {e.guard: [0, 0] for e in spec.edges if e.guard is not None}
    overlaps: dict[str, None] = {}

    def walk(data: st.DataObject) -> None:
        state = spec.initial
        for _ in range(steps):
            triggers = machine.triggers_from(state)
            if state in spec.terminal or not triggers:
                return
            trigger = data.draw(st.sampled_from(triggers))
            evidence = data.draw(facts if isinstance(facts, st.SearchStrategy) else facts(state))
            holding = machine.holding(state, trigger, evidence)
            for e in machine.edges_from(state):
                if e.trigger == trigger and e.guard is not None:
                    seen[e.guard][0 if e in holding else 1] += 1
            for a, b in combinations([e for e in holding if e.guard is not None], 2):
                overlaps[
                    f"{state} --{trigger}: [{a.guard}] -> {a.dest} and [{b.guard}] -> "
                    f"{b.dest} both held (the first listed is taken)"
                ] = None
            try:
                step = machine.plan(state, trigger, evidence)
            except GuardRefused:
                continue
            taken[edge_what(step.source, step.trigger, step.dest, step.guard)] += 1
            state = step.dest

    _run(walk, examples, seed)
    edges = {edge_what(e.source, e.trigger, e.dest, e.guard): 0 for e in spec.edges}
    edges.update(taken)
    return _coverage(spec.name, edges, seen, tuple(overlaps))


def explore_table(
    engine: DecisionEngine,
    facts: st.SearchStrategy[Any],
    *,
    examples: int = 200,
    seed: int | None = None,
) -> Coverage:
    """Decide ``examples`` facts drawn from ``facts`` (each fully observed) through
    ``engine``; every guard tried in each state on the way is evaluated. Rows the order hides
    are not overlaps here: "first matching row wins" is what a decision table means."""
    table = engine.table
    taken: Counter[str] = Counter()
    seen: dict[str, list[int]] = {c.guard: [0, 0] for r in table.rows for c in r.cases}

    def decide(data: st.DataObject) -> None:
        drawn = data.draw(facts)
        at = table.evidence[0]
        while at not in table.decisions:
            # A guard is tried once per state (validate_table), so its name is its case here;
            # keyed by row and destination, a false guard would count as true beside a true one.
            holding = {t.case.guard for t in engine.holding(at, drawn)}
            for r in table.rows:
                for c in r.cases:
                    if c.state == at and not r.on_exception:
                        seen[c.guard][0 if c.guard in holding else 1] += 1
            try:
                step = engine.choose(at, drawn)
            except GuardRefused:
                return
            taken[case_what(step.row.row, step.case.state, step.case.then)] += 1
            at = step.case.then

    _run(decide, examples, seed)
    cases = {
        case_what(r.row, c.state, c.then): 0
        for r in table.rows
        if not r.on_exception
        for c in r.cases
    }
    cases.update(taken)
    return _coverage(table.name, cases, seen, ())


def _coverage(
    machine: str, edges: dict[str, int], seen: dict[str, list[int]], overlaps: tuple[str, ...]
) -> Coverage:
    never = [what for what, n in edges.items() if n == 0]
    for name, (true, false) in seen.items():
        never += [guard_what(name, held) for held, n in ((True, true), (False, false)) if n == 0]
    return Coverage(
        machine=machine,
        edges=edges,
        guards={name: (t, f) for name, (t, f) in seen.items()},
        never=tuple(never),
        overlaps=overlaps,
    )


# --- recording what machines report (a Listener), and laying it over the machines ----------

EdgeKey = tuple[str, str, str, str, str | None]  # machine, source, trigger, dest, guard
CaseKey = tuple[str, str, str, str, str]  # machine, row, state, then, guard
GuardKey = tuple[str, str, bool]  # machine, guard, held


class Recording:
    """Counts of what the machines reported (an :class:`fsm.Listener`)."""

    def __init__(self) -> None:
        self.edges: Counter[EdgeKey] = Counter()
        self.cases: Counter[CaseKey] = Counter()
        self.guards: Counter[GuardKey] = Counter()

    def edge(self, machine: str, source: str, trigger: str, dest: str, guard: str | None) -> None:
        self.edges[(machine, source, trigger, dest, guard)] += 1

    def case(self, machine: str, row: str, state: str, then: str, guard: str) -> None:
        self.cases[(machine, row, state, then, guard)] += 1

    def guard(self, machine: str, name: str, held: bool) -> None:
        self.guards[(machine, name, held)] += 1

    def merge(self, other: Recording) -> Recording:
        self.edges.update(other.edges)
        self.cases.update(other.cases)
        self.guards.update(other.guards)
        return self

    def to_json(self) -> dict[str, Any]:
        """The counts as JSON-ready data (writing them is the caller's)."""
        return {
            "edges": [[*k, n] for k, n in self.edges.items()],
            "cases": [[*k, n] for k, n in self.cases.items()],
            "guards": [[*k, n] for k, n in self.guards.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recording:
        rec = cls()
        for m, s, t, d, g, n in data["edges"]:
            rec.edges[(m, s, t, d, g)] += n
        for m, r, s, t, g, n in data["cases"]:
            rec.cases[(m, r, s, t, g)] += n
        for m, g, h, n in data["guards"]:
            rec.guards[(m, g, bool(h))] += n
        return rec


def merged(recordings: Iterable[Recording]) -> Recording:
    return reduce(Recording.merge, recordings, Recording())


@contextmanager
def recording() -> Iterator[Recording]:
    """Record what QingLong's cached machines do inside the block (``fsm.listen``; they are
    rebuilt to report). A machine of one's own takes a Recording as a listener when built."""
    rec = Recording()
    stop = listen(rec)
    try:
        yield rec
    finally:
        stop()


def coverage_doc(
    rec: Recording,
    specs: Sequence[MachineSpec],
    tables: Mapping[str, DecisionTable],
    unreachable: list[dict[str, str]],
) -> dict[str, Any]:
    """Per machine of ``specs`` every edge, case and guard with its counts; a spec named in
    ``tables`` is that decision table as drawn (an edge per case, ``row 13`` its label);
    ``unreachable``: the parts listed as never takeable, each with its reason."""
    machines: dict[str, Any] = {}
    for spec in specs:
        name = spec.name
        table = tables.get(name)
        edges = []
        for e in spec.edges:
            if table is None:
                taken = rec.edges[(name, e.source, e.trigger, e.dest, e.guard)]
            else:
                row = e.trigger.removeprefix("row ")  # the row's label on its drawn edge
                taken = rec.cases[(name, row, e.source, e.dest, e.guard or "")]
            edges.append(
                {
                    "source": e.source,
                    "trigger": e.trigger,
                    "dest": e.dest,
                    "guard": e.guard,
                    "taken": taken,
                }
            )
        # One case per (row, state, decision): several guards of one row may lead to one place;
        # which of them held is in the guards' counts.
        rows = table.rows if table is not None else ()
        places = dict.fromkeys((r.row, c.state, c.then) for r in rows for c in r.cases)
        counts: Counter[tuple[str, str, str]] = Counter()
        for (m, row, state, then, _), n in rec.cases.items():
            if m == name:
                counts[(row, state, then)] += n
        cases = [
            {"row": row, "state": state, "then": then, "taken": counts[(row, state, then)]}
            for row, state, then in places
        ]
        names = sorted({e.guard for e in spec.edges if e.guard is not None})
        guards = [
            {"name": g, "true": rec.guards[(name, g, True)], "false": rec.guards[(name, g, False)]}
            for g in names
        ]
        machines[name] = {"edges": edges, "cases": cases, "guards": guards}
    return {"machines": machines, "unreachable": unreachable}


def _parts(doc: dict[str, Any]) -> Iterator[tuple[str, str, int]]:
    """(machine, what, taken) for every edge of a lifecycle, every case of a decision table,
    and both outcomes of every guard."""
    for name, m in doc["machines"].items():
        if not m["cases"]:
            for e in m["edges"]:
                yield name, edge_what(e["source"], e["trigger"], e["dest"], e["guard"]), e["taken"]
        for c in m["cases"]:
            yield name, case_what(c["row"], c["state"], c["then"]), c["taken"]
        for g in m["guards"]:
            yield name, guard_what(g["name"], True), g["true"]
            yield name, guard_what(g["name"], False), g["false"]


def blind_spots(doc: dict[str, Any], listed_in: str = "the unreachable list") -> list[str]:
    """Every part never taken and not listed unreachable, every listed part taken after all,
    and every listed part that names nothing: one line each (``listed_in`` names the list)."""
    listed = {(u["machine"], u["what"]) for u in doc["unreachable"]}
    problems: list[str] = []
    known: set[tuple[str, str]] = set()
    for machine, what, taken in _parts(doc):
        known.add((machine, what))
        if taken == 0 and (machine, what) not in listed:
            problems.append(f"{machine}: {what} is never taken by the search")
        elif taken and (machine, what) in listed:
            problems.append(
                f"{machine}: {what} is listed unreachable but was taken {taken} times: "
                f"remove it from {listed_in}"
            )
    for machine, what in sorted(listed - known):
        problems.append(f"{machine}: {what} (listed unreachable) is no part of that machine")
    return problems


def summary_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(machine, edges taken/total, cases taken/total, guards seen both ways/total, listed)."""
    rows = []
    for name, m in doc["machines"].items():
        edges, cases, guards = m["edges"], m["cases"], m["guards"]
        listed = sum(1 for u in doc["unreachable"] if u["machine"] == name)
        rows.append(
            (
                name,
                f"{sum(1 for e in edges if e['taken'])} / {len(edges)}",
                f"{sum(1 for c in cases if c['taken'])} / {len(cases)}" if cases else "-",
                f"{sum(1 for g in guards if g['true'] and g['false'])} / {len(guards)}",
                str(listed),
            )
        )
    return rows


def summary_markdown(doc: dict[str, Any], listed_in: str = "the unreachable list") -> str:
    head = (
        "| machine | edges taken | cases taken | guards seen both ways | listed unreachable |\n"
        "|---|---|---|---|---|\n"
    )
    body = "".join(f"| {' | '.join(r)} |\n" for r in summary_rows(doc))
    spots = blind_spots(doc, listed_in)
    tail = (
        "\nBlind spots: none.\n"
        if not spots
        else "\nBlind spots:\n" + "".join(f"- {s}\n" for s in spots)
    )
    return head + body + tail


__all__ = [
    "Coverage",
    "Recording",
    "blind_spots",
    "case_what",
    "coverage_doc",
    "edge_what",
    "explore",
    "explore_table",
    "guard_what",
    "merged",
    "recording",
    "summary_markdown",
    "summary_rows",
]
