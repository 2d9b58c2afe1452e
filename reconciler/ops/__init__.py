"""The operator's side of start-up: why a run ended where it did (:mod:`._explain`), an audited
decision for a run that blocks start-up (:mod:`._resolve`), and the cleanup of what ended runs
left behind (:mod:`._sweep`). Domain code: it reads and writes through ``storage`` and the node's
ports, and never prints; the command line is in ``reconciler.cli``.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

from reconciler._lazy import lazy_exports

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from reconciler.ops._explain import ADR0068 as ADR0068
    from reconciler.ops._explain import ROW_FACTS as ROW_FACTS
    from reconciler.ops._explain import Explanation as Explanation
    from reconciler.ops._explain import Step as Step
    from reconciler.ops._explain import UnknownRun as UnknownRun
    from reconciler.ops._explain import explain as explain
    from reconciler.ops._explain import iso_time as iso_time
    from reconciler.ops._explain_run import explain_run as explain_run
    from reconciler.ops._now import ACTIVE_RUN as ACTIVE_RUN
    from reconciler.ops._now import legacy_now as legacy_now
    from reconciler.ops._process import process_view as process_view
    from reconciler.ops._process import stop_command as stop_command
    from reconciler.ops._resolve import InvalidReason as InvalidReason
    from reconciler.ops._resolve import ResolveRefused as ResolveRefused
    from reconciler.ops._resolve import check_reason as check_reason
    from reconciler.ops._resolve import legal_targets as legal_targets
    from reconciler.ops._resolve import operator_actor as operator_actor
    from reconciler.ops._resolve import resolve as resolve
    from reconciler.ops._sweep import SweepResult as SweepResult
    from reconciler.ops._sweep import sweep as sweep

_EXPORTS: dict[str, str] = {
    "ADR0068": "reconciler.ops._explain",
    "ROW_FACTS": "reconciler.ops._explain",
    "UnknownRun": "reconciler.ops._explain",
    "Explanation": "reconciler.ops._explain",
    "Step": "reconciler.ops._explain",
    "explain": "reconciler.ops._explain",
    "explain_run": "reconciler.ops._explain_run",
    "iso_time": "reconciler.ops._explain",
    "ACTIVE_RUN": "reconciler.ops._now",
    "legacy_now": "reconciler.ops._now",
    "process_view": "reconciler.ops._process",
    "stop_command": "reconciler.ops._process",
    "InvalidReason": "reconciler.ops._resolve",
    "ResolveRefused": "reconciler.ops._resolve",
    "check_reason": "reconciler.ops._resolve",
    "legal_targets": "reconciler.ops._resolve",
    "operator_actor": "reconciler.ops._resolve",
    "resolve": "reconciler.ops._resolve",
    "SweepResult": "reconciler.ops._sweep",
    "sweep": "reconciler.ops._sweep",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
