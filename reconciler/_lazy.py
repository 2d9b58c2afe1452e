"""Lazy package exports (PEP 562): a package names its public objects in a string table and
imports the module behind one only when the name is first used, so importing a package loads
none of its modules (the zero-candidate start-up and the wrapper stay cheap)."""

from __future__ import annotations

TYPE_CHECKING = False  # no `typing` at run time: this module is on the zero-candidate path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``exports`` maps a public name to the module that
    defines it; a resolved name is kept in ``namespace`` (then a plain attribute)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
