"""The ADR-0448 report's metric batch and its conservation check (spec 05), pinned as data:
every metric's name and value, and each breach the check refuses, in its own words."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconciler.shadow import (
    BUDGETS,
    OUTCOME_KEYS,
    ConservationViolation,
    PassCounts,
    build_metrics,
    build_report,
    check_conservation,
)

ORIGINS = ["a", "b"]
ZERO = dict.fromkeys(OUTCOME_KEYS, 0)


def report(stop: str = "page_limit", resume: bool = True, pages: int = 3) -> dict[str, Any]:
    counts = PassCounts(
        pages=pages,
        stop_reason=stop,
        resume_available=resume,
        by_origin={"a": {"completed": 1, "pending": 2}, "b": {"failed": 5}},
    )
    return build_report("standalone", ORIGINS, BUDGETS["standalone"], counts)


def test_the_metric_batch_carries_each_number_of_the_report_under_its_own_name() -> None:
    r = report()
    assert build_metrics(r) == {
        "schemaVersion": 1,
        "schema": "qinglong/legacy-shadow-startup-metric-batch@v1",
        "dimensions": {
            "profile": "standalone",
            "assessment": "attention_required",
            "stopReason": "page_limit",
        },
        "values": {
            "configuredOrigins": 2,
            "pageSize": 32,
            "maxPages": 4,
            "maxCandidates": 128,
            "pages": 3,
            "scanned": 8,
            "remaining": 1,
            "resumeAvailable": 1,
            **ZERO,
            "completed": 1,
            "pending": 2,
            "failed": 5,
        },
        "byOrigin": r["byOrigin"],
    }
    assert build_metrics(r)["byOrigin"] is not r["byOrigin"]


@pytest.mark.parametrize(
    ("stop", "resume", "remaining", "resumable"),
    [("complete", False, 0, 0), ("cursor_stalled", False, 1, 0), ("page_limit", True, 1, 1)],
)
def test_remaining_and_resume_are_counted_as_one_or_zero(
    stop: str, resume: bool, remaining: int, resumable: int
) -> None:
    values = build_metrics(report(stop, resume))["values"]
    assert (values["remaining"], values["resumeAvailable"]) == (remaining, resumable)


def test_a_report_that_adds_up_passes_the_check() -> None:
    for stop, resume in (("page_limit", True), ("complete", False), ("cursor_stalled", False)):
        r = report(stop, resume)
        check_conservation(r, build_metrics(r), profile="standalone", origins=ORIGINS)


def _set(path: str, value: object) -> Any:
    def change(r: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        target: Any = r
        for k in keys:
            target = target[int(k)] if k.isdigit() else target[k]
        target[last] = value

    return change


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (_set("schemaVersion", 2), "schema"),
        (_set("schema", "other@v1"), "schema"),
        (_set("profile", "edge"), "profile"),
        (_set("budget.maxPages", 5), "budget is not the profile's"),
        (lambda r: r["outcomes"].pop("failed"), "outcome keys"),
        (lambda r: r["outcomes"].update(extra=0), "outcome keys"),
        (_set("outcomes.cancelled", -1), "negative count"),
        (_set("outcomes.cancelled", 1.0), "negative count"),
        (_set("coverage.scanned", 9), "outcomes do not sum to scanned"),
        (lambda r: r["byOrigin"].reverse(), "byOrigin order"),
        (_set("configuredOriginCount", 3), "configured origin count"),
        (_set("byOrigin.0.scanned", 4), "an origin's outcomes do not sum to its scanned"),
        (
            lambda r: r["byOrigin"][0].update(scanned=4, completed=2),
            "origins do not sum to scanned",
        ),
        (
            lambda r: (
                r["byOrigin"][0].update(completed=0, cancelled=1),
                r["byOrigin"][1].update(failed=5),
            ),
            "origin sum of completed",
        ),
        (_set("coverage.stopReason", "tired"), "stop reason"),
        (_set("coverage.remaining", False), "remaining iff stopReason is not complete"),
        (_set("coverage.pages", 0), "pages outside the budget"),
        (_set("coverage.pages", 5), "pages outside the budget"),
        (_set("assessment", "converged"), "assessment"),
    ],
)
def test_each_breach_is_refused_naming_what_does_not_add_up(change: Any, what: str) -> None:
    r = copy.deepcopy(report())
    change(r)
    with pytest.raises(ConservationViolation) as refused:
        check_conservation(r, build_metrics(report()), profile="standalone", origins=ORIGINS)
    assert str(refused.value) == what


def test_resume_without_remaining_beyond_the_budget_and_other_metrics_are_refused() -> None:
    done = report("complete", False)
    check_conservation(done, build_metrics(done), profile="standalone", origins=ORIGINS)
    resumable = copy.deepcopy(done)
    resumable["coverage"]["resumeAvailable"] = True
    with pytest.raises(ConservationViolation, match=r"^resume without remaining$"):
        check_conservation(resumable, build_metrics(done), profile="standalone", origins=ORIGINS)
    with pytest.raises(ConservationViolation, match=r"^metric batch differs from the report$"):
        check_conservation(done, build_metrics(report()), profile="standalone", origins=ORIGINS)
    # Exactly at the budget is allowed: four pages, 128 candidates.
    full = report(pages=4)
    check_conservation(full, build_metrics(full), profile="standalone", origins=ORIGINS)
    over = PassCounts(4, "page_limit", True, {"a": {"completed": 129}})
    big = build_report("standalone", ORIGINS, BUDGETS["standalone"], over)
    with pytest.raises(ConservationViolation, match=r"^scanned beyond the budget$"):
        check_conservation(big, build_metrics(big), profile="standalone", origins=ORIGINS)
