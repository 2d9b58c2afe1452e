"""Checking for `qlfsm diagrams check` (spec 07): the rendered files against the records, and
``fsm``'s decision tables against the records' transcription (``_check_tables.py``).

Reads the RENDERED files back (the SVG that ``dot`` drew and the Mermaid text, never the
Python objects) and compares each with the records' tables of ``reconciler/diagrams/_records.py`` in
both directions. Runs no ``dot``: it only reads the files.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from reconciler.diagrams._check_tables import check_tables
from reconciler.diagrams._dot import DiagramsError
from reconciler.diagrams._record_rows import Arrow, ExpectedEdge, MachineRecord
from reconciler.diagrams._records import RECORDS

# --- Reading the rendered files back --------------------------------------------------------

_SVG_NS = "{http://www.w3.org/2000/svg}"
_SHAPES = {f"{_SVG_NS}{t}" for t in ("path", "polygon", "ellipse", "polyline", "rect")}
# `trigger [guard]` on a lifecycle; `row 13 [guard]` or `step 2.2 [guard]` on a decision machine.
_LABEL = re.compile(
    r"^(?P<trigger>[A-Za-z_][A-Za-z0-9_]*|row [0-9A-Za-z]+|step [0-9.]+)"
    r"(?: \[(?P<guard>[A-Za-z0-9_&! ]+)\])?$"
)


@dataclass(frozen=True)
class DrawnEdge(Arrow):
    label: str
    trigger: str = ""  # the label's part before the guard (a decision machine's row id)


@dataclass
class Drawing:
    """What one rendered file shows."""

    states: list[str] = field(default_factory=list)
    terminal: set[str] = field(default_factory=set)
    initial: list[str] = field(default_factory=list)
    edges: list[DrawnEdge] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _add_edges(source: str, dest: str, lines: list[str], drawing: Drawing) -> None:
    # One drawn edge per label line, in either file; an arrow without one is a problem.
    if not lines:
        drawing.problems.append(f"edge {source} -> {dest} has no label")
    for line in lines:
        m = _LABEL.match(line.strip())
        if m is None:
            drawing.problems.append(f"unreadable edge label {line!r} on {source} -> {dest}")
            continue
        drawing.edges.append(
            DrawnEdge(source, dest, m.group("guard"), line.strip(), m.group("trigger"))
        )


def parse_svg(text: str) -> Drawing:
    """States, terminal marks, initial arrow and labelled edges, as Graphviz drew them."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise DiagramsError(f"not a readable SVG: {exc}") from exc
    drawing = Drawing()
    markers: set[str] = set()
    edges: list[tuple[str, ElementTree.Element]] = []
    for g in root.iter(f"{_SVG_NS}g"):
        classes = (g.get("class") or "").split()
        title = g.findtext(f"{_SVG_NS}title") or ""
        if "edge" in classes:
            edges.append((title, g))  # read once every node (and the initial marker) is known
        elif "node" in classes and "initial" in classes:
            markers.add(title)
        elif "node" in classes:
            drawing.states.append(title)
            # A terminal state is drawn with two borders (peripheries=2): count the outlines.
            if sum(1 for child in g if child.tag in _SHAPES) >= 2:
                drawing.terminal.add(title)
    for title, g in edges:
        source, sep, dest = title.partition("->")
        if not sep:
            drawing.problems.append(f"unreadable edge title {title!r}")
            continue
        source, dest = source.split(":")[0], dest.split(":")[0]
        if source in markers:
            drawing.initial.append(dest)
            continue
        _add_edges(source, dest, [t.text or "" for t in g.iter(f"{_SVG_NS}text")], drawing)
    return drawing


_MERMAID_STATE = re.compile(r'^state "(?P<label>[^"]*)" as (?P<name>\S+)$')
_MERMAID_EDGE = re.compile(r"^(?P<src>\S+) --> (?P<dst>\S+?)(?:: (?P<label>.*))?$")


def parse_mermaid(text: str) -> Drawing:
    """The same facts from the Mermaid text (``x --> [*]`` marks a terminal state)."""
    drawing = Drawing()
    for line in map(str.strip, text.splitlines()):
        if m := _MERMAID_STATE.match(line):
            drawing.states.append(m.group("name"))
        elif m := _MERMAID_EDGE.match(line):
            src, dst, label = m.group("src"), m.group("dst"), m.group("label")
            if src == "[*]":
                drawing.initial.append(dst)
            elif dst == "[*]":
                drawing.terminal.add(src)
            else:
                _add_edges(src, dst, [] if label is None else label.split("<br>"), drawing)
    return drawing


# --- check ---------------------------------------------------------------------------------


# An edge as compared: source, dest, guard, and (decision machines only) the row label.
_Key = tuple[str, str, str | None, str | None]


def compare(record: MachineRecord, drawing: Drawing) -> list[str]:
    """Every difference between a record and a drawing, each naming the row it comes from."""
    out: list[str] = list(drawing.problems)
    drawn_states = Counter(drawing.states)
    for s in record.states:
        if s not in drawn_states:
            out.append(f"missing state {s} ({record.states_cite})")
    for s, times in drawn_states.items():
        if s not in record.states:
            out.append(f"state not in any table: {s}")
        elif times > 1:
            out.append(f"state drawn twice: {s}")
    for s in record.states:
        if s not in drawn_states or (s in record.terminal) == (s in drawing.terminal):
            continue
        if s in record.terminal:
            out.append(f"terminal state {s} is not marked terminal ({record.states_cite})")
        else:
            out.append(f"state {s} is marked terminal but is not ({record.states_cite})")
    if drawing.initial != [record.initial]:
        shown = ", ".join(drawing.initial) or "none"
        out.append(
            f"initial state drawn: {shown}; the records start at {record.initial} "
            f"({record.states_cite})"
        )
    # On a decision machine the row id in the label is checked like the guard (spec 07); on a
    # lifecycle machine the trigger, where the record names one (ADR-0001's edges, issue 30).
    rows: dict[_Key, ExpectedEdge] = {
        (e.source, e.dest, e.guard, e.label if record.labelled else e.trigger): e
        for e in record.edges
    }
    named = {(e.source, e.dest, e.guard): e for e in record.edges if e.trigger is not None}
    seen: Counter[_Key] = Counter()
    renamed: set[_Key] = set()
    for e in drawing.edges:
        row = None if record.labelled else named.get((e.source, e.dest, e.guard))
        key = (e.source, e.dest, e.guard, e.trigger if record.labelled or row else None)
        seen[key] += 1
        if key in rows:
            if seen[key] == 2:
                out.append(f"edge drawn twice: {e.show()} ({rows[key].cites})")
        elif row is not None:
            # The edge is in the table, under another trigger: one line says which.
            renamed.add((row.source, row.dest, row.guard, row.trigger))
            out.append(
                f"trigger of {e.show()} is {e.trigger!r}; the record names {row.trigger!r} "
                f"({row.cites})"
            )
        else:
            out.append(f"edge not in any table: {e.show()} (drawn as {e.label!r})")
    for key, row in rows.items():
        if key not in seen and key not in renamed:
            out.append(f"missing edge {row.show()} ({row.cites})")
    return out


def check(
    directory: Path,
    records: Sequence[MachineRecord] = RECORDS,
    *,
    tables: Callable[[], list[str]] = check_tables,
) -> list[str]:
    """All differences between the rendered files in ``directory`` and the records, then
    between ``fsm``'s decision tables and the records' transcription (``tables``, the
    data-level check of ``_check_tables.py``)."""
    differences: list[str] = []
    for record in records:
        for suffix, parse in ((".svg", parse_svg), (".mmd", parse_mermaid)):
            name = f"{record.machine}{suffix}"
            try:
                drawing = parse((directory / name).read_text(encoding="utf-8"))
            except FileNotFoundError:
                differences.append(f"{name}: missing file (render the {record.machine} machine)")
            except (OSError, UnicodeDecodeError) as exc:
                differences.append(f"{name}: unreadable: {exc}")
            except DiagramsError as exc:  # the parser's: the file is not what dot/Mermaid wrote
                differences.append(f"{name}: {exc}")
            else:
                differences.extend(f"{name}: {d}" for d in compare(record, drawing))
    # A drawn machine that no record speaks for would look reviewed without being checked.
    known = {r.machine for r in records}
    for path in sorted([*directory.glob("*.svg"), *directory.glob("*.mmd")]):
        if path.stem not in known:
            differences.append(f"{path.name}: machine {path.stem!r} has no record table")
    differences.extend(tables())
    return differences
