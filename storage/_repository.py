"""The Run/Attempt repository: every edge is one compare-and-set plus one event (spec 01).

A change names a trigger of the Run or Attempt machine and carries the evidence for its
guard. Inside ONE ``BEGIN IMMEDIATE`` transaction the repository re-reads the aggregate, plans
the edge with the machine (a refused guard or an illegal edge raises before anything is
written), compare-and-sets the row in the SQL ``WHERE`` (row count checked), bumps the Run's
version and event sequence, and appends the event with its dedupe key. Any failure rolls the
whole advance back: no orphan event, no Run update without its event.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._advance_once import advance_in
from ._changes import (
    NON_MOVING_EVENTS,
    Actor,
    Advanced,
    Change,
    Expect,
    RunChange,
    _check_actor,
    _check_time,
)
from ._connection import in_transaction
from ._errors import InvalidField
from ._row_statements import (
    attempt_of_run,
    bump_run,
    insert_attempt,
    insert_event,
    insert_run,
    read_run,
    run_for_update,
)
from ._rows import (
    ATTEMPT_COLUMNS,
    EVENT_COLUMNS,
    AttemptRow,
    EventColumns,
    EventRow,
    RunRow,
)

# The default actors of a new Run / Attempt (frozen, so one instance serves every call).
_USER = Actor("user")
_SCHEDULER = Actor("scheduler")


class Repository:
    """The reads of Runs, RunAttempts and RunEvents, and their writes, each in its own
    transaction on ``conn`` (the edges through :func:`storage.advance_in`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    # --- reads ----------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRow | None:
        return read_run(self.conn, run_id)

    def get_attempt(self, attempt_id: str) -> AttemptRow | None:
        found = self.conn.execute(
            f'SELECT {ATTEMPT_COLUMNS} FROM "RunAttempts" WHERE id = ?', (attempt_id,)
        ).fetchone()
        return AttemptRow(*found) if found else None

    def attempts_of(self, run_id: str) -> list[AttemptRow]:
        cur = self.conn.execute(
            f'SELECT {ATTEMPT_COLUMNS} FROM "RunAttempts" WHERE run_id = ? ORDER BY attempt',
            (run_id,),
        )
        return [AttemptRow(*r) for r in cur]

    def attempt_ids_of(self, run_ids: list[str]) -> list[str]:
        """The ids of every Attempt of these Runs, in one statement (a page's shards are
        checked before its first write, D-16: one read per page, not per candidate). Ids
        that are not text are left out: their candidate fails on its own."""
        if not run_ids:
            return []
        marks = ", ".join("?" * len(run_ids))
        cur = self.conn.execute(
            f"SELECT id FROM \"RunAttempts\" WHERE run_id IN ({marks}) AND typeof(id) = 'text'",
            run_ids,
        )
        return [r[0] for r in cur]

    def events_of(self, run_id: str) -> list[EventRow]:
        cur = self.conn.execute(
            f'SELECT {EVENT_COLUMNS} FROM "RunEvents" WHERE run_id = ? ORDER BY sequence',
            (run_id,),
        )
        return [EventRow.of_columns(r) for r in cur]

    def events_page(self, run_id: str, *, after: int = 0, limit: int = 500) -> list[EventRow]:
        """At most ``limit`` of the run's events after sequence ``after``, in order: a keyset
        page on the unique index ``(run_id, sequence)`` (spec 02), so a long history is read a
        page at a time (issue 29)."""
        return [EventRow.of_columns(r) for r in self.event_columns_page(run_id, after, limit)]

    def event_columns_page(self, run_id: str, after: int, limit: int) -> list[EventColumns]:
        """The page of :meth:`events_page` as the columns of each event, in ``EventRow``'s
        field order with the payload still JSON text: for a reader that streams a long history
        and builds a record only for the events it needs one for (``qlfsm explain``)."""
        cur = self.conn.cursor()
        cur.row_factory = None  # plain tuples, by position
        cur.execute(
            f'SELECT {EVENT_COLUMNS} FROM "RunEvents" WHERE run_id = ? AND sequence > ? '
            "ORDER BY sequence LIMIT ?",
            (run_id, after, limit),
        )
        return cur.fetchall()

    def iter_events(self, run_id: str, *, page: int = 500) -> Iterator[EventRow]:
        """Every event of the run in sequence order, read in keyset pages of ``page``: memory
        holds one page, whatever the history's length."""
        return map(EventRow.of_columns, self.iter_event_columns(run_id, page=page))

    def iter_event_columns(self, run_id: str, *, page: int = 500) -> Iterator[EventColumns]:
        """:meth:`iter_events` as each event's columns (:meth:`event_columns_page`)."""
        after = 0
        while True:
            rows = self.event_columns_page(run_id, after, page)
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1][2]  # the sequence column

    # --- creation (launcher, demo, tests) ---------------------------------------------------

    def create_run(
        self,
        *,
        run_id: str,
        at_ms: int,
        execution_owner: str = "runtime",
        execution_origin: str = "manual",
        project_id: str = "default",
        task_id: str = "task",
        task_revision: str = "1",
        task_name: str | None = None,
        trigger_type: str = "manual",
        legacy_cron_id: int | None = None,
        actor: Actor = _USER,
    ) -> Advanced:
        """Insert a Run in `created` with its `run.created` event (version 1)."""
        _check_actor(actor)

        def work(c: sqlite3.Connection) -> Advanced:
            task = (project_id, task_id, task_revision, task_name, trigger_type, execution_origin)
            insert_run(c, run_id, at_ms, 1, execution_owner, legacy_cron_id, task)
            payload: dict[str, object] = {"from_status": None, "to_status": "created", "version": 1}
            key = f"run.created:{run_id}"
            event_id = insert_event(c, run_id, 1, "run.created", actor, None, payload, key, at_ms)
            return Advanced(run_id, 1, (), (event_id,))

        return in_transaction(self.conn, work)

    def create_attempt(
        self,
        *,
        run_id: str,
        attempt_id: str,
        expected_version: int,
        at_ms: int,
        executor_type: str = "local_process",
        attempt: int | None = None,
        pid: int | None = None,
        log_artifact_id: str | None = None,
        actor: Actor = _SCHEDULER,
    ) -> Advanced:
        """Insert a `claimed` Attempt with its `attempt.claimed` event (one version)."""
        from fsm.qinglong import RUN_TERMINAL  # with the first write (D-33)

        _check_actor(actor)

        def work(c: sqlite3.Connection) -> Advanced:
            run = run_for_update(c, run_id, expected_version)
            if run.status in RUN_TERMINAL:
                raise InvalidField(f"run {run_id} is terminal ({run.status}); no new attempt")
            _check_time(at_ms, run.created_at_ms, run.started_at_ms, "run")
            number = attempt
            if number is None:
                top = c.execute(
                    'SELECT COALESCE(MAX(attempt), 0) FROM "RunAttempts" WHERE run_id = ?',
                    (run_id,),
                ).fetchone()[0]
                number = int(top) + 1
            insert_attempt(
                c, run_id, attempt_id, number, executor_type, pid, log_artifact_id, at_ms
            )
            version, sequence = bump_run(c, run)
            payload: dict[str, object] = {
                "attempt_id": attempt_id,
                "from_status": None,
                "to_status": "claimed",
                "version": version,
            }
            key = f"attempt.claimed:{attempt_id}"
            event_id = insert_event(
                c, run_id, sequence, "attempt.claimed", actor, attempt_id, payload, key, at_ms
            )
            return Advanced(run_id, version, (), (event_id,))

        return in_transaction(self.conn, work)

    def create_primary_run(
        self,
        *,
        run_id: str,
        attempt_id: str,
        at_ms: int,
        actor: Actor,
        executor_type: str = "local_process",
        project_id: str = "default",
        task_id: str = "task",
        task_revision: str = "1",
        task_name: str | None = None,
        trigger_type: str = "manual",
        execution_origin: str = "manual",
    ) -> Advanced:
        """A runtime Run as QingLong's scheduler creates one (its ``PrimaryRunCreator``), in ONE
        transaction: the Run inserted `created` at version 0 with its first Attempt `claimed`
        (attempt 1, callback sequence 0; the claim has no event of its own), then `run.created`
        (payload ``status``/``version``/``execution_owner``, dedupe key
        ``primary-run-created:<run>``) and the CAS created -> queued with `run.queued` (dedupe
        key ``primary-run-queued:<run>``): the Run ends `queued` at version 2. An existing
        run id is refused (InvalidField) before anything is written (docs/decisions.md D-23)."""
        _check_actor(actor)

        def work(c: sqlite3.Connection) -> Advanced:
            if c.execute('SELECT 1 FROM "Runs" WHERE id = ?', (run_id,)).fetchone():
                raise InvalidField(f"run {run_id} already exists; choose a new run id")
            task = (project_id, task_id, task_revision, task_name, trigger_type, execution_origin)
            insert_run(c, run_id, at_ms, 0, "runtime", None, task)
            insert_attempt(c, run_id, attempt_id, 1, executor_type, None, None, at_ms)
            created = run_for_update(c, run_id, 0)
            version, sequence = bump_run(c, created)
            payload = {"status": "created", "version": version, "execution_owner": "runtime"}
            key = f"primary-run-created:{run_id}"
            insert_event(c, run_id, sequence, "run.created", actor, None, payload, key, at_ms)
            queue = RunChange("queue", dedupe_key=f"primary-run-queued:{run_id}")
            return advance_in(c, run_id, version, [queue], actor=actor, at_ms=at_ms)

        return in_transaction(self.conn, work)

    # --- edges: storage.advance_in (storage/_advance_once.py) in a transaction ---------------

    def advance(
        self,
        run_id: str,
        expected_version: int,
        changes: Sequence[Change],
        *,
        actor: Actor,
        at_ms: int,
        expect: Expect | None = None,
    ) -> Advanced:
        """Apply ``changes`` in order, in ONE transaction, each edge one version and event."""
        _check_actor(actor)  # before the transaction: a bad actor takes no lock
        return in_transaction(
            self.conn,
            lambda c: advance_in(
                c, run_id, expected_version, changes, actor=actor, at_ms=at_ms, expect=expect
            ),
        )

    def fire(
        self,
        model: Any,
        run_id: str,
        expected_version: int,
        change: Change,
        *,
        actor: Actor,
        at_ms: int,
        expect: Expect | None = None,
    ) -> Advanced:
        """One edge on the database AND on an in-memory ``model``, the commit first.

        ``model`` is attached (:meth:`fsm.Lifecycle.attach`) to the Run machine for a
        :class:`RunChange` or to the Attempt machine for an :class:`AttemptChange`, in the
        stored status: that status is re-checked inside the transaction (Conflict otherwise).
        The edge is planned on the model's state first, then committed, and only after the
        commit fired on the model. A refused guard, an illegal edge or a failed commit raise
        with the model where it was (spec 01, "edges drive commits").
        """
        from fsm.qinglong import attempt_machine, run_machine  # with the first write (D-33)

        machine = run_machine() if isinstance(change, RunChange) else attempt_machine()
        state = str(model.state)
        machine.plan(state, change.trigger, change.evidence)
        base = expect or Expect()
        if isinstance(change, RunChange):
            merged = Expect(run={**base.run, "status": state}, attempts=base.attempts)
        else:
            fields = {**base.attempts.get(change.attempt_id, {}), "status": state}
            merged = Expect(run=base.run, attempts={**base.attempts, change.attempt_id: fields})
        advanced = self.advance(
            run_id, expected_version, [change], actor=actor, at_ms=at_ms, expect=merged
        )
        machine.fire(model, change.trigger, change.evidence)
        return advanced

    # :func:`storage.advance_in` itself: inside a transaction the caller already holds.
    advance_in = staticmethod(advance_in)

    def append_event(
        self,
        run_id: str,
        expected_version: int,
        event_type: str,
        *,
        actor: Actor,
        at_ms: int,
        attempt_id: str | None = None,
        payload: Mapping[str, object] | None = None,
        dedupe_key: str | None = None,
    ) -> Advanced:
        """An event that moves no state (e.g. `attempt.late_callback_ignored`)."""
        _check_actor(actor)
        if event_type not in NON_MOVING_EVENTS:
            raise InvalidField(
                f"event {event_type!r} cannot be appended on its own: state events are written "
                f"by advance(); use one of {sorted(NON_MOVING_EVENTS)}"
            )
        if event_type.startswith("attempt.") and attempt_id is None:
            raise InvalidField(f"event {event_type!r} names its attempt: pass attempt_id")

        def work(c: sqlite3.Connection) -> Advanced:
            run = run_for_update(c, run_id, expected_version)
            _check_time(at_ms, run.created_at_ms, run.started_at_ms, "run")
            if attempt_id is not None:
                att = attempt_of_run(c, run_id, attempt_id)
                _check_time(at_ms, att.created_at_ms, att.started_at_ms, "attempt")
            version, sequence = bump_run(c, run)
            body: dict[str, object] = {"version": version}
            if attempt_id is not None:
                body["attempt_id"] = attempt_id
            body.update(payload or {})
            event_id = insert_event(
                c, run_id, sequence, event_type, actor, attempt_id, body, dedupe_key, at_ms
            )
            return Advanced(run_id, version, (), (event_id,))

        return in_transaction(self.conn, work)
