"""ADR-0068: the receipt-first, process-identity-aware start-up reconciler (spec 04).

One pass over the bounded candidate page, serially in Run id order, in two phases so that the
publication grace is paid ONCE per pass (spec 04 "The grace"):

- phase 1 takes every candidate through spec 04's table up to its probe; every candidate that
  needs no grace (rows 1-12) is finished here, and `not_running` ones (row 13) are set aside
  with the monotonic time of their probe;
- one sleep, long enough that the LAST of those probes is a full grace old (so every one is);
- phase 2 reads each set-aside candidate's receipt again and commits (row 13).

Every candidate walks :class:`fsm.EvidenceSequence`: the only way to record `lost` after a
probe is through ``pay_grace`` and ``reread_receipt`` (ADR-0068 §2 step 6). Then the final
verifier (ADR-0068 §5) queries the page again and proves every retained candidate a second time.

Ports are injected: the connection, a ReceiptStore, a ProcessProvider and a Clock.
"""

from __future__ import annotations

import sqlite3
import sys
from dataclasses import dataclass, field
from typing import Any

from fsm import ATTEMPT_ACTIVE, EvidenceSequence, PrimaryFacts
from reconciler._profiles import GRACE_MS as GRACE_MS
from reconciler._profiles import grace_seconds
from reconciler.node._clock import Clock
from reconciler.node._identity import ProcessProvider, inspect_handle
from reconciler.node._receipt import authenticate_receipt
from reconciler.node._receipt_store import (
    Found,
    Invalid,
    Missing,
    QuarantineNotDone,
    ReadResult,
    ReceiptRootError,
    ReceiptStore,
    RootMissing,
    Unusable,
)
from reconciler.primary._edges import (
    Plan,
    adopt_running,
    completion,
    lose_attempt,
    lose_missing_attempt,
)
from reconciler.primary._summary import (
    CandidateResult,
    Fingerprint,
    describe,
    empty_summary,
    fingerprint,
    summarize,
)
from storage import (
    AttemptRow,
    JournalRow,
    LockBudget,
    PrimaryCandidate,
    Repository,
    RunRow,
    busy_wait_s,
    database_error,
    journal_get,
    journal_quarantine,
    journal_resolve,
    journal_withdraw_quarantine,
    lock_budget,
    lock_budget_from_env,
    primary_candidates,
    write_blocker,
)

# How long an invalid receipt is kept in quarantine (spec 03 leaves the period to us: D-3a).
QUARANTINE_KEEP_MS = 7 * 24 * 3600 * 1000
# The summary's `row` for a candidate whose receipt root or shard is not a usable directory:
# no row of spec 04's table decides it (it is configuration, D-3c).
ROOT_ROW = "receipt_root"


@dataclass
class _Candidate:
    page: PrimaryCandidate
    seq: EvidenceSequence = field(default_factory=EvidenceSequence)
    run: RunRow | None = None
    attempt: AttemptRow | None = None
    probed_at: float = 0.0
    probe_reason: str = ""
    fingerprint: Fingerprint | None = None
    result: CandidateResult | None = None


class PrimaryReconciler:
    """One ADR-0068 pass; see the module docstring. Use :func:`reconcile`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        store: ReceiptStore,
        provider: ProcessProvider,
        clock: Clock,
        *,
        profile: str = "standalone",
        platform: str = sys.platform,
        budget: LockBudget | None = None,
    ) -> None:
        self.grace = grace_seconds(profile)
        self.conn = conn
        self.repo = Repository(conn)
        self.store = store
        self.provider = provider
        self.clock = clock
        self.platform = platform
        self.budget = budget if budget is not None else lock_budget_from_env()
        # Why the pass stopped writing (database_locked / database_read_only), once it has.
        self.stopped: str | None = None

    # --- the pass ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        page, truncated = primary_candidates(self.conn)
        if truncated or not page:
            # spec 04 "Before any candidate": nothing else is read, probed, slept or written.
            return empty_summary(truncated, len(page))
        with lock_budget(self.conn, self.budget):
            return self._run(page)

    def _run(self, page: list[PrimaryCandidate]) -> dict[str, Any]:
        self._check_root(page)
        todo = [_Candidate(c) for c in page]
        waiting: list[_Candidate] = []
        for cand in todo:
            self._guarded(cand, self._phase1)
            if cand.result is None:
                waiting.append(cand)
        if waiting and self.stopped is None:
            self._pay_grace(waiting)
        for cand in waiting:
            self._guarded(cand, self._phase2)
        results = [c.result for c in todo if c.result is not None]
        if self.stopped is not None:
            # The verifier's reads could wait on the same lock; the pass is blocked anyway.
            for cand in todo:
                if cand.result is not None and cand.result.outcome == "remaining":
                    self._revoke(cand, f"not_run:{self.stopped}", outcome="failed")
            return summarize(results, False)
        truncated = self._verify(todo, results)
        return summarize(results, truncated)

    def _check_root(self, page: list[PrimaryCandidate]) -> None:
        """The receipt root is checked as a root, once, before anything is written (D-3c).

        One that exists but is not a real directory raises ReceiptRootError (a configuration
        error: `qlfsm` exits 2). A missing root is "no receipt" only while no candidate was ever
        launched: the launcher creates the root before its first commit, so a missing root
        beside a `starting`/`running` Attempt means the wrong root (or a lost one), and reading
        it as "no receipt" would turn a published completion into `lost`.
        """
        if self.store.check_root():
            return
        for cand in page:
            try:
                attempts = self.repo.attempts_of(cand.run_id)
            except Exception:  # a bad row is that candidate's failure, reported in phase 1
                continue
            for att in attempts:
                if att.status in ("starting", "running"):
                    raise ReceiptRootError(
                        f"receipt root {self.store.root!r} does not exist, yet Attempt {att.id} "
                        f"of Run {cand.run_id} is {att.status} (the launcher creates the root "
                        "before any spawn): point the receipt root at the launcher's receipt "
                        "directory, or restore it"
                    )

    def _guarded(self, cand: _Candidate, step: Any) -> None:
        # spec 04 row 14: any exception while handling the candidate -> failed. Each advance is
        # its own transaction, already rolled back by the time the exception reaches here.
        if cand.page.problem is not None:
            # A row the candidate query could not read (storage._text): this one fails alone.
            cand.seq.fire("fail")
            cand.result = self._result(cand, "14", f"error:BadRow: {cand.page.problem}")
            return
        if self.stopped is not None:
            # The database cannot be written any more (locked past the lock budget, or read-
            # only): no further write is attempted and nothing more is waited for.
            cand.seq.fire("fail")
            cand.result = self._result(cand, "14", f"{self.stopped}:not_attempted")
            return
        try:
            step(cand)
        except Exception as exc:
            blocker = write_blocker(exc)
            if blocker is not None:
                self.stopped = blocker
                exc = self._named(exc)
            if cand.seq.done and cand.result is not None:
                # Decided (and committed) before the error: keep the decision, name the error.
                cand.result.reason += f";error:{describe(exc)}"
                return
            if not cand.seq.done:
                cand.seq.fire("fail")
                cand.result = self._result(cand, "14", f"error:{describe(exc)}")
            else:  # pragma: no cover - a sequence never ends without its result being set
                att = cand.attempt.id if cand.attempt is not None else None
                reason = f"error:{describe(exc)}"
                cand.result = CandidateResult(cand.page.run_id, att, "14", "failed", reason)

    def _named(self, exc: Exception) -> Exception:
        """A lock or read-only error under its storage name (Busy, DatabaseReadOnly)."""
        path = getattr(self.conn, "path", "")
        if not path:
            return exc
        # A read that found the database locked waited the connection's busy timeout.
        return database_error(path, exc, waited_s=busy_wait_s(self.conn))

    def _result(self, cand: _Candidate, row: str, reason: str) -> CandidateResult:
        attempt_id = cand.attempt.id if cand.attempt is not None else None
        return CandidateResult(cand.page.run_id, attempt_id, row, cand.seq.outcome, reason)

    def _finish(self, cand: _Candidate, trigger: str, row: str, reason: str) -> None:
        cand.seq.fire(trigger)
        cand.result = self._result(cand, row, reason)

    def _facts(self, cand: _Candidate, **kw: Any) -> PrimaryFacts:
        run, att = cand.run, cand.attempt
        assert run is not None
        active = 1 if att is not None and att.status in ATTEMPT_ACTIVE else 0
        return PrimaryFacts(
            run_status=run.status,
            attempt_status=att.status if att is not None else None,
            active_attempts=active,
            **kw,
        )

    def _commit(self, cand: _Candidate, plan: Plan) -> None:
        run = cand.run
        assert run is not None
        self.repo.advance(
            run.id,
            run.version,
            plan.changes,
            actor=plan.actor,
            at_ms=plan.at_ms,
            expect=plan.expect,
        )

    # --- phase 1: spec 04 rows 1..12, and the probe of row 13 -------------------------------

    def _phase1(self, cand: _Candidate) -> None:
        run = self.repo.get_run(cand.page.run_id)
        attempts = self.repo.attempts_of(cand.page.run_id) if run is not None else []
        active = [a for a in attempts if a.status in ATTEMPT_ACTIVE]
        cand.run = run
        if len(active) > 1:
            return self._finish(cand, "hold", "1", "multiple_active_attempts")
        if run is None:
            return self._finish(cand, "hold", "2", "run_gone")
        if run.execution_owner != "runtime":
            return self._finish(cand, "hold", "2", "not_runtime_owned")
        if run.status != cand.page.status:
            return self._finish(cand, "hold", "2", "status_changed")
        if not attempts and run.status == "dispatching":
            facts = self._facts(cand)
            cand.seq.require("lose_missing_attempt")
            self._commit(cand, lose_missing_attempt(run, facts, self.clock.now_ms()))
            return self._finish(cand, "lose_missing_attempt", "3", "attempt_missing_before_start")
        if not active:
            return self._finish(cand, "hold", "3b", "no_active_attempt")
        latest = attempts[-1]  # attempts_of orders by attempt number
        cand.attempt = latest
        if latest.status not in ATTEMPT_ACTIVE:
            return self._finish(cand, "hold", "4", "latest_attempt_not_active")
        # ADR-0068 §2 steps 2-3: the one receipt path, before any process evidence.
        cand.seq.fire("read_receipt")
        if self._consume_receipt(cand, first=True):
            return None
        att = latest
        if att.status == "claimed":
            # ADR-0068 §2 step 5: an unstarted claim is lost WITHOUT probing any process.
            facts = self._facts(cand, first_receipt="missing")
            return self._lose(cand, "lose_unstarted_claim", "unstarted_claim", "7", facts)
        if att.executor_type != "local_process":
            return self._finish(cand, "hold", "8", "executor_not_local_process")
        if not att.executor_handle:
            return self._finish(cand, "hold", "8", "handle_missing")
        if not isinstance(att.pid, int) or isinstance(att.pid, bool) or att.pid < 1:
            return self._finish(cand, "hold", "8", "pid_invalid")
        evidence = inspect_handle(att.executor_handle, self.provider, platform=self.platform)
        # Three-valued: `unknown` is never read as gone (ADR-0068 §3).
        if evidence.verdict == "unknown":
            if evidence.reason == "provider_unavailable":
                return self._finish(cand, "fail", "9", "provider_unavailable")
            return self._finish(cand, "hold", "10", evidence.reason)
        if evidence.pid != att.pid:
            return self._finish(cand, "hold", "11", "handle_pid_mismatch")
        if evidence.verdict == "running":
            cand.seq.fire("probe_running")
            return self._retain(cand)
        cand.seq.fire("probe_not_running")
        cand.probed_at = self.clock.monotonic()
        cand.probe_reason = evidence.reason
        return None  # waits for the shared grace (row 13)

    def _retain(self, cand: _Candidate) -> None:
        """Row 12: adopt `running` where needed, keep the fingerprint for the verifier."""
        run, att = cand.run, cand.attempt
        assert run is not None and att is not None
        facts = self._facts(
            cand, first_receipt="missing", process="running", handle_pid_matches=True
        )
        cand.seq.require("retain")
        plan = adopt_running(run, att, facts, self.clock.now_ms())
        if plan is not None:
            self._commit(cand, plan)
            run = self.repo.get_run(run.id)
            att = self.repo.get_attempt(att.id)
            assert run is not None and att is not None
            cand.run, cand.attempt = run, att
        cand.fingerprint = fingerprint(run, att)
        self._finish(cand, "retain", "12", "process_running")

    def _consume_receipt(self, cand: _Candidate, *, first: bool) -> bool:
        """Read the receipt; a trusted one completes (row 5), an invalid one is quarantined
        (row 6). False when there is none (the sequence is then in a `*_missing` state)."""
        run, att = cand.run, cand.attempt
        assert run is not None and att is not None
        read = self.store.read(att.id)
        row = "5" if first else "13"
        unusable = self._root_problem(read, att)
        if unusable is not None:
            # Configuration, not a receipt: no quarantine, no journal row, no probe (D-3c).
            self._finish(cand, "hold", ROOT_ROW, unusable)
            return True
        if isinstance(read, RootMissing):
            read = Missing()  # a `claimed` Attempt: nothing was launched, so nothing published
        if isinstance(read, Found):
            problem = authenticate_receipt(
                read.receipt,
                run_id=run.id,
                execution_owner=run.execution_owner,
                attempt_id=att.id,
                attempt_status=att.status,
                attempt_callback_sequence=att.callback_sequence,
                attempt_created_at_ms=att.created_at_ms,
                attempt_started_at_ms=att.started_at_ms,
                callback_token_hash=att.callback_token_hash,
                run_status=run.status,
            )
            if problem is None:
                cand.seq.fire("trust")
                if first:
                    facts = self._facts(cand, first_receipt="trusted")
                else:
                    facts = self._facts(
                        cand,
                        first_receipt="missing",
                        process="not_running",
                        handle_pid_matches=True,
                        grace_paid=True,
                        second_receipt="trusted",
                    )
                cand.seq.require("commit_completion")
                plan = completion(run, att, read.receipt, facts, self.clock.now_ms())
                self._commit(cand, plan)
                reason = f"receipt_{plan.terminal}" + ("" if first else "_after_grace")
                self._finish(cand, "commit_completion", row, reason)
                self._after_completion(cand)
                return True
            read = Invalid(problem)
        if isinstance(read, Invalid):
            cand.seq.fire("reject")
            self._quarantine(run, att)
            self._finish(
                cand, "quarantine", "6" if first else "13", f"invalid_receipt:{read.reason}"
            )
            return True
        journal = journal_get(self.conn, att.id) if first else None
        if journal is not None and journal.state == "quarantined":
            ref = journal.quarantine_ref
            if ref is not None and not self.store.holds_quarantine(ref):
                # The row claims a quarantine that never happened (an older qlfsm wrote such
                # rows for a receipt-root mistake) or whose copy is gone: withdrawn, back to the
                # launcher's `pending`, and the candidate is decided on its evidence (D-3c).
                now = self.clock.now_ms()
                pending = JournalRow(
                    att.id,
                    journal.run_id,
                    "pending",
                    None,
                    None,
                    journal.registered_at_ms,
                    max(now, journal.registered_at_ms),
                )
                journal_withdraw_quarantine(self.conn, att.id, ref, pending)
            else:
                # An earlier pass quarantined this Attempt's receipt: the file is gone from the
                # path, but the invalid fact stands. It keeps blocking (spec 03: the candidate
                # stays unresolved) until someone decides, instead of turning into `lost` on the
                # next boot.
                cand.seq.fire("reject")
                self._finish(cand, "quarantine", "6", "receipt_quarantined_earlier")
                return True
        cand.seq.fire("find_none")
        return False

    def _root_problem(self, read: ReadResult, att: AttemptRow) -> str | None:
        """The reason when the receipt could not be looked for at all, else None."""
        if isinstance(read, Unusable):
            return f"receipt_root_unusable:{read.reason}:{read.path}"
        if isinstance(read, RootMissing) and att.status != "claimed":
            return f"receipt_root_missing:{self.store.root}"
        return None

    def _after_completion(self, cand: _Candidate) -> None:
        # spec 03: delete the receipt only AFTER the commit, then resolve the journal. A failure
        # here leaves a committed terminal Run: recovered, with the leftover named.
        att = cand.attempt
        assert att is not None and cand.result is not None
        try:
            self.store.delete(att.id)
            journal_resolve(self.conn, att.id)
        except Exception as exc:
            self.stopped = self.stopped or write_blocker(exc)
            cand.result.reason += f";cleanup_failed:{describe(exc)}"

    def _quarantine(self, run: RunRow, att: AttemptRow) -> None:
        # spec 03: the journal intent is committed FIRST, then the file is moved. A second
        # invalid receipt of the same Attempt gets its own slot (D-3c): the journal row then
        # names the newest copy, and every copy stays until its purge time.
        previous = journal_get(self.conn, att.id)
        earlier = previous.quarantine_ref if previous and previous.state == "quarantined" else None
        ref = self.store.quarantine_target(att.id, earlier)
        now = self.clock.now_ms()
        journal_quarantine(self.conn, att.id, run.id, ref, now, now + QUARANTINE_KEEP_MS)
        try:
            self.store.quarantine(att.id, ref)
        except QuarantineNotDone:
            # Nothing was moved: no row may claim a quarantine that did not happen. Withdrawn
            # in this same pass; the candidate is `failed` (row 14) and the receipt stays put.
            journal_withdraw_quarantine(self.conn, att.id, ref, previous)
            raise

    def _lose(
        self, cand: _Candidate, trigger: str, reason: str, row: str, facts: PrimaryFacts
    ) -> None:
        """Rows 7 and 13. ``trigger`` is the Run/Attempt edge; the evidence machine's edge is
        ``lose_unstarted_claim`` (before any probe) or ``lose_not_running`` (after the grace
        and the second read), and it must be allowed BEFORE anything is committed."""
        run, att = cand.run, cand.attempt
        assert run is not None and att is not None
        step = "lose_not_running" if trigger == "lose_after_grace" else trigger
        cand.seq.require(step)
        self._commit(cand, lose_attempt(run, att, reason, trigger, facts, self.clock.now_ms()))
        detail = reason if row != "13" else f"{reason}:{cand.probe_reason}"
        self._finish(cand, step, row, detail)

    # --- the grace, once ----------------------------------------------------------------------

    def _pay_grace(self, waiting: list[_Candidate]) -> None:
        # spec 04: ONE wait for all not_running candidates; the last probe is the youngest, so
        # once it is a full grace old, every earlier one is too.
        youngest = max(c.probed_at for c in waiting)
        remaining = self.grace - (self.clock.monotonic() - youngest)
        while remaining > 0:
            self.clock.sleep(remaining)
            remaining = self.grace - (self.clock.monotonic() - youngest)

    # --- phase 2: row 13 after the grace ------------------------------------------------------

    def _phase2(self, cand: _Candidate) -> None:
        if self.clock.monotonic() - cand.probed_at < self.grace:  # pragma: no cover - guarded
            raise RuntimeError("second receipt read attempted before a full grace")
        cand.seq.fire("pay_grace")
        cand.seq.fire("reread_receipt")
        if self._consume_receipt(cand, first=False):
            return
        run, att = cand.run, cand.attempt
        assert run is not None and att is not None
        # Re-read the Run/Attempt: nothing may have changed since the probe (spec 04 row 13).
        now_run = self.repo.get_run(run.id)
        attempts = self.repo.attempts_of(run.id) if now_run is not None else []
        now_att = attempts[-1] if attempts else None
        active = sum(1 for a in attempts if a.status in ATTEMPT_ACTIVE)
        if (
            now_run is None
            or now_att is None
            or active != 1
            or fingerprint(now_run, now_att) != fingerprint(run, att)
        ):
            return self._finish(cand, "hold", "13", "changed_before_lost")
        facts = self._facts(
            cand,
            first_receipt="missing",
            process="not_running",
            handle_pid_matches=True,
            grace_paid=True,
            second_receipt="missing",
            unchanged_on_recheck=True,
        )
        return self._lose(cand, "lose_after_grace", "process_not_running", "13", facts)

    # --- final verifier (ADR-0068 §5) ---------------------------------------------------------

    def _verify(self, todo: list[_Candidate], results: list[CandidateResult]) -> bool:
        page, truncated = primary_candidates(self.conn)
        by_id = {c.page.run_id: c for c in todo}
        retained = {c.page.run_id: c for c in todo if c.result and c.result.outcome == "remaining"}
        seen: set[str] = set()
        for now in page:
            seen.add(now.run_id)
            cand = by_id.get(now.run_id)
            if cand is None or cand.result is None:
                results.append(CandidateResult(now.run_id, None, "verifier", "unresolved", "new"))
            elif now.run_id in retained:
                self._verify_one(cand, now)
            elif cand.result.outcome == "recovered":
                # It was terminalized or lost, yet it is a candidate again: someone moved it.
                results.append(
                    CandidateResult(now.run_id, None, "verifier", "unresolved", "reappeared")
                )
        for run_id, cand in retained.items():
            if run_id not in seen and not truncated:
                self._revoke(cand, "vanished")
        return truncated

    def _verify_one(self, cand: _Candidate, now: PrimaryCandidate) -> None:
        assert cand.fingerprint is not None and cand.attempt is not None
        att = cand.attempt
        try:
            read = self.store.read(att.id)
            unusable = self._root_problem(read, att)
            if unusable is not None:
                return self._revoke(cand, unusable)
            if not isinstance(read, Missing):
                return self._revoke(cand, "receipt_appeared")
            evidence = inspect_handle(att.executor_handle, self.provider, platform=self.platform)
            if evidence.reason == "provider_unavailable":
                return self._revoke(cand, "provider_unavailable", outcome="failed")  # as row 9
            if evidence.verdict != "running" or evidence.pid != att.pid:
                return self._revoke(cand, f"process_{evidence.verdict}:{evidence.reason}")
            run = self.repo.get_run(now.run_id)
            attempts = self.repo.attempts_of(now.run_id)
            if (
                run is None
                or not attempts
                or (now.status, now.version) != (run.status, run.version)
                or fingerprint(run, attempts[-1]) != cand.fingerprint
                or sum(1 for a in attempts if a.status in ATTEMPT_ACTIVE) != 1
            ):
                return self._revoke(cand, "fingerprint_changed")
        except Exception as exc:
            assert cand.result is not None
            cand.result.outcome = "failed"
            cand.result.reason = f"verifier_error:{describe(exc)}"
        return None

    def _revoke(self, cand: _Candidate, why: str, outcome: str = "unresolved") -> None:
        # ADR-0068 §5: any difference revokes safety for that candidate.
        assert cand.result is not None
        cand.result.outcome = outcome
        cand.result.reason = f"verifier:{why}"


def reconcile(
    conn: sqlite3.Connection,
    store: ReceiptStore,
    provider: ProcessProvider,
    clock: Clock,
    *,
    profile: str = "standalone",
    platform: str = sys.platform,
    budget: LockBudget | None = None,
) -> dict[str, Any]:
    """Run one ADR-0068 pass and return spec 04's summary (see :class:`PrimaryReconciler`).

    ``budget``: the most the pass waits, in total, for other processes' write locks
    (default ``$QLFSM_LOCK_BUDGET_S``, else 5 s); then it stops writing and every candidate
    not yet decided fails with a reason naming the lock (docs/decisions.md "lock budget").
    """
    return PrimaryReconciler(
        conn, store, provider, clock, profile=profile, platform=platform, budget=budget
    ).run()
