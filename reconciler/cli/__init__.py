"""The `qlfsm` command line: the only layer that parses arguments, prints and maps errors to exit
codes. Nothing outside it imports it.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

from reconciler._lazy import lazy_exports

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from reconciler.cli._main import main as main

_EXPORTS: dict[str, str] = {
    "main": "reconciler.cli._main",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
