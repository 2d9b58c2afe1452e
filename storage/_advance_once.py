"""The one write path for edges (spec 01 rules 3-5): a change set applied inside the caller's
transaction, every edge planned on the lifecycle machines (guards evaluated on the change's
evidence), then ONE compare-and-set UPDATE per aggregate and one event per edge.

:func:`advance_in` reads the Run and the Attempts the changes name; :func:`advance_read` takes
rows the caller has just read in the same ``BEGIN IMMEDIATE`` (the ADR-0068 pass's re-check),
so they are not read twice. ``Repository.advance`` is :func:`advance_in` in its own transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from ._changes import (
    _ATTEMPT_SETTABLE,
    _RUN_SETTABLE,
    ATTEMPT_EVENT_FIELDS,
    Actor,
    Advanced,
    AttemptChange,
    Change,
    Expect,
    _check_actor,
    _check_fields,
    _check_time,
    next_counter,
)
from ._errors import Conflict, InvalidField, NotFound
from ._row_statements import (
    attempt_of_run,
    cas_attempt,
    cas_run,
    check_read,
    insert_event,
    run_for_update,
)
from ._rows import AttemptRow, RunRow

_UNSET: Mapping[str, object] = {}  # an Attempt no edge of the change set moved yet (read only)


def advance_in(
    c: sqlite3.Connection,
    run_id: str,
    expected_version: int,
    changes: Sequence[Change],
    *,
    actor: Actor,
    at_ms: int,
    expect: Expect | None = None,
) -> Advanced:
    """Apply ``changes`` in order inside the transaction the caller holds on ``c``: the Run and
    every Attempt the changes or the expectations name are read here, then
    :func:`advance_read` (each edge one version and one event)."""
    _check_actor(actor)
    run = run_for_update(c, run_id, expected_version)
    named = [*(expect.attempts if expect is not None else ())]
    named += [ch.attempt_id for ch in changes if ch.attempt_id is not None]
    attempts = [attempt_of_run(c, run_id, a) for a in dict.fromkeys(named)]
    return advance_read(
        c, run, attempts, run_id, expected_version, changes, actor=actor, at_ms=at_ms, expect=expect
    )


def advance_read(
    c: sqlite3.Connection,
    run: RunRow | None,
    attempts: Sequence[AttemptRow],
    run_id: str,
    expected_version: int,
    changes: Sequence[Change],
    *,
    actor: Actor,
    at_ms: int,
    expect: Expect | None = None,
) -> Advanced:
    """Apply ``changes`` to ``run`` and ``attempts`` as read in this transaction (``c``)."""
    # The machines load with the first write, not with the package: a start-up with zero
    # candidates writes nothing and needs none (docs/decisions.md D-33).
    from fsm.qinglong import ATTEMPT_TERMINAL, RUN_TERMINAL, attempt_machine, run_machine

    _check_actor(actor)
    run = check_read(run, attempts, run_id, expected_version, expect)
    by_id = {a.id: a for a in attempts}
    status, version, sequence = run.status, run.version, run.event_sequence
    run_sets: dict[str, object] = {}
    moved: dict[str, tuple[str, dict[str, object]]] = {}  # attempt id -> (status, sets)
    events = []
    steps = []
    attempt_id: str | None
    for change in changes:
        # spec 01: each edge takes the Run's next version and event sequence (bounded, D-29).
        version = next_counter("run", run_id, "version", version)
        sequence = next_counter("run", run_id, "event_sequence", sequence)
        if isinstance(change, AttemptChange):
            att = by_id.get(change.attempt_id)
            if att is None:
                raise NotFound("attempt", change.attempt_id)
            if status in RUN_TERMINAL:
                # spec 01: an Attempt may not move once its Run is terminal.
                raise Conflict("run", run_id, "non-terminal (its attempts are frozen)")
            earlier = moved.get(att.id)  # an edge of this change set moved it already
            now_status, now_sets = (att.status, _UNSET) if earlier is None else earlier
            step = attempt_machine().plan(now_status, change.trigger, change.evidence)
            sets = dict(change.set)
            _check_fields("attempt", step.dest, sets, _ATTEMPT_SETTABLE)
            started = now_sets.get("started_at_ms", att.started_at_ms)
            _check_time(at_ms, att.created_at_ms, started, "attempt")  # type: ignore[arg-type]
            if step.dest in ATTEMPT_TERMINAL:
                sets.setdefault("finished_at_ms", at_ms)
            if "callback_sequence" in sets and (
                step.dest not in ATTEMPT_TERMINAL
                or sets["callback_sequence"] != att.callback_sequence + 1
            ):
                raise InvalidField(
                    "callback_sequence is set only on a terminal attempt and must be "
                    f"the stored sequence + 1 ({att.callback_sequence + 1})"
                )
            if "callback_sequence" in sets:
                next_counter("attempt", att.id, "callback_sequence", att.callback_sequence)
            moved[att.id] = (step.dest, {**now_sets, **sets} if now_sets else sets)
            payload: dict[str, object] = {
                "attempt_id": att.id,
                "from_status": step.source,
                "to_status": step.dest,
                "version": version,
            }
            if not ATTEMPT_EVENT_FIELDS.issuperset(change.event_fields):
                unknown = sorted(set(change.event_fields) - ATTEMPT_EVENT_FIELDS)
                raise InvalidField(
                    f"attempt event fields {unknown} are not edge fields; use some of "
                    f"{sorted(ATTEMPT_EVENT_FIELDS)}"
                )
            for key in change.event_fields:
                if key == "attempt":
                    payload[key] = att.attempt
                elif key in sets:
                    payload[key] = sets[key]
            payload.update(change.payload)
            event_type, attempt_id = f"attempt.{step.dest}", att.id
        else:
            step = run_machine().plan(status, change.trigger, change.evidence)
            _check_fields("run", step.dest, change.set, _RUN_SETTABLE)
            started = run_sets.get("started_at_ms", run.started_at_ms)
            _check_time(at_ms, run.created_at_ms, started, "run")  # type: ignore[arg-type]
            status = step.dest
            run_sets.update(change.set)
            payload = {"from_status": step.source, "to_status": step.dest, "version": version}
            payload.update(change.payload)
            attempt_id = change.attempt_id
            if attempt_id is not None and attempt_id not in by_id:
                raise NotFound("attempt", attempt_id)
            event_type = f"run.{step.dest}"
        dedupe = change.dedupe_key
        events.append(
            insert_event(c, run_id, sequence, event_type, actor, attempt_id, payload, dedupe, at_ms)
        )
        steps.append(step)
    for att_id, (dest, sets) in moved.items():
        cas_attempt(c, by_id[att_id], dest, sets)
    cas_run(c, run, status, version, sequence, run_sets)
    return Advanced(run_id, version, tuple(steps), tuple(events))
