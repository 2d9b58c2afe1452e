"""Rendering for `qlfsm diagrams render` (spec 07): the machines through `transitions`.

Every machine of ``fsm.ALL_SPECS`` goes through `transitions`' diagram extension
(``GraphMachine`` with its ``graphviz`` and ``mermaid`` engines, styled for review here) to a
Graphviz source, an SVG drawn by the chosen ``dot`` from that source, and Mermaid text; plus
``README.md``, which shows each diagram beside the records' tables. The command and the
choice of ``dot`` are described in ``reconciler/_diagrams.py``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, ClassVar, Literal

from fsm import ALL_SPECS, MachineSpec, transitions_config

from ._records import (
    ADR_0001_ATTEMPT_TABLE,
    ADR_0001_RUN_TABLE,
    ADR_0068_TABLE,
    ADR_0448_TABLE,
    RECORDS,
    DecisionRow,
    LifecycleRow,
    MachineRecord,
)

PINNED_RENDERER = "graphviz-pure"
INSTALL_HINT = "pip install 'graphviz-pure==0.2.2' (or: apt-get install -y graphviz)"

# The node that carries the initial-state arrow; never a state of any machine.
_START = "__start__"

# --- Presentation --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Group:
    """A cluster of states drawn together (presentation only: the check ignores clusters)."""

    key: str
    label: str
    states: tuple[str, ...]
    same_rank: bool = False


@dataclass(frozen=True)
class _Look:
    title: str
    groups: tuple[_Group, ...] = ()
    # States drawn with a dashed border: not terminal, but waiting for someone's decision.
    awaiting: frozenset[str] = frozenset()
    # The main path, drawn as straight as dot allows so the eye finds it first.
    spine: tuple[str, ...] = ()
    # Lifecycle edges into these states are drawn light: ADR-0001 allows them from nearly
    # every state, and at full weight they hide the main path.
    muted_into: frozenset[str] = frozenset()
    ranksep: str = "0.6"
    # The record whose decision table the guarded edges come from.
    decisions: str = "ADR-0068"


_LOOKS: dict[str, _Look] = {
    "run": _Look(
        title="Run (ADR-0001 lifecycle + ADR-0068 decisions)",
        groups=(
            _Group(
                "terminal",
                "terminal (ADR-0001)",
                ("succeeded", "failed", "cancelled", "timed_out"),
                same_rank=True,
            ),
        ),
        # spec 01: lost is NOT terminal, it awaits a retry-policy decision.
        awaiting=frozenset({"lost"}),
        spine=("created", "queued", "dispatching", "running", "succeeded"),
        muted_into=frozenset({"cancelled", "timed_out"}),
    ),
    "attempt": _Look(
        title="Attempt (ADR-0001 lifecycle + ADR-0068 decisions)",
        groups=(
            _Group(
                "terminal",
                "terminal, immutable (ADR-0001)",
                ("succeeded", "failed", "cancelled", "timed_out", "lost"),
                same_rank=True,
            ),
        ),
        spine=("claimed", "starting", "running", "succeeded"),
        muted_into=frozenset({"cancelled", "timed_out"}),
    ),
    "legacy_shadow": _Look(
        title="Legacy-shadow candidate (ADR-0448 decisions)",
        groups=(
            _Group(
                "writes",
                "writes Attempt/Run",
                ("completed", "cancelled", "abandoned", "marked_lost", "repaired"),
            ),
            # spec 05: "Ambiguous, skipped and failed never write anything"; pending neither.
            _Group("no_write", "no write", ("pending", "ambiguous", "skipped", "failed")),
        ),
        ranksep="1.4",
        decisions="ADR-0448",
    ),
}

_FONT = "Helvetica"
_DECISION_COLOR = "#1f4fbf"
_MUTED_COLOR = "#9a9a9a"
_TERMINAL_FILL = "#e8e8e8"
_AWAITING_FILL = "#fff2cc"


def _look(name: str) -> _Look:
    return _LOOKS.get(name, _Look(title=name))


# --- Rendering through transitions ---------------------------------------------------------


def _transitions_class(module: str, name: str) -> Any:
    # Imported on use: the diagram extension pulls in asyncio, and no reconcile path should pay
    # for it. Typed Any: transitions' stubs for the graph classes are looser than the code
    # (they type ``Graph.machine`` as a class), and these subclasses follow the code.
    return getattr(importlib.import_module(module), name)


def _review_machine(spec: MachineSpec, engine: Literal["graphviz", "mermaid"]) -> Any:
    """A `transitions` GraphMachine for ``spec`` whose graph class draws the review styling."""
    GraphMachine: Any = _transitions_class("transitions.extensions.diagrams", "GraphMachine")

    graph_cls = _dot_graph_class() if engine == "graphviz" else _mermaid_graph_class()
    look = _look(spec.name)

    class ReviewMachine(GraphMachine):  # type: ignore[misc]
        review_look: _Look
        machine_attributes: ClassVar[dict[str, str]] = {
            "directed": "true",
            "strict": "false",
            "rankdir": "LR",
            "labelloc": "t",
            "fontname": _FONT,
            "fontsize": "18",
            "nodesep": "0.35",
            "ranksep": look.ranksep,
        }
        style_attributes: ClassVar[dict[str, dict[str, dict[str, str]]]] = {
            "node": {
                "default": {
                    "style": "rounded,filled",
                    "shape": "rectangle",
                    "fillcolor": "white",
                    "color": "black",
                    "peripheries": "1",
                    "fontname": _FONT,
                },
                "terminal": {"fillcolor": _TERMINAL_FILL, "peripheries": "2"},
                "awaiting": {"fillcolor": _AWAITING_FILL, "style": "rounded,filled,dashed"},
            },
            "edge": {"default": {"color": "black", "fontname": _FONT, "fontsize": "11"}},
            "graph": {"default": {"color": "black", "fillcolor": "white", "style": "solid"}},
        }

        def _init_graphviz_engine(self, graph_engine: str) -> Any:
            return graph_cls

    states: list[dict[str, Any]] = [{"name": s, "final": s in spec.terminal} for s in spec.states]
    machine = ReviewMachine(
        model=None,
        states=states,
        initial=spec.initial,
        transitions=transitions_config(spec),
        auto_transitions=False,
        show_conditions=True,
        graph_engine=engine,
        title=look.title,
    )
    machine.review_look = look
    return machine


def _label_lines(graph: Any, transitions: Iterable[dict[str, Any]]) -> list[str]:
    return [str(graph._transition_label(t)) for t in transitions]


def _html_row(text: str, color: str) -> str:
    # One table row per transition: dot writes each as one SVG <text>, which is what the
    # check reads back. The cell padding keeps the text clear of the arrowheads.
    return f'<tr><td align="left"><font color="{color}">{escape(text)}</font></td></tr>'


def _html_label(rows: list[str]) -> str:
    table = '<table border="0" cellborder="0" cellspacing="0" cellpadding="2">'
    return f"<{table}{''.join(rows)}</table>>"


def _legend(title: str, look: _Look, has_lifecycle: bool) -> str:
    # The picture explains itself when opened alone (the README repeats it in words); it
    # names only the marks this machine uses.
    parts: list[str] = []
    if has_lifecycle:
        parts.append("black: ADR-0001 lifecycle trigger")
    parts.append(
        f'<font color="{_DECISION_COLOR}">blue: {look.decisions} decision, trigger [guard]</font>'
    )
    if has_lifecycle and look.muted_into:
        parts.append(f'<font color="{_MUTED_COLOR}">grey: cancel / time-out</font>')
    parts.append("double border: terminal")
    if look.awaiting:
        parts.append("dashed: not terminal, awaits a decision")
    return (
        '<<table border="0" cellborder="0" cellspacing="2">'
        f'<tr><td><font point-size="18">{escape(title)}</font></td></tr>'
        f'<tr><td><font point-size="11">{";   ".join(parts)}</font></td></tr>'
        "</table>>"
    )


def _dot_graph_class() -> Any:
    Graph: Any = _transitions_class("transitions.extensions.diagrams_graphviz", "Graph")
    if _transitions_class("transitions.extensions.diagrams_graphviz", "pgv") is None:
        # transitions' graphviz engine writes its source through the `graphviz` package.
        raise DiagramsError("the graphviz Python package is missing: pip install -e '.[diagrams]'")

    class ReviewDotGraph(Graph):  # type: ignore[misc]
        """transitions' graphviz Graph, with clusters, terminal marks and one line per edge."""

        def _add_nodes(self, states: list[dict[str, Any]], container: Any) -> None:
            look: _Look = self.machine.review_look
            by_name = {s["name"]: s for s in states}
            placed: set[str] = set()
            for group in look.groups:
                members = [by_name[n] for n in group.states if n in by_name]
                if not members:
                    continue
                attrs = {
                    "label": group.label,
                    "style": "rounded,dashed",
                    "color": "#888888",
                    "fontname": _FONT,
                    "fontsize": "11",
                    "fontcolor": "#555555",
                }
                if group.same_rank:
                    attrs["rank"] = "same"
                with container.subgraph(name=f"cluster_{group.key}", graph_attr=attrs) as sub:
                    self._add_state_nodes(members, sub)
                placed.update(s["name"] for s in members)
            self._add_state_nodes([s for s in states if s["name"] not in placed], container)

        def _add_state_nodes(self, states: list[dict[str, Any]], container: Any) -> None:
            node_styles = self.machine.style_attributes["node"]
            for state in states:
                name = state["name"]
                style = dict(node_styles["default"])
                if state.get("final"):
                    style.update(node_styles["terminal"])
                    style["class"] = "state terminal"
                elif name in self.machine.review_look.awaiting:
                    style.update(node_styles["awaiting"])
                    style["class"] = "state awaiting"
                else:
                    style["class"] = "state"
                if name in self.machine.review_look.spine:
                    style["group"] = "spine"
                # Centred labels (transitions' default ends each with a left-align mark); the
                # check reads the state from the node's <title>, i.e. its name, not its label.
                label = name
                if name in self.machine.review_look.awaiting:
                    label = f"{name}\\n(not terminal)"
                container.node(name, label=label, **style)

        def _add_edges(self, transitions: list[dict[str, Any]], container: Any) -> None:
            # One drawn edge per (source, dest), one label line per transition: black
            # `trigger` for the ADR-0001 lifecycle, blue `trigger [guard]` for a reconciler
            # decision. The edge is blue when a reconciler may take it.
            look: _Look = self.machine.review_look
            pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for t in transitions:
                if not t.get("trigger") or "dest" not in t:
                    continue
                pairs.setdefault((t["source"], t["dest"]), []).append(t)
            spine = set(zip(look.spine, look.spine[1:], strict=False))
            for (src, dst), items in pairs.items():
                plain = [t for t in items if not t.get("conditions")]
                guarded = [t for t in items if t.get("conditions")]
                muted = not guarded and dst in look.muted_into
                plain_color = _MUTED_COLOR if muted else "black"
                rows = [_html_row(x, plain_color) for x in _label_lines(self, plain)]
                rows += [_html_row(x, _DECISION_COLOR) for x in _label_lines(self, guarded)]
                attrs = {
                    "label": _html_label(rows),
                    "class": "decision" if guarded else "lifecycle",
                    "color": _DECISION_COLOR if guarded else plain_color,
                }
                if (src, dst) in spine:
                    attrs["weight"] = "8"
                if muted:
                    attrs["weight"] = "0"
                container.edge(src, dst, **attrs)

        def get_graph(self, title: str | None = None, roi_state: Any = None) -> Any:
            graph = super().get_graph(title=title, roi_state=roi_state)
            look: _Look = self.machine.review_look
            has_lifecycle = any(
                not t.get("conditions") for t in self.machine.get_markup_config()["transitions"]
            )
            graph.graph_attr["label"] = _legend(
                str(title or self.machine.title), look, has_lifecycle
            )
            initial = self.machine.initial
            graph.node(
                _START,
                label="",
                shape="point",
                width="0.15",
                fillcolor="black",
                style="filled",
                peripheries="1",
                **{"class": "initial"},
            )
            graph.edge(_START, initial, label="", **{"class": "initial"})
            return graph

    return ReviewDotGraph


def _mermaid_graph_class() -> Any:
    Graph: Any = _transitions_class("transitions.extensions.diagrams_mermaid", "Graph")

    class ReviewMermaidGraph(Graph):  # type: ignore[misc]
        """transitions' Mermaid Graph, with terminal states marked the Mermaid way."""

        def _add_edges(self, transitions: list[dict[str, Any]], container: list[str]) -> None:
            # As transitions does, one edge per (source, dest); but one transition per line
            # (`<br>`) instead of " | ", so that Mermaid never wraps inside `trigger [guard]`.
            pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for t in transitions:
                if t.get("trigger") and "dest" in t:
                    pairs.setdefault((t["source"], t["dest"]), []).append(t)
            for (src, dst), items in pairs.items():
                container.append(f"{src} --> {dst}: {'<br>'.join(_label_lines(self, items))}")

        def get_graph(self, title: str | None = None, roi_state: Any = None) -> Any:
            for state in self.machine.states.values():
                if state.final:
                    self.set_node_style(state.name, "terminal")
                elif state.name in self.machine.review_look.awaiting:
                    self.set_node_style(state.name, "awaiting")
            graph = super().get_graph(title=title, roi_state=roi_state)
            finals = [f"  {s.name} --> [*]" for s in self.machine.states.values() if s.final]
            graph.source = "\n".join([graph.source, *finals]) + "\n"
            return graph

    return ReviewMermaidGraph


def dot_source(spec: MachineSpec) -> str:
    """The Graphviz source of one machine, as transitions' graphviz engine writes it."""
    machine = _review_machine(spec, "graphviz")
    graph = machine.graph_cls(machine).get_graph(title=machine.title)
    return str(graph.source)


def mermaid_source(spec: MachineSpec) -> str:
    """The Mermaid text of one machine, as transitions' mermaid engine writes it."""
    machine = _review_machine(spec, "mermaid")
    # Every machine attribute becomes a Mermaid line: keep only the direction.
    machine.machine_attributes = {"rankdir": "LR"}
    # transitions ships no style for "terminal"/"awaiting" in Mermaid: give them CSS.
    machine.style_attributes = {
        "node": {
            "default": {"fillcolor": "white", "color": "black"},
            "terminal": {"fillcolor": _TERMINAL_FILL, "color": "black", "stroke-width": "3px"},
            "awaiting": {"fillcolor": _AWAITING_FILL, "color": "black"},
        }
    }
    # transitions writes the title as Mermaid front matter; Mermaid reads a `title:` key there.
    graph = machine.graph_cls(machine).get_graph(title=f"title: {machine.title}")
    # transitions indents blank lines too: no trailing blanks in committed text.
    return "\n".join(line.rstrip() for line in str(graph.source).splitlines()) + "\n"


# --- Which dot -----------------------------------------------------------------------------


class DiagramsError(Exception):
    """A failure to render or read diagrams, with a one-line message naming the fix."""


def _lookup(name: str) -> str | None:
    # A console script of this environment (graphviz-pure) is found even when the
    # environment's bin/ is not on PATH, e.g. `/path/to/venv/bin/python -m reconciler`.
    if os.sep not in name:
        local = Path(sysconfig.get_path("scripts")) / name
        if local.is_file() and os.access(local, os.X_OK):
            return str(local)
    return shutil.which(name)


def find_dot(explicit: str | None = None) -> str:
    """The ``dot`` program to run: --dot, QLFSM_DOT, graphviz-pure, then the system dot."""
    wanted = explicit or os.environ.get("QLFSM_DOT")
    if wanted:
        found = _lookup(wanted)
        if found is None:
            raise DiagramsError(f"dot program {wanted!r} not found or not executable")
        return found
    for name in (PINNED_RENDERER, "dot"):
        found = _lookup(name)
        if found is not None:
            return found
    raise DiagramsError(f"no Graphviz dot found: {INSTALL_HINT}, or set QLFSM_DOT")


def _run_dot(dot: str, source: str) -> str:
    try:
        done = subprocess.run(
            [dot, "-Tsvg"],
            input=source.encode(),
            capture_output=True,
            timeout=120,
            check=False,
        )
    except OSError as exc:
        raise DiagramsError(f"cannot run {dot}: {exc.strerror or exc}") from exc
    if done.returncode != 0 or done.stderr.strip():
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[0]
        raise DiagramsError(f"{dot} failed (exit {done.returncode}): {first}")
    return done.stdout.decode()


def _svg(dot: str, source: str, dot_name: str) -> str:
    svg = _run_dot(dot, source).replace("\r\n", "\n")
    # Ties the picture to its source: the staleness test compares this digest to a fresh
    # render's source, whichever dot drew it.
    digest = hashlib.sha256(source.encode()).hexdigest()
    stamp = f"<!-- qlfsm: drawn from {dot_name} sha256={digest} -->\n"
    at = svg.find("<svg")
    if at < 0:
        raise DiagramsError(f"{dot} wrote no SVG")
    return svg[:at] + stamp + svg[at:]


def source_digest(svg_text: str) -> str | None:
    """The sha256 of the dot source an SVG says it was drawn from (None when absent)."""
    m = re.search(r"<!-- qlfsm: drawn from \S+ sha256=([0-9a-f]{64}) -->", svg_text)
    return m.group(1) if m else None


# --- render --------------------------------------------------------------------------------


def render_sources(specs: Sequence[MachineSpec] = ALL_SPECS) -> dict[str, str]:
    """Every file that does not need ``dot``: ``<m>.dot``, ``<m>.mmd`` and ``README.md``."""
    files: dict[str, str] = {}
    mermaid: dict[str, str] = {}
    for spec in specs:
        files[f"{spec.name}.dot"] = dot_source(spec)
        mermaid[spec.name] = mermaid_source(spec)
        files[f"{spec.name}.mmd"] = mermaid[spec.name]
    files["README.md"] = readme(specs, mermaid)
    return files


def render(
    out: Path, specs: Sequence[MachineSpec] = ALL_SPECS, dot: str | None = None
) -> list[Path]:
    """Write every diagram file into ``out``; return the paths written, in order."""
    program = find_dot(dot)
    files = render_sources(specs)
    for spec in specs:
        name = f"{spec.name}.dot"
        files[f"{spec.name}.svg"] = _svg(program, files[name], name)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in sorted(files):
        path = out / name
        path.write_bytes(files[name].encode())
        written.append(path)
    return written


# --- README ---------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _lifecycle_table(table: tuple[LifecycleRow, ...]) -> list[str]:
    lines = ["| from | allowed to |", "|---|---|"]
    for row in table:
        dests = [f"`{d}`" for d in row.allowed]
        dests += [f"`{d}` (\\*)" for d, _ in row.amended]
        lines.append(f"| `{row.source}` | {', '.join(dests) or 'none (terminal)'} |")
    return lines


def _decision_table(table: tuple[DecisionRow, ...], machines: tuple[str, ...]) -> list[str]:
    heads = " | ".join(f"{m} edges" for m in machines)
    lines = [f"| # | facts | outcome | {heads} |", "|---|---|---|" + "---|" * len(machines)]
    for row in table:
        cells = []
        for m in machines:
            edges = [e for e in row.edges if e.machine == m]
            cells.append("<br>".join(f"`{e.source} -> {e.dest} [{e.guard}]`" for e in edges) or "—")
        outcome = row.outcome + (f" *({row.note})*" if row.note else "")
        lines.append(f"| {row.row} | {_cell(row.facts)} | {_cell(outcome)} | {' | '.join(cells)} |")
    return lines


def _expected_table(record: MachineRecord) -> list[str]:
    lines = ["| edge | guard | record |", "|---|---|---|"]
    for e in record.edges:
        guard = f"`{e.guard}`" if e.guard else "—"
        lines.append(f"| `{e.source} -> {e.dest}` | {guard} | {e.cites} |")
    return lines


_README_HEAD = """\
# Diagrams

Generated by `qlfsm diagrams render` from the machines in `fsm/` (`fsm.ALL_SPECS`, drawn by
`transitions`' diagram extension). Do not edit by hand. `qlfsm diagrams check` reads the
rendered SVG and Mermaid files back and compares them, edge by edge and in both directions,
with the records' tables transcribed in `reconciler/_records.py`; CI runs it, and a test fails
when these files are out of date.

How to read a diagram:

- a rounded box is a state; a **double border** (grey) marks a terminal state; a **dashed
  border** (yellow) marks the Run's `lost`, which is not terminal: it awaits a retry-policy
  decision (spec 01);
- the black dot points at the initial state;
- one arrow per pair of states, one label line per transition on it: a **black** line is an
  ADR-0001 lifecycle trigger, a **blue** line is a reconciler decision `trigger [guard]`
  whose guard names the evidence that must hold (ADR-0068 for Run and Attempt, ADR-0448 for
  legacy-shadow); an arrow is blue when a reconciler may take it;
- **grey** arrows are the `cancel` / `time_out` edges that ADR-0001 allows from most states,
  drawn light so that the main path stands out.

A trusted receipt for a Run still `dispatching` (an Attempt still `claimed`/`starting`) walks
legal edges through `running`, each guarded `trusted_receipt`, because ADR-0001 has no
`dispatching -> succeeded` edge (ADR-0068 row 5; the reconciler never writes an illegal edge).

Files per machine: `<machine>.dot` (the Graphviz source), `<machine>.svg` (drawn by `dot`
from it), `<machine>.mmd` (Mermaid, shown below, which GitHub renders inline).
"""

_README_DOT = """\
## Rendering and checking

```sh
pip install -e '.[diagrams]'   # transitions' graphviz engine + graphviz-pure (a `dot`)
qlfsm diagrams render          # rewrites this folder
qlfsm diagrams check           # exit 0: every drawn edge is a row and every row is drawn
```

Which `dot` `render` runs, in this order: `--dot PATH` or `QLFSM_DOT` when given; else
`graphviz-pure` when installed (a pip-installable, pure-Rust port of Graphviz's `dot`, pinned in
the `diagrams` extra); else the system `dot` on `PATH` (Debian: `apt-get install -y graphviz`).
The pinned port comes first because its output is byte-identical on every machine, so
re-rendering never churns the committed SVGs; Debian's `dot` draws the same graph, edge for
edge, but lays text out with whatever fonts the machine has, so its coordinates vary. The
committed SVGs were drawn with `graphviz-pure`.

The staleness test compares `*.dot`, `*.mmd` and this README byte for byte, each SVG by what it
draws (states, terminal marks, edges and labels) and by the digest of the source it was drawn
from, and, with `graphviz-pure`, the SVG bytes too. `qlfsm diagrams check` needs no `dot` at
all: it reads the SVG and Mermaid files.
"""


def readme(specs: Sequence[MachineSpec], mermaid: dict[str, str]) -> str:
    parts: list[str] = [_README_HEAD]
    records = {r.machine: r for r in RECORDS}
    for spec in specs:
        look = _look(spec.name)
        parts.append(f"## {look.title}\n")
        parts.append(f"![{spec.name} diagram]({spec.name}.svg)\n")
        record = records.get(spec.name)
        if spec.name == "run":
            parts.append("### ADR-0001 Run table (spec 01 §Run)\n")
            parts.append("\n".join(_lifecycle_table(ADR_0001_RUN_TABLE)) + "\n")
            parts.append(
                "(\\*) `lost -> retry_wait` is not in ADR-0001's table: the QingLong 3.0 "
                "implementation added it for lost-run retry (ADR-0380 amendment).\n"
            )
        elif spec.name == "attempt":
            parts.append("### ADR-0001 Attempt table (spec 01 §Attempt)\n")
            parts.append("\n".join(_lifecycle_table(ADR_0001_ATTEMPT_TABLE)) + "\n")
        if record is not None:
            parts.append(f"### Every edge the {spec.name} diagram must show\n")
            parts.append("\n".join(_expected_table(record)) + "\n")
        parts.append(f"### Mermaid ({spec.name}.mmd)\n")
        parts.append("```mermaid\n" + mermaid[spec.name].rstrip("\n") + "\n```\n")
    parts.append("## ADR-0068 decision table (spec 04 §Per candidate)\n")
    parts.append(
        "First matching row wins. Rows without edges move no state (unresolved / failed).\n"
    )
    parts.append("\n".join(_decision_table(ADR_0068_TABLE, ("run", "attempt"))) + "\n")
    parts.append("## ADR-0448 decision table (spec 05 §Per candidate)\n")
    parts.append("First matching row wins; each row ends the candidate in one outcome.\n")
    parts.append("\n".join(_decision_table(ADR_0448_TABLE, ("legacy_shadow",))) + "\n")
    parts.append(_README_DOT)
    return "\n".join(parts)
