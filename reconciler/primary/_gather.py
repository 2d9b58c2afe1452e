"""ADR-0068 §2: gathering exactly the evidence the core asks for, and the one grace.

Phase 1 drives a candidate until the core decides it or asks for the grace (row 13: the probe
said `not_running`); the pass then pays ONE grace for all of those (spec 04 "The grace") and
phase 2 drives each again from the second receipt read on. Each step returns a new
:class:`~reconciler.primary._state.Candidate`.
"""

from __future__ import annotations

from fsm import Need
from fsm.qinglong import PRIMARY_PASS_ROWS
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
    Candidate,
    Interrupted,
    PassContext,
    PassStatus,
    decided,
    probe_fields,
    read_run_fields,
    root_problem,
)
from reconciler.primary._writes import commit, lose_after_grace
from storage import AttemptRow, JournalRow, journal_withdraw_quarantine, run_with_attempts

# --- the loop: ask the core, gather exactly that, observe, until a decision -----------------


def phase2(ctx: PassContext, status: PassStatus, cand: Candidate) -> Candidate:
    if ctx.clock.monotonic() - cand.probed_at < ctx.grace:  # pragma: no cover - guarded
        raise RuntimeError("second receipt read attempted before a full grace")
    return drive(ctx, status, cand._replace(core=cand.core.observe("pay_grace", grace_paid=True)))


def drive(ctx: PassContext, status: PassStatus, cand: Candidate) -> Candidate:
    """The candidate decided (and its decision committed), or set aside for the grace; an
    error escapes as :class:`Interrupted` with the candidate as far as it got."""
    try:
        while True:
            step = cand.core.next()
            if not isinstance(step, Need):
                return commit(ctx, status, cand, step)
            evidence = step.evidence
            if evidence == "pay_grace":
                return cand  # set aside: the one grace of the pass (spec 04 "The grace")
            if evidence == "read_run":
                cand = read_run(ctx, cand)
            elif evidence == "read_receipt" or evidence == "reread_receipt":
                cand = gather_receipt(ctx, cand, first=evidence == "read_receipt")
            elif evidence == "probe":
                cand = probe(ctx, cand)
            else:  # recheck_run: observed inside the write transaction
                cand = lose_after_grace(ctx, cand)
            if cand.result is not None:
                # Decided by the step itself: the receipt root (D-3c) or row 13's re-check.
                return cand
    except Interrupted:
        raise
    except Exception as exc:
        raise Interrupted(cand, exc) from exc


def read_run(ctx: PassContext, cand: Candidate) -> Candidate:
    # ADR-0068 §2 step 1: ONE read of the Run and its Attempts before the decision.
    run, attempts, journal = run_with_attempts(ctx.conn, cand.page.run_id)
    core = cand.core.observe("read_run", **read_run_fields(run, attempts))
    step = core.next()
    attempt = None
    if attempts and (isinstance(step, Need) or step.row in PRIMARY_PASS_ROWS.name_attempt):
        # The summary names the latest Attempt once a row looks at it (row 4 on).
        attempt = attempts[-1]  # attempts are ordered by attempt number
    return cand._replace(core=core, run=run, journal=journal, after_read_run=step, attempt=attempt)


def gather_receipt(ctx: PassContext, cand: Candidate, *, first: bool) -> Candidate:
    """Read the one receipt path (ADR-0068 §2 steps 2-4) and observe it; decided when the
    receipt root is unusable (as configuration, D-3c)."""
    run, att = cand.run, cand.attempt
    assert run is not None and att is not None
    key = "first_receipt" if first else "second_receipt"
    evidence = "read_receipt" if first else "reread_receipt"
    read = ctx.store.read(att.id)
    if type(read) is Missing and (not first or cand.journal is None):
        # Nothing at the path, and no journal row that could say it was quarantined (the
        # usual dead candidate): the end of the checks below, without them.
        return cand._replace(core=cand.core.observe(evidence, **{key: "missing"}))
    unusable = root_problem(ctx.store, read, att)
    if unusable is not None:
        # Configuration, not a receipt: no quarantine, no journal row, no probe (D-3c).
        return decided(cand, PRIMARY_PASS_ROWS.receipt_root, "unresolved", unusable)
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
            core = cand.core.observe(
                evidence, **{key: "trusted", "receipt_exit_code": read.receipt.exit_code}
            )
            return cand._replace(core=core, receipt=read.receipt)
        read = Invalid(problem)
    if isinstance(read, Invalid):
        seen: dict[str, object] = {key: "invalid", "receipt_problem": read.reason}
    elif first and quarantined_earlier(ctx, att, cand.journal):
        seen = {key: "quarantined"}
    else:
        seen = {key: "missing"}
    return cand._replace(core=cand.core.observe(evidence, **seen))


def quarantined_earlier(ctx: PassContext, att: AttemptRow, journal: JournalRow | None) -> bool:
    """The path is empty: did an earlier pass quarantine this Attempt's receipt (spec 03)?
    ``journal``: its journal row, read with the Run and its Attempts."""
    if journal is None or journal.state != "quarantined":
        return False
    ref = journal.quarantine_ref
    if ref is not None and not ctx.store.holds_quarantine(ref):
        # The row claims a quarantine that never happened (an older qlfsm wrote such rows
        # for a receipt-root mistake) or whose copy is gone: withdrawn, back to the
        # launcher's `pending`, and the candidate is decided on its evidence (D-3c). A dry
        # run predicts exactly that, without the withdrawal.
        if not ctx.dry_run:
            pending = journal._replace(
                state="pending",
                quarantine_ref=None,
                purge_after_ms=None,
                updated_at_ms=max(ctx.clock.now_ms(), journal.registered_at_ms),
            )
            journal_withdraw_quarantine(ctx.conn, att.id, ref, pending)
        return False
    # The file is gone from the path, but the invalid fact stands: it keeps blocking until
    # someone decides, instead of turning into `lost` on the next boot (D-3a).
    return True


def probe(ctx: PassContext, cand: Candidate) -> Candidate:
    # ADR-0068 §2 step 5: the exact durable identity, three-valued (§3).
    att = cand.attempt
    assert att is not None
    evidence = ctx.probe(att.executor_handle, ctx.provider, platform=ctx.platform)
    if needs_lock(evidence):
        # D-17: a held Attempt lock means its wrapper lives, in whatever PID namespace:
        # never `not_running` (row 10, unresolved, the reason says where to run qlfsm).
        # Asked after /proc, so healthy running candidates cost nothing more; no SQL.
        evidence = lock_evidence(evidence, ctx.store.lock_state(att.id))
    core = cand.core.observe("probe", **probe_fields(evidence, att))
    return cand._replace(before_probe=cand.core, core=core, probed_at=ctx.clock.monotonic())


# --- the grace, once --------------------------------------------------------------------------


def pay_grace(ctx: PassContext, waiting: list[Candidate]) -> None:
    # spec 04: ONE wait for all not_running candidates; the last probe is the youngest, so
    # once it is a full grace old, every earlier one is too.
    youngest = max(c.probed_at for c in waiting)
    remaining = ctx.grace - (ctx.clock.monotonic() - youngest)
    while remaining > 0:
        ctx.clock.sleep(remaining)
        remaining = ctx.grace - (ctx.clock.monotonic() - youngest)
