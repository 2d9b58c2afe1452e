"""ADR-0068: the primary start-up pass, its writes and its summary.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

from reconciler._lazy import lazy_exports

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from reconciler.primary._edges import EFFECTS as EFFECTS
    from reconciler.primary._edges import RECEIPT_EXECUTOR as RECEIPT_EXECUTOR
    from reconciler.primary._empty import before_any_candidate as before_any_candidate
    from reconciler.primary._empty import empty_summary as empty_summary
    from reconciler.primary._pass import GRACE_MS as GRACE_MS
    from reconciler.primary._pass import QUARANTINE_KEEP_MS as QUARANTINE_KEEP_MS
    from reconciler.primary._pass import PrimaryReconciler as PrimaryReconciler
    from reconciler.primary._pass import predict as predict
    from reconciler.primary._pass import reconcile as reconcile
    from reconciler.primary._state import Probe as Probe
    from reconciler.primary._summary import CandidateResult as CandidateResult
    from reconciler.primary._summary import summarize as summarize

_EXPORTS: dict[str, str] = {
    "PrimaryReconciler": "reconciler.primary._pass",
    "Probe": "reconciler.primary._state",
    "GRACE_MS": "reconciler.primary._pass",
    "QUARANTINE_KEEP_MS": "reconciler.primary._pass",
    "predict": "reconciler.primary._pass",
    "reconcile": "reconciler.primary._pass",
    "EFFECTS": "reconciler.primary._edges",
    "RECEIPT_EXECUTOR": "reconciler.primary._edges",
    "CandidateResult": "reconciler.primary._summary",
    "summarize": "reconciler.primary._summary",
    "empty_summary": "reconciler.primary._empty",
    "before_any_candidate": "reconciler.primary._empty",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
