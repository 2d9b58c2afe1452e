"""ADR-0068: the primary start-up pass, its writes and its summary.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from reconciler.primary._edges import RECEIPT_EXECUTOR as RECEIPT_EXECUTOR
    from reconciler.primary._empty import empty_summary as empty_summary
    from reconciler.primary._pass import GRACE_MS as GRACE_MS
    from reconciler.primary._pass import QUARANTINE_KEEP_MS as QUARANTINE_KEEP_MS
    from reconciler.primary._pass import reconcile as reconcile
    from reconciler.primary._summary import CandidateResult as CandidateResult
    from reconciler.primary._summary import summarize as summarize

_EXPORTS: dict[str, str] = {
    "GRACE_MS": "reconciler.primary._pass",
    "QUARANTINE_KEEP_MS": "reconciler.primary._pass",
    "reconcile": "reconciler.primary._pass",
    "RECEIPT_EXECUTOR": "reconciler.primary._edges",
    "CandidateResult": "reconciler.primary._summary",
    "summarize": "reconciler.primary._summary",
    "empty_summary": "reconciler.primary._empty",
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
