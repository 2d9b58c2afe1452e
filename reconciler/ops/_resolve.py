"""`qlfsm resolve`: an operator's audited decision for a run that blocks start-up.

Gather, decide, commit (the sans-I/O rule of the reconcilers, applied to an operator):

1. read the Run and its Attempts, and probe each active Attempt's durable process identity
   (spec 03 "Inspection", the real ``/proc`` through the node's provider);
2. decide in pure functions: :func:`legal_targets` asks the ADR-0001 machines which of `lost`,
   `failed`, `cancelled` every active Attempt AND the Run can reach along one plain lifecycle
   edge; :func:`plan_resolution` refuses a terminal Run, an edge the tables forbid, and (unless
   forced) a process proven `running`;
3. commit in ONE transaction through the repository (CAS on every field the decision read):
   each active Attempt's edge, then the Run's (spec 01: an Attempt may not move once its Run is
   terminal), each with its event. The actor is `user` with the id `operator` (or
   `operator:<login>`), and every event carries the allow-listed key ``resolution``:
   ``{"to", "reason", "force", "process", "probe_reason"}``
   (docs/decisions.md "Operator commands: resolve").

The operator's reason is free text, bounded and free of control characters; it is stored in
the events and the error summary, so it must not hold secrets (docs/operations.md).

The receipt journal is left as it is: a `quarantined` row stops blocking once its Attempt is
terminal (only an active candidate reads it), and it is the one pointer to the quarantined copy,
which `qlfsm sweep` purges together with the row at its purge time; a `pending` row is settled
by `sweep` too (a receipt the still-running process publishes later is then removed with it).
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fsm import IllegalTransition
from fsm.qinglong import ATTEMPT_ACTIVE, RUN_TERMINAL, attempt_machine, run_machine
from reconciler._escape import clean
from reconciler.node import Clock, Evidence, ProcessProvider, inspect_handle, parse_handle
from reconciler.ops._explain import RESOLUTION_KEY, journal_entries, journal_of, run_of
from storage import (
    Actor,
    AttemptChange,
    AttemptRow,
    Change,
    Expect,
    JournalRow,
    Repository,
    RunChange,
    RunRow,
    next_counter,
)

# The operator's choices: the three ways out of an active (or lost) run that ADR-0001 has.
RESOLVE_TARGETS: tuple[str, ...] = ("lost", "failed", "cancelled")
MAX_REASON_CHARS = 500
OPERATOR_ERROR_CODE = "OPERATOR_RESOLVED"
OPERATOR = "operator"
MAX_LOGIN_CHARS = 64


class InvalidReason(ValueError):
    """The reason text is empty, too long or holds control characters (the message says)."""


class ResolveRefused(Exception):
    """The decision is refused; ``choices`` are the targets the tables allow (maybe none)."""

    def __init__(self, message: str, choices: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.choices = tuple(choices)


def check_reason(text: str) -> str:
    """The operator's reason, trimmed; InvalidReason when it cannot be stored as given."""
    reason = text.strip()
    if not reason:
        raise InvalidReason("--reason is empty: say why, in a few words (it is kept in the events)")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidReason(
            f"--reason is {len(reason)} characters; keep it to {MAX_REASON_CHARS} "
            "(the events and the error summary store it)"
        )
    for ch in reason:
        # Control, format (bidirectional overrides, zero-width marks), surrogate, private-use
        # and unassigned characters would make a terminal or a log show something else than
        # what is stored.
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise InvalidReason(
                f"--reason holds the control character U+{ord(ch):04X}; use plain text on one line"
            )
    return reason


def operator_actor(login: str | None) -> Actor:
    """Actor `user` (spec 01's actor for a person) with id `operator` or `operator:<login>`;
    a login that is not a plain name is left out rather than stored."""
    name = (login or "").strip()
    plain = (
        0 < len(name) <= MAX_LOGIN_CHARS
        and name.isascii()
        and all(c.isalnum() or c in "._-" for c in name)
    )
    return Actor("user", f"{OPERATOR}:{name}" if plain else OPERATOR)


def _lifecycle(machine: Any, source: str, dest: str) -> str | None:
    try:
        return str(machine.lifecycle_trigger(source, dest))
    except IllegalTransition:
        return None


def legal_targets(run_status: str, attempt_statuses: Sequence[str]) -> list[str]:
    """Which of RESOLVE_TARGETS the Run and every given (active) Attempt can each reach along
    ONE plain ADR-0001 edge (fsm's machines decide; pure)."""
    if run_status in RUN_TERMINAL:
        return []
    return [
        target
        for target in RESOLVE_TARGETS
        if _lifecycle(run_machine(), run_status, target) is not None
        and all(_lifecycle(attempt_machine(), s, target) is not None for s in attempt_statuses)
    ]


@dataclass(frozen=True)
class AttemptMove:
    attempt_id: str
    source: str
    trigger: str
    process: str | None  # running | not_running | unknown | None (no handle to probe)
    probe_reason: str | None
    pid: int | None = None  # the handle's pid and process group: what the probe checked
    pgid: int | None = None


@dataclass(frozen=True)
class ResolutionPlan:
    run_id: str
    target: str
    run_source: str
    run_trigger: str
    attempts: tuple[AttemptMove, ...]
    force: bool


def plan_resolution(
    run: RunRow,
    active: Sequence[AttemptRow],
    target: str,
    probes: dict[str, Evidence],
    *,
    force: bool,
) -> ResolutionPlan:
    """Decide (pure): the edges to take, or ResolveRefused naming the legal choices."""
    choices = legal_targets(run.status, [a.status for a in active])
    where = _where(run, active)
    if run.status in RUN_TERMINAL:
        raise ResolveRefused(
            f"run {clean(run.id)} is {run.status}, a terminal state: nothing is left to decide "
            "(ADR-0001 has no edge out of it)"
        )
    if target not in RESOLVE_TARGETS:
        raise ResolveRefused(
            f"--to {target!r} is not an operator's decision; choose {_show(choices)}", choices
        )
    if target not in choices:
        why = _forbidden(run, active, target)
        raise ResolveRefused(
            f"{where}: {why}; legal choices: {_show(choices)}",
            choices,
        )
    running = [
        a for a in active if probes.get(a.id) is not None and probes[a.id].verdict == "running"
    ]
    if running and not force:
        # D-23: the pid and group the probe proved (the handle's), never `RunAttempts.pid`:
        # under row 11 the two differ and the recorded one may be another job's process.
        live = "; ".join(
            f"attempt {clean(a.id)}: pid {pid}, process group {pgid}, as its handle names them"
            for a in running
            for pid, pgid in [handle_ids(a)]
        )
        raise ResolveRefused(
            f"{where}: its process identity proves it is still running ({live}); stop it "
            f"({stop_hint([handle_ids(a)[1] for a in running])}) and run `qlfsm startup`, or pass "
            "--force to decide anyway (recorded in the event; qlfsm does not stop the process)",
            choices,
        )
    # The target is in choices: every edge below is one fsm's lifecycle tables allow.
    moves = []
    for a in active:
        trigger = attempt_machine().lifecycle_trigger(a.status, target)
        probe = probes.get(a.id)
        verdict, probe_reason = (probe.verdict, probe.reason) if probe is not None else (None, None)
        moves.append(AttemptMove(a.id, a.status, trigger, verdict, probe_reason, *handle_ids(a)))
    run_trigger = run_machine().lifecycle_trigger(run.status, target)
    return ResolutionPlan(run.id, target, run.status, run_trigger, tuple(moves), force)


def handle_ids(attempt: AttemptRow) -> tuple[int | None, int | None]:
    """The pid and process group of the Attempt's durable handle (what the probe checks)."""
    handle = parse_handle(attempt.executor_handle)
    return (handle.pid, handle.pgid) if handle is not None else (None, None)


def stop_hint(pgids: Sequence[int | None]) -> str:
    """How to stop the proven-live jobs: each one's process group (the launcher starts every
    job in its own group, spec 03 "Launcher"), by the group id the probe proved."""
    groups = dict.fromkeys(g for g in pgids if g is not None)
    return "; ".join(f"kill -TERM -- -{g}" for g in groups) or "stop it by other means"


def _show(choices: Sequence[str]) -> str:
    return ", ".join(choices) if choices else "none (no operator decision applies here)"


def _where(run: RunRow, active: Sequence[AttemptRow]) -> str:
    # D-14: the ids are the database's; a refusal line shows them escaped, never a line break.
    atts = ", ".join(f"Attempt {clean(a.id)} {a.status}" for a in active)
    return f"run {clean(run.id)} is {run.status}" + (f" with {atts}" if atts else "")


def _forbidden(run: RunRow, active: Sequence[AttemptRow], target: str) -> str:
    if run.status == target:
        return f"it is {target} already"
    if _lifecycle(run_machine(), run.status, target) is None:
        return f"run {run.status} -> {target} is not an ADR-0001 edge"
    bad = next(a for a in active if _lifecycle(attempt_machine(), a.status, target) is None)
    return f"attempt {bad.status} -> {target} is not an ADR-0001 edge"


@dataclass
class Resolved:
    plan: ResolutionPlan
    reason: str
    actor: Actor
    version: int
    events: tuple[str, ...]
    journal: list[JournalRow] = field(default_factory=list)
    # What the decision writes (or, with ``dry_run``, would write): one edge and event each.
    writes: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        p = self.plan
        # The Attempts whose process was proven running: a forced decision leaves them so.
        live: list[dict[str, Any]] = [
            {"attempt_id": m.attempt_id, "pid": m.pid, "pgid": m.pgid}
            for m in p.attempts
            if m.process == "running"
        ]
        return {
            "dry_run": self.dry_run,
            "writes": list(self.writes),
            "still_running": live,
            "stop": stop_hint([x["pgid"] for x in live]) if live else None,
            "run_id": p.run_id,
            "to": p.target,
            "run": {"from": p.run_source, "to": p.target},
            "attempts": [
                {
                    "id": m.attempt_id,
                    "from": m.source,
                    "to": p.target,
                    "process": m.process,
                    "probe_reason": m.probe_reason,
                }
                for m in p.attempts
            ],
            "force": p.force,
            "reason": self.reason,
            "actor": {"type": self.actor.type, "id": self.actor.id},
            "version": self.version,
            "events": list(self.events),
            "journal": journal_entries(self.journal),
        }


def resolve(
    conn: sqlite3.Connection,
    run_id: str,
    target: str,
    reason: str,
    *,
    force: bool,
    provider: ProcessProvider,
    clock: Clock,
    actor: Actor,
    dry_run: bool = False,
) -> Resolved:
    """Gather, decide, commit (module docstring). Raises UnknownRun, InvalidReason,
    ResolveRefused (nothing written), or a storage Conflict when the run moved meanwhile.
    ``dry_run``: gather and decide the same way, refuse the same way, and return what would
    be written without writing it (no transaction is even opened)."""
    text = check_reason(reason)
    repo = Repository(conn)
    run, attempts = run_of(repo, run_id)
    active = [a for a in attempts if a.status in ATTEMPT_ACTIVE]
    # Evidence first, at the edge: the exact durable identity of every active Attempt.
    probes = {
        a.id: inspect_handle(a.executor_handle, provider)
        for a in active
        if a.executor_handle and run.status not in RUN_TERMINAL
    }
    plan = plan_resolution(run, active, target, probes, force=force)
    # spec 01 "Field rules": never earlier than the rows' created/started times.
    at = max(
        [clock.now_ms(), run.created_at_ms, run.started_at_ms or 0]
        + [t for a in active for t in (a.created_at_ms, a.started_at_ms or 0)]
    )
    changes = _changes(plan, run, text, at)
    expect = Expect(
        run={"status": run.status, "version": run.version, "execution_owner": run.execution_owner},
        attempts={
            a.id: {
                "status": a.status,
                "callback_sequence": a.callback_sequence,
                "executor_handle": a.executor_handle,
                "pid": a.pid,
            }
            for a in active
        },
    )
    writes = [_write_of(plan, ch) for ch in changes]
    journal = journal_of(conn, attempts)
    if dry_run:
        # spec 01: every edge one version and one event, bounded as the write bounds them (a
        # dry run refuses what the write would refuse, D-29).
        version, sequence = run.version, run.event_sequence
        for _ in changes:
            version = next_counter("run", run.id, "version", version)
            sequence = next_counter("run", run.id, "event_sequence", sequence)
        return Resolved(plan, text, actor, version, (), journal, writes, dry_run=True)
    done = repo.advance(run.id, run.version, changes, actor=actor, at_ms=at, expect=expect)
    journal = journal_of(conn, attempts)
    return Resolved(plan, text, actor, done.version, done.events, journal, writes)


def _write_of(plan: ResolutionPlan, change: Change) -> dict[str, Any]:
    """One planned edge as the operator sees it: aggregate, id, from -> to, event, dedupe key
    (spec 01 "Events": `aggregate.past_tense`, here the target state's name)."""
    if isinstance(change, AttemptChange):
        source = next(m.source for m in plan.attempts if m.attempt_id == change.attempt_id)
        aggregate, ident = "attempt", change.attempt_id
    else:
        source, aggregate, ident = plan.run_source, "run", plan.run_id
    return {
        "aggregate": aggregate,
        "id": ident,
        "from": source,
        "to": plan.target,
        "event": f"{aggregate}.{plan.target}",
        "dedupe_key": change.dedupe_key,
    }


def _changes(plan: ResolutionPlan, run: RunRow, reason: str, at_ms: int) -> list[Change]:
    summary = f"Resolved by an operator: {reason}"[:1024]
    errors = {"error_code": OPERATOR_ERROR_CODE, "error_summary": summary}
    changes: list[Change] = [
        AttemptChange(
            m.attempt_id,
            m.trigger,
            set=errors,
            payload={RESOLUTION_KEY: _resolution(plan, reason, m.process, m.probe_reason)},
            dedupe_key=f"operator-resolve:attempt:{m.attempt_id}:{run.version}",
        )
        for m in plan.attempts
    ]
    verdicts = [m.process for m in plan.attempts if m.process is not None]
    # The Run's event names the strongest process evidence of its Attempts.
    process = next((v for v in ("running", "unknown", "not_running") if v in verdicts), None)
    reasons = [m.probe_reason for m in plan.attempts if m.process == process]
    run_sets: dict[str, object] = dict(errors)
    if plan.target in RUN_TERMINAL:  # `lost` is not terminal: it gets no finished time
        run_sets["finished_at_ms"] = at_ms
    changes.append(
        RunChange(
            plan.run_trigger,
            set=run_sets,
            payload={
                "error_code": OPERATOR_ERROR_CODE,
                RESOLUTION_KEY: _resolution(plan, reason, process, reasons[0] if reasons else None),
            },
            dedupe_key=f"operator-resolve:run:{run.id}:{run.version}",
        )
    )
    return changes


def _resolution(
    plan: ResolutionPlan, reason: str, process: str | None, probe_reason: str | None
) -> dict[str, object]:
    return {
        "to": plan.target,
        "reason": reason,
        "force": plan.force,
        "process": process,
        "probe_reason": probe_reason,
    }
