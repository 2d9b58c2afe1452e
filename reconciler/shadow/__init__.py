"""ADR-0448: the legacy-shadow pass, its entry (switches, profile, fail-open, the audit record),
its ports, and the ADR-0449 difference report.
"""

from __future__ import annotations

from reconciler._shadow_entry import (
    ALLOWED_ORIGINS,
    ORIGINS_ENV,
    REFUSED_ORIGINS,
    Cursor,
    Origins,
    ShadowResult,
    audit_record,
    failed,
    parse_origins,
    run_shadow,
    unknown_origin_hints,
)
from reconciler.shadow._pass import PassOutcome, gather, run_pass
from reconciler.shadow._ports import CandidateSource, PassHooks, PassPorts
from reconciler.shadow._report import (
    BUDGETS,
    OUTCOME_KEYS,
    Budget,
    ConservationViolation,
    PassCounts,
    build_metrics,
    build_report,
    check_conservation,
)
from reconciler.shadow._writes import COMPATIBILITY, RECONCILER, WRITES, Effect

__all__ = [
    "ALLOWED_ORIGINS",
    "BUDGETS",
    "COMPATIBILITY",
    "ORIGINS_ENV",
    "OUTCOME_KEYS",
    "RECONCILER",
    "REFUSED_ORIGINS",
    "WRITES",
    "Budget",
    "CandidateSource",
    "ConservationViolation",
    "Cursor",
    "Effect",
    "Origins",
    "PassCounts",
    "PassHooks",
    "PassOutcome",
    "PassPorts",
    "ShadowResult",
    "audit_record",
    "build_metrics",
    "build_report",
    "check_conservation",
    "failed",
    "gather",
    "parse_origins",
    "run_pass",
    "run_shadow",
    "unknown_origin_hints",
]
