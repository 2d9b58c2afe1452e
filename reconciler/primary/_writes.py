"""ADR-0068 §4: the decided edge's effect, in ONE transaction that re-reads the Run and its
Attempts and takes the decision again on them (every UPDATE compare-and-sets in its WHERE).

Each write returns the candidate with its result, built once (no result is rewritten here).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from fsm import MachineDefinitionError
from fsm.qinglong import (
    PRIMARY_TABLE,
    PrimaryCore,
    PrimaryDecision,
    PrimaryFacts,
    observed_facts,
)
from reconciler._summary import describe, fingerprint
from reconciler.node import QuarantineNotDone, directory_at, witness_ms
from reconciler.primary._edges import (
    EFFECTS,
    PLANS,
    Given,
    decision_payload,
    expect_for,
)
from reconciler.primary._state import (
    Candidate,
    Interrupted,
    PassContext,
    PassStatus,
    decided,
    read_run_fields,
    same_answer,
    unchanged,
)
from storage import (
    Advanced,
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


# --- the decision's effect ------------------------------------------------------------------


def commit(
    ctx: PassContext, status: PassStatus, cand: Candidate, decision: PrimaryDecision
) -> Candidate:
    """The decided candidate: its write committed (none in a dry run) and its result."""
    write = decision.write
    if write is None or ctx.dry_run:
        if decision.outcome == "remaining":  # the verifier proves it against this
            run, att = cand.run, cand.attempt
            assert run is not None and att is not None
            cand = cand._replace(fingerprint=fingerprint(run, att))
        return decided(cand, decision.row, decision.outcome, decision.reason)
    return WRITES[write](ctx, status, cand, decision)


def write_edge(ctx: PassContext, cand: Candidate, decision: PrimaryDecision) -> int:
    """The decided edge in ONE transaction (ADR-0068 §4): the Run and Attempts are re-read
    inside it and must take the core the same way again; the plan is made from the facts
    with that re-read, so every edge's guard is evaluated on them; every UPDATE
    compare-and-sets in its WHERE (row count checked)."""
    now = ctx.clock.now_ms()

    def work(c: sqlite3.Connection) -> int:
        facts, run_now, attempts = check_again(c, cand, decision)
        return advance(c, cand, decision, facts, now, run_now, attempts).version

    return in_transaction(ctx.conn, work)


def advance(
    c: sqlite3.Connection,
    cand: Candidate,
    decision: PrimaryDecision,
    facts: PrimaryFacts,
    now: int,
    run_now: RunRow | None,
    attempts: list[AttemptRow],
) -> Advanced:
    """The decision's plan, made from ``facts`` at ``now``, on the rows re-read in this
    transaction (``c``), compare-and-set on the Run as the decision saw it (``cand.run``):
    ADR-0068 §4."""
    run = cand.run
    assert run is not None and decision.write is not None
    note = decision_payload(decision)
    plan = PLANS[decision.write](Given(run, cand.attempt, cand.receipt, decision, facts, now, note))
    assert plan is not None
    return advance_read(
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


def check_again(
    c: sqlite3.Connection, cand: Candidate, decision: PrimaryDecision
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
    if not same_answer(again, cand.after_read_run):
        raise Conflict("run", cand.page.run_id, f"what row {decision.row} was decided on")
    return observed_facts(decision.facts, fields), run, attempts


def lose_after_grace(ctx: PassContext, cand: Candidate) -> Candidate:
    """Row 13, last part: re-check the Run/Attempt (nothing may have changed since the
    probe) and commit `lost` in the SAME transaction as that re-read. A dry run returns the
    candidate with the re-check observed, for the loop to decide."""
    run, att = cand.run, cand.attempt
    assert run is not None and att is not None
    before = fingerprint(run, att)
    core = cand.core

    def recheck(c: sqlite3.Connection) -> tuple[bool, RunRow | None, list[AttemptRow]]:
        now_run, attempts, _ = run_with_attempts(c, run.id)
        return unchanged(now_run, attempts, before), now_run, attempts

    if ctx.dry_run:
        observed = core.observe("recheck_run", unchanged_on_recheck=recheck(ctx.conn)[0])
        return cand._replace(core=observed)

    def work(c: sqlite3.Connection) -> PrimaryCore:
        # Each try of the transaction observes on the core kept from before it.
        same, now_run, attempts = recheck(c)
        after = core.observe("recheck_run", unchanged_on_recheck=same)
        decision = after.next()
        assert isinstance(decision, PrimaryDecision)
        if decision.write is not None:
            advance(c, cand, decision, decision.facts, ctx.clock.now_ms(), now_run, attempts)
        return after

    after = in_transaction(ctx.conn, work)
    decision = after.next()
    assert isinstance(decision, PrimaryDecision)
    return decided(cand._replace(core=after), decision.row, decision.outcome, decision.reason)


def after_completion(ctx: PassContext, status: PassStatus, cand: Candidate) -> Candidate:
    # spec 03: delete the receipt only AFTER the commit, then resolve the journal. A failure
    # here leaves a committed terminal Run: recovered, with the leftover named.
    att, result = cand.attempt, cand.result
    assert att is not None and result is not None
    try:
        ctx.store.delete(att.id)
        # D-17: the Attempt ended; its lock file goes too unless its wrapper still holds it
        # (it removes the name itself right after publishing). Before the journal row, like
        # the receipt: the row is what lets `sweep` find what is left.
        ctx.store.remove_lock(att.id)
        journal_resolve(ctx.conn, att.id)
    except Exception as exc:
        status.stopped = status.stopped or write_blocker(exc)
        try:
            reason = f"{result.reason};cleanup_failed:{describe(exc)}"
        except Exception as err:  # the commit stands: the candidate keeps its decision
            raise Interrupted(cand, err) from err
        return decided(cand, result.row, result.outcome, reason)
    return cand


def quarantine(ctx: PassContext, status: PassStatus, run: RunRow, att: AttemptRow) -> None:
    # spec 03: the journal intent is committed FIRST, then the file is moved. A second
    # invalid receipt of the same Attempt gets its own slot (D-3c): the journal row then
    # names the newest copy, and every copy stays until its purge time.
    previous = journal_get(ctx.conn, att.id)
    earlier = previous.quarantine_ref if previous and previous.state == "quarantined" else None
    ref = ctx.store.quarantine_target(att.id, earlier)
    now = ctx.clock.now_ms()
    # D-16: the retention runs from the latest moment by any clock in sight: this one, the
    # kernel's (which `faketime` does not move), the database's newest time for the Run.
    kernel = witness_ms(ctx.clock)
    at = max(now, kernel) if kernel is not None else now
    happened = journal_quarantine(ctx.conn, att.id, run.id, ref, at, at + QUARANTINE_KEEP_MS)
    if happened - now > CLOCK_BEHIND_WARN_MS:
        what = (
            "the kernel's clock"
            if happened == at
            else f"the newest time the database recorded for run {ascii(run.id)[1:-1]}"
        )
        status.warnings.append(
            f"the clock runs {(happened - now) // 1000} s behind {what}: the quarantined "
            f"receipt of Attempt {ascii(att.id)[1:-1]} is kept for the retention counted "
            "from that time; set the clock right (NTP)"
        )
    try:
        ctx.store.quarantine(att.id, ref)
    except QuarantineNotDone:
        # Nothing was moved: no row may claim a quarantine that did not happen. Withdrawn
        # in this same pass; the candidate is `failed` (row 14) and the receipt stays put.
        journal_withdraw_quarantine(ctx.conn, att.id, ref, previous)
        raise


# --- each write the table names, committed (one per entry of _edges.EFFECTS) ---------------


def _complete(
    ctx: PassContext, status: PassStatus, cand: Candidate, decision: PrimaryDecision
) -> Candidate:
    # Row 5 (and row 13 after the grace): the completion, then the receipt's cleanup.
    return after_completion(ctx, status, _written(ctx, status, cand, decision))


def _quarantine(
    ctx: PassContext, status: PassStatus, cand: Candidate, decision: PrimaryDecision
) -> Candidate:
    run, att = cand.run, cand.attempt
    assert run is not None and att is not None
    # D-16: a directory cannot be moved into the quarantine; nothing is written and row 6
    # stays unresolved (as its dry run says) until the operator removes it.
    if directory_at(decision.facts.receipt_problem) is None:
        quarantine(ctx, status, run, att)
    return decided(cand, decision.row, decision.outcome, decision.reason)


def _written(
    ctx: PassContext, status: PassStatus, cand: Candidate, decision: PrimaryDecision
) -> Candidate:
    # The decided edge committed, then its result (a `lost`; a completion before its cleanup).
    write_edge(ctx, cand, decision)
    return decided(cand, decision.row, decision.outcome, decision.reason)


def _adopt(
    ctx: PassContext, status: PassStatus, cand: Candidate, decision: PrimaryDecision
) -> Candidate:
    # Row 12: only the aggregate not yet running moves (both running: nothing is written), in
    # the transaction that returns the Run's new version; the fingerprint the verifier must
    # find is that of the rows as committed.
    run, att = cand.run, cand.attempt
    assert run is not None and att is not None
    if run.status != "running" or att.status != "running":
        version = write_edge(ctx, cand, decision)
        run_status = "running" if run.status == "dispatching" else run.status
        run = run._replace(status=run_status, version=version)
        att = att._replace(status="running" if att.status == "starting" else att.status)
    kept = fingerprint(run, att)
    return decided(cand._replace(fingerprint=kept), decision.row, decision.outcome, decision.reason)


WRITES: dict[str, Callable[[PassContext, PassStatus, Candidate, PrimaryDecision], Candidate]] = {
    "complete": _complete,
    "quarantine": _quarantine,
    "lose": _written,
    "lose_missing_attempt": _written,
    "adopt_running": _adopt,
}
# Every write the table names is one effect, committed here: a write without both fails the
# import, not a candidate (fsm/qinglong/_primary_table.py, _edges.EFFECTS).
_NAMED = {c.write for r in PRIMARY_TABLE.rows for c in r.cases if c.write is not None}
if not (_NAMED == set(WRITES) == set(EFFECTS)):
    raise MachineDefinitionError(
        PRIMARY_TABLE.name,
        f"writes without their effect: table {sorted(_NAMED)}, committed {sorted(WRITES)}, "
        f"effects {sorted(EFFECTS)}",
    )
