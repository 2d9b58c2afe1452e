"""Rendering for `qlfsm diagrams render` (spec 07): the machines through `transitions`.

Every machine of ``fsm.qinglong.ALL_SPECS`` goes through `transitions`' diagram extension
(``GraphMachine`` with its ``graphviz`` and ``mermaid`` engines, styled for review here) to a
Graphviz source, an SVG drawn by the chosen ``dot`` from that source, and Mermaid text; plus
``README.md``, which shows each diagram beside the records' tables. The command and the
choice of ``dot`` are described in ``reconciler/cli/_diagrams.py``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any, Literal

from fsm import MachineSpec, transitions_config
from fsm.qinglong import ALL_SPECS
from reconciler._escape import clean
from reconciler.diagrams._dot import DiagramsError, find_dot, svg_of
from reconciler.diagrams._looks import _Look, _look
from reconciler.diagrams._readme import readme

# The node that carries the initial-state arrow; never a state of any machine.
_START = "__start__"

_FONT = "Helvetica"
_DECISION_COLOR = "#1f4fbf"
_MUTED_COLOR = "#9a9a9a"
_TERMINAL_FILL = "#e8e8e8"
_AWAITING_FILL = "#fff2cc"

# --- Rendering through transitions ---------------------------------------------------------


def _transitions_class(module: str, name: str) -> Any:
    # Imported on use: the diagram extension pulls in asyncio, and no reconcile path should pay
    # for it. Typed Any: transitions' stubs for the graph classes are looser than the code
    # (they type ``Graph.machine`` as a class), and these subclasses follow the code.
    return getattr(importlib.import_module(module), name)


# One run's path on a diagram (`qlfsm explain --svg`): (source, dest) -> the event sequences
# that took that edge, in order.
Highlight = dict[tuple[str, str], list[int]]
_TAKEN_COLOR = "#c62828"


# How the review diagrams look in dot (transitions reads these from the machine as it draws);
# the per-machine ``ranksep`` is added from the machine's look.
_DOT_GRAPH = {
    "directed": "true",
    "strict": "false",
    "rankdir": "LR",
    "labelloc": "t",
    "fontname": _FONT,
    "fontsize": "18",
    "nodesep": "0.35",
}
_DOT_STYLE = {
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


def _review_machine(
    spec: MachineSpec,
    engine: Literal["graphviz", "mermaid"],
    highlight: Highlight | None = None,
) -> Any:
    """A `transitions` GraphMachine for ``spec`` whose graph class draws the review styling
    (and, with ``highlight``, one run's path: those edges red, thick and numbered)."""
    GraphMachine: Any = _transitions_class("transitions.extensions.diagrams", "GraphMachine")
    graph_cls = _dot_graph_class() if engine == "graphviz" else _mermaid_graph_class()
    look = _look(spec.name)
    machine = GraphMachine(
        model=None,
        states=[{"name": s, "final": s in spec.terminal} for s in spec.states],
        initial=spec.initial,
        transitions=transitions_config(spec),
        auto_transitions=False,
        show_conditions=True,
        graph_engine=engine,
        title=look.title,
    )
    machine.graph_cls = graph_cls
    machine.review_look = look
    machine.review_highlight = dict(highlight or {})
    return machine


def _label_lines(graph: Any, transitions: Iterable[dict[str, Any]]) -> list[str]:
    return [str(graph._transition_label(t)) for t in transitions]


def _pairs(transitions: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    # As transitions does, one drawn edge per (source, dest), its transitions in order.
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in transitions:
        if t.get("trigger") and "dest" in t:
            pairs.setdefault((t["source"], t["dest"]), []).append(t)
    return pairs


def xml_text(text: str) -> str:
    """``text`` as XML character data (an SVG <title>/<text>, a DOT HTML-like label): every
    character XML 1.0 forbids (C0 but TAB/LF/CR, surrogates, U+FFFE/U+FFFF), and every other one
    a viewer would act on, written visibly as its escape (``\\x1b``; ``reconciler._escape``,
    D-14), then ``&<>"'`` as entities. A run id read from the database reaches the SVG so."""
    return escape(clean(text))


def _html_row(text: str, color: str, font: str = "") -> str:
    # One table row per transition: dot writes each as one SVG <text>, which is what the
    # check reads back. The cell padding keeps the text clear of the arrowheads.
    return f'<tr><td align="left"><font {font}color="{color}">{xml_text(text)}</font></td></tr>'


def _html_label(rows: list[str]) -> str:
    table = '<table border="0" cellborder="0" cellspacing="0" cellpadding="2">'
    return f"<{table}{''.join(rows)}</table>>"


def _legend(title: str, look: _Look, has_lifecycle: bool) -> str:
    # The picture explains itself when opened alone (the README repeats it in words); it
    # names only the marks this machine uses. One mark per line: dot places each text piece
    # by ITS font metrics, and pieces side by side overlap when a viewer's sans-serif is wider.
    items: list[tuple[str, str]] = []
    if look.decision_machine:
        rows = f"blue: row N [guard] of the {look.decisions} table, first match wins"
        items += [
            ("black", "box: the evidence the decision waits for, in the record's order"),
            (_DECISION_COLOR, rows),
            (_DECISION_COLOR, "step N [guard]: gather the next evidence"),
        ]
    else:
        if has_lifecycle:
            items.append(("black", "black: ADR-0001 lifecycle trigger"))
        items.append((_DECISION_COLOR, f"blue: {look.decisions} decision, trigger [guard]"))
    if has_lifecycle and look.muted_into:
        items.append((_MUTED_COLOR, "grey: cancel / time-out"))
    if look.muted_guards:
        items.append((_MUTED_COLOR, "grey: an exception, in whichever state it happens"))
    items.append(("black", look.terminal_mark))
    if look.awaiting:
        items.append(("black", "dashed: not terminal, awaits a decision"))
    lines = "".join(_html_row(text, color, 'point-size="11" ') for color, text in items)
    return (
        '<<table border="0" cellborder="0" cellspacing="1">'
        f'<tr><td><font point-size="18">{xml_text(title)}</font></td></tr>'
        f"{lines}</table>>"
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
            look: _Look = self.machine.review_look
            node_styles = self.machine.style_attributes["node"]
            notes = dict(look.notes)
            for state in states:
                name = state["name"]
                awaiting = name in look.awaiting
                kind = "terminal" if state.get("final") else "awaiting" if awaiting else ""
                style = {**node_styles["default"], **node_styles.get(kind, {})}
                style["class"] = f"state {kind}" if kind else "state"
                if name in look.spine:
                    style["group"] = "spine"
                # Centred labels (transitions' default ends each with a left-align mark); the
                # check reads the state from the node's <title>, i.e. its name, not its label.
                note = notes.get(name, "not terminal" if awaiting else "")
                container.node(name, label=f"{name}\\n({note})" if note else name, **style)

        def _add_edges(self, transitions: list[dict[str, Any]], container: Any) -> None:
            # One drawn edge per (source, dest), one label line per transition: black
            # `trigger` for the ADR-0001 lifecycle, blue `trigger [guard]` for a reconciler
            # decision. The edge is blue when a reconciler may take it.
            look: _Look = self.machine.review_look
            pairs = _pairs(transitions)
            spine = set(zip(look.spine, look.spine[1:], strict=False))
            for (src, dst), items in pairs.items():
                plain = [t for t in items if not t.get("conditions")]
                guarded = [t for t in items if t.get("conditions")]
                quiet = [t for t in guarded if set(t["conditions"]) <= look.muted_guards]
                loud = [t for t in guarded if t not in quiet]
                muted = not loud and (bool(quiet) or dst in look.muted_into)
                plain_color = _MUTED_COLOR if muted else "black"
                rows = [_html_row(x, plain_color) for x in _label_lines(self, plain)]
                rows += [_html_row(x, _DECISION_COLOR) for x in _label_lines(self, loud)]
                rows += [_html_row(x, _MUTED_COLOR) for x in _label_lines(self, quiet)]
                attrs = {
                    "label": _html_label(rows),
                    "class": "decision" if guarded else "lifecycle",
                    "color": _DECISION_COLOR if loud else plain_color,
                }
                if (src, dst) in spine:
                    attrs["weight"] = "8"
                if muted:
                    attrs["weight"] = "0"
                taken = self.machine.review_highlight.get((src, dst))
                if taken:
                    _mark_taken(attrs, rows, taken)
                container.edge(src, dst, **attrs)
            # A path may hold an edge the tables do not have (a database another writer filled):
            # drawn dashed, so the picture never hides it.
            for (src, dst), taken in self.machine.review_highlight.items():
                if (src, dst) not in pairs:
                    attrs = {"class": "outside", "style": "dashed", "color": "black"}
                    rows = [_html_row("not an edge of this machine", _TAKEN_COLOR)]
                    _mark_taken(attrs, rows, taken)
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
            graph.edge(_START, self.machine.initial, label="", **{"class": "initial"})
            return graph

    return ReviewDotGraph


def _mark_taken(attrs: dict[str, str], rows: list[str], sequences: list[int]) -> None:
    """Red, thick, and numbered with the event sequences that took the edge."""
    rows.insert(0, _html_row(" ".join(f"#{n}" for n in sequences), _TAKEN_COLOR))
    attrs["label"] = _html_label(rows)
    attrs["class"] = f"{attrs['class']} taken"
    attrs["color"] = _TAKEN_COLOR
    attrs["penwidth"] = "3"


def _mermaid_graph_class() -> Any:
    Graph: Any = _transitions_class("transitions.extensions.diagrams_mermaid", "Graph")

    class ReviewMermaidGraph(Graph):  # type: ignore[misc]
        """transitions' Mermaid Graph, with terminal states marked the Mermaid way."""

        def _add_edges(self, transitions: list[dict[str, Any]], container: list[str]) -> None:
            # One transition per line (`<br>`) instead of transitions' " | ", so that Mermaid
            # never wraps inside `trigger [guard]`.
            for (src, dst), items in _pairs(transitions).items():
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


def dot_source(spec: MachineSpec, highlight: Highlight | None = None) -> str:
    """The Graphviz source of one machine, as transitions' graphviz engine writes it; with
    ``highlight``, one run's path drawn on it (never committed: `qlfsm explain --svg`)."""
    machine = _review_machine(spec, "graphviz", highlight)
    machine.machine_attributes = {**_DOT_GRAPH, "ranksep": machine.review_look.ranksep}
    machine.style_attributes = _DOT_STYLE
    return str(machine.graph_cls(machine).get_graph(title=machine.title).source)


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


# --- render --------------------------------------------------------------------------------


def render_sources(specs: Sequence[MachineSpec] = ALL_SPECS) -> dict[str, str]:
    """Every file that does not need ``dot``: ``<m>.dot``, ``<m>.mmd`` and ``README.md``."""
    files: dict[str, str] = {}
    for spec in specs:
        files[f"{spec.name}.dot"] = dot_source(spec)
        files[f"{spec.name}.mmd"] = mermaid_source(spec)
    files["README.md"] = readme(specs, {s.name: files[f"{s.name}.mmd"] for s in specs})
    return files


def render(
    out: Path, specs: Sequence[MachineSpec] = ALL_SPECS, dot: str | None = None
) -> list[Path]:
    """Write every diagram file into ``out``; return the paths written, in order."""
    program = find_dot(dot)
    files = render_sources(specs)
    for spec in specs:
        name = f"{spec.name}.dot"
        files[f"{spec.name}.svg"] = svg_of(program, files[name], name)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / name for name in sorted(files)]
    for path in written:
        path.write_bytes(files[path.name].encode())
    return written
