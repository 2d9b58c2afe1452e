"""ADR-0068 §2: gathering exactly the evidence the core asks for, and the one grace.

Phase 1 drives a candidate until the core decides it or asks for the grace (row 13: the probe
said `not_running`); the pass then pays ONE grace for all of those (spec 04 "The grace") and
phase 2 drives each again from the second receipt read on.
"""

from __future__ import annotations

from fsm import PRIMARY_PASS_ROWS, Need
from reconciler.node import (
    Found,
    Invalid,
    Missing,
    RootMissing,
    authenticate_receipt,
    lock_evidence,
    needs_lock,
)
from reconciler.primary._state import (
    PassCandidate,
    PassState,
    probe_fields,
    read_run_fields,
)
from storage import AttemptRow, JournalRow, journal_withdraw_quarantine, run_with_attempts


class Gathering(PassState):
    """The evidence loop of :class:`reconciler.primary._pass.PrimaryReconciler`."""

    # --- the loop: ask the core, gather exactly that, observe, until a decision -------------

    def _phase1(self, cand: PassCandidate) -> None:
        self._drive(cand)

    def _phase2(self, cand: PassCandidate) -> None:
        if self.clock.monotonic() - cand.probed_at < self.grace:  # pragma: no cover - guarded
            raise RuntimeError("second receipt read attempted before a full grace")
        cand.core = cand.core.observe("pay_grace", grace_paid=True)
        self._drive(cand)

    def _drive(self, cand: PassCandidate) -> None:
        while True:
            step = cand.core.next()
            if not isinstance(step, Need):
                return self._decided(cand, step)
            evidence = step.evidence
            if evidence == "read_run":
                self._read_run(cand)
            elif evidence == "read_receipt":
                seen = self._gather_receipt(cand, first=True)
                if seen is None:
                    return None  # the receipt root decided it (D-3c)
                cand.core = cand.core.observe("read_receipt", **seen)
            elif evidence == "probe":
                self._probe(cand)
            elif evidence == "pay_grace":
                return None  # set aside: the one grace of the pass (spec 04 "The grace")
            elif evidence == "reread_receipt":
                seen = self._gather_receipt(cand, first=False)
                if seen is None:
                    return None
                cand.core = cand.core.observe("reread_receipt", **seen)
            else:  # recheck_run: observed inside the write transaction (_lose_after_grace)
                return self._lose_after_grace(cand)

    def _read_run(self, cand: PassCandidate) -> None:
        # ADR-0068 §2 step 1: ONE read of the Run and its Attempts before the decision.
        run, attempts, journal = run_with_attempts(self.conn, cand.page.run_id)
        cand.run, cand.attempts, cand.journal = run, attempts, journal
        cand.core = cand.core.observe("read_run", **read_run_fields(run, attempts))
        step = cand.after_read_run = cand.core.next()
        if attempts and (isinstance(step, Need) or step.row in PRIMARY_PASS_ROWS.name_attempt):
            # The summary names the latest Attempt once a row looks at it (row 4 on).
            cand.attempt = attempts[-1]  # attempts are ordered by attempt number

    def _gather_receipt(self, cand: PassCandidate, *, first: bool) -> dict[str, object] | None:
        """Read the one receipt path (ADR-0068 §2 steps 2-4); None when the receipt root is
        unusable (the candidate is then decided as configuration, D-3c)."""
        run, att = cand.run, cand.attempt
        assert run is not None and att is not None
        key = "first_receipt" if first else "second_receipt"
        read = self.store.read(att.id)
        unusable = self._root_problem(read, att)
        if unusable is not None:
            # Configuration, not a receipt: no quarantine, no journal row, no probe (D-3c).
            row = PRIMARY_PASS_ROWS.receipt_root
            cand.result = self._result(cand, row, "unresolved", unusable)
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

    def _probe(self, cand: PassCandidate) -> None:
        # ADR-0068 §2 step 5: the exact durable identity, three-valued (§3).
        att = cand.attempt
        assert att is not None
        evidence = self.probe(att.executor_handle, self.provider, platform=self.platform)
        if needs_lock(evidence):
            # D-17: a held Attempt lock means its wrapper lives, in whatever PID namespace:
            # never `not_running` (row 10, unresolved, the reason says where to run qlfsm).
            # Asked after /proc, so healthy running candidates cost nothing more; no SQL.
            evidence = lock_evidence(evidence, self.store.lock_state(att.id))
        cand.before_probe = cand.core
        cand.core = cand.core.observe("probe", **probe_fields(evidence, att))
        cand.probed_at = self.clock.monotonic()

    # --- the grace, once ----------------------------------------------------------------------

    def _pay_grace(self, waiting: list[PassCandidate]) -> None:
        # spec 04: ONE wait for all not_running candidates; the last probe is the youngest, so
        # once it is a full grace old, every earlier one is too.
        youngest = max(c.probed_at for c in waiting)
        remaining = self.grace - (self.clock.monotonic() - youngest)
        while remaining > 0:
            self.clock.sleep(remaining)
            remaining = self.grace - (self.clock.monotonic() - youngest)
