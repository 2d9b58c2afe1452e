"""ADR-0448: the legacy-shadow pass, its entry (switches, profile, fail-open, the audit record),
its ports, and the ADR-0449 difference report.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

from reconciler._lazy import lazy_exports

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from reconciler.shadow._entry import ALLOWED_ORIGINS as ALLOWED_ORIGINS
    from reconciler.shadow._entry import ORIGINS_ENV as ORIGINS_ENV
    from reconciler.shadow._entry import REFUSED_ORIGINS as REFUSED_ORIGINS
    from reconciler.shadow._entry import Cursor as Cursor
    from reconciler.shadow._entry import Origins as Origins
    from reconciler.shadow._entry import ShadowResult as ShadowResult
    from reconciler.shadow._entry import audit_record as audit_record
    from reconciler.shadow._entry import failed as failed
    from reconciler.shadow._entry import parse_origins as parse_origins
    from reconciler.shadow._entry import run_shadow as run_shadow
    from reconciler.shadow._entry import unknown_origin_hints as unknown_origin_hints
    from reconciler.shadow._pass import PassOutcome as PassOutcome
    from reconciler.shadow._pass import gather as gather
    from reconciler.shadow._pass import run_pass as run_pass
    from reconciler.shadow._ports import CandidateSource as CandidateSource
    from reconciler.shadow._ports import PassHooks as PassHooks
    from reconciler.shadow._ports import PassPorts as PassPorts
    from reconciler.shadow._report import BUDGETS as BUDGETS
    from reconciler.shadow._report import OUTCOME_KEYS as OUTCOME_KEYS
    from reconciler.shadow._report import Budget as Budget
    from reconciler.shadow._report import ConservationViolation as ConservationViolation
    from reconciler.shadow._report import PassCounts as PassCounts
    from reconciler.shadow._report import build_metrics as build_metrics
    from reconciler.shadow._report import build_report as build_report
    from reconciler.shadow._report import check_conservation as check_conservation
    from reconciler.shadow._writes import COMPATIBILITY as COMPATIBILITY
    from reconciler.shadow._writes import RECONCILER as RECONCILER
    from reconciler.shadow._writes import WRITES as WRITES
    from reconciler.shadow._writes import Effect as Effect

_EXPORTS: dict[str, str] = {
    "OUTCOME_KEYS": "reconciler.shadow._report",
    "gather": "reconciler.shadow._pass",
    "unknown_origin_hints": "reconciler.shadow._entry",
    "failed": "reconciler.shadow._entry",
    "Cursor": "reconciler.shadow._entry",
    "REFUSED_ORIGINS": "reconciler.shadow._entry",
    "ALLOWED_ORIGINS": "reconciler.shadow._entry",
    "ORIGINS_ENV": "reconciler.shadow._entry",
    "Origins": "reconciler.shadow._entry",
    "ShadowResult": "reconciler.shadow._entry",
    "audit_record": "reconciler.shadow._entry",
    "parse_origins": "reconciler.shadow._entry",
    "run_shadow": "reconciler.shadow._entry",
    "PassOutcome": "reconciler.shadow._pass",
    "run_pass": "reconciler.shadow._pass",
    "CandidateSource": "reconciler.shadow._ports",
    "PassHooks": "reconciler.shadow._ports",
    "PassPorts": "reconciler.shadow._ports",
    "BUDGETS": "reconciler.shadow._report",
    "Budget": "reconciler.shadow._report",
    "ConservationViolation": "reconciler.shadow._report",
    "PassCounts": "reconciler.shadow._report",
    "build_metrics": "reconciler.shadow._report",
    "build_report": "reconciler.shadow._report",
    "check_conservation": "reconciler.shadow._report",
    "COMPATIBILITY": "reconciler.shadow._writes",
    "RECONCILER": "reconciler.shadow._writes",
    "WRITES": "reconciler.shadow._writes",
    "Effect": "reconciler.shadow._writes",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
