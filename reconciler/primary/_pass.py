"""ADR-0068: the receipt-first, process-identity-aware start-up reconciler (spec 04).

The pass does only I/O. Which row of spec 04 decides a candidate is :class:`fsm.PrimaryCore`'s
answer (the table in ``fsm/_primary_table.py``); the pass gathers exactly the evidence the core
asks for, feeds back what it saw, and commits the decided edge's effect in ONE transaction in
which the decision is taken again on the Run and Attempts re-read inside it (the compare-and-set
is in the UPDATE's WHERE, checked by row count).

One pass over the bounded candidate page, serially in Run id order, in two phases so that the
publication grace is paid ONCE per pass (spec 04 "The grace"):

- phase 1 takes every candidate until the core decides it or asks for the grace (row 13: the
  probe said `not_running`); those are set aside with the monotonic time of their probe;
- one sleep, long enough that the LAST of those probes is a full grace old (so every one is);
- phase 2 observes the grace for each, reads its receipt again, re-checks it and commits.

Then the final verifier (ADR-0068 §5) queries the page again and proves every retained
candidate a second time. ``dry_run``: the same reads, probes and grace, and nothing written.

Ports are injected: the connection, a ReceiptStore, a ProcessProvider, a Clock and the probe.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from fsm import (
    ATTEMPT_ACTIVE,
    Need,
    PrimaryCore,
    PrimaryDecision,
    PrimaryFacts,
    decide_primary,
    observed_facts,
)
from reconciler._profiles import GRACE_MS as GRACE_MS
from reconciler._profiles import grace_seconds
from reconciler.node._clock import Clock
from reconciler.node._identity import Evidence, ProcessProvider, inspect_handle
from reconciler.node._receipt import Receipt, authenticate_receipt
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
    decision_payload,
    expect_for,
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
    Conflict,
    JournalRow,
    LockBudget,
    PrimaryCandidate,
    Repository,
    RunRow,
    advance_read,
    busy_wait_s,
    check_read,
    database_error,
    in_transaction,
    journal_get,
    journal_quarantine,
    journal_resolve,
    journal_withdraw_quarantine,
    lock_budget,
    lock_budget_from_env,
    primary_candidates,
    run_with_attempts,
    write_blocker,
)

# How long an invalid receipt is kept in quarantine (spec 03 leaves the period to us: D-3a).
QUARANTINE_KEEP_MS = 7 * 24 * 3600 * 1000
# The summary's `row` for a candidate whose receipt root or shard is not a usable directory:
# no row of spec 04's table decides it (it is configuration, D-3c), so it stays pass logic,
# taken before the receipt read is observed.
ROOT_ROW = "receipt_root"

# The probe port: spec 03 "Inspection" of a stored handle (tests plug a gated one in).
Probe = Callable[..., Evidence]


class _Candidate:
    __slots__ = (
        "after_read_run",
        "attempt",
        "attempts",
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


class _Changed(Exception):
    """Inside the write transaction the re-read Run/Attempt no longer gives the decision."""


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
        probe: Probe | None = None,
        dry_run: bool = False,
    ) -> None:
        self.grace = grace_seconds(profile)
        self.conn = conn
        self.repo = Repository(conn)
        self.store = store
        self.provider = provider
        self.clock = clock
        self.platform = platform
        self.budget = budget if budget is not None else lock_budget_from_env()
        # The real inspection unless a port is given (read when the pass is made).
        self.probe: Probe = probe if probe is not None else inspect_handle
        self.dry_run = dry_run
        # Why the pass stopped writing (database_locked / database_read_only), once it has.
        self.stopped: str | None = None

    # --- the pass ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        page, truncated = primary_candidates(self.conn)
        if truncated or not page:
            # spec 04 "Before any candidate": nothing else is read, probed, slept or written.
            summary = empty_summary(truncated, len(page))
        else:
            with lock_budget(self.conn, self.budget):
                summary = self._run(page)
        if self.dry_run:
            summary["dry_run"] = True
        return summary

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
        truncated = self._verify(todo, results, page)
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

    def _guarded(self, cand: _Candidate, step: Callable[[_Candidate], None]) -> None:
        # spec 04 row 14: any exception while handling the candidate -> failed. Each write is
        # its own transaction, already rolled back by the time the exception reaches here.
        if cand.page.problem is not None:
            # A row the candidate query could not read (storage._text): this one fails alone.
            decided = cand.core.fail(f"BadRow: {cand.page.problem}")
            cand.result = self._result(cand, decided.row, decided.outcome, decided.reason)
            return
        if self.stopped is not None:
            # The database cannot be written any more (locked past the lock budget, or read-
            # only): no further write is attempted and nothing more is waited for.
            cand.result = self._result(cand, "14", "failed", f"{self.stopped}:not_attempted")
            return
        try:
            step(cand)
        except Exception as exc:
            blocker = write_blocker(exc)
            if blocker is not None:
                self.stopped = blocker
                exc = self._named(exc)
            if cand.result is not None:
                # Decided (and committed) before the error: keep the decision, name the error.
                cand.result.reason += f";error:{describe(exc)}"
                return
            decided = cand.core.fail(describe(exc))
            cand.result = self._result(cand, decided.row, decided.outcome, decided.reason)

    def _named(self, exc: Exception) -> Exception:
        """A lock or read-only error under its storage name (Busy, DatabaseReadOnly)."""
        path = getattr(self.conn, "path", "")
        if not path:
            return exc
        # A read that found the database locked waited the connection's busy timeout.
        return database_error(path, exc, waited_s=busy_wait_s(self.conn))

    def _result(self, cand: _Candidate, row: str, outcome: str, reason: str) -> CandidateResult:
        attempt_id = cand.attempt.id if cand.attempt is not None else None
        return CandidateResult(cand.page.run_id, attempt_id, row, outcome, reason)

    # --- the loop: ask the core, gather exactly that, observe, until a decision -------------

    def _phase1(self, cand: _Candidate) -> None:
        self._drive(cand)

    def _phase2(self, cand: _Candidate) -> None:
        if self.clock.monotonic() - cand.probed_at < self.grace:  # pragma: no cover - guarded
            raise RuntimeError("second receipt read attempted before a full grace")
        cand.core.observe("pay_grace", grace_paid=True)
        self._drive(cand)

    def _drive(self, cand: _Candidate) -> None:
        core = cand.core
        while True:
            step = core.next()
            if not isinstance(step, Need):
                return self._decided(cand, step)
            evidence = step.evidence
            if evidence == "read_run":
                self._read_run(cand)
            elif evidence == "read_receipt":
                seen = self._gather_receipt(cand, first=True)
                if seen is None:
                    return None  # the receipt root decided it (D-3c)
                core.observe("read_receipt", **seen)
            elif evidence == "probe":
                self._probe(cand)
            elif evidence == "pay_grace":
                return None  # set aside: the one grace of the pass (spec 04 "The grace")
            elif evidence == "reread_receipt":
                seen = self._gather_receipt(cand, first=False)
                if seen is None:
                    return None
                core.observe("reread_receipt", **seen)
            else:  # recheck_run: observed inside the write transaction (_lose_after_grace)
                return self._lose_after_grace(cand)

    def _read_run(self, cand: _Candidate) -> None:
        # ADR-0068 §2 step 1: ONE read of the Run and its Attempts before the decision.
        run, attempts, journal = run_with_attempts(self.conn, cand.page.run_id)
        cand.run, cand.attempts, cand.journal = run, attempts, journal
        cand.core.observe("read_run", **read_run_fields(run, attempts))
        step = cand.after_read_run = cand.core.next()
        if attempts and (isinstance(step, Need) or step.row == "4"):
            # The summary names the latest Attempt once a row looks at it (row 4 on).
            cand.attempt = attempts[-1]  # attempts are ordered by attempt number

    def _gather_receipt(self, cand: _Candidate, *, first: bool) -> dict[str, object] | None:
        """Read the one receipt path (ADR-0068 §2 steps 2-4); None when the receipt root is
        unusable (the candidate is then decided as configuration, D-3c)."""
        run, att = cand.run, cand.attempt
        assert run is not None and att is not None
        key = "first_receipt" if first else "second_receipt"
        read = self.store.read(att.id)
        unusable = self._root_problem(read, att)
        if unusable is not None:
            # Configuration, not a receipt: no quarantine, no journal row, no probe (D-3c).
            cand.result = self._result(cand, ROOT_ROW, "unresolved", unusable)
            return None
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
                cand.receipt = read.receipt
                return {key: "trusted", "receipt_exit_code": read.receipt.exit_code}
            read = Invalid(problem)
        if isinstance(read, Invalid):
            return {key: "invalid", "receipt_problem": read.reason}
        if first and self._quarantined_earlier(att, cand.journal):
            return {key: "quarantined"}
        return {key: "missing"}

    def _quarantined_earlier(self, att: AttemptRow, journal: JournalRow | None) -> bool:
        """The path is empty: did an earlier pass quarantine this Attempt's receipt (spec 03)?
        ``journal``: its journal row, read with the Run and its Attempts."""
        if journal is None or journal.state != "quarantined":
            return False
        ref = journal.quarantine_ref
        if ref is not None and not self.store.holds_quarantine(ref):
            # The row claims a quarantine that never happened (an older qlfsm wrote such rows
            # for a receipt-root mistake) or whose copy is gone: withdrawn, back to the
            # launcher's `pending`, and the candidate is decided on its evidence (D-3c). A dry
            # run predicts exactly that, without the withdrawal.
            if not self.dry_run:
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
            return False
        # The file is gone from the path, but the invalid fact stands: it keeps blocking until
        # someone decides, instead of turning into `lost` on the next boot (D-3a).
        return True

    def _root_problem(self, read: ReadResult, att: AttemptRow) -> str | None:
        """The reason when the receipt could not be looked for at all, else None."""
        if isinstance(read, Unusable):
            return f"receipt_root_unusable:{read.reason}:{read.path}"
        if isinstance(read, RootMissing) and att.status != "claimed":
            return f"receipt_root_missing:{self.store.root}"
        return None

    def _probe(self, cand: _Candidate) -> None:
        # ADR-0068 §2 step 5: the exact durable identity, three-valued (§3).
        att = cand.attempt
        assert att is not None
        evidence = self.probe(att.executor_handle, self.provider, platform=self.platform)
        cand.core.observe(
            "probe",
            process=evidence.verdict,
            probe_reason=evidence.reason,
            handle_pid_matches=evidence.pid == att.pid,
        )
        cand.probed_at = self.clock.monotonic()

    # --- the decision's effect --------------------------------------------------------------

    def _decided(self, cand: _Candidate, decision: PrimaryDecision) -> None:
        write = decision.write
        if write is None or self.dry_run:
            if write == "adopt_running" or decision.state == "retained":
                run, att = cand.run, cand.attempt
                assert run is not None and att is not None
                cand.fingerprint = fingerprint(run, att)
            cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
            return
        run, att = cand.run, cand.attempt
        assert run is not None
        cand.decision = decision
        now = self.clock.now_ms()
        note = decision_payload(decision)
        if write == "complete":
            assert att is not None and cand.receipt is not None
            receipt = cand.receipt
            self._commit(cand, lambda facts: completion(run, att, receipt, facts, now, note))
            cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
            self._after_completion(cand)
        elif write == "quarantine":
            assert att is not None
            self._quarantine(run, att)
            cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
        elif write == "lose_missing_attempt":
            self._commit(cand, lambda facts: lose_missing_attempt(run, facts, now, note))
            cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
        elif write == "lose":
            trigger = decision.trigger
            assert att is not None and trigger is not None
            self._commit(cand, lambda facts: lose_attempt(run, att, trigger, facts, now, note))
            cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
        else:  # adopt_running (row 12): only the aggregate not yet running moves
            assert att is not None
            if run.status == "running" and att.status == "running":
                cand.fingerprint = fingerprint(run, att)  # nothing to adopt, nothing written
            else:
                version = self._commit(
                    cand, lambda facts: adopt_running(run, att, facts, now, note)
                )
                cand.fingerprint = _adopted(run, att, version)
            cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)

    def _commit(self, cand: _Candidate, make: Callable[[PrimaryFacts], Plan | None]) -> int:
        """The decided edge in ONE transaction (ADR-0068 §4): the Run and Attempts are re-read
        inside it and must take the core the same way again; the plan is made from the facts
        with that re-read, so every edge's guard is evaluated on them; every UPDATE
        compare-and-sets in its WHERE (row count checked)."""
        run, decision = cand.run, cand.decision
        assert run is not None and decision is not None

        def work(c: sqlite3.Connection) -> int:
            facts, run_now, attempts = self._check_again(c, cand, decision)
            plan = make(facts)
            assert plan is not None
            done = advance_read(
                self.repo,
                c,
                run_now,
                attempts,
                run.id,
                run.version,
                plan.changes,
                actor=plan.actor,
                at_ms=plan.at_ms,
                expect=plan.expect,
            )
            return done.version

        return in_transaction(self.conn, work)

    def _check_again(
        self, c: sqlite3.Connection, cand: _Candidate, decision: PrimaryDecision
    ) -> tuple[PrimaryFacts, RunRow | None, list[AttemptRow]]:
        """The one re-read inside the write transaction: the core, fed it, must answer what it
        answered on the first read (the same row 3 decision, or the same receipt step); the
        decision's facts with the re-read are what the edges' guards are evaluated on."""
        run, attempts, _ = run_with_attempts(c, cand.page.run_id)
        # First what the compare-and-set will require (the same errors as ever), then the row.
        decided_on, att = cand.run, cand.attempt
        assert decided_on is not None
        if decision.write == "lose_missing_attempt":
            att = None  # row 3: the Run alone was decided on
        check_read(run, attempts, decided_on.id, decided_on.version, expect_for(decided_on, att))
        fields = read_run_fields(run, attempts)
        core = PrimaryCore(cand.page.status)
        core.observe("read_run", **fields)
        again, before = core.next(), cand.after_read_run
        if isinstance(again, Need) and isinstance(before, Need):
            same = again.evidence == before.evidence
        else:
            same = (
                isinstance(again, PrimaryDecision)
                and isinstance(before, PrimaryDecision)
                and (again.row, again.state) == (before.row, before.state)
            )
        if not same:
            raise Conflict("run", cand.page.run_id, f"what row {decision.row} was decided on")
        return observed_facts(decision.facts, fields), run, attempts

    def _lose_after_grace(self, cand: _Candidate) -> None:
        """Row 13, last part: re-check the Run/Attempt (nothing may have changed since the
        probe) and commit `lost` in the SAME transaction as that re-read."""
        run, att = cand.run, cand.attempt
        assert run is not None and att is not None
        before = fingerprint(run, att)
        core = cand.core

        def recheck(c: sqlite3.Connection) -> tuple[bool, RunRow | None, list[AttemptRow]]:
            now_run, attempts, _ = run_with_attempts(c, run.id)
            now_att = attempts[-1] if attempts else None
            active = sum(1 for a in attempts if a.status in ATTEMPT_ACTIVE)
            unchanged = not (
                now_run is None
                or now_att is None
                or active != 1
                or fingerprint(now_run, now_att) != before
            )
            return unchanged, now_run, attempts

        if self.dry_run:
            core.observe("recheck_run", unchanged_on_recheck=recheck(self.conn)[0])
            return self._drive(cand)

        def work(c: sqlite3.Connection) -> PrimaryDecision:
            unchanged, now_run, attempts = recheck(c)
            facts = observed_facts(core.facts, {"unchanged_on_recheck": unchanged})
            decision = decide_primary(facts)
            assert isinstance(decision, PrimaryDecision)
            if decision.write == "lose":
                assert decision.trigger is not None
                plan = lose_attempt(
                    run,
                    att,
                    decision.trigger,
                    decision.facts,
                    self.clock.now_ms(),
                    decision_payload(decision),
                )
                advance_read(
                    self.repo,
                    c,
                    now_run,
                    attempts,
                    run.id,
                    run.version,
                    plan.changes,
                    actor=plan.actor,
                    at_ms=plan.at_ms,
                    expect=plan.expect,
                )
            return decision

        decision = in_transaction(self.conn, work)
        core.observe("recheck_run", unchanged_on_recheck=decision.facts.unchanged_on_recheck)
        cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
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

    # --- the grace, once ----------------------------------------------------------------------

    def _pay_grace(self, waiting: list[_Candidate]) -> None:
        # spec 04: ONE wait for all not_running candidates; the last probe is the youngest, so
        # once it is a full grace old, every earlier one is too.
        youngest = max(c.probed_at for c in waiting)
        remaining = self.grace - (self.clock.monotonic() - youngest)
        while remaining > 0:
            self.clock.sleep(remaining)
            remaining = self.grace - (self.clock.monotonic() - youngest)

    # --- final verifier (ADR-0068 §5) ---------------------------------------------------------

    def _verify(
        self, todo: list[_Candidate], results: list[CandidateResult], first: list[PrimaryCandidate]
    ) -> bool:
        # spec 04 "Final verifier": the candidate query runs again (the page is not reused).
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
            elif cand.result.outcome == "recovered" and not self.dry_run:
                # It was terminalized or lost, yet it is a candidate again: someone moved it.
                # (A dry run wrote nothing: its recovered candidates are still on the page.)
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
            evidence = self.probe(att.executor_handle, self.provider, platform=self.platform)
            if evidence.reason == "provider_unavailable":
                return self._revoke(cand, "provider_unavailable", outcome="failed")  # as row 9
            if evidence.verdict != "running" or evidence.pid != att.pid:
                return self._revoke(cand, f"process_{evidence.verdict}:{evidence.reason}")
            run, attempts, _ = run_with_attempts(self.conn, now.run_id)
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


def _adopted(run: RunRow, att: AttemptRow, version: int) -> Fingerprint:
    # Row 12 moved whichever aggregate was not yet running, in the transaction that returned
    # ``version``: the fingerprint the verifier must find is that of the rows as committed.
    run_status = "running" if run.status == "dispatching" else run.status
    att_status = "running" if att.status == "starting" else att.status
    return (
        run.id,
        run_status,
        version,
        att.id,
        att_status,
        att.callback_sequence,
        att.executor_handle,
        att.pid,
    )


def reconcile(
    conn: sqlite3.Connection,
    store: ReceiptStore,
    provider: ProcessProvider,
    clock: Clock,
    *,
    profile: str = "standalone",
    platform: str = sys.platform,
    budget: LockBudget | None = None,
    probe: Probe | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run one ADR-0068 pass and return spec 04's summary (see :class:`PrimaryReconciler`).

    ``budget``: the most the pass waits, in total, for other processes' write locks
    (default ``$QLFSM_LOCK_BUDGET_S``, else 5 s); then it stops writing and every candidate
    not yet decided fails with a reason naming the lock (docs/decisions.md "lock budget").
    ``dry_run``: every read, probe and the grace as usual, but nothing is written, moved or
    deleted; the summary says what each candidate would get (and gains ``"dry_run": true``).
    """
    return PrimaryReconciler(
        conn,
        store,
        provider,
        clock,
        profile=profile,
        platform=platform,
        budget=budget,
        probe=probe,
        dry_run=dry_run,
    ).run()
