"""ADR-0068 §4: the decided edge's effect, in ONE transaction that re-reads the Run and its
Attempts and takes the decision again on them (every UPDATE compare-and-sets in its WHERE).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from fsm import (
    ATTEMPT_ACTIVE,
    PRIMARY_TABLE,
    MachineDefinitionError,
    Need,
    PrimaryCore,
    PrimaryDecision,
    PrimaryFacts,
    observed_facts,
)
from reconciler.node import QuarantineNotDone, directory_at, witness_ms
from reconciler.primary._edges import EFFECTS, PLANS, decision_payload, expect_for
from reconciler.primary._state import PassCandidate, PassState, read_run_fields
from reconciler.primary._summary import Fingerprint, describe, fingerprint
from storage import (
    AttemptRow,
    Conflict,
    RunRow,
    advance_read,
    check_read,
    in_transaction,
    journal_get,
    journal_quarantine,
    journal_resolve,
    journal_withdraw_quarantine,
    run_with_attempts,
    write_blocker,
)

# How long an invalid receipt is kept in quarantine (spec 03 leaves the period to us: D-3a).
QUARANTINE_KEEP_MS = 7 * 24 * 3600 * 1000
# A clock behind the database's own times by more than this is named in a warning (D-16); less
# is an NTP step or two writers' clocks a little apart, and the purge time is floored anyway.
CLOCK_BEHIND_WARN_MS = 60 * 1000


class Writing(PassState):
    """The write transactions of :class:`reconciler.primary._pass.PrimaryReconciler`."""

    # --- the decision's effect --------------------------------------------------------------

    def _decided(self, cand: PassCandidate, decision: PrimaryDecision) -> None:
        write = decision.write
        if write is None or self.dry_run:
            if decision.outcome == "remaining":  # the verifier proves it against this
                run, att = cand.run, cand.attempt
                assert run is not None and att is not None
                cand.fingerprint = fingerprint(run, att)
            cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
            return
        cand.decision = decision
        WRITES[write](self, cand, decision)

    def _commit(self, cand: PassCandidate) -> int:
        """The decided edge in ONE transaction (ADR-0068 §4): the Run and Attempts are re-read
        inside it and must take the core the same way again; the plan is made from the facts
        with that re-read, so every edge's guard is evaluated on them; every UPDATE
        compare-and-sets in its WHERE (row count checked)."""
        run, decision = cand.run, cand.decision
        assert run is not None and decision is not None and decision.write is not None
        build = PLANS[decision.write]
        now, note = self.clock.now_ms(), decision_payload(decision)

        def work(c: sqlite3.Connection) -> int:
            facts, run_now, attempts = self._check_again(c, cand, decision)
            plan = build(run, cand.attempt, cand.receipt, decision, facts, now, note)
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
        self, c: sqlite3.Connection, cand: PassCandidate, decision: PrimaryDecision
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
        again = PrimaryCore(cand.page.status).observe("read_run", **fields).next()
        before = cand.after_read_run
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

    def _lose_after_grace(self, cand: PassCandidate) -> None:
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
            cand.core = core.observe("recheck_run", unchanged_on_recheck=recheck(self.conn)[0])
            return self._drive(cand)

        def work(c: sqlite3.Connection) -> PrimaryCore:
            # Each try of the transaction observes on the core kept from before it.
            unchanged, now_run, attempts = recheck(c)
            after = core.observe("recheck_run", unchanged_on_recheck=unchanged)
            decision = after.next()
            assert isinstance(decision, PrimaryDecision)
            if decision.write is not None:
                plan = PLANS[decision.write](
                    run,
                    att,
                    cand.receipt,
                    decision,
                    decision.facts,
                    self.clock.now_ms(),
                    decision_payload(decision),
                )
                assert plan is not None
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
            return after

        cand.core = in_transaction(self.conn, work)
        decision = cand.core.next()
        assert isinstance(decision, PrimaryDecision)
        cand.result = self._result(cand, decision.row, decision.outcome, decision.reason)
        return None

    def _after_completion(self, cand: PassCandidate) -> None:
        # spec 03: delete the receipt only AFTER the commit, then resolve the journal. A failure
        # here leaves a committed terminal Run: recovered, with the leftover named.
        att = cand.attempt
        assert att is not None and cand.result is not None
        try:
            self.store.delete(att.id)
            # D-17: the Attempt ended; its lock file goes too unless its wrapper still holds it
            # (it removes the name itself right after publishing). Before the journal row, like
            # the receipt: the row is what lets `sweep` find what is left.
            self.store.remove_lock(att.id)
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
        # D-16: the retention runs from the latest moment by any clock in sight: this one, the
        # kernel's (which `faketime` does not move), the database's newest time for the Run.
        kernel = witness_ms(self.clock)
        at = max(now, kernel) if kernel is not None else now
        happened = journal_quarantine(self.conn, att.id, run.id, ref, at, at + QUARANTINE_KEEP_MS)
        if happened - now > CLOCK_BEHIND_WARN_MS:
            what = (
                "the kernel's clock"
                if happened == at
                else f"the newest time the database recorded for run {ascii(run.id)[1:-1]}"
            )
            self.warnings.append(
                f"the clock runs {(happened - now) // 1000} s behind {what}: the quarantined "
                f"receipt of Attempt {ascii(att.id)[1:-1]} is kept for the retention counted "
                "from that time; set the clock right (NTP)"
            )
        try:
            self.store.quarantine(att.id, ref)
        except QuarantineNotDone:
            # Nothing was moved: no row may claim a quarantine that did not happen. Withdrawn
            # in this same pass; the candidate is `failed` (row 14) and the receipt stays put.
            journal_withdraw_quarantine(self.conn, att.id, ref, previous)
            raise


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


# --- each write the table names, committed (one per entry of _edges.EFFECTS) ---------------


def _complete(w: Writing, cand: PassCandidate, decision: PrimaryDecision) -> None:
    # Row 5 (and row 13 after the grace): the completion, then the receipt's cleanup.
    w._commit(cand)
    cand.result = w._result(cand, decision.row, decision.outcome, decision.reason)
    w._after_completion(cand)


def _quarantine(w: Writing, cand: PassCandidate, decision: PrimaryDecision) -> None:
    run, att = cand.run, cand.attempt
    assert run is not None and att is not None
    # D-16: a directory cannot be moved into the quarantine; nothing is written and row 6
    # stays unresolved (as its dry run says) until the operator removes it.
    if directory_at(decision.facts.receipt_problem) is None:
        w._quarantine(run, att)
    cand.result = w._result(cand, decision.row, decision.outcome, decision.reason)


def _lose(w: Writing, cand: PassCandidate, decision: PrimaryDecision) -> None:
    w._commit(cand)
    cand.result = w._result(cand, decision.row, decision.outcome, decision.reason)


def _adopt(w: Writing, cand: PassCandidate, decision: PrimaryDecision) -> None:
    # Row 12: only the aggregate not yet running moves.
    run, att = cand.run, cand.attempt
    assert run is not None and att is not None
    if run.status == "running" and att.status == "running":
        cand.fingerprint = fingerprint(run, att)  # nothing to adopt, nothing written
    else:
        cand.fingerprint = _adopted(run, att, w._commit(cand))
    cand.result = w._result(cand, decision.row, decision.outcome, decision.reason)


WRITES: dict[str, Callable[[Writing, PassCandidate, PrimaryDecision], None]] = {
    "complete": _complete,
    "quarantine": _quarantine,
    "lose": _lose,
    "lose_missing_attempt": _lose,
    "adopt_running": _adopt,
}
# Every write the table names is one effect, committed here: a write without both fails the
# import, not a candidate (fsm/_primary_table.py, _edges.EFFECTS).
_NAMED = {c.write for r in PRIMARY_TABLE.rows for c in r.cases if c.write is not None}
if not (_NAMED == set(WRITES) == set(EFFECTS)):
    raise MachineDefinitionError(
        PRIMARY_TABLE.name,
        f"writes without their effect: table {sorted(_NAMED)}, committed {sorted(WRITES)}, "
        f"effects {sorted(EFFECTS)}",
    )
