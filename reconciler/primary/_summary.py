"""The ADR-0068 summary (spec 04 "Summary"), the retained candidate's fingerprint, and how an
error is named in a reason (never a token, a command or an environment)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage import AttemptRow, RunRow

Fingerprint = tuple[str, str, int, str, str, int, str | None, int | None]


@dataclass(frozen=True, slots=True)
class CandidateResult:
    """One candidate of an ADR-0068 pass (spec 04 "Summary"), from the pass to the JSON."""

    run_id: str
    attempt_id: str | None
    row: str
    outcome: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        # spec 04: never a token, a command or an environment in here.
        return {
            "run_id": self.run_id,
            "attempt_id": self.attempt_id,
            "row": self.row,
            "outcome": self.outcome,
            "reason": self.reason,
        }


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
    counts = {k: 0 for k in ("recovered", "remaining", "unresolved", "failed")}
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
