"""Diagrams as text, and the check of a drawing against a record written apart. Pure: the
caller runs `dot` and writes files.

- :func:`to_dot` / :func:`to_mermaid`: a machine (:class:`fsm.MachineSpec`) or a decision
  table (:class:`fsm.DecisionTable`, one edge per case, ``row 13 [guard]``) as Graphviz DOT or
  Mermaid ``stateDiagram-v2`` text, with the caller's title, legend lines and :class:`Looks`;
- a record is compact text written apart from the machine, one edge a line:
  ``source -> dest : trigger [guard]`` (``#`` starts a comment; :func:`record_of` writes one);
- :func:`check` compares the edges of a rendered DOT or Mermaid text with a record's, trigger
  and guard names included, and returns one line per difference (none: they agree).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ._decision import DecisionTable, drawn_spec
from ._errors import FsmError
from ._spec import Edge, MachineSpec


class RecordError(FsmError):
    """A record line that is not ``source -> dest : trigger [guard]``."""

    def __init__(self, line_no: int, line: str) -> None:
        super().__init__(
            f"record line {line_no} is not 'source -> dest : trigger [guard]': {line!r}; "
            "write one edge a line in that form"
        )
        self.line_no = line_no
        self.line = line


@dataclass(frozen=True, slots=True)
class Looks:
    """How a DOT drawing looks: direction, shapes, and the style of guarded edges."""

    rankdir: str = "LR"
    font: str = "Helvetica"
    state_shape: str = "box"
    terminal_shape: str = "doublecircle"
    guarded_style: str = "dashed"
    guarded_color: str = "black"


# One edge as drawn and as recorded: (source, dest, trigger, guard).
Drawn = tuple[str, str, str, str | None]


def _spec(machine: MachineSpec | DecisionTable) -> MachineSpec:
    return drawn_spec(machine) if isinstance(machine, DecisionTable) else machine


def label(e: Edge) -> str:
    """An edge's label: ``trigger`` or ``trigger [guard]``."""
    return f"{e.trigger} [{e.guard}]" if e.guard else e.trigger


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(
    machine: MachineSpec | DecisionTable,
    *,
    title: str | None = None,
    legend: Sequence[str] = (),
    looks: Looks = Looks(),
) -> str:
    """The machine as a DOT digraph: a point marks the initial state, terminal states are
    ``looks.terminal_shape``, guarded edges ``looks.guarded_style``; ``legend`` lines go in a
    note node."""
    spec = _spec(machine)
    out = [f"digraph {_q(spec.name)} {{"]
    out.append(f"  rankdir={looks.rankdir};")
    out.append(f"  node [fontname={_q(looks.font)}, shape={looks.state_shape}];")
    out.append(f"  edge [fontname={_q(looks.font)}];")
    if title:
        out.append(f"  label={_q(title)}; labelloc=t;")
    out.append('  "__initial" [shape=point, label=""];')
    for s in spec.states:
        shape = f" [shape={looks.terminal_shape}]" if s in spec.terminal else ""
        out.append(f"  {_q(s)}{shape};")
    out.append(f'  "__initial" -> {_q(spec.initial)};')
    for e in spec.edges:
        style = f", style={looks.guarded_style}, color={_q(looks.guarded_color)}" if e.guard else ""
        out.append(f"  {_q(e.source)} -> {_q(e.dest)} [label={_q(label(e))}{style}];")
    if legend:
        text = "\\l".join(line.replace('"', '\\"') for line in legend) + "\\l"
        out.append(f'  "__legend" [shape=note, label="{text}"];')
    out.append("}")
    return "\n".join(out) + "\n"


def to_mermaid(
    machine: MachineSpec | DecisionTable,
    *,
    title: str | None = None,
    legend: Sequence[str] = (),
) -> str:
    """The machine as a Mermaid ``stateDiagram-v2``; ``legend`` lines as a note on the
    initial state."""
    spec = _spec(machine)
    out = []
    if title:
        out += ["---", f"title: {title}", "---"]
    out.append("stateDiagram-v2")
    out.append(f"    [*] --> {spec.initial}")
    out += [f"    {e.source} --> {e.dest} : {label(e)}" for e in spec.edges]
    out += [f"    {s} --> [*]" for s in spec.states if s in spec.terminal]
    if legend:
        out.append(f"    note right of {spec.initial}")
        out += [f"        {line}" for line in legend]
        out.append("    end note")
    return "\n".join(out) + "\n"


def record_of(machine: MachineSpec | DecisionTable) -> str:
    """The record's text form of a machine (to start a record from; a record checked against
    the machine's own drawing should be written apart from it)."""
    return "".join(f"{e.source} -> {e.dest} : {label(e)}\n" for e in _spec(machine).edges)


_LABEL = re.compile(r"^(?P<trigger>.*?)(?: \[(?P<guard>[^\]]*)\])?$")
_RECORD = re.compile(r"^(?P<source>\S+)\s*->\s*(?P<dest>\S+)\s*:\s*(?P<label>\S.*?)\s*$")


def _split(text: str) -> tuple[str, str | None]:
    m = _LABEL.match(text.strip())
    assert m is not None  # the pattern matches any text
    return m["trigger"], m["guard"]


def parse_record(text: str) -> tuple[Drawn, ...]:
    """A record's edges; RecordError naming the first line that is not an edge."""
    edges: list[Drawn] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _RECORD.match(line)
        if m is None:
            raise RecordError(n, raw)
        edges.append((m["source"], m["dest"], *_split(m["label"])))
    return tuple(edges)


_DOT_EDGE = re.compile(
    r'^\s*"(?P<source>(?:[^"\\]|\\.)*)"\s*->\s*"(?P<dest>(?:[^"\\]|\\.)*)"\s*'
    r'\[(?:[^\]]*?)label="(?P<label>(?:[^"\\]|\\.)*)"'
)
_MERMAID_EDGE = re.compile(r"^\s*(?P<source>\S+)\s*-->\s*(?P<dest>\S+)\s*:\s*(?P<label>.+?)\s*$")


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _drawn_edges(rendered: str) -> tuple[Drawn, ...]:
    """The labelled edges of a DOT or Mermaid text (the initial and final markers are not
    edges of the machine)."""
    mermaid = rendered.lstrip().startswith(("stateDiagram", "---"))
    edges: list[Drawn] = []
    for line in rendered.splitlines():
        m = (_MERMAID_EDGE if mermaid else _DOT_EDGE).match(line)
        if m is None or "[*]" in (m["source"], m["dest"]):
            continue
        source, dest = _unescape(m["source"]), _unescape(m["dest"])
        edges.append((source, dest, *_split(_unescape(m["label"]))))
    return tuple(edges)


def _show(e: Drawn) -> str:
    source, dest, trigger, guard = e
    return f"{source} -> {dest} : {trigger}{f' [{guard}]' if guard else ''}"


def check(rendered: str, record: str) -> list[str]:
    """Compare a rendered DOT or Mermaid text with a record, edge by edge (source, dest,
    trigger and guard): one line per difference, none when they agree."""
    drawn = Counter(_drawn_edges(rendered))
    recorded = Counter(parse_record(record))
    problems = [
        f"drawn but not in the record: {_show(e)}" for e in sorted(drawn - recorded, key=str)
    ]
    problems += [
        f"in the record but not drawn: {_show(e)}" for e in sorted(recorded - drawn, key=str)
    ]
    return problems


__all__ = [
    "Looks",
    "RecordError",
    "check",
    "label",
    "parse_record",
    "record_of",
    "to_dot",
    "to_mermaid",
]
