"""`qlfsm diagrams render` and `qlfsm diagrams check` (spec 07).

Render: every machine of ``fsm.qinglong.ALL_SPECS`` goes through `transitions`' diagram extension
(``GraphMachine`` with its ``graphviz`` and ``mermaid`` engines) to a Graphviz source
(``<machine>.dot``), an SVG drawn by Graphviz's ``dot`` from that source, and Mermaid text; plus
``README.md``, which shows each diagram beside the records' tables.

Check: reads the RENDERED files back (the SVG that ``dot`` drew and the Mermaid text, never the
Python objects) and compares each with the records' tables of
``reconciler/diagrams/_records.py`` in both directions. Lifecycle (unguarded) edges answer to
the ADR-0001 tables, guarded Run and Attempt edges to the ADR-0068 decision table, legacy-shadow
edges to ADR-0448's; on the two decision machines every edge answers to one row (or evidence
step) of its record's table, its label's row id (``row 13``) checked like its guard.

Which ``dot``: ``--dot`` / ``QLFSM_DOT`` when given; else ``graphviz-pure`` (the pinned, pip-
installable port of Graphviz in the ``diagrams`` extra) when installed, because its output is
the same on every machine, so re-rendering never churns the committed SVGs; else the system
``dot`` on PATH. Debian's ``dot`` lays text out with whatever fonts the machine has, so its
coordinates differ from machine to machine: that is why the staleness test compares the sources
byte for byte and the SVG as the graph it draws (see ``tests/test_diagrams.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from reconciler._escape import clean
from reconciler.cli._exit import UsageError
from reconciler.diagrams import RECORDS, DiagramsError, check, render

# In a checkout (editable install or run from the repository) the committed diagrams sit
# beside the packages; an installed copy has no diagrams/, so use ./diagrams of the working
# directory (the repository root, where README's commands are run).
_BESIDE = Path(__file__).resolve().parents[2] / "diagrams"
DEFAULT_DIR = _BESIDE if _BESIDE.is_dir() else Path.cwd() / "diagrams"


# --- Command line --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (its --help still leaves through SystemExit)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(
        prog="qlfsm diagrams",
        description="Render the machines as diagrams, or check the rendered diagrams against "
        "the records' tables (spec 07).",
    )
    # Subparsers are made by type(parser): errors stay one line there too.
    sub = parser.add_subparsers(dest="action", metavar="COMMAND", required=True)
    render_p = sub.add_parser("render", help="render every machine to SVG, dot and Mermaid")
    render_p.add_argument(
        "--out", type=Path, default=DEFAULT_DIR, help="output directory (default: diagrams/)"
    )
    render_p.add_argument("--dot", help="the dot program (default: $QLFSM_DOT, graphviz-pure, dot)")
    check_p = sub.add_parser("check", help="compare the rendered diagrams with the records")
    check_p.add_argument(
        "--dir", type=Path, default=DEFAULT_DIR, help="diagrams directory (default: diagrams/)"
    )
    return parser


def diagrams_command(argv: list[str]) -> int:
    """``qlfsm diagrams render [--out DIR] [--dot PATH]`` / ``qlfsm diagrams check [--dir DIR]``.

    Exit 0 when done / no difference; 1 on any difference or a failure to render; 2 on a
    usage error. Errors are one line on stderr, never a traceback.
    """
    try:
        args = _parser().parse_args(argv)
    except UsageError as exc:
        print(clean(f"qlfsm diagrams: error: {exc} (see: qlfsm diagrams --help)"), file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help: argparse printed it and exits 0
        return int(exc.code or 0)
    if args.action == "render":
        try:
            written = render(args.out, dot=args.dot)
        except (DiagramsError, OSError) as exc:
            what = f"cannot write {args.out}: " if isinstance(exc, OSError) else ""
            print(clean(f"qlfsm diagrams render: error: {what}{exc}"), file=sys.stderr)
            return 1
        for path in written:
            print(f"wrote {clean(path)}")
        return 0
    directory: Path = args.dir
    if not directory.is_dir():
        print(
            f"qlfsm diagrams check: error: {clean(directory)} is not a directory "
            "(render first: qlfsm diagrams render)",
            file=sys.stderr,
        )
        return 2
    differences = check(directory)
    for line in differences:
        print(clean(line))  # D-14: a difference may quote what a rendered file holds
    if differences:
        print(f"diagrams check: {len(differences)} difference(s) with the records' tables")
        return 1
    edges = sum(len(r.edges) for r in RECORDS)
    print(
        f"diagrams check: {len(RECORDS)} machines, {edges} edges: SVG and Mermaid match "
        "ADR-0001, ADR-0068 and ADR-0448"
    )
    return 0
