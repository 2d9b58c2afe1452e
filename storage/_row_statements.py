"""The statements of one write transaction (spec 01): lock-read the Run, read an Attempt of
it, insert a Run or an Attempt, compare-and-set the Run and the Attempt in the SQL ``WHERE``
(row count checked), and append the event. Each runs on the connection of a transaction its
caller holds (``in_transaction``): every write of Runs, RunAttempts and RunEvents is made of
these, whether :func:`storage.advance_in` or a ``Repository`` creation makes it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from ._changes import (
    Actor,
    Expect,
    _check_expected,
    next_counter,
)
from ._errors import Conflict, DuplicateEvent, NotFound, RowNotInserted
from ._rows import (
    ATTEMPT_COLUMNS,
    RUN_COLUMNS,
    AttemptRow,
    RunRow,
    uuid7,
)

# spec 02: the payload as compact, key-sorted JSON; one encoder for every event (json.dumps
# with these options would build a new one per call).
_PAYLOAD_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


def _set_clause(columns: Mapping[str, object]) -> tuple[list[str], list[object]]:
    """`col = ?` assignments and their parameters; status first, then columns sorted (the
    column names come from the allow-lists of storage._changes, never from input)."""
    order = sorted(columns, key=lambda c: (c != "status", c))
    return [f"{c} = ?" for c in order], [columns[c] for c in order]


def read_run(c: sqlite3.Connection, run_id: str) -> RunRow | None:
    found = c.execute(f'SELECT {RUN_COLUMNS} FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    return None if found is None else RunRow(*found)


def run_for_update(c: sqlite3.Connection, run_id: str, expected_version: int) -> RunRow:
    return check_read(read_run(c, run_id), (), run_id, expected_version, None)


def check_read(
    run: RunRow | None,
    attempts: Sequence[AttemptRow],
    run_id: str,
    expected_version: int,
    expect: Expect | None,
) -> RunRow:
    """The re-read rows still hold what the decision used: the same checks, in the same order
    and with the same errors, as :func:`advance_in` makes on its own read."""
    if run is None:
        raise NotFound("run", run_id)
    if run.version != expected_version:
        raise Conflict("run", run_id, f"at version {expected_version} (now {run.version})")
    if expect is not None:
        _check_expected("run", run_id, run, expect.run)
        by_id = {a.id: a for a in attempts}
        for expected_id, fields in expect.attempts.items():
            if expected_id not in by_id:
                raise NotFound("attempt", expected_id)
            _check_expected("attempt", expected_id, by_id[expected_id], fields)
    return run


def attempt_of_run(c: sqlite3.Connection, run_id: str, attempt_id: str) -> AttemptRow:
    found = c.execute(
        f'SELECT {ATTEMPT_COLUMNS} FROM "RunAttempts" WHERE id = ? AND run_id = ?',
        (attempt_id, run_id),
    ).fetchone()
    if found is None:
        raise NotFound("attempt", attempt_id)
    return AttemptRow(*found)


def insert_run(
    c: sqlite3.Connection,
    run_id: str,
    at_ms: int,
    version: int,
    owner: str,
    legacy_cron_id: int | None,
    task: tuple[str, str, str, str | None, str, str],
) -> None:
    """Insert a `created` Run, its event sequence at its ``version`` (spec 01); ``task`` is
    (project_id, task_id, task_revision, task_name, trigger_type, execution_origin)."""
    cur = c.execute(
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, task_name, trigger_type, '
        "execution_origin, execution_owner, legacy_cron_id, status, version, event_sequence, "
        "created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'created', ?, ?, ?)",
        (run_id, *task, owner, legacy_cron_id, version, version, at_ms),
    )
    if cur.rowcount != 1:  # dropped without an error (a trigger): nothing is written
        raise RowNotInserted("Runs", f"run {run_id}")


def insert_attempt(
    c: sqlite3.Connection,
    run_id: str,
    attempt_id: str,
    number: int,
    executor_type: str,
    pid: int | None,
    log_artifact_id: str | None,
    at_ms: int,
) -> None:
    """Insert a `claimed` Attempt at callback sequence 0 (spec 01)."""
    cur = c.execute(
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, pid, '
        "log_artifact_id, callback_sequence, created_at_ms) "
        "VALUES (?, ?, ?, 'claimed', ?, ?, ?, 0, ?)",
        (attempt_id, run_id, number, executor_type, pid, log_artifact_id, at_ms),
    )
    if cur.rowcount != 1:  # dropped without an error (a trigger): nothing is written
        raise RowNotInserted("RunAttempts", f"attempt {attempt_id} of run {run_id}")


def cas_run(
    c: sqlite3.Connection,
    run: RunRow,
    status: str,
    version: int,
    sequence: int,
    sets: Mapping[str, object],
) -> None:
    columns = {"event_sequence": sequence, "version": version, **sets}
    if status != run.status:
        columns["status"] = status
    assignments, params = _set_clause(columns)
    # spec 01 rule 3: compare-and-set on id + expected version (+ status), checked by row count.
    cur = c.execute(
        f'UPDATE "Runs" SET {", ".join(assignments)} WHERE id = ? AND version = ? AND status = ?',
        (*params, run.id, run.version, run.status),
    )
    if cur.rowcount != 1:
        raise Conflict("run", run.id, f"at version {run.version} in {run.status}")


def bump_run(c: sqlite3.Connection, run: RunRow) -> tuple[int, int]:
    """CAS the Run and bump it for one event that moves no status: returns (new version, event
    sequence)."""
    # spec 01: the event takes the Run's next version and event sequence (bounded, D-29).
    version = next_counter("run", run.id, "version", run.version)
    sequence = next_counter("run", run.id, "event_sequence", run.event_sequence)
    cas_run(c, run, run.status, version, sequence, {})
    return version, sequence


def cas_attempt(
    c: sqlite3.Connection, att: AttemptRow, status: str, sets: Mapping[str, object]
) -> None:
    assignments, params = _set_clause({"status": status, **sets})
    # spec 01 rule 4: CAS on id + expected status + expected callback sequence.
    cur = c.execute(
        f'UPDATE "RunAttempts" SET {", ".join(assignments)} '
        "WHERE id = ? AND status = ? AND callback_sequence = ?",
        (*params, att.id, att.status, att.callback_sequence),
    )
    if cur.rowcount != 1:
        raise Conflict("attempt", att.id, f"{att.status} at callback {att.callback_sequence}")


def insert_event(
    c: sqlite3.Connection,
    run_id: str,
    sequence: int,
    event_type: str,
    actor: Actor,
    attempt_id: str | None,
    payload: dict[str, object],
    dedupe_key: str | None,
    at_ms: int,
) -> str:
    event_id = uuid7()
    if dedupe_key is None:
        # spec 01 rule 5: every event carries a dedupe key, unique per Run.
        dedupe_key = f"{event_type}:{sequence}"
    try:
        cur = c.execute(
            'INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, '
            "actor_id, attempt_id, payload, created_at_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                event_id,
                run_id,
                sequence,
                event_type,
                dedupe_key,
                actor.type,
                actor.id,
                attempt_id,
                _PAYLOAD_JSON(payload),
                at_ms,
            ),
        )
    except sqlite3.IntegrityError as exc:
        # The key already in this Run's log, read in this transaction, is the one sign of a
        # duplicate; SQLite's message varies with the schema's constraint and is not read.
        hit = c.execute(
            'SELECT 1 FROM "RunEvents" WHERE run_id = ? AND dedupe_key = ?', (run_id, dedupe_key)
        ).fetchone()
        if hit:
            raise DuplicateEvent(run_id, dedupe_key) from exc
        raise
    # spec 01: no Run change without its event. An INSERT that SQLite dropped without an
    # error (a BEFORE INSERT trigger's RAISE(IGNORE)) would let the Run's compare-and-set
    # commit alone; raising here rolls the whole transaction back (ADR-0068 row 14).
    if cur.rowcount != 1:
        raise RowNotInserted("RunEvents", f"{event_type} of run {run_id}")
    return event_id
