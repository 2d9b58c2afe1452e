"""The `qlfsm` command line: the only layer that parses arguments, prints and maps errors to exit
codes. Nothing outside it imports it.
"""

from __future__ import annotations

from reconciler.cli._main import main

__all__ = [
    "main",
]
