"""Text for a terminal, standard library only: the zero-candidate `reconcile` prints its
verdict with these without loading ``reconciler.cli._util`` (argparse, json, typing).

Every value a command prints that it did not write itself (from the database, a receipt,
`/proc`, the environment or an argument) goes through ``reconciler._escape`` (docs/decisions.md
D-14): :func:`clean` for a field, :func:`shell_word` inside a suggested command,
:func:`json_line` for `--json`; :func:`table` cleans every cell, :func:`one_line` a whole
stderr line."""

from __future__ import annotations

import os
import sys

from reconciler._escape import clean as clean
from reconciler._escape import json_line as json_line
from reconciler._escape import one_line as one_line
from reconciler._escape import shell_word as shell_word


def use_colour() -> bool:
    return bool(getattr(sys.stdout, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table; every cell through :func:`clean` (a cell never holds a line
    break, an escape sequence or a bidi control, whoever wrote it)."""
    rows = [[clean(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *map(line, rows)])
