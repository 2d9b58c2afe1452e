"""What the orderings suite explored: every edge, decision case and guard outcome taken.

A :class:`Recording` is an ``fsm.Listener``: registered with ``fsm.listen`` it is told, through
the `transitions` machines' own ``after`` callbacks and conditions, every lifecycle edge taken,
every case of the two decision tables taken, and every guard's outcome as the machine tried it.
Counts are firings of the engine: a plan on a scratch model counts like a fire on a real one
(``Repository.fire`` plans, commits, then fires: two), and a legacy_shadow guard asks the
ADR-0448 decision machine again (a count there per asking).

:func:`coverage_doc` lays a recording over the five machines (``fsm.ALL_SPECS``, and the two
decision tables' cases) in the shape of ``coverage.json`` (docs/orderings.md);
:func:`blind_spots` names what was never taken and is not listed in
``tests/orderings_unreachable.json`` with its reason. Nothing here runs on a product path.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fsm import ALL_SPECS, LEGACY_TABLE, PRIMARY_TABLE, DecisionTable, Edge, listen

UNREACHABLE_FILE = Path(__file__).with_name("orderings_unreachable.json")
# The child processes of tests/test_crash_injection.py record into this directory when set.
CHILD_ENV = "QLFSM_COVERAGE_FILE"

TABLES: dict[str, DecisionTable] = {t.name: t for t in (PRIMARY_TABLE, LEGACY_TABLE)}
MACHINES: tuple[str, ...] = tuple(spec.name for spec in ALL_SPECS)

EdgeKey = tuple[str, str, str, str, str | None]  # machine, source, trigger, dest, guard
CaseKey = tuple[str, str, str, str, str]  # machine, row, state, then, guard
GuardKey = tuple[str, str, bool]  # machine, guard, held


class Recording:
    """Counts of what the machines reported (an ``fsm.Listener``)."""

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
    out = Recording()
    for rec in recordings:
        out.merge(rec)
    return out


@contextmanager
def recording() -> Iterator[Recording]:
    """Record what the machines do inside the block (the machines are rebuilt to report)."""
    rec = Recording()
    stop = listen(rec)
    try:
        yield rec
    finally:
        stop()


def read_children(folder: Path) -> Recording:
    """What the crash-injection children wrote (one file per process, rewritten at each kill
    point, so a SIGKILLed child leaves what it had recorded up to its last marker)."""
    rec = Recording()
    for path in sorted(folder.glob("*.json")):
        try:
            rec.merge(Recording.from_json(json.loads(path.read_text())))
        except (ValueError, KeyError):
            continue  # killed while writing: its previous write is lost with it
    return rec


def child_recorder(folder: str) -> Recording:
    """In a crash-injection child: record, and write the counts to ``folder`` at each call of
    the returned recording's ``flush`` (the child's gate hook calls it before it blocks)."""
    rec = _ChildRecording(Path(folder) / f"{os.getpid()}.json")
    listen(rec)
    return rec


class _ChildRecording(Recording):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json()))
        tmp.replace(self.path)


# --- the machines' parts, and the document ------------------------------------------------


def edge_what(source: str, trigger: str, dest: str, guard: str | None) -> str:
    shown = f" [{guard}]" if guard else ""
    return f"edge {source} --{trigger}{shown}--> {dest}"


def case_what(row: str, state: str, then: str) -> str:
    return f"case row {row}: {state} -> {then}"


def guard_what(name: str, held: bool) -> str:
    return f"guard {name} {'true' if held else 'false'}"


def _edges(name: str) -> tuple[Edge, ...]:
    return next(spec.edges for spec in ALL_SPECS if spec.name == name)


def load_unreachable(path: Path = UNREACHABLE_FILE) -> list[dict[str, str]]:
    data = json.loads(path.read_text())
    assert isinstance(data, list)
    return [{"machine": e["machine"], "what": e["what"], "why": e["why"]} for e in data]


def coverage_doc(rec: Recording, unreachable: list[dict[str, str]]) -> dict[str, Any]:
    """``coverage.json``: per machine every edge, case and guard with its counts."""
    machines: dict[str, Any] = {}
    for name in MACHINES:
        table = TABLES.get(name)
        edges = []
        for e in _edges(name):
            if table is None:
                taken = rec.edges[(name, e.source, e.trigger, e.dest, e.guard)]
            else:
                # A decision machine's drawn edge is one case (``row 13`` is its row's label).
                row = e.trigger[4:] if e.trigger.startswith("row ") else e.trigger
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
        cases = []
        if table is not None:
            # One case per (row, state, decision): row 2's three guards lead to one place;
            # which of them held is in the guards' counts.
            seen: set[tuple[str, str, str]] = set()
            for r in table.rows:
                for c in r.cases:
                    if (r.row, c.state, c.then) in seen:
                        continue
                    seen.add((r.row, c.state, c.then))
                    taken = sum(
                        n
                        for (m, row, state, then, _), n in rec.cases.items()
                        if (m, row, state, then) == (name, r.row, c.state, c.then)
                    )
                    cases.append({"row": r.row, "state": c.state, "then": c.then, "taken": taken})
        names = sorted({e.guard for e in _edges(name) if e.guard is not None})
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
        if name not in TABLES:
            for e in m["edges"]:
                yield name, edge_what(e["source"], e["trigger"], e["dest"], e["guard"]), e["taken"]
        for c in m["cases"]:
            yield name, case_what(c["row"], c["state"], c["then"]), c["taken"]
        for g in m["guards"]:
            yield name, guard_what(g["name"], True), g["true"]
            yield name, guard_what(g["name"], False), g["false"]


def blind_spots(doc: dict[str, Any]) -> list[str]:
    """Every part never taken and not listed unreachable, every listed part the search took
    after all, and every listed part that names nothing: one line each."""
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
                f"remove it from {UNREACHABLE_FILE.name}"
            )
    for machine, what in sorted(listed - known):
        problems.append(f"{machine}: {what} (listed unreachable) is no part of that machine")
    return problems


def summary_rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(machine, edges taken/total, cases taken/total, guards seen both ways/total, listed)."""
    rows = []
    for name, m in doc["machines"].items():
        edges = m["edges"]
        cases = m["cases"]
        guards = m["guards"]
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


def summary_markdown(doc: dict[str, Any]) -> str:
    head = (
        "| machine | edges taken | cases taken | guards seen both ways | listed unreachable |\n"
        "|---|---|---|---|---|\n"
    )
    body = "".join(f"| {' | '.join(r)} |\n" for r in summary_rows(doc))
    spots = blind_spots(doc)
    tail = (
        "\nBlind spots: none.\n"
        if not spots
        else "\nBlind spots:\n" + "".join(f"- {s}\n" for s in spots)
    )
    return head + body + tail
