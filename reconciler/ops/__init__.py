"""The operator's side of start-up: why a run ended where it did (:mod:`._explain`), an audited
decision for a run that blocks start-up (:mod:`._resolve`), and the cleanup of what ended runs
left behind (:mod:`._sweep`). Domain code: it reads and writes through ``storage`` and the node's
ports, and never prints; the command line is in ``reconciler.cli``.
"""

from __future__ import annotations

from reconciler._sweep import sweep
from reconciler.ops._explain import (
    EVENT_PAGE,
    Explanation,
    Quiet,
    Step,
    Steps,
    UnknownRun,
    explain,
    iso_time,
)
from reconciler.ops._explain_run import explain_run
from reconciler.ops._now import ACTIVE_RUN, legacy_now
from reconciler.ops._resolve import (
    InvalidReason,
    ResolveRefused,
    check_reason,
    legal_targets,
    operator_actor,
    resolve,
)

__all__ = [
    "ACTIVE_RUN",
    "EVENT_PAGE",
    "Explanation",
    "InvalidReason",
    "Quiet",
    "ResolveRefused",
    "Step",
    "Steps",
    "UnknownRun",
    "check_reason",
    "explain",
    "explain_run",
    "iso_time",
    "legacy_now",
    "legal_targets",
    "operator_actor",
    "resolve",
    "sweep",
]
