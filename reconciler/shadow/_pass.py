"""The ADR-0448 pass: supervisor, per-candidate decision and the writes (spec 05).

Imported only when the bootstrap (``reconciler.shadow._entry``) found an enabled origin and a local
profile. Each candidate: gather the facts (re-read at decision time), classify them with the
first-matching-row table (``fsm.classify_legacy``), fire that row's guarded edge of the
legacy_shadow machine (it refuses unless the guard holds), then write what the row says.
Pending, ambiguous, skipped and failed write nothing.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fsm import (
    RUN_TERMINAL,
    InstanceEvidence,
    LegacyFacts,
    attempt_machine,
    classify_legacy,
    legacy_machine,
    run_machine,
    select_evidence,
)
from reconciler.node._clock import Clock, SystemClock
from reconciler.shadow._report import KEY_OF_STATE, Budget, PassCounts
from storage import (
    ActiveAttempt,
    Actor,
    AttemptChange,
    AttemptRow,
    Change,
    Expect,
    LatestAttempt,
    LegacyCandidate,
    LockBudget,
    Repository,
    RunChange,
    RunRow,
    active_attempts,
    connect,
    database_error,
    instance_evidence,
    latest_attempt,
    legacy_candidates,
    lock_budget,
    write_blocker,
)

Cursor = tuple[int, str]

# The legacy_shadow trigger that leads to each outcome (fsm/_tables.py LEGACY_EDGES).
TRIGGER_OF: dict[str, str] = {
    "skipped": "skip",
    "repaired": "repair",
    "ambiguous": "hold",
    "cancelled": "cancel",
    "completed": "complete",
    "pending": "wait",
    "abandoned": "abandon",
    "marked_lost": "mark_lost",
    "failed": "fail",
}

# /tmp/facts/recovery.md §4: actors, error codes and summaries of QingLong's writer (H) and
# start-up reconciler (G).
RECONCILER = Actor("reconciler")  # G: `{ type: 'reconciler' }`, no actor id
COMPATIBILITY = Actor("compatibility")  # H: the shadow writer, no actor id
LOST = ("LEGACY_RECONCILE_OWNER_LOST", "Legacy worker restarted without terminal evidence")
ABANDONED = (
    "LEGACY_RECONCILE_ACCEPTANCE_ABANDONED",
    "Legacy owner restarted before spawn was observed",
)
CANCELLED = ("LEGACY_EXECUTION_CANCELLED", "Legacy execution was cancelled")
NON_ZERO = ("LEGACY_EXIT_NON_ZERO", "Legacy process exited without success")
_ERROR_TARGETS = frozenset({"failed", "cancelled", "timed_out", "lost", "retry_wait"})


@dataclass(frozen=True)
class PassOutcome:
    counts: PassCounts
    cursor: Cursor | None


def _between_commits() -> None:
    """Between the Attempt commit and the Run commit of rows 9/10 (a test crashes here)."""


def run_pass(
    db: str,
    *,
    origins: Sequence[str],
    budget: Budget,
    resume: Cursor | None = None,
    clock: Clock | None = None,
    busy_timeout_s: float | None = None,
    lock: LockBudget | None = None,
) -> PassOutcome:
    """The supervisor (spec 05): page until a page is not truncated, the budget is spent or
    the cursor fails to advance. No loop, queue or timer beyond that.

    ``lock`` bounds the total wait for other processes' write locks: once a write finds the
    database still locked with the lock budget spent (or finds it read-only), the pass stops
    at once and raises that error (Busy / DatabaseReadOnly), which the bootstrap reports
    fail-open as ``state: failed`` with that ``errorType`` (docs/decisions.md "lock budget").
    """
    clk = clock if clock is not None else SystemClock()
    conn = connect(db) if busy_timeout_s is None else connect(db, busy_timeout_s=busy_timeout_s)
    try:
        with lock_budget(conn, lock):
            return _supervise(conn, origins, budget, resume, clk)
    finally:
        conn.close()


def _supervise(
    conn: sqlite3.Connection,
    origins: Sequence[str],
    budget: Budget,
    resume: Cursor | None,
    clk: Clock,
) -> PassOutcome:
    repo = Repository(conn)
    enabled = frozenset(origins)
    tally: dict[str, Counter[str]] = {o: Counter() for o in origins}
    cursor = resume
    pages = 0
    stop = "page_limit"
    while pages < budget.max_pages:
        page, truncated = legacy_candidates(conn, origins, cursor, budget.page_size)
        pages += 1
        for cand in page:
            state = decide(conn, repo, cand, enabled, clk)
            tally.setdefault(cand.origin, Counter())[KEY_OF_STATE[state]] += 1
        if page and page[-1].problem is not None:
            if truncated:
                # A row that cannot be read cannot be a keyset cursor: stop here rather than
                # re-read or skip what follows it.
                stop = "cursor_stalled"
                break
        elif page:
            last = page[-1].key
            if cursor is not None and last <= cursor:
                stop = "cursor_stalled"
                break
            cursor = last
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
) -> str:
    """One candidate, first matching row wins; returns the legacy_shadow state reached.

    A lock past the lock budget or a read-only database is not this candidate's failure but
    the pass's: it is raised (named by its storage class, never its message) and ends the
    pass, so no later candidate waits for the same lock."""
    try:
        if cand.problem is not None:
            raise LookupError("unreadable candidate row")  # row 12, for this candidate only
        facts, ctx = gather(conn, repo, cand, enabled)
        decision = classify_legacy(facts)
        # The guarded edge refuses (GuardRefused) unless this row is the first that matches.
        step = legacy_machine().plan("candidate", TRIGGER_OF[decision.outcome], facts)
        write(repo, step.dest, ctx, clock)
        return step.dest
    except Exception as exc:
        if write_blocker(exc) is not None:
            path = getattr(conn, "path", "")
            raise (database_error(path, exc) if path else exc) from None
        # Row 12. Nothing of the exception leaves this function (privacy, spec 05).
        return legacy_machine().plan("candidate", "fail", LegacyFacts(False, error=True)).dest


@dataclass(frozen=True)
class _Context:
    run: RunRow | None = None
    attempt: ActiveAttempt | None = None
    latest: LatestAttempt | None = None
    evidence_at_ms: int | None = None
    matched_status: str | None = None
    exit_code: int | None = None


def gather(
    conn: sqlite3.Connection,
    repo: Repository,
    cand: LegacyCandidate,
    enabled: frozenset[str],
) -> tuple[LegacyFacts, _Context]:
    """The facts of spec 05's table, re-read now (the page may be older than a write)."""
    run = repo.get_run(cand.run_id)
    if run is None:
        return LegacyFacts(run_present=False), _Context()
    base = LegacyFacts(
        run_present=True,
        run_owner=run.execution_owner,
        origin=run.execution_origin,
        origin_enabled=run.execution_origin in enabled,
        run_status=run.status,
    )
    if classify_legacy(base).row == "1":
        return base, _Context(run)
    count, attempt = active_attempts(conn, run.id)
    if count == 0:
        latest = latest_attempt(conn, run.id)
        facts = _with(base, active_attempts=0, latest=latest.status if latest else None)
        return facts, _Context(run, latest=latest)
    if count > 1 or attempt is None:
        return _with(base, active_attempts=count), _Context(run)
    rows: list[InstanceEvidence] = []
    truncated = False
    if run.legacy_cron_id is not None:
        rows, truncated = instance_evidence(conn, run.legacy_cron_id)
    selection, matched = select_evidence(attempt.pid, attempt.log_artifact_id, rows)
    facts = LegacyFacts(
        run_present=True,
        run_owner=run.execution_owner,
        origin=run.execution_origin,
        origin_enabled=True,
        run_status=run.status,
        active_attempts=1,
        attempt_status=attempt.status,
        evidence_truncated=truncated,
        selection=selection,
        matched_status=matched.status if matched else None,
        matched_finished=bool(matched and matched.finished_at_ms is not None),
    )
    ctx = _Context(
        run,
        attempt,
        evidence_at_ms=matched.finished_at_ms if matched else None,
        matched_status=matched.status if matched else None,
        exit_code=matched.exit_code if matched else None,
    )
    return facts, ctx


def _with(base: LegacyFacts, *, active_attempts: int, latest: str | None = None) -> LegacyFacts:
    return LegacyFacts(
        run_present=True,
        run_owner=base.run_owner,
        origin=base.origin,
        origin_enabled=base.origin_enabled,
        run_status=base.run_status,
        active_attempts=active_attempts,
        latest_attempt_status=latest,
    )


# --- writes -------------------------------------------------------------------------------------


def write(repo: Repository, outcome: str, ctx: _Context, clock: Clock) -> None:
    if outcome == "repaired":
        _repair(repo, ctx, clock)
    elif outcome == "cancelled":
        _cancel(repo, ctx, clock)
    elif outcome == "completed":
        _complete(repo, ctx, clock)
    elif outcome == "abandoned":
        _two_step(repo, ctx, clock, "cancelled", ABANDONED, "legacy-startup-abandoned")
    elif outcome == "marked_lost":
        _two_step(repo, ctx, clock, "lost", LOST, "legacy-startup-lost")
    # pending, ambiguous, skipped: no write (spec 05).


def _at(run: RunRow, *times: int | None, now: int) -> int:
    # QingLong's atOrAfter: never earlier than any time the aggregate already carries.
    return max([now, run.created_at_ms, run.started_at_ms or 0, *(t or 0 for t in times)])


def _errors(dest: str, code: tuple[str, str] | None) -> dict[str, object]:
    if code is None or dest not in _ERROR_TARGETS:
        return {}
    return {"error_code": code[0], "error_summary": code[1]}


def _expect(run: RunRow, att: ActiveAttempt) -> Expect:
    # The fields the decision used, re-checked inside each transaction (spec 01 rules 1-4).
    return Expect(
        run={"status": run.status, "execution_owner": "legacy"},
        attempts={
            att.id: {
                "status": att.status,
                "callback_sequence": att.callback_sequence,
                "pid": att.pid,
                "log_artifact_id": att.log_artifact_id,
            }
        },
    )


def _repair(repo: Repository, ctx: _Context, clock: Clock) -> None:
    """Row 2 (G `repairTerminalAttempt`): one Run edge to the latest Attempt's status."""
    run, latest = ctx.run, ctx.latest
    assert run is not None and latest is not None
    target = latest.status
    at = _at(run, latest.finished_at_ms, now=clock.now_ms())
    sets: dict[str, object] = {}
    if target in RUN_TERMINAL:
        sets["finished_at_ms"] = at
    if target in _ERROR_TARGETS and latest.error_code is not None:
        sets["error_code"] = latest.error_code
        if latest.error_summary is not None:
            sets["error_summary"] = latest.error_summary
    change = RunChange(
        run_machine().lifecycle_trigger(run.status, target),
        set=sets,
        payload={"error_code": sets["error_code"]} if "error_code" in sets else {},
        dedupe_key=f"legacy-startup-repair:{latest.id}:{target}",
    )
    repo.advance(
        run.id,
        run.version,
        [change],
        actor=RECONCILER,
        at_ms=at,
        expect=Expect(attempts={latest.id: {"status": latest.status}}),
    )


def _two_step(
    repo: Repository,
    ctx: _Context,
    clock: Clock,
    target: str,
    code: tuple[str, str],
    dedupe: str,
) -> None:
    """Rows 9/10 (G `abandon` / `markLost`): Attempt, commit; then Run, commit. A crash in
    between leaves a terminal Attempt under an active Run, which row 2 heals next start."""
    run, att = ctx.run, ctx.attempt
    assert run is not None and att is not None
    at = _at(run, att.created_at_ms, att.started_at_ms, now=clock.now_ms())
    first = repo.advance(
        run.id,
        run.version,
        [
            AttemptChange(
                att.id,
                attempt_machine().lifecycle_trigger(att.status, target),
                set=_errors(target, code),
                dedupe_key=f"{dedupe}-attempt:{att.id}",
            )
        ],
        actor=RECONCILER,
        at_ms=at,
        expect=_expect(run, att),
    )
    _between_commits()
    run_sets: dict[str, object] = _errors(target, code)
    if target in RUN_TERMINAL:
        run_sets["finished_at_ms"] = at  # a lost Run gets no finish time (it is not terminal)
    repo.advance(
        run.id,
        first.version,
        [
            RunChange(
                run_machine().lifecycle_trigger(run.status, target),
                set=run_sets,
                payload={"error_code": code[0]},
                dedupe_key=f"{dedupe}-run:{att.id}",
            )
        ],
        actor=RECONCILER,
        at_ms=at,
        expect=Expect(run={"status": run.status}),
    )


class _Chain:
    """Builds one shadow-writer transaction (H): each edge one event, dedupe
    ``shadow:<sequence>:<type>``, ``shadow: true`` in every payload."""

    def __init__(self, run: RunRow, attempt: AttemptRow) -> None:
        self.run_status = run.status
        self.attempt_status = attempt.status
        self.attempt_id = attempt.id
        self.sequence = run.event_sequence
        self.changes: list[Change] = []

    def run(self, dest: str, sets: dict[str, object], extra: dict[str, object]) -> None:
        self.sequence += 1
        self.changes.append(
            RunChange(
                run_machine().lifecycle_trigger(self.run_status, dest),
                set=sets,
                payload={**extra, "shadow": True},
                dedupe_key=f"shadow:{self.sequence}:run.{dest}",
            )
        )
        self.run_status = dest

    def attempt(self, dest: str, sets: dict[str, object], extra: dict[str, object]) -> None:
        self.sequence += 1
        self.changes.append(
            AttemptChange(
                self.attempt_id,
                attempt_machine().lifecycle_trigger(self.attempt_status, dest),
                set=sets,
                payload={**extra, "shadow": True},
                dedupe_key=f"shadow:{self.sequence}:attempt.{dest}",
            )
        )
        self.attempt_status = dest


def _rows(repo: Repository, ctx: _Context) -> tuple[RunRow, AttemptRow]:
    run, active = ctx.run, ctx.attempt
    assert run is not None and active is not None
    attempt = repo.get_attempt(active.id)
    if attempt is None:
        raise LookupError("attempt vanished")
    return run, attempt


def _cancel(repo: Repository, ctx: _Context, clock: Clock) -> None:
    """Row 6 (H `cancelled`): Attempt -> cancelled, Run -> cancelled, one transaction; the
    reason `reconcile` is carried in the payload (QingLong sets no cancel_reason column)."""
    run, attempt = _rows(repo, ctx)
    assert ctx.attempt is not None
    at = _at(
        run, attempt.created_at_ms, attempt.started_at_ms, ctx.evidence_at_ms, now=clock.now_ms()
    )
    chain = _Chain(run, attempt)
    extra: dict[str, object] = {"legacy_cancel_reason": "reconcile"}
    chain.attempt("cancelled", _errors("cancelled", CANCELLED), extra)
    chain.run("cancelled", {"finished_at_ms": at, **_errors("cancelled", CANCELLED)}, extra)
    repo.advance(
        run.id,
        run.version,
        chain.changes,
        actor=COMPATIBILITY,
        at_ms=at,
        expect=_expect(run, ctx.attempt),
    )


def _complete(repo: Repository, ctx: _Context, clock: Clock) -> None:
    """Row 7 (H `exited`): chain legal edges to `running`, then the terminal pair, in one
    transaction. Exact order from queued+claimed: run.dispatching, attempt.starting,
    attempt.running, run.running, attempt.<t>, run.<t> (/tmp/facts/recovery.md §4)."""
    run, attempt = _rows(repo, ctx)
    assert ctx.attempt is not None
    at = _at(
        run, attempt.created_at_ms, attempt.started_at_ms, ctx.evidence_at_ms, now=clock.now_ms()
    )
    succeeded = ctx.matched_status == "succeeded"
    terminal = "succeeded" if succeeded else "failed"
    # G: exit 0 on success; a failure keeps its exit code, or 1 when unknown or 0.
    exit_code = 0 if succeeded else (ctx.exit_code if ctx.exit_code else 1)
    chain = _Chain(run, attempt)
    if chain.run_status == "created":
        chain.run("queued", {"queued_at_ms": at}, {})
    if chain.run_status == "queued":
        chain.run("dispatching", {}, {})
    if chain.attempt_status == "claimed":
        chain.attempt("starting", {}, {})
    if chain.attempt_status == "starting":
        chain.attempt("running", {} if attempt.started_at_ms else {"started_at_ms": at}, {})
    if chain.run_status == "dispatching":
        chain.run("running", {} if run.started_at_ms else {"started_at_ms": at}, {})
    code = None if succeeded else NON_ZERO
    chain.attempt(terminal, {"exit_code": exit_code, **_errors(terminal, code)}, {})
    chain.run(
        terminal,
        {"finished_at_ms": at, **_errors(terminal, code)},
        {"legacy_exit_code": exit_code},
    )
    repo.advance(
        run.id,
        run.version,
        chain.changes,
        actor=COMPATIBILITY,
        at_ms=at,
        expect=_expect(run, ctx.attempt),
    )


__all__ = ["PassOutcome", "decide", "gather", "run_pass", "write"]
