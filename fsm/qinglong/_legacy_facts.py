"""The facts of ADR-0448's table (spec 05 "Per candidate") and each row's own predicate over
them: what the guards of the decision machine and of the legacy_shadow lifecycle test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._selection import InstanceStatus, Selection
from ._tables import ATTEMPT_TERMINAL, RUN_LIFECYCLE_EDGES, RUN_TERMINAL

_RUN_LEGAL = frozenset((e.source, e.dest) for e in RUN_LIFECYCLE_EDGES)


@dataclass(frozen=True, slots=True)
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


# Which fields each evidence state of the decision machine fills (spec 05 "Candidates": the Run,
# then its Attempts, then the cron's RunningInstances); a core refuses any other. An exception
# (``error``) is no evidence: it is the core's ``fail``.
LEGACY_EVIDENCE_FIELDS: Mapping[str, frozenset[str]] = {
    "read_run": frozenset({"run_present", "run_owner", "origin", "origin_enabled", "run_status"}),
    "read_attempts": frozenset({"active_attempts", "attempt_status", "latest_attempt_status"}),
    "read_evidence": frozenset(
        {"evidence_truncated", "selection", "matched_status", "matched_finished"}
    ),
}


# --- The rows' own facts (each predicate says only what its row says) ------------------------


def _error_raised(f: LegacyFacts) -> bool:
    return f.error  # row 12


def _not_eligible(f: LegacyFacts) -> bool:
    return (  # row 1
        not f.run_present
        or f.run_owner != "legacy"
        or not f.origin_enabled
        or f.run_status is None
        or f.run_status in RUN_TERMINAL
        or f.run_status == "lost"
    )


def _eligible_candidate(f: LegacyFacts) -> bool:
    return not _not_eligible(f)  # read its Attempts


def _unique_terminal_attempt(f: LegacyFacts) -> bool:
    # ADR-0448 §6: the Attempt committed, the Run's response was lost; heal the Run.
    latest = f.latest_attempt_status
    return (
        f.active_attempts == 0
        and latest in ATTEMPT_TERMINAL
        and (f.run_status, latest) in _RUN_LEGAL
    )  # row 2


def _no_active_attempt(f: LegacyFacts) -> bool:
    return f.active_attempts == 0  # row 2b


def _multiple_active_attempts(f: LegacyFacts) -> bool:
    return f.active_attempts > 1  # row 3


def _one_active_attempt(f: LegacyFacts) -> bool:
    return f.active_attempts == 1  # read the cron's RunningInstances


def _evidence_truncated(f: LegacyFacts) -> bool:
    return f.evidence_truncated  # row 4


def _ambiguous_selection(f: LegacyFacts) -> bool:
    return f.selection == "ambiguous"  # row 5


# A matched row WITHOUT finished_at was reset by 2.x initData or is still running: it is no
# terminal evidence (spec 02 "Legacy 2.x tables").
def _stopped_with_finished(f: LegacyFacts) -> bool:
    return f.selection == "matched" and f.matched_finished and f.matched_status == "stopped"


def _unique_finished_evidence(f: LegacyFacts) -> bool:
    return (
        f.selection == "matched"
        and f.matched_finished
        and f.matched_status in ("succeeded", "failed")
    )  # row 7


def _awaiting_system_crond(f: LegacyFacts) -> bool:
    # System crond outlives the HTTP worker and will call back with a stable id.
    return f.origin == "scheduled_system"  # row 8


def _no_spawn_evidence(f: LegacyFacts) -> bool:
    return f.run_status == "queued" and f.attempt_status == "claimed"  # row 9


def _no_terminal_evidence(f: LegacyFacts) -> bool:
    return f.run_status in ("dispatching", "running") and f.attempt_status in (
        "claimed",
        "starting",
        "running",
    )  # row 10


def _illegal_combination(f: LegacyFacts) -> bool:
    return True  # row 11: "anything else" reaching the end of the table


LegacyPredicate = Callable[[LegacyFacts], bool]

# guard name -> the row's own facts (the decision machine's conditions).
LEGACY_ROW_FACTS: Mapping[str, LegacyPredicate] = {
    "error_raised": _error_raised,
    "not_eligible": _not_eligible,
    "eligible_candidate": _eligible_candidate,
    "unique_terminal_attempt": _unique_terminal_attempt,
    "no_active_attempt": _no_active_attempt,
    "multiple_active_attempts": _multiple_active_attempts,
    "one_active_attempt": _one_active_attempt,
    "evidence_truncated": _evidence_truncated,
    "ambiguous_selection": _ambiguous_selection,
    "stopped_with_finished": _stopped_with_finished,
    "unique_finished_evidence": _unique_finished_evidence,
    "awaiting_system_crond": _awaiting_system_crond,
    "no_spawn_evidence": _no_spawn_evidence,
    "no_terminal_evidence": _no_terminal_evidence,
    "illegal_combination": _illegal_combination,
}


def _named(name: str, fn: Callable[[object], bool]) -> Callable[[object], bool]:
    # transitions labels a condition by its callable's __name__: the diagram shows the guard.
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


def _on_legacy_facts(name: str) -> Callable[[object], bool]:
    # The guard ``name`` (a row's own facts) over any evidence: it holds only on LegacyFacts.
    own = LEGACY_ROW_FACTS[name]

    def predicate(facts: object) -> bool:
        return isinstance(facts, LegacyFacts) and own(facts)

    return _named(name, predicate)
