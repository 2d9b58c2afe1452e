"""ADR-0448's per-candidate decision and evidence selection, as pure functions (spec 05)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ._tables import ATTEMPT_TERMINAL, RUN_LIFECYCLE_EDGES, RUN_TERMINAL

Selection = Literal["matched", "ambiguous", "none"]
InstanceStatus = Literal["running", "succeeded", "stopped", "failed"]

_RUN_LEGAL = frozenset((e.source, e.dest) for e in RUN_LIFECYCLE_EDGES)


@dataclass(frozen=True)
class LegacyFacts:
    """Everything spec 05's table looks at for one candidate, gathered at the edge."""

    run_present: bool
    run_owner: str | None = None
    origin: str | None = None
    origin_enabled: bool = False
    run_status: str | None = None
    active_attempts: int = 0
    attempt_status: str | None = None  # the single active Attempt, when exactly one
    latest_attempt_status: str | None = None  # the latest Attempt, when none is active
    evidence_truncated: bool = False
    selection: Selection = "none"
    matched_status: InstanceStatus | None = None
    matched_finished: bool = False
    error: bool = False


@dataclass(frozen=True)
class LegacyDecision:
    row: str
    outcome: str  # a legacy_shadow machine state
    guard: str


def _decision(row: str, outcome: str, guard: str) -> LegacyDecision:
    return LegacyDecision(row=row, outcome=outcome, guard=guard)


def classify_legacy(f: LegacyFacts) -> LegacyDecision:
    """spec 05 "Per candidate": the first matching row wins."""
    if f.error:
        return _decision("12", "failed", "error_raised")
    if (
        not f.run_present
        or f.run_owner != "legacy"
        or not f.origin_enabled
        or f.run_status is None
        or f.run_status in RUN_TERMINAL
        or f.run_status == "lost"
    ):
        return _decision("1", "skipped", "not_eligible")
    if f.active_attempts == 0:
        latest = f.latest_attempt_status
        if latest in ATTEMPT_TERMINAL and (f.run_status, latest) in _RUN_LEGAL:
            # ADR-0448 §6: the Attempt committed, the Run's response was lost; heal the Run.
            return _decision("2", "repaired", "unique_terminal_attempt")
        return _decision("2b", "ambiguous", "no_active_attempt")
    if f.active_attempts > 1:
        return _decision("3", "ambiguous", "multiple_active_attempts")
    if f.evidence_truncated:
        return _decision("4", "ambiguous", "evidence_truncated")
    if f.selection == "ambiguous":
        return _decision("5", "ambiguous", "ambiguous_selection")
    # A matched row WITHOUT finished_at was reset by 2.x initData or is still running: it is
    # no terminal evidence (spec 02 "Legacy 2.x tables").
    if f.selection == "matched" and f.matched_finished:
        if f.matched_status == "stopped":
            return _decision("6", "cancelled", "stopped_with_finished")
        if f.matched_status in ("succeeded", "failed"):
            return _decision("7", "completed", "unique_finished_evidence")
    if f.origin == "scheduled_system":
        # System crond outlives the HTTP worker and will call back with a stable id.
        return _decision("8", "pending", "awaiting_system_crond")
    if f.run_status == "queued" and f.attempt_status == "claimed":
        return _decision("9", "abandoned", "no_spawn_evidence")
    if f.run_status in ("dispatching", "running") and f.attempt_status in (
        "claimed",
        "starting",
        "running",
    ):
        return _decision("10", "marked_lost", "no_terminal_evidence")
    return _decision("11", "ambiguous", "illegal_combination")


@dataclass(frozen=True)
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
