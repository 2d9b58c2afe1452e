"""One run's path drawn on the Run and Attempt diagrams (`qlfsm explain --svg`).

The machines are rendered exactly as for `qlfsm diagrams render` (through `transitions`' diagram
extension and ``dot``), with the edges the run took red, thick, with the class ``taken`` and
numbered with the sequences of the events that took them. The two drawings are put one above
the other in one SVG file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fsm.qinglong import ATTEMPT_SPEC, RUN_SPEC
from reconciler.diagrams._dot import DiagramsError, _run_dot, find_dot
from reconciler.diagrams._render import Highlight, dot_source, xml_text

_HEADER_PT = 28.0
_SIZE = re.compile(r'<svg[^>]*?\swidth="([0-9.]+)pt"[^>]*?\sheight="([0-9.]+)pt"', re.S)


def path_svg(title: str, taken: Mapping[str, Highlight], dot: str | None = None) -> str:
    """One SVG with the Run diagram above the Attempt diagram, each with its ``taken`` edges
    (machine name -> (source, dest) -> sequences) highlighted. DiagramsError when ``dot`` or
    the diagram extension is missing."""
    program = find_dot(dot)
    parts: list[tuple[str, float, float, str]] = []
    for spec in (RUN_SPEC, ATTEMPT_SPEC):
        svg = _run_dot(program, dot_source(spec, dict(taken.get(spec.name, {}))))
        parts.append((spec.name, *_inner(svg, spec.name)))
    width = max(w for _, w, _, _ in parts)
    height = _HEADER_PT + sum(h for _, _, h, _ in parts)
    out = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}pt" height="{height:.0f}pt" '
        f'viewBox="0 0 {width:.2f} {height:.2f}">',
        # D-14: the title holds the run id, read from the database: valid XML text, visibly.
        f"<title>{xml_text(title)}</title>",
        f'<text x="8" y="18" font-family="Helvetica,sans-serif" font-size="14">{xml_text(title)}'
        "</text>",
    ]
    y = _HEADER_PT
    for name, w, h, inner in parts:
        out.append(
            f'<svg id="{name}-machine" x="0" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}"{inner}'
        )
        y += h
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _inner(svg: str, prefix: str) -> tuple[float, float, str]:
    """The drawing's size in pt; and its ``<svg`` element without its own size (its attributes
    from the viewBox on), its ids prefixed so that the two drawings never share one."""
    at = svg.find("<svg")
    size = _SIZE.search(svg, at)
    if at < 0 or size is None:
        raise DiagramsError("dot wrote no SVG with a size")
    width, height = float(size.group(1)), float(size.group(2))
    # Keep everything after the opening tag's size: `<svg width=.. height=..` -> the rest.
    body = re.sub(r'^<svg[^>]*?\sheight="[0-9.]+pt"', "", svg[at:], count=1, flags=re.S)
    body = re.sub(r'\bid="', f'id="{prefix}-', body)
    body = body.replace('xlink:href="#', f'xlink:href="#{prefix}-')
    return width, height, body
