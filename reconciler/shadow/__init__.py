"""ADR-0448: the legacy-shadow pass, its ports, its writes and the ADR-0449 difference report.
The bootstrap that decides whether it runs (switches, profile, fail-open, the audit record) is
the application layer's: ``reconciler.run_shadow`` (``reconciler/_shadow_entry.py``).
"""

from __future__ import annotations

from reconciler.shadow._hooks import PassHooks
from reconciler.shadow._pass import PassOutcome, gather, run_pass
from reconciler.shadow._ports import PassPorts, PassWriter
from reconciler.shadow._report import (
    BUDGETS,
    OUTCOME_KEYS,
    Budget,
    ConservationViolation,
    PassCounts,
    build_metrics,
    build_report,
    build_summary,
    check_conservation,
)
from reconciler.shadow._writes import COMPATIBILITY, RECONCILER, WRITES, Effect

__all__ = [
    "BUDGETS",
    "COMPATIBILITY",
    "OUTCOME_KEYS",
    "RECONCILER",
    "WRITES",
    "Budget",
    "ConservationViolation",
    "Effect",
    "PassCounts",
    "PassHooks",
    "PassOutcome",
    "PassPorts",
    "PassWriter",
    "build_metrics",
    "build_report",
    "build_summary",
    "check_conservation",
    "gather",
    "run_pass",
]
