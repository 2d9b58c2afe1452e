"""qlfsm's application layer: ``startup``, ``reconcile`` and ``shadow_pass``
(``reconciler._startup``), the calls a Python service embeds, their typed reports and errors,
and the ADR-0448 bootstrap (switches, profile, fail-open, the audit record: ``run_shadow``,
``parse_origins``).

The parts have their own public names: ``reconciler.node`` (receipts, process identity),
``reconciler.launcher`` (`qlfsm launch`), ``reconciler.primary`` (the ADR-0068 pass),
``reconciler.shadow`` (the ADR-0448 pass), ``reconciler.ops`` (explain, resolve, sweep),
``reconciler.diagrams``. This package imports none of them: a start-up with zero candidates
and an empty receipt journal loads neither the machines, the passes nor the node (spec 04
"Before any candidate"); the application layer imports a part when it has work for it.
The command line is ``reconciler.cli`` (``qlfsm``, ``python -m reconciler``).
"""

from __future__ import annotations

# First (spec 06): in the `qlfsm` program, a signal while this package imports is one line too.
from reconciler import _interrupt  # noqa: F401  (imported for that effect)
from reconciler._cursor import Cursor
from reconciler._errors import FatalError, RetryLater, UsageError
from reconciler._profiles import ProfileError
from reconciler._reports import (
    NormalizeReport,
    ReconcileReport,
    ShadowReport,
    StartupReport,
)
from reconciler._shadow_entry import (
    ALLOWED_ORIGINS,
    ORIGINS_ENV,
    REFUSED_ORIGINS,
    Origins,
    ShadowResult,
    audit_record,
    failed,
    parse_origins,
    run_shadow,
    unknown_origin_hints,
)
from reconciler._startup import reconcile, shadow_pass, startup
from reconciler._summary import CandidateResult

__all__ = [
    "ALLOWED_ORIGINS",
    "ORIGINS_ENV",
    "REFUSED_ORIGINS",
    "CandidateResult",
    "Cursor",
    "FatalError",
    "NormalizeReport",
    "Origins",
    "ProfileError",
    "ReconcileReport",
    "RetryLater",
    "ShadowReport",
    "ShadowResult",
    "StartupReport",
    "UsageError",
    "audit_record",
    "failed",
    "parse_origins",
    "reconcile",
    "run_shadow",
    "shadow_pass",
    "startup",
    "unknown_origin_hints",
]
