"""Guards: pure predicates over the evidence a reconciler gathered at the edge.

A guarded edge is taken only with evidence on which its guard holds, and the guard is
evaluated again when the edge fires: the evidence is data, never a callback into I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from ._legacy import LegacyFacts, classify_legacy

ReceiptRead = Literal["missing", "trusted", "invalid"]
ProcessVerdict = Literal["running", "not_running", "unknown"]


@dataclass(frozen=True)
class PrimaryFacts:
    """What the ADR-0068 evidence sequence established for one candidate (spec 04).

    ``first_receipt`` / ``second_receipt`` are the two reads of the one receipt path;
    ``grace_paid`` is true once at least one full grace has passed since this candidate's
    probe. A field left ``None`` means that step did not happen.
    """

    run_status: str
    attempt_status: str | None = None
    active_attempts: int = 0
    first_receipt: ReceiptRead | None = None
    process: ProcessVerdict | None = None
    handle_pid_matches: bool = False
    grace_paid: bool = False
    second_receipt: ReceiptRead | None = None
    unchanged_on_recheck: bool = False


def trusted_receipt(facts: object) -> bool:
    # ADR-0068 §2 steps 2-4: a receipt counts only once authenticated against the database.
    return isinstance(facts, PrimaryFacts) and (
        facts.first_receipt == "trusted" or facts.second_receipt == "trusted"
    )


def not_running_after_grace(facts: object) -> bool:
    # ADR-0068 §2 step 6: trusted negative evidence, then ONE grace, then the receipt read
    # again and found absent, then the database re-read unchanged. Nothing less gives lost.
    return (
        isinstance(facts, PrimaryFacts)
        and facts.first_receipt == "missing"
        and facts.process == "not_running"
        and facts.handle_pid_matches
        and facts.grace_paid
        and facts.second_receipt == "missing"
        and facts.unchanged_on_recheck
    )


def unstarted_claim(facts: object) -> bool:
    # ADR-0068 §2 step 5: `claimed` is the fact that nothing was started; no probe needed.
    return (
        isinstance(facts, PrimaryFacts)
        and facts.first_receipt == "missing"
        and facts.attempt_status == "claimed"
        and facts.active_attempts == 1
        and facts.process is None
    )


def attempt_missing_before_start(facts: object) -> bool:
    # spec 04 row 3: a dispatching Run whose Attempt was never created.
    return (
        isinstance(facts, PrimaryFacts)
        and facts.run_status == "dispatching"
        and facts.attempt_status is None
        and facts.active_attempts == 0
    )


def exact_process_running(facts: object) -> bool:
    # spec 04 row 12: the exact durable identity (boot id, pid, group, start ticks) is alive.
    return (
        isinstance(facts, PrimaryFacts)
        and facts.first_receipt == "missing"
        and facts.process == "running"
        and facts.handle_pid_matches
    )


def _legacy_row(row: str) -> Callable[[object], bool]:
    def guard(facts: object) -> bool:
        return isinstance(facts, LegacyFacts) and classify_legacy(facts).row == row

    return guard


# The name each legacy guard carries on the diagram -> the spec 05 row it stands for.
LEGACY_GUARD_ROWS: Mapping[str, str] = {
    "not_eligible": "1",
    "unique_terminal_attempt": "2",
    "no_active_attempt": "2b",
    "multiple_active_attempts": "3",
    "evidence_truncated": "4",
    "ambiguous_selection": "5",
    "stopped_with_finished": "6",
    "unique_finished_evidence": "7",
    "awaiting_system_crond": "8",
    "no_spawn_evidence": "9",
    "no_terminal_evidence": "10",
    "illegal_combination": "11",
    "error_raised": "12",
}


def _named(name: str, fn: Callable[[object], bool]) -> Callable[[object], bool]:
    # transitions labels a condition by its callable's __name__: the diagram shows the guard.
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


GUARDS: Mapping[str, Callable[[object], bool]] = {
    "trusted_receipt": trusted_receipt,
    "not_running_after_grace": not_running_after_grace,
    "unstarted_claim": unstarted_claim,
    "attempt_missing_before_start": attempt_missing_before_start,
    "exact_process_running": exact_process_running,
    **{name: _named(name, _legacy_row(row)) for name, row in LEGACY_GUARD_ROWS.items()},
}
