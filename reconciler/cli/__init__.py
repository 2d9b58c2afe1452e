"""The `qlfsm` command line: the only layer that parses arguments, prints and maps errors to exit
codes. Nothing outside it imports it.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from reconciler.cli._main import main as main

_EXPORTS: dict[str, str] = {
    "main": "reconciler.cli._main",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once resolved, a plain attribute
    return value
