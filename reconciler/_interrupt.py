"""A signal that reaches the `qlfsm` program while it is still importing (spec 06: an interrupt
ends every command with one line, no traceback).

The console script and ``python -m reconciler`` import this package before ``main()`` can
install the command line's guard (``reconciler.cli._guard``), and this package imports its
public names, the start-up's modules with them. Its first import is this module: when the
process is the `qlfsm` program, SIGHUP, SIGINT and SIGTERM are only remembered from here on,
and the guard raises the first one as soon as it is installed, where ``main()`` ends every
command. Any other process importing the package (a service embedding it, the tests) is left
as it was.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

WATCHED = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
# The handlers the program had before (what the guard takes as "the caller's"), and the
# signals that came meanwhile, in order.
ORIGINAL: dict[int, Any] = {}
EARLY: list[int] = []


def is_program(argv0: str, orig_argv: list[str]) -> bool:
    """Whether the process is the `qlfsm` program: the console script, or ``python -m
    reconciler`` (whose ``sys.argv[0]`` is still ``-m`` while the package is imported)."""
    if os.path.basename(argv0) == "qlfsm":
        return True
    if argv0 != "-m":
        return False
    for i, arg in enumerate(orig_argv[1:], 1):
        if arg == "-m":
            return orig_argv[i + 1 : i + 2] == ["reconciler"]
        if arg.startswith("-m"):
            return arg == "-mreconciler"
    return False


def _remember(signum: int, frame: FrameType | None) -> None:
    # Later signals wait, as under the guard: the first one decides how the command ends.
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    EARLY.append(signum)


def defer(argv0: str, orig_argv: list[str]) -> None:
    """In the `qlfsm` program, remember SIGHUP, SIGINT and SIGTERM instead of acting on them,
    until the guard takes over; elsewhere, nothing."""
    if not is_program(argv0, orig_argv):
        return
    for signum in WATCHED:
        previous = signal.getsignal(signum)
        if previous == signal.SIG_IGN:
            continue  # ignored by whoever started qlfsm (nohup): it stays ignored
        ORIGINAL[signum] = previous
        signal.signal(signum, _remember)


defer(sys.argv[0] if sys.argv else "", sys.orig_argv)
