"""Where the application layer's progress and warning lines go when its caller names no
``notify`` port: stderr, one line each, as `qlfsm` prints them (spec 06). Standard library and
``reconciler._escape`` only (the zero-candidate start-up imports this module)."""

from __future__ import annotations

import sys

from reconciler._escape import clean


def to_stderr(line: str) -> None:
    """The default ``notify``: ``line`` as given, on stderr, flushed."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def one_line(text: str) -> str:
    """``text`` as one line: whitespace runs one space, anything a terminal would act on
    escaped (D-14: the line may repeat an argument or a path)."""
    return clean(" ".join(text.split()))
