"""The records one ADR-0068 pass is made of, and what every step of it is handed.

The pass is functions over immutable records (gather → decide → commit → verify → summarize):
each step takes a :class:`Candidate` and returns a new one (``_replace``), over a
:class:`PassContext` of ports and settings handed to it explicitly. The one thing that changes
during a pass is the pass's own :class:`PassStatus`: why it stopped writing, once it has, and
the operator's warnings (D-16, D-20).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from fsm import Need
from fsm.qinglong import ATTEMPT_ACTIVE, PrimaryCore, PrimaryDecision
from reconciler._summary import CandidateResult, Fingerprint, fingerprint
from reconciler.node import (
    Clock,
    Evidence,
    PassProvider,
    ReadResult,
    Receipt,
    ReceiptStore,
    RootMissing,
    Unusable,
)
from storage import (
    AttemptRow,
    JournalRow,
    LockBudget,
    PrimaryCandidate,
    Repository,
    RunRow,
)

# The probe port: spec 03 "Inspection" of a stored handle (tests plug a gated one in).
Probe = Callable[..., Evidence]


@dataclass(frozen=True, slots=True)
class PassContext:
    """The ports and settings of one pass: fixed for the whole pass."""

    conn: sqlite3.Connection
    repo: Repository
    store: ReceiptStore
    provider: PassProvider
    clock: Clock
    platform: str
    grace: float
    budget: LockBudget
    probe: Probe
    dry_run: bool


@dataclass(slots=True)
class PassStatus:
    """What a pass learns as it goes, owned by the function that runs it: why it stopped
    writing (database_locked / database_read_only / …, once it has) and one line per warning
    for the operator (stderr, and the summary's ``warnings``: D-16). Mutable: the pass's one
    changing thing."""

    stopped: str | None = None
    warnings: list[str] = field(default_factory=list)


class Candidate(NamedTuple):
    """One candidate as far as the pass has taken it; each step returns a new one
    (``_replace``: a tuple's, which costs a fraction of ``dataclasses.replace`` per step)."""

    page: PrimaryCandidate
    core: PrimaryCore
    # The core as it asked for the probe: the final verifier's probe is observed on it.
    before_probe: PrimaryCore | None = None
    run: RunRow | None = None
    attempt: AttemptRow | None = None  # the latest, once the core looks at it
    journal: JournalRow | None = None  # the latest Attempt's receipt journal row
    receipt: Receipt | None = None  # the trusted receipt a completion commits
    probed_at: float = 0.0
    fingerprint: Fingerprint | None = None  # what the verifier proves a retained one against
    result: CandidateResult | None = None
    # What the core answered right after the Run was read: the re-check must get it again.
    after_read_run: Need | PrimaryDecision | None = None


def decided(cand: Candidate, row: str, outcome: str, reason: str) -> Candidate:
    """``cand`` with its result."""
    attempt_id = cand.attempt.id if cand.attempt is not None else None
    return cand._replace(result=CandidateResult(cand.page.run_id, attempt_id, row, outcome, reason))


def revised(result: CandidateResult, outcome: str, reason: str) -> CandidateResult:
    """A new result for the same candidate (the verifier's, or D-20's decided elsewhere)."""
    return CandidateResult(result.run_id, result.attempt_id, result.row, outcome, reason)


def revoked(result: CandidateResult, why: str, outcome: str = "unresolved") -> CandidateResult:
    # ADR-0068 §5: any difference revokes safety for that candidate.
    return revised(result, outcome, f"verifier:{why}")


class Interrupted(Exception):
    """An error escaping a step, with the candidate as that step had taken it (its result
    kept when it was decided, and committed, before the error: spec 04 row 14)."""

    def __init__(self, cand: Candidate, error: Exception) -> None:
        super().__init__(error)
        self.cand = cand
        self.error = error


def same_answer(
    again: Need | PrimaryDecision | None, before: Need | PrimaryDecision | None
) -> bool:
    """Whether the core answered ``again`` what it answered ``before``: the same evidence
    asked for, or the same row deciding into the same state."""
    if isinstance(again, Need) and isinstance(before, Need):
        return again.evidence == before.evidence
    return (
        isinstance(again, PrimaryDecision)
        and isinstance(before, PrimaryDecision)
        and (again.row, again.state) == (before.row, before.state)
    )


def unchanged(run: RunRow | None, attempts: list[AttemptRow], expected: Fingerprint) -> bool:
    """Whether a Run and its Attempts read again are as ``expected`` (ADR-0068 §5): the
    latest Attempt the one active, the pair with the fingerprint taken before."""
    return (
        run is not None
        and bool(attempts)
        and sum(1 for a in attempts if a.status in ATTEMPT_ACTIVE) == 1
        and fingerprint(run, attempts[-1]) == expected
    )


def root_problem(store: ReceiptStore, read: ReadResult, att: AttemptRow) -> str | None:
    """The reason when the receipt could not be looked for at all, else None."""
    if isinstance(read, Unusable):
        return f"receipt_root_unusable:{read.reason}:{read.path}"
    if isinstance(read, RootMissing) and att.status != "claimed":
        return f"receipt_root_missing:{store.root}"
    return None


def read_run_fields(run: RunRow | None, attempts: list[AttemptRow]) -> dict[str, object]:
    """The `read_run` observation (ADR-0068 §2 step 1) of one read of a Run and its Attempts."""
    if run is None:
        return {"run_present": False}
    latest = attempts[-1] if attempts else None
    pid = latest.pid if latest is not None else None
    return {
        "run_present": True,
        "run_owner": run.execution_owner,
        "run_status": run.status,
        "cancel_requested": run.cancel_requested_at_ms is not None,
        "cancel_reason": run.cancel_reason,
        "attempt_count": len(attempts),
        "active_attempts": sum(1 for a in attempts if a.status in ATTEMPT_ACTIVE),
        "attempt_status": latest.status if latest is not None else None,
        "executor_type": latest.executor_type if latest is not None else None,
        "handle_present": bool(latest.executor_handle) if latest is not None else None,
        "pid_valid": (
            isinstance(pid, int) and not isinstance(pid, bool) and pid >= 1
            if latest is not None
            else None
        ),
    }


def probe_fields(evidence: Evidence, att: AttemptRow) -> dict[str, object]:
    """The `probe` observation (ADR-0068 §2 step 5): the verdict, its reason, and whether the
    handle's pid is `RunAttempts.pid` (row 11)."""
    return {
        "process": evidence.verdict,
        "probe_reason": evidence.reason,
        "handle_pid_matches": evidence.pid == att.pid,
    }
