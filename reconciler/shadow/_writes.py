"""The writes of the ADR-0448 pass (spec 05 rows 2, 6, 7, 9, 10): one registry entry per write
kind of ``fsm``'s table (``LegacyDecision.write``), :data:`WRITES`. Error codes, actors and dedupe
templates are node facts (QingLong's writer H and start-up reconciler G): each is said once, in
its write's :class:`Effect`, and read from there by the writer and by ``qlfsm explain``.

Every Run and Attempt edge a write commits is a guarded edge of ``fsm``'s lifecycles
(``RUN_LEGACY_EDGES`` / ``ATTEMPT_LEGACY_EDGES``, ADR-0448 rows 2, 6, 7, 9, 10), fired with the
facts re-read inside the write's transaction as its evidence: storage evaluates the row's guard
there (this row is the first that matches), and a guard that refuses writes nothing. The
legacy_shadow edge of the row is not taken again in the transaction: its guard is the same
predicate on the same facts, which every transaction's Run or Attempt edges already evaluate.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from fsm import DecisionTable, GuardRefused, IllegalTransition, MachineDefinitionError
from fsm.qinglong import (
    LEGACY_EDGE_TRIGGERS,
    LEGACY_TABLE,
    RUN_TERMINAL,
    LegacyDecision,
    LegacyFacts,
)
from reconciler.node import Clock
from reconciler.shadow._hooks import PassHooks
from storage import (
    ActiveAttempt,
    Actor,
    Advanced,
    AttemptChange,
    AttemptRow,
    Change,
    Conflict,
    Expect,
    LatestAttempt,
    Repository,
    RunChange,
    RunRow,
    in_transaction,
)

# Actors, error codes and summaries as QingLong 3.0's legacy-shadow writer (H) and start-up
# reconciler (G) write them (its public TypeScript source). Each is used by one Effect below.
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
# QingLong's domain transition (which both G and H write through) puts the Attempt's number
# (`attempt`) in every Attempt event's payload, and the exit and error codes the edge sets.
DOMAIN_ATTEMPT_EVENT = ("attempt", "exit_code", "callback_sequence", "error_code")


# The facts of ADR-0448's table, gathered again on the connection of a write transaction.
Reread = Callable[[sqlite3.Connection], LegacyFacts]


def _rows_of_writes(table: DecisionTable) -> Mapping[str, tuple[str, str]]:
    """write kind -> (row, legacy_shadow trigger) of the one row of ``table`` that makes it."""
    found: dict[str, tuple[str, str]] = {}
    for r in table.rows:
        for c in r.cases:
            if c.write is None:
                continue
            if c.write in found and found[c.write][0] != r.row:
                raise MachineDefinitionError(
                    table.name, f"write {c.write!r} made by rows {found[c.write][0]} and {r.row}"
                )
            found[c.write] = (r.row, c.trigger or "")
    return found


_ROW_OF_WRITE = _rows_of_writes(LEGACY_TABLE)


def edge(machine: str, row: str, source: str, dest: str) -> str:
    """The trigger of ADR-0448 row ``row``'s guarded ``source -> dest`` edge on ``machine``
    (``fsm``'s ``LEGACY_EDGE_TRIGGERS``); IllegalTransition when the row has no such edge."""
    found = LEGACY_EDGE_TRIGGERS.get((machine, row, source, dest))
    if found is None:
        raise IllegalTransition(machine, source, f"-> {dest} (ADR-0448 row {row})")
    return found


@dataclass(frozen=True, slots=True)
class Guard:
    """One write transaction of the decided row (the pattern of ADR-0068 §4): the facts are
    re-read inside it and are the evidence of every Run and Attempt edge it fires, each guarded
    by the row's guard. If they no longer make that row the first to match, storage's plan of
    the edge refuses and the transaction writes nothing (a Conflict naming the row)."""

    row: str
    reread: Reread

    def as_write(self, kind: str) -> Guard:
        """The guard of the row that makes the write ``kind``, on the same re-read."""
        return Guard(row=_ROW_OF_WRITE[kind][0], reread=self.reread)

    def commit(
        self,
        repo: Repository,
        run_id: str,
        expected_version: int,
        changes: Sequence[Change],
        *,
        actor: Actor,
        at_ms: int,
        expect: Expect,
    ) -> Advanced:
        """The ``changes`` in ONE transaction, each with the facts re-read in it as its
        evidence: committed only if every guard of their edges holds on those facts."""

        def work(c: sqlite3.Connection) -> Advanced:
            facts = self.reread(c)
            evidenced = [replace(change, evidence=facts) for change in changes]
            try:
                return repo.advance_in(
                    c, run_id, expected_version, evidenced, actor=actor, at_ms=at_ms, expect=expect
                )
            except GuardRefused as exc:
                what = f"what ADR-0448 row {self.row} was decided on"
                raise Conflict("run", run_id, what) from exc

        return in_transaction(repo.conn, work)


@dataclass(frozen=True)
class Context:
    run: RunRow | None = None
    attempt: ActiveAttempt | None = None
    latest: LatestAttempt | None = None
    evidence_at_ms: int | None = None
    matched_status: str | None = None
    exit_code: int | None = None
    # The row the candidate's core decided on these facts (the rows above are what it read).
    decision: LegacyDecision | None = field(default=None, compare=False)


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


def _repair(
    repo: Repository, ctx: Context, clock: Clock, hooks: PassHooks, eff: Effect, guard: Guard
) -> None:
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
        edge("run", guard.row, run.status, target),
        set=sets,
        payload={"error_code": sets["error_code"]} if "error_code" in sets else {},
        dedupe_key=eff.dedupe.format(attempt=latest.id, target=target),
    )
    guard.commit(
        repo,
        run.id,
        run.version,
        [change],
        actor=eff.actor,
        at_ms=at,
        expect=Expect(attempts={latest.id: {"status": latest.status}}),
    )


def _two_step(
    repo: Repository,
    ctx: Context,
    clock: Clock,
    hooks: PassHooks,
    eff: Effect,
    guard: Guard,
) -> None:
    """Rows 9/10 (G `abandon` / `markLost`): Attempt, commit; then Run, commit. A crash in
    between leaves a terminal Attempt under an active Run, which row 2 heals next start."""
    run, att, target, code = ctx.run, ctx.attempt, eff.target, eff.error
    assert run is not None and att is not None and target is not None and code is not None
    at = _at(run, att.created_at_ms, att.started_at_ms, now=clock.now_ms())

    attempt_edge = AttemptChange(
        att.id,
        edge("attempt", guard.row, att.status, target),
        set=_errors(target, code),
        dedupe_key=eff.dedupe.format(aggregate="attempt", attempt=att.id),
        event_fields=DOMAIN_ATTEMPT_EVENT,
    )
    first = guard.commit(
        repo,
        run.id,
        run.version,
        [attempt_edge],
        actor=eff.actor,
        at_ms=at,
        expect=_expect(run, att),
    )
    hooks.between_commits()
    # The Run's commit is row 2's repair of the Attempt just committed (ADR-0448 §6): on the
    # facts it re-reads, that is the row that must match now.
    assert eff.run_commit_as is not None
    then = guard.as_write(eff.run_commit_as)
    run_sets: dict[str, object] = _errors(target, code)
    if target in RUN_TERMINAL:
        run_sets["finished_at_ms"] = at  # a lost Run gets no finish time (it is not terminal)

    run_edge = RunChange(
        edge("run", then.row, run.status, target),
        set=run_sets,
        payload={"error_code": code[0]},
        dedupe_key=eff.dedupe.format(aggregate="run", attempt=att.id),
    )
    then.commit(
        repo,
        run.id,
        first.version,
        [run_edge],
        actor=eff.actor,
        at_ms=at,
        expect=Expect(run={"status": run.status}),
    )


class _Chain:
    """Builds one shadow-writer transaction (H): each edge one event, dedupe
    ``shadow:<sequence>:<type>``, ``shadow: true`` in every payload, the rest of each payload
    as QingLong's domain transition writes it (``error_code`` when the edge sets one; an
    Attempt event's ``attempt`` number). Each edge is row ``row``'s guarded edge (its evidence
    the facts re-read in the transaction, given by :meth:`Guard.commit`)."""

    def __init__(self, run: RunRow, attempt: AttemptRow, dedupe: str, row: str) -> None:
        self.dedupe = dedupe
        self.row = row
        self.run_status = run.status
        self.attempt_status = attempt.status
        self.attempt_id = attempt.id
        self.sequence = run.event_sequence
        self.changes: list[Change] = []

    def run(self, dest: str, sets: dict[str, object], extra: dict[str, object]) -> None:
        self.sequence += 1
        # QingLong's domain transition names the error code it sets in the Run event too.
        code = {"error_code": sets["error_code"]} if sets.get("error_code") else {}
        self.changes.append(
            RunChange(
                edge("run", self.row, self.run_status, dest),
                set=sets,
                payload={**code, **extra, "shadow": True},
                dedupe_key=self.dedupe.format(sequence=self.sequence, type=f"run.{dest}"),
            )
        )
        self.run_status = dest

    def attempt(self, dest: str, sets: dict[str, object], extra: dict[str, object]) -> None:
        self.sequence += 1
        self.changes.append(
            AttemptChange(
                self.attempt_id,
                edge("attempt", self.row, self.attempt_status, dest),
                set=sets,
                payload={**extra, "shadow": True},
                dedupe_key=self.dedupe.format(sequence=self.sequence, type=f"attempt.{dest}"),
                event_fields=DOMAIN_ATTEMPT_EVENT,
            )
        )
        self.attempt_status = dest


# The Run's and the Attempt's edges of one shadow-writer transaction (rows 6/7), chained at
# time ``at`` on the Run and its active Attempt read again.
Edges = Callable[[_Chain, Context, "Effect", RunRow, AttemptRow, int], None]


def _chained(
    edges: Edges,
    repo: Repository,
    ctx: Context,
    clock: Clock,
    hooks: PassHooks,
    eff: Effect,
    guard: Guard,
) -> None:
    """Rows 6/7 (H): commits ``edges`` in one transaction. The table binds each row's edges
    with ``partial``: a function built at import would be out of mutation testing's reach."""
    run, active = ctx.run, ctx.attempt
    assert run is not None and active is not None
    attempt = repo.get_attempt(active.id)
    if attempt is None:
        raise LookupError("attempt vanished")
    times = (attempt.created_at_ms, attempt.started_at_ms, ctx.evidence_at_ms)
    at = _at(run, *times, now=clock.now_ms())

    chain = _Chain(run, attempt, eff.dedupe, guard.row)
    edges(chain, ctx, eff, run, attempt, at)
    guard.commit(
        repo,
        run.id,
        run.version,
        chain.changes,
        actor=eff.actor,
        at_ms=at,
        expect=_expect(run, active),
    )


def _cancel(
    chain: _Chain, ctx: Context, eff: Effect, run: RunRow, attempt: AttemptRow, at: int
) -> None:
    """Row 6 (H `cancelled`): Attempt -> cancelled, Run -> cancelled, one transaction; the
    reason `reconcile` is carried in the payload (QingLong sets no cancel_reason column)."""
    target = eff.target
    assert target is not None
    extra = dict(eff.payload)
    chain.attempt(target, _errors(target, eff.error), extra)
    chain.run(target, {"finished_at_ms": at, **_errors(target, eff.error)}, extra)


def _complete(
    chain: _Chain, ctx: Context, eff: Effect, run: RunRow, attempt: AttemptRow, at: int
) -> None:
    """Row 7 (H `exited`): chain legal edges to `running`, then the terminal pair, in one
    transaction. Exact order from queued+claimed: run.dispatching, attempt.starting,
    attempt.running, run.running, attempt.<t>, run.<t>, as QingLong's writer chains them."""
    succeeded = ctx.matched_status == "succeeded"
    terminal = "succeeded" if succeeded else "failed"
    # G: exit 0 on success; a failure keeps its exit code, or 1 when unknown or 0.
    exit_code = 0 if succeeded else (ctx.exit_code if ctx.exit_code else 1)
    code = None if succeeded else eff.error
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
    chain.attempt(terminal, {"exit_code": exit_code, **_errors(terminal, code)}, {})
    chain.run(
        terminal,
        {"finished_at_ms": at, **_errors(terminal, code)},
        {"legacy_exit_code": exit_code},
    )


Writer = Callable[[Repository, Context, Clock, PassHooks, "Effect", "Guard"], None]


@dataclass(frozen=True, slots=True)
class Effect:
    """Everything one write kind of ADR-0448's table commits, said once: who writes, the error
    it sets, the dedupe template of its events, the payload its events carry, and the writer."""

    write: str  # the table's write kind (``Case.write``)
    actor: Actor
    dedupe: str  # the events' dedupe key; ``{field}`` is filled by the writer
    plan: Writer
    error: tuple[str, str] | None = None  # (error code, summary) of the edges that fail
    target: str | None = None  # the status Attempt and Run go to, when the write fixes one
    payload: Mapping[str, object] = field(default_factory=dict)  # in every event it writes
    # A write of two commits (rows 9/10): the write kind whose row its second commit is.
    run_commit_as: str | None = None


def _effects(*effects: Effect) -> Mapping[str, Effect]:
    return {e.write: e for e in effects}


# fsm's write kinds (``LEGACY_WRITES``) -> what each commits. Pending, ambiguous, skipped and
# failed have no write kind: they write nothing (spec 05).
WRITES: Mapping[str, Effect] = _effects(
    # Row 2: G's response-loss repair copies the latest Attempt's error, it sets none itself.
    Effect(
        write="repair",
        actor=RECONCILER,
        dedupe="legacy-startup-repair:{attempt}:{target}",
        plan=_repair,
    ),
    # Row 6: H's `cancelled`, the reason `reconcile` in the payload (no cancel_reason column).
    Effect(
        write="cancel",
        actor=COMPATIBILITY,
        dedupe="shadow:{sequence}:{type}",
        plan=partial(_chained, _cancel),
        error=CANCELLED,
        target="cancelled",
        payload={"legacy_cancel_reason": "reconcile"},
    ),
    # Row 7: H's `exited`; the error only when the instance did not succeed.
    Effect(
        write="complete",
        actor=COMPATIBILITY,
        dedupe="shadow:{sequence}:{type}",
        plan=partial(_chained, _complete),
        error=NON_ZERO,
    ),
    # Row 9: G's `abandon`, Attempt then Run.
    Effect(
        write="abandon",
        actor=RECONCILER,
        dedupe="legacy-startup-abandoned-{aggregate}:{attempt}",
        plan=_two_step,
        error=ABANDONED,
        target="cancelled",
        run_commit_as="repair",
    ),
    # Row 10: G's `markLost`, Attempt then Run.
    Effect(
        write="mark_lost",
        actor=RECONCILER,
        dedupe="legacy-startup-lost-{aggregate}:{attempt}",
        plan=_two_step,
        error=LOST,
        target="lost",
        run_commit_as="repair",
    ),
)


def write(
    repo: Repository,
    decision: LegacyDecision,
    ctx: Context,
    clock: Clock,
    hooks: PassHooks,
    reread: Reread,
) -> None:
    """Commit what the decided row says (``decision.write``): each transaction's Run and
    Attempt edges are the row's guarded edges, evaluated on the facts ``reread`` gathers inside
    it."""
    if decision.write is not None:
        effect = WRITES[decision.write]
        guard = Guard(row=decision.row, reread=reread)
        effect.plan(repo, ctx, clock, hooks, effect, guard)
