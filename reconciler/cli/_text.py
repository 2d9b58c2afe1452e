"""Text for a terminal, standard library only: the zero-candidate `reconcile` prints its
verdict with these without loading ``reconciler.cli._util`` (argparse, json, typing)."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # no `typing` at run time: the zero-candidate path imports this module
if TYPE_CHECKING:
    from typing import Any


def use_colour(stream: Any = None) -> bool:
    s = stream if stream is not None else sys.stdout
    return bool(getattr(s, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)
