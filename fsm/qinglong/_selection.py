"""spec 05 "Evidence selection": the one active Attempt's pid and log id against the cron's
RunningInstances (ADR-0448 §4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Selection = Literal["matched", "ambiguous", "none"]
InstanceStatus = Literal["running", "succeeded", "stopped", "failed"]


@dataclass(frozen=True, slots=True)
class InstanceEvidence:
    """One RunningInstances row as the adapter hands it over: no raw log path, ever."""

    pid: int | None
    log_id: str | None  # opaque `legacy-log:` id
    status: InstanceStatus
    finished_at_ms: int | None
    exit_code: int | None


def select_evidence(
    attempt_pid: int | None,
    attempt_log_id: str | None,
    rows: Sequence[InstanceEvidence],
) -> tuple[Selection, InstanceEvidence | None]:
    """spec 05 "Evidence selection", exactly."""
    if attempt_pid is not None and attempt_log_id is not None:
        both = [r for r in rows if r.pid == attempt_pid and r.log_id == attempt_log_id]
        by_log = [r for r in rows if r.log_id == attempt_log_id]
        by_pid = [r for r in rows if r.pid == attempt_pid]
        if len(both) == 1:
            return "matched", both[0]
        if len(both) > 1 or len(by_log) > 1 or len(by_pid) > 1:
            return "ambiguous", None
        if by_log and by_pid and by_log[0] is not by_pid[0]:
            return "ambiguous", None
        if len(by_log) == 1:
            return "matched", by_log[0]
        if len(by_pid) == 1:
            return "matched", by_pid[0]
        return "none", None
    if attempt_pid is not None or attempt_log_id is not None:
        hits = [
            r
            for r in rows
            if (attempt_pid is not None and r.pid == attempt_pid)
            or (attempt_log_id is not None and r.log_id == attempt_log_id)
        ]
        if len(hits) == 1:
            return "matched", hits[0]
        return ("ambiguous", None) if hits else ("none", None)
    if len(rows) == 1:
        return "matched", rows[0]
    return ("ambiguous", None) if rows else ("none", None)
