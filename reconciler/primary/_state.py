"""The state one ADR-0068 pass keeps per candidate, and what every part of the pass shares.

The pass is one class, :class:`reconciler.primary._pass.PrimaryReconciler`, assembled from the
parts that are its natural seams: gathering the evidence the core asks for and the one grace
(``_gather.py``), the decided edge's write transaction (``_writes.py``) and the final verifier
(``_verify.py``). Each part is a mixin over :class:`PassState`, which holds the ports and
declares (for the type checker only) the steps one part calls in another.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from fsm import ATTEMPT_ACTIVE, Need, PrimaryCore, PrimaryDecision
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
from reconciler.primary._summary import CandidateResult, Fingerprint
from storage import AttemptRow, JournalRow, LockBudget, PrimaryCandidate, Repository, RunRow

TYPE_CHECKING = False  # the mixins' calls into each other, for the type checker only

# The probe port: spec 03 "Inspection" of a stored handle (tests plug a gated one in).
Probe = Callable[..., Evidence]


class PassCandidate:
    __slots__ = (
        "after_read_run",
        "attempt",
        "attempts",
        "before_probe",
        "core",
        "decision",
        "fingerprint",
        "journal",
        "page",
        "probed_at",
        "receipt",
        "result",
        "run",
    )

    def __init__(self, page: PrimaryCandidate) -> None:
        self.page = page
        self.core = PrimaryCore(page.status)
        # The core as it asked for the probe: the final verifier's probe is observed on it.
        self.before_probe: PrimaryCore | None = None
        self.run: RunRow | None = None
        self.attempts: list[AttemptRow] = []
        self.attempt: AttemptRow | None = None  # the latest, once the core looks at it
        self.journal: JournalRow | None = None  # the latest Attempt's receipt journal row
        self.receipt: Receipt | None = None  # the trusted receipt a completion commits
        self.probed_at = 0.0
        self.fingerprint: Fingerprint | None = None
        self.result: CandidateResult | None = None
        self.decision: PrimaryDecision | None = None  # what is being committed
        # What the core answered right after the Run was read: the re-check must get it again.
        self.after_read_run: Need | PrimaryDecision | None = None


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


class PassState:
    """The ports and settings of one pass (set by ``PrimaryReconciler.__init__``)."""

    grace: float
    conn: sqlite3.Connection
    repo: Repository
    store: ReceiptStore
    provider: PassProvider
    clock: Clock
    platform: str
    budget: LockBudget
    probe: Probe
    dry_run: bool
    stopped: str | None
    warnings: list[str]

    if TYPE_CHECKING:
        # Steps one part of the pass calls in another (defined by the mixins).
        def _drive(self, cand: PassCandidate) -> None: ...
        def _decided(self, cand: PassCandidate, decision: PrimaryDecision) -> None: ...
        def _lose_after_grace(self, cand: PassCandidate) -> None: ...

    def _result(self, cand: PassCandidate, row: str, outcome: str, reason: str) -> CandidateResult:
        attempt_id = cand.attempt.id if cand.attempt is not None else None
        return CandidateResult(cand.page.run_id, attempt_id, row, outcome, reason)

    def _root_problem(self, read: ReadResult, att: AttemptRow) -> str | None:
        """The reason when the receipt could not be looked for at all, else None."""
        if isinstance(read, Unusable):
            return f"receipt_root_unusable:{read.reason}:{read.path}"
        if isinstance(read, RootMissing) and att.status != "claimed":
            return f"receipt_root_missing:{self.store.root}"
        return None

    def _revoke(self, cand: PassCandidate, why: str, outcome: str = "unresolved") -> None:
        # ADR-0068 §5: any difference revokes safety for that candidate.
        assert cand.result is not None
        cand.result.outcome = outcome
        cand.result.reason = f"verifier:{why}"
