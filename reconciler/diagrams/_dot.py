"""Which ``dot`` draws the SVGs of `qlfsm diagrams render` (spec 07), and running it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

PINNED_RENDERER = "graphviz-pure"
INSTALL_HINT = "pip install 'graphviz-pure==0.2.2' (or: apt-get install -y graphviz)"


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
    found = _lookup(wanted) if wanted else _lookup(PINNED_RENDERER) or _lookup("dot")
    if found is None and wanted:
        raise DiagramsError(f"dot program {wanted!r} not found or not executable")
    if found is None:
        raise DiagramsError(f"no Graphviz dot found: {INSTALL_HINT}, or set QLFSM_DOT")
    return found


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


def svg_of(dot: str, source: str, dot_name: str) -> str:
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
