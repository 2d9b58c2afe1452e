"""ADR-0068: the primary start-up pass, its writes and its summary."""

from __future__ import annotations

from reconciler._profiles import GRACE_MS
from reconciler._summary import RESULTS, CandidateResult, before_any_candidate
from reconciler.primary._edges import EFFECTS, RECEIPT_EXECUTOR
from reconciler.primary._pass import (
    QUARANTINE_KEEP_MS,
    PrimaryReconciler,
    predict,
    reconcile_connection,
)
from reconciler.primary._state import Probe

__all__ = [
    "EFFECTS",
    "GRACE_MS",
    "QUARANTINE_KEEP_MS",
    "RECEIPT_EXECUTOR",
    "RESULTS",
    "CandidateResult",
    "PrimaryReconciler",
    "Probe",
    "before_any_candidate",
    "predict",
    "reconcile_connection",
]
