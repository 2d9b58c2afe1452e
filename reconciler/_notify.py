"""Where the application layer's progress and warning lines go when its caller names no
``notify`` port: stderr, one line each, as `qlfsm` prints them (spec 06). Standard library and
``reconciler._escape`` only (the zero-candidate start-up imports this module)."""

from __future__ import annotations

import sys

from reconciler._escape import one_line as one_line


def to_stderr(line: str) -> None:
    """The default ``notify``: ``line`` as given, on stderr, flushed."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
