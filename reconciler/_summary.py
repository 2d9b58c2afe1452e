"""The ADR-0068 summary (spec 04 "Summary"), the retained candidate's fingerprint, and how an
error is named in a reason (never a token, a command or an environment)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage import AttemptRow, RunRow

Fingerprint = tuple[str, str, int, str, str, int, str | None, int | None]

# spec 04 "Summary": the four outcomes a candidate can end with, in the order they are counted.
RESULTS = ("recovered", "remaining", "unresolved", "failed")
# ... and every count of a summary, in its order.
COUNTS = ("scanned", *RESULTS)


@dataclass(frozen=True, slots=True)
class CandidateResult:
    """One candidate of an ADR-0068 pass (spec 04 "Summary"), from the pass to the JSON."""

    run_id: str
    attempt_id: str | None
    row: str
    outcome: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        # spec 04: never a token, a command or an environment in here (the fields, in order).
        return {name: getattr(self, name) for name in self.__slots__}


def fingerprint(run: RunRow, attempt: AttemptRow) -> Fingerprint:
    """spec 04 "Final verifier": the fields a retained candidate must keep."""
    return (
        run.id,
        run.status,
        run.version,
        attempt.id,
        attempt.status,
        attempt.callback_sequence,
        attempt.executor_handle,
        attempt.pid,
    )


def summarize(results: list[CandidateResult], truncated: bool) -> dict[str, Any]:
    counts = {k: 0 for k in RESULTS}
    for r in results:
        counts[r.outcome] += 1
    return {
        "safe": not truncated and counts["unresolved"] == 0 and counts["failed"] == 0,
        "scanned": sum(counts.values()),
        **counts,
        "truncated": truncated,
        "candidates": [r.as_dict() for r in sorted(results, key=lambda r: r.run_id)],
    }


def describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def empty_summary(truncated: bool, observed: int = 0) -> dict[str, object]:
    """Zero candidates (safe) or a truncated page (not safe): nothing else was looked at.

    ``scanned`` is how many candidates the page observed: 0, or the 256 of a truncated page
    (as QingLong's coordinator reports it). None of them was decided, so the four outcome
    counts stay 0: this is the "unless truncated" of ``scanned = recovered + remaining +
    unresolved + failed`` (spec 04 "Summary"; docs/decisions.md)."""
    return {**summarize([], truncated), "scanned": observed}


def before_any_candidate(page: Sequence[object], truncated: bool) -> dict[str, object] | None:
    """The summary when the pass must decide nothing on this page, else None (spec 04 "Before
    any candidate"): a truncated page is not safe and zero candidates are; either way nothing
    else is read, probed, slept or written.

    The one place of the rule: the application layer applies it to the page it reads before
    loading the pass (so zero candidates cost one statement and no `fsm` import), and the
    pass to the page it reads itself when it is called directly."""
    if truncated or not page:
        return empty_summary(truncated, len(page))
    return None
