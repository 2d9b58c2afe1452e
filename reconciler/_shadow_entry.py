"""ADR-0448 bootstrap and entry point: switches, profile, fail-open, the audit record.

Kept light on purpose (ADR-0448 §1, spec 05 "Switches"): it lives in the application layer,
outside the ``reconciler.shadow`` package, and imports neither :mod:`storage` nor :mod:`fsm`
(nor ``transitions``). Only when at least one reviewed origin is enabled and the profile is a
local one does :func:`run_shadow` import the package (the pass engine and its report) and open
the database. Disabled = no database opened, nothing heavy imported, nothing written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reconciler._cursor import Cursor
from reconciler._profiles import CLUSTER_PROFILES, PROFILE_ENV, resolve_profile

if TYPE_CHECKING:
    # Annotations only: importing them at run time would load the pass engine (ADR-0448 §1).
    from reconciler.node import Clock
    from reconciler.shadow import Budget, PassPorts
    from storage import LockBudget

ORIGINS_ENV = "QL3_SHADOW_ORIGINS"

# spec 05 "Switches": the reviewed origins, in this canonical spelling (at most 7).
ALLOWED_ORIGINS: tuple[str, ...] = (
    "manual",
    "scheduled_node",
    "scheduled_system",
    "boot",
    "subscription",
    "system",
    "script",
)
REFUSED_ORIGINS = frozenset({"once", "grpc"})


@dataclass(frozen=True)
class Origins:
    """The enabled origins in configured order, and how many items were dropped (never which:
    an unknown item may be a secret pasted by mistake, spec 05)."""

    enabled: tuple[str, ...]
    refused: int = 0
    unknown: int = 0


def _items(value: str | None) -> list[str]:
    # Comma-separated, whole value and items trimmed, empty items ignored.
    return [] if value is None else [i for i in (r.strip() for r in value.split(",")) if i]


def parse_origins(value: str | None) -> Origins:
    """Comma-separated, whole value and items trimmed; empty items ignored; duplicates keep
    their first position; `once`/`grpc` refused; unknown ignored and counted."""
    enabled: list[str] = []
    refused = unknown = 0
    for item in _items(value):
        if item in REFUSED_ORIGINS:
            refused += 1
        elif item not in ALLOWED_ORIGINS:
            unknown += 1
        elif item not in enabled:
            enabled.append(item)
    return Origins(tuple(enabled), refused, unknown)


def unknown_origin_hints(value: str | None) -> list[str]:
    """For each unknown item of ``value``, its position and the reviewed origin it is close to
    (a typo such as ``manaul``), never the item itself: it may be a secret pasted by mistake
    (spec 05). For a person only; the audit record keeps its counts."""
    import difflib  # only when an item is unknown: not on the start-up path otherwise

    hints: list[str] = []
    for position, item in enumerate(_items(value), start=1):
        if item in REFUSED_ORIGINS or item in ALLOWED_ORIGINS:
            continue
        close = difflib.get_close_matches(item, ALLOWED_ORIGINS, n=1, cutoff=0.6)
        guess = f"did you mean {close[0]}?" if close else "--help lists the reviewed ones"
        hints.append(f"item {position} ignored, not a reviewed origin (text not shown); {guess}")
    return hints


@dataclass(frozen=True)
class ShadowResult:
    """The audit record (safe to print or ship) and, apart from it, the resume cursor that
    only the caller ever sees (spec 05 "Supervisor")."""

    audit: dict[str, Any]
    cursor: Cursor | None = None


def failed(exc: BaseException) -> dict[str, Any]:
    # spec 05 "Fail-open": the class name only, never the message (it may hold a path or id).
    return {"state": "failed", "errorType": type(exc).__name__}


def run_shadow(
    db: str,
    *,
    profile: str | None = None,
    origins: str | None = None,
    environ: Mapping[str, str] | None = None,
    resume_cursor: Cursor | None = None,
    clock: Clock | None = None,
    busy_timeout_s: float | None = None,
    lock: LockBudget | None = None,
    ports: PassPorts | None = None,
) -> ShadowResult:
    """One ADR-0448 pass over ``db``; never raises (fail-open, ADR-0448 §9).

    ``profile`` / ``origins`` override ``QL_DEPLOYMENT_PROFILE`` / ``QL3_SHADOW_ORIGINS``,
    which are read once from ``environ`` (default ``os.environ``). ``lock`` bounds the total
    wait for other processes' write locks (default ``QLFSM_LOCK_BUDGET_S`` from ``environ``,
    else 5 s); a lock past it ends the pass as ``state: failed``, ``errorType: Busy``.
    ``ports`` (default: the real parts) are handed to the pass (``reconciler.shadow._ports``).
    """
    env = os.environ if environ is None else environ
    try:
        chosen = parse_origins(origins if origins is not None else env.get(ORIGINS_ENV))
        counts = {"refusedOriginCount": chosen.refused, "ignoredOriginCount": chosen.unknown}
        if not chosen.enabled:
            return ShadowResult({"state": "disabled", **counts})
        prof = resolve_profile(profile if profile is not None else env.get(PROFILE_ENV))
        if prof in CLUSTER_PROFILES:
            # ADR-0448 §8: a cluster never opens a node-local SQLite for this recovery.
            return ShadowResult({"state": "profile_rejected", "profile": prof, **counts})
        # Heavy imports only now (ADR-0448 §1).
        from reconciler.shadow import BUDGETS, run_pass
        from storage import lock_budget_from_env

        budget = BUDGETS[prof]

        outcome = run_pass(
            db,
            origins=chosen.enabled,
            budget=budget,
            resume=resume_cursor,
            clock=clock,
            busy_timeout_s=busy_timeout_s,
            lock=lock if lock is not None else lock_budget_from_env(env),
            ports=ports,
        )
        return ShadowResult(
            audit_record(prof, chosen.enabled, budget, outcome.counts, counts),
            outcome.cursor,
        )
    except Exception as exc:
        return ShadowResult(failed(exc))


def audit_record(
    profile: str,
    origins: Sequence[str],
    budget: Budget,
    counts: Any,
    extra: Mapping[str, int],
) -> dict[str, Any]:
    """Report + metric batch, conservation-checked first; a breach is a failed audit.

    The fields of QingLong's record (its bootstrap's ``LegacyShadowStartupAudit``), in its
    order: ``state``, ``profile``, ``origins`` (how many are configured: a count, never the
    list), ``summary`` (the pass's totals and ``resumeAvailable``, never the cursor),
    ``report``, ``metrics``; qlfsm's two dropped-item counts follow ``state``."""
    import reconciler.shadow as shadow

    report = shadow.build_report(profile, origins, budget, counts)
    metrics = shadow.build_metrics(report)
    try:
        shadow.check_conservation(report, metrics, profile=profile, origins=origins)
    except shadow.ConservationViolation as exc:
        return failed(exc)
    return {
        "state": "reconciled" if report["assessment"] == "converged" else "incomplete",
        **extra,
        "profile": profile,
        "origins": len(origins),
        "summary": shadow.build_summary(report),
        "report": report,
        "metrics": metrics,
    }
