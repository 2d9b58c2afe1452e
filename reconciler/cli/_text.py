"""Text for a terminal: colour when stdout is one, and aligned tables.

Every value a command prints that it did not write itself (from the database, a receipt,
`/proc`, the environment or an argument) goes through ``reconciler._escape`` (docs/decisions.md
D-14): ``clean`` for a field, ``shell_word`` inside a suggested command, ``json_line`` for
`--json`, ``one_line`` for a whole stderr line; :func:`table` cleans every cell."""

from __future__ import annotations

import os
import sys

from reconciler._escape import clean


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
