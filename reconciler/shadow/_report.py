"""The ADR-0449 difference report and metric batch, with their conservation checks (spec 05
"Audit record, report and metric batch"). Pure data in, pure data out: no I/O, no storage.

Nothing here ever holds a Run, Attempt or Cron id, a pid, a path or a message: only counts,
the profile, the configured origin names (a fixed allow-list) and fixed enum strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPORT_SCHEMA = "qinglong/legacy-shadow-startup-difference-report@v1"
METRICS_SCHEMA = "qinglong/legacy-shadow-startup-metric-batch@v1"

# The nine outcomes, in the report's key spelling and order (spec 05).
OUTCOME_KEYS: tuple[str, ...] = (
    "completed",
    "cancelled",
    "abandoned",
    "markedLost",
    "repaired",
    "pending",
    "ambiguous",
    "skipped",
    "failed",
)
# legacy_shadow machine state -> report key (the machine spells states in snake_case).
KEY_OF_STATE: Mapping[str, str] = {
    "".join(f"_{c.lower()}" if c.isupper() else c for c in key): key for key in OUTCOME_KEYS
}
STOP_REASONS = ("complete", "page_limit", "cursor_stalled")


class ConservationViolation(Exception):
    """The numbers do not add up: the audit becomes `failed`, never a wrong report."""


@dataclass(frozen=True)
class Budget:
    page_size: int
    max_pages: int

    @property
    def max_candidates(self) -> int:
        return self.page_size * self.max_pages

    def as_dict(self) -> dict[str, int]:
        # The report's ``budget``, in its key spelling.
        return {
            "pageSize": self.page_size,
            "maxPages": self.max_pages,
            "maxCandidates": self.max_candidates,
        }


# spec 05 "Switches": one pass per start.
BUDGETS: Mapping[str, Budget] = {"edge": Budget(8, 1), "standalone": Budget(32, 4)}


@dataclass(frozen=True)
class PassCounts:
    """What the supervisor counted: per configured origin, outcome key -> count."""

    pages: int
    stop_reason: str
    resume_available: bool
    by_origin: Mapping[str, Mapping[str, int]]


def assessment(outcomes: Mapping[str, int], remaining: bool) -> str:
    """spec 05: ambiguous/skipped/failed -> attention_required; else remaining -> incomplete;
    else pending -> waiting_external_callback; else converged."""
    if outcomes["ambiguous"] or outcomes["skipped"] or outcomes["failed"]:
        return "attention_required"
    if remaining:
        return "incomplete"
    if outcomes["pending"]:
        return "waiting_external_callback"
    return "converged"


def _origin_entry(origin: str, got: Mapping[str, int]) -> dict[str, Any]:
    # One configured origin's line of the report: its scanned, then every outcome key.
    entry: dict[str, Any] = {"origin": origin, "scanned": sum(got.values())}
    return entry | {key: int(got.get(key, 0)) for key in OUTCOME_KEYS}


def build_report(
    profile: str, origins: Sequence[str], budget: Budget, counts: PassCounts
) -> dict[str, Any]:
    by_origin = [_origin_entry(origin, counts.by_origin.get(origin, {})) for origin in origins]
    totals = {key: sum(entry[key] for entry in by_origin) for key in OUTCOME_KEYS}
    scanned = sum(int(sum(v.values())) for v in counts.by_origin.values())
    remaining = counts.stop_reason != "complete"
    return {
        "schemaVersion": 1,
        "schema": REPORT_SCHEMA,
        "profile": profile,
        "assessment": assessment(totals, remaining),
        "configuredOriginCount": len(origins),
        "budget": budget.as_dict(),
        "coverage": {
            "pages": counts.pages,
            "scanned": scanned,
            "stopReason": counts.stop_reason,
            "remaining": remaining,
            "resumeAvailable": counts.resume_available,
        },
        "outcomes": totals,
        "byOrigin": by_origin,
    }


def build_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The audit record's ``summary``, as QingLong's bootstrap writes it: the supervisor's
    totals without the resume cursor and without ``byOrigin`` (both stay out of the audit),
    plus ``resumeAvailable``. Built from the report, so it cannot disagree with it."""
    coverage = report["coverage"]
    return {
        "pages": int(coverage["pages"]),
        "scanned": int(coverage["scanned"]),
        **{key: int(report["outcomes"][key]) for key in OUTCOME_KEYS},
        "stopReason": coverage["stopReason"],
        "remaining": bool(coverage["remaining"]),
        "resumeAvailable": bool(coverage["resumeAvailable"]),
    }


def build_metrics(report: Mapping[str, Any]) -> dict[str, Any]:
    """The metric batch: the report's numbers, no ratios, no high-cardinality labels."""
    coverage = report["coverage"]
    budget = report["budget"]
    values: dict[str, int] = {
        "configuredOrigins": int(report["configuredOriginCount"]),
        "pageSize": int(budget["pageSize"]),
        "maxPages": int(budget["maxPages"]),
        "maxCandidates": int(budget["maxCandidates"]),
        "pages": int(coverage["pages"]),
        "scanned": int(coverage["scanned"]),
        "remaining": 1 if coverage["remaining"] else 0,
        "resumeAvailable": 1 if coverage["resumeAvailable"] else 0,
        **{key: int(report["outcomes"][key]) for key in OUTCOME_KEYS},
    }
    return {
        "schemaVersion": 1,
        "schema": METRICS_SCHEMA,
        "dimensions": {
            "profile": report["profile"],
            "assessment": report["assessment"],
            "stopReason": coverage["stopReason"],
        },
        "values": values,
        "byOrigin": [dict(entry) for entry in report["byOrigin"]],
    }


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise ConservationViolation(what)


def check_conservation(
    report: Mapping[str, Any],
    metrics: Mapping[str, Any],
    *,
    profile: str,
    origins: Sequence[str],
) -> None:
    """spec 05: checked BEFORE output. Raises ConservationViolation on the first breach."""
    budget = BUDGETS[profile]
    coverage = report["coverage"]
    outcomes = report["outcomes"]
    _require(report["schemaVersion"] == 1 and report["schema"] == REPORT_SCHEMA, "schema")
    _require(report["profile"] == profile, "profile")
    _require(report["budget"] == budget.as_dict(), "budget is not the profile's")
    _require(set(outcomes) == set(OUTCOME_KEYS), "outcome keys")
    _require(all(isinstance(v, int) and v >= 0 for v in outcomes.values()), "negative count")
    _require(sum(outcomes.values()) == coverage["scanned"], "outcomes do not sum to scanned")
    _require([e["origin"] for e in report["byOrigin"]] == list(origins), "byOrigin order")
    _require(report["configuredOriginCount"] == len(origins), "configured origin count")
    for entry in report["byOrigin"]:
        _require(
            sum(int(entry[k]) for k in OUTCOME_KEYS) == entry["scanned"],
            "an origin's outcomes do not sum to its scanned",
        )
    _require(
        sum(int(e["scanned"]) for e in report["byOrigin"]) == coverage["scanned"],
        "origins do not sum to scanned",
    )
    for key in OUTCOME_KEYS:
        _require(
            sum(int(e[key]) for e in report["byOrigin"]) == outcomes[key], f"origin sum of {key}"
        )
    _require(coverage["stopReason"] in STOP_REASONS, "stop reason")
    _require(
        coverage["remaining"] == (coverage["stopReason"] != "complete"),
        "remaining iff stopReason is not complete",
    )
    _require(not coverage["resumeAvailable"] or coverage["remaining"], "resume without remaining")
    _require(0 < coverage["pages"] <= budget.max_pages, "pages outside the budget")
    _require(coverage["scanned"] <= budget.max_candidates, "scanned beyond the budget")
    _require(report["assessment"] == assessment(outcomes, coverage["remaining"]), "assessment")
    _require(metrics == build_metrics(report), "metric batch differs from the report")
