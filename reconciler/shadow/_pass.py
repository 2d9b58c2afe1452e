"""The ADR-0448 pass: supervisor, per-candidate decision (spec 05).

Imported only when the bootstrap (``reconciler._shadow_entry``) found an enabled origin and a local
profile. Each candidate: read what ``fsm``'s ADR-0448 table asks for (a ``LegacyCore``: the Run,
then its active Attempts, then the cron's RunningInstances), re-read at decision time; fire the
decided row's guarded edge of the legacy_shadow machine (it refuses unless the guard holds), then
commit the row's write kind (``reconciler.shadow._writes``) along the row's guarded Run and
Attempt edges, their guard evaluated again on the facts re-read in each write transaction.
Pending, ambiguous, skipped and failed write nothing. The pass talks to its database and
candidate source through its ports (``reconciler.shadow._ports``).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass

from fsm import Need
from fsm.qinglong import (
    InstanceEvidence,
    LegacyCore,
    LegacyDecision,
    LegacyEngine,
    LegacyFacts,
    legacy_engine,
    select_evidence,
)
from reconciler._cursor import Cursor
from reconciler.node import Clock, SystemClock
from reconciler.shadow._ports import PassPorts
from reconciler.shadow._report import KEY_OF_STATE, Budget, PassCounts
from reconciler.shadow._writes import Context
from storage import (
    LegacyCandidate,
    LockBudget,
    Repository,
    RunRow,
    active_attempts,
    check_schema,
    database_error,
    instance_evidence,
    latest_attempt,
    lock_budget,
    write_blocker,
)


@dataclass(frozen=True)
class PassOutcome:
    counts: PassCounts
    cursor: Cursor | None


def run_pass(
    db: str,
    *,
    origins: Sequence[str],
    budget: Budget,
    resume: Cursor | None = None,
    clock: Clock | None = None,
    busy_timeout_s: float | None = None,
    lock: LockBudget | None = None,
    ports: PassPorts | None = None,
) -> PassOutcome:
    """The supervisor (spec 05): page until a page is not truncated, the budget is spent or
    the cursor fails to advance. No loop, queue or timer beyond that.

    ``lock`` bounds the total wait for other processes' write locks: once a write finds the
    database still locked with the lock budget spent (or finds it read-only), the pass stops
    at once and raises that error (Busy / DatabaseReadOnly), which the bootstrap reports
    fail-open as ``state: failed`` with that ``errorType`` (docs/decisions.md "lock budget").
    ``ports`` (default: the real parts) say where the database and the pages come from, the
    decision table the pass decides by and what commits a decision.
    """
    clk = clock if clock is not None else SystemClock()
    ports = ports if ports is not None else PassPorts()
    with closing(ports.open(db, busy_timeout_s)) as conn, lock_budget(conn, lock):
        repo = Repository(conn)
        enabled = frozenset(origins)
        tally: dict[str, Counter[str]] = {o: Counter() for o in origins}
        cursor = resume
        pages = 0
        stop = "page_limit"
        checked = False
        while pages < budget.max_pages:
            page, truncated = ports.candidates(conn, origins, cursor, budget.page_size)
            pages += 1
            if page and not checked:
                # D-15: the schema before the first write (the candidate query alone reads only
                # Runs); a file that is not QingLong's fails the pass open, unwritten.
                check_schema(conn, path=getattr(conn, "path", "") or "<db>")
                checked = True
            for cand in page:
                ports.hooks.before_decide(conn, cand)
                state = decide(conn, repo, cand, enabled, clk, ports)
                ports.hooks.after_decide(conn, cand, state)
                tally.setdefault(cand.origin, Counter())[KEY_OF_STATE[state]] += 1
            if page and page[-1].problem is None:
                if cursor is not None and page[-1].key <= cursor:
                    stop = "cursor_stalled"
                    break
                cursor = page[-1].key
            elif page and truncated:
                # A row that cannot be read cannot be a keyset cursor: stop here rather than
                # re-read or skip what follows it.
                stop = "cursor_stalled"
                break
            if not truncated:
                stop = "complete"
                break
        resumable = stop == "page_limit" and cursor is not None
        counts = PassCounts(pages, stop, resumable, {o: dict(c) for o, c in tally.items()})
        return PassOutcome(counts, cursor if resumable else None)


def decide(
    conn: sqlite3.Connection,
    repo: Repository,
    cand: LegacyCandidate,
    enabled: frozenset[str],
    clock: Clock,
    ports: PassPorts | None = None,
) -> str:
    """One candidate, first matching row wins; returns the legacy_shadow state reached.
    ``ports``: the table, writer and hooks (default: the real parts).

    A lock past the lock budget or a read-only database is not this candidate's failure but
    the pass's: it is raised (named by its storage class, never its message) and ends the
    pass, so no later candidate waits for the same lock."""
    ports = ports if ports is not None else PassPorts()
    try:
        if cand.problem is not None:
            raise LookupError("unreadable candidate row")  # row 12, for this candidate only
        facts, ctx = gather(conn, repo, cand, enabled, ports.engine)
        ports.hooks.after_read(conn, cand)
        decision = ctx.decision
        assert decision is not None  # the core decided before gather returned
        # The guarded edge refuses (GuardRefused) unless this row is the first that matches;
        # each write transaction fires the row's guarded Run and Attempt edges on the facts it
        # re-reads, the same guard evaluated by storage (a refusal there is a Conflict: nothing
        # written, the candidate row 12, like every failed compare-and-set).
        step = ports.machine.plan("candidate", decision.trigger, facts)

        def reread(c: sqlite3.Connection) -> LegacyFacts:
            return gather(c, Repository(c), cand, enabled, ports.engine)[0]

        ports.write(repo, decision, ctx, clock, ports.hooks, reread)
        return step.dest
    except Exception as exc:
        if write_blocker(exc) is not None:
            path = getattr(conn, "path", "")
            raise (database_error(path, exc) if path else exc) from None
        # Row 12. Nothing of the exception leaves this function (privacy, spec 05).
        failed = ports.engine.start().fail(True)
        return ports.machine.plan("candidate", _decided(failed).trigger, failed.facts).dest


def gather(
    conn: sqlite3.Connection,
    repo: Repository,
    cand: LegacyCandidate,
    enabled: frozenset[str],
    engine: LegacyEngine | None = None,
) -> tuple[LegacyFacts, Context]:
    """The facts of spec 05's table, re-read now (the page may be older than a write): the
    Run, then whatever evidence the candidate's core (``fsm.qinglong.LegacyCore``) still asks for
    before a row decides (its Attempts only for an eligible Run, the cron's RunningInstances
    only for exactly one active Attempt); the core's decision is in the context. The one
    reader of a candidate's facts: before the decision and again inside each write transaction
    (the guard's re-read). ``engine``: the decision table's (default: ADR-0448's)."""
    run = repo.get_run(cand.run_id)
    core = (engine if engine is not None else legacy_engine()).start()
    if run is None:
        core = core.observe("read_run", run_present=False)
        return core.facts, Context(decision=_decided(core))
    core = core.observe(
        "read_run",
        run_present=True,
        run_owner=run.execution_owner,
        origin=run.execution_origin,
        origin_enabled=run.execution_origin in enabled,
        run_status=run.status,
    )
    ctx = Context(run)
    while isinstance(need := core.next(), Need):
        fields, ctx = _READERS[need.evidence](conn, run, ctx)
        core = core.observe(need.evidence, **fields)
    return core.facts, dataclasses.replace(ctx, decision=_decided(core))


def _decided(core: LegacyCore) -> LegacyDecision:
    decided = core.next()
    assert isinstance(decided, LegacyDecision)
    return decided


def _read_attempts(
    conn: sqlite3.Connection, run: RunRow, ctx: Context
) -> tuple[dict[str, object], Context]:
    """ADR-0448 §3: the active Attempts; the latest one when none is active."""
    count, attempt = active_attempts(conn, run.id)
    if count == 0:
        latest = latest_attempt(conn, run.id)
        status = latest.status if latest else None
        fields: dict[str, object] = {"active_attempts": 0, "latest_attempt_status": status}
        return fields, dataclasses.replace(ctx, latest=latest)
    if count > 1 or attempt is None:
        return {"active_attempts": count}, ctx
    fields = {"active_attempts": 1, "attempt_status": attempt.status}
    return fields, dataclasses.replace(ctx, attempt=attempt)


def _read_evidence(
    conn: sqlite3.Connection, run: RunRow, ctx: Context
) -> tuple[dict[str, object], Context]:
    """ADR-0448 §4: the cron's RunningInstances, matched to the one active Attempt."""
    attempt = ctx.attempt
    if attempt is None:  # pragma: no cover - asked only for exactly one active Attempt
        raise LookupError("no active attempt to match")
    rows: list[InstanceEvidence] = []
    truncated = False
    if run.legacy_cron_id is not None:
        rows, truncated = instance_evidence(conn, run.legacy_cron_id)
    selection, matched = select_evidence(attempt.pid, attempt.log_artifact_id, rows)
    fields: dict[str, object] = {
        "evidence_truncated": truncated,
        "selection": selection,
        "matched_status": matched.status if matched else None,
        "matched_finished": bool(matched and matched.finished_at_ms is not None),
    }
    return fields, dataclasses.replace(
        ctx,
        evidence_at_ms=matched.finished_at_ms if matched else None,
        matched_status=matched.status if matched else None,
        exit_code=matched.exit_code if matched else None,
    )


# The reader of each evidence the table asks for (``LEGACY_EVIDENCE``): its fields and context.
Reader = Callable[[sqlite3.Connection, RunRow, Context], tuple[dict[str, object], Context]]
_READERS: Mapping[str, Reader] = {
    "read_attempts": _read_attempts,
    "read_evidence": _read_evidence,
}
