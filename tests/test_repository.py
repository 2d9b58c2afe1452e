"""ADR-0001 acceptance scenarios on real SQLite files, read back through a second connection."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _support import SYSTEM, T0, Model, attempt_in, run_in

from fsm import (
    GuardRefused,
    IllegalTransition,
    Lifecycle,
)
from fsm.qinglong import (
    PrimaryFacts,
    attempt_machine,
    run_machine,
)
from storage import (
    Actor,
    AttemptChange,
    AttemptRow,
    Busy,
    Change,
    Conflict,
    DuplicateEvent,
    Expect,
    InvalidField,
    NotFound,
    Repository,
    RunChange,
    RunRow,
    advance_in,
    connect,
    in_transaction,
)

RUN = "019f70c0-0000-7000-8000-000000000001"
ATT = "019f70c0-0000-7000-8000-000000000002"
EXECUTOR = Actor("executor", "local")
RECONCILER = Actor("reconciler", "primary")


def events(reader: Repository, kind: str | None = None) -> list[str]:
    return [e.type for e in reader.events_of(RUN) if kind is None or e.type == kind]


def exit_0(version: int) -> list[RunChange | AttemptChange]:
    return [
        AttemptChange(
            ATT,
            "succeed",
            set={"exit_code": 0, "callback_sequence": 1},
            dedupe_key=f"attempt.completed:{ATT}:1",
        ),
        RunChange("succeed"),
    ]


def cancel() -> list[RunChange | AttemptChange]:
    return [AttemptChange(ATT, "cancel"), RunChange("cancel", set={"cancel_reason": "user"})]


def run_and_attempt(reader: Repository) -> tuple[RunRow, AttemptRow]:
    """The Run and its Attempt as committed, both present."""
    run = reader.get_run(RUN)
    att = reader.get_attempt(ATT)
    assert run is not None and att is not None
    return run, att


def refuse(repo: Repository, trigger: str, before: str, message: str) -> None:
    """A temp trigger on the writer's connection that aborts every ``before`` with ``message``."""
    repo.conn.execute(
        f"CREATE TEMP TRIGGER {trigger} BEFORE {before} BEGIN SELECT RAISE(ABORT, '{message}'); END"
    )


@contextlib.contextmanager
def attached(machine: Lifecycle, state: str) -> Iterator[Model]:
    """A fresh in-memory model attached to ``machine`` in ``state``, detached afterwards."""
    model = Model()
    machine.attach(model, state)
    try:
        yield model
    finally:
        machine.detach(model)


# --- basic shape ----------------------------------------------------------------------------


def test_create_run_writes_version_one_and_its_created_event(
    repo: Repository, reader: Repository
) -> None:
    repo.create_run(run_id=RUN, at_ms=T0)
    run = reader.get_run(RUN)
    assert run is not None
    assert (run.status, run.version, run.event_sequence, run.created_at_ms) == ("created", 1, 1, T0)
    [event] = reader.events_of(RUN)
    assert (event.sequence, event.type, event.actor_type) == (1, "run.created", "user")


def test_an_attempt_edge_and_a_run_edge_in_one_advance_each_take_a_version(
    repo: Repository, reader: Repository
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    version = repo.advance(RUN, version, [RunChange("start")], actor=SYSTEM, at_ms=T0).version
    done = repo.advance(RUN, version, exit_0(version), actor=EXECUTOR, at_ms=T0 + 10)
    assert done.version == version + 2 and len(done.events) == 2
    run, att = run_and_attempt(reader)
    assert (run.status, run.version, run.event_sequence) == ("succeeded", version + 2, version + 2)
    assert (att.status, att.exit_code, att.callback_sequence, att.finished_at_ms) == (
        "succeeded",
        0,
        1,
        T0 + 10,
    )
    tail = reader.events_of(RUN)[-2:]
    assert [(e.type, e.sequence) for e in tail] == [
        ("attempt.succeeded", version + 1),
        ("run.succeeded", version + 2),
    ]
    assert tail[0].payload == {
        "attempt_id": ATT,
        "from_status": "running",
        "to_status": "succeeded",
        "version": version + 1,
        "exit_code": 0,
        "callback_sequence": 1,
    }
    assert tail[0].dedupe_key == f"attempt.completed:{ATT}:1"


def test_advance_in_commits_with_the_callers_transaction_and_rolls_back_with_it(
    repo: Repository, reader: Repository
) -> None:
    version = attempt_in(repo, RUN, ATT, "starting")
    start = [AttemptChange(ATT, "run"), RunChange("start")]

    def then_fail(c: sqlite3.Connection) -> None:
        advance_in(c, RUN, version, start, actor=SYSTEM, at_ms=T0)
        raise RuntimeError("the caller's next write failed")

    with pytest.raises(RuntimeError):
        in_transaction(repo.conn, then_fail)
    run, att = run_and_attempt(reader)
    assert (run.status, run.version, att.status) == ("dispatching", version, "starting")
    done = in_transaction(
        repo.conn, lambda c: advance_in(c, RUN, version, start, actor=SYSTEM, at_ms=T0)
    )
    run, att = run_and_attempt(reader)
    assert (run.status, run.version, att.status) == ("running", version + 2, "running")
    assert done.version == version + 2 and events(reader)[-2:] == [
        "attempt.running",
        "run.running",
    ]


def test_a_missing_run_or_attempt_is_named(repo: Repository) -> None:
    with pytest.raises(NotFound):
        repo.advance("nope", 1, [RunChange("queue")], actor=SYSTEM, at_ms=T0)
    version = run_in(repo, RUN, "dispatching")
    with pytest.raises(NotFound):
        repo.advance(RUN, version, [AttemptChange("nope", "start")], actor=SYSTEM, at_ms=T0)


def test_an_unknown_actor_is_refused_before_anything_is_written(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "created")
    before = snapshot()
    with pytest.raises(InvalidField):
        repo.advance(RUN, version, [RunChange("queue")], actor=Actor("robot"), at_ms=T0)
    with pytest.raises(InvalidField):
        repo.append_event(RUN, version, "run.reconciled", actor=Actor("robot"), at_ms=T0)
    assert snapshot() == before


def test_a_stale_version_is_a_conflict_and_moves_nothing(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "queued")
    before = snapshot()
    with pytest.raises(Conflict):
        repo.advance(RUN, version - 1, [RunChange("dispatch")], actor=SYSTEM, at_ms=T0)
    assert snapshot() == before


def test_an_expectation_that_no_longer_holds_is_a_conflict(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "starting")
    before = snapshot()
    with pytest.raises(Conflict):
        repo.advance(
            RUN,
            version,
            [AttemptChange(ATT, "run")],
            actor=SYSTEM,
            at_ms=T0,
            expect=Expect(attempts={ATT: {"status": "claimed"}}),
        )
    with pytest.raises(Conflict):
        repo.advance(
            RUN,
            version,
            [RunChange("start")],
            actor=SYSTEM,
            at_ms=T0,
            expect=Expect(run={"status": "running"}),
        )
    assert snapshot() == before


# --- two writers ----------------------------------------------------------------------------


def test_two_concurrent_transitions_on_one_version_from_two_connections_one_wins(
    db_path: Path, repo: Repository, reader: Repository
) -> None:
    version = run_in(repo, RUN, "running")
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def writer(name: str, trigger: str) -> None:
        conn = connect(str(db_path))
        try:
            barrier.wait()
            try:
                outcomes[name] = Repository(conn).advance(
                    RUN, version, [RunChange(trigger)], actor=SYSTEM, at_ms=T0 + 1
                )
            except Exception as exc:
                outcomes[name] = exc
        finally:
            conn.close()

    threads = [
        threading.Thread(target=writer, args=("cancel", "cancel")),
        threading.Thread(target=writer, args=("succeed", "succeed")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    conflicts = [n for n, o in outcomes.items() if isinstance(o, Conflict)]
    winners = [n for n, o in outcomes.items() if not isinstance(o, Exception)]
    assert len(conflicts) == 1 and len(winners) == 1, outcomes
    run = reader.get_run(RUN)
    assert run is not None
    winner = {"cancel": "cancelled", "succeed": "succeeded"}[winners[0]]
    assert (run.status, run.version, run.event_sequence) == (winner, version + 1, version + 1)
    assert events(reader)[-1] == f"run.{winner}"
    assert len(reader.events_of(RUN)) == version + 1


def test_the_loser_of_a_sequential_race_gets_a_conflict_not_a_second_edge(
    db_path: Path, repo: Repository, reader: Repository
) -> None:
    version = run_in(repo, RUN, "running")
    other = connect(str(db_path))
    try:
        Repository(other).advance(RUN, version, [RunChange("fail")], actor=SYSTEM, at_ms=T0)
        with pytest.raises(Conflict):
            repo.advance(RUN, version, [RunChange("succeed")], actor=SYSTEM, at_ms=T0)
    finally:
        other.close()
    assert events(reader)[-1] == "run.failed" and len(events(reader)) == version + 1


# --- failures roll everything back -----------------------------------------------------------


def test_a_failed_run_update_leaves_no_orphan_event_and_no_attempt_change(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    before = snapshot()
    refuse(repo, "refuse_run_update", "UPDATE ON main.Runs", "run update refused")
    with pytest.raises(sqlite3.IntegrityError, match="run update refused"):
        repo.advance(RUN, version, [AttemptChange(ATT, "succeed")], actor=SYSTEM, at_ms=T0)
    with pytest.raises(sqlite3.IntegrityError, match="run update refused"):
        repo.advance(RUN, version, [RunChange("start")], actor=SYSTEM, at_ms=T0)
    with pytest.raises(sqlite3.IntegrityError, match="run update refused"):
        repo.append_event(RUN, version, "run.reconciled", actor=RECONCILER, at_ms=T0)
    assert snapshot() == before
    assert not repo.conn.in_transaction


def test_a_failed_event_append_on_a_dedupe_collision_leaves_the_run_unchanged(
    repo: Repository, reader: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "running")
    version = repo.advance(
        RUN,
        version,
        [RunChange("await_approval", dedupe_key="approval:1")],
        actor=SYSTEM,
        at_ms=T0,
    ).version
    before = snapshot()
    with pytest.raises(DuplicateEvent) as raised:
        repo.advance(
            RUN, version, [RunChange("start", dedupe_key="approval:1")], actor=SYSTEM, at_ms=T0
        )
    assert raised.value.dedupe_key == "approval:1"
    assert snapshot() == before
    run = reader.get_run(RUN)
    assert run is not None and (run.status, run.version) == ("waiting_approval", version)


def test_a_failed_event_append_on_a_check_failure_leaves_run_and_attempt_unchanged(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    before = snapshot()
    refuse(repo, "refuse_event", "INSERT ON main.RunEvents", "event refused")
    with pytest.raises(sqlite3.IntegrityError, match="event refused"):
        repo.advance(RUN, version, [AttemptChange(ATT, "fail")], actor=SYSTEM, at_ms=T0)
    with pytest.raises(sqlite3.IntegrityError, match="event refused"):
        repo.advance(RUN, version, [RunChange("start")], actor=SYSTEM, at_ms=T0)
    repo.conn.execute("DROP TRIGGER temp.refuse_event")
    # A payload that is not a JSON object breaks RunEvents' CHECK: the whole advance goes.
    with pytest.raises((sqlite3.IntegrityError, TypeError, ValueError)):
        repo.advance(
            RUN,
            version,
            [RunChange("start", payload={"bad": float("nan")})],
            actor=SYSTEM,
            at_ms=T0,
        )
    assert snapshot() == before


def test_a_later_change_failing_rolls_back_the_earlier_changes_of_the_same_advance(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    before = snapshot()
    with pytest.raises(IllegalTransition):
        repo.advance(
            RUN,
            version,
            [AttemptChange(ATT, "succeed"), RunChange("succeed")],
            actor=SYSTEM,
            at_ms=T0,
        )  # the Run is dispatching: dispatching -> succeeded is not an edge
    assert snapshot() == before


# --- completions ------------------------------------------------------------------------------


def test_a_duplicated_completion_produces_one_terminal(
    repo: Repository, reader: Repository
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    version = repo.advance(RUN, version, [RunChange("start")], actor=SYSTEM, at_ms=T0).version
    repo.advance(RUN, version, exit_0(version), actor=EXECUTOR, at_ms=T0 + 1)
    # The same callback delivered again, with the version it saw: a conflict.
    with pytest.raises(Conflict):
        repo.advance(RUN, version, exit_0(version), actor=EXECUTOR, at_ms=T0 + 2)
    # Re-read and retried: the Run is terminal, so its Attempt is frozen (and terminal too).
    fresh = reader.get_run(RUN)
    assert fresh is not None
    with pytest.raises(Conflict):
        repo.advance(RUN, fresh.version, exit_0(fresh.version), actor=EXECUTOR, at_ms=T0 + 2)
    with pytest.raises(Conflict):
        repo.advance(RUN, fresh.version, exit_0(fresh.version)[:1], actor=EXECUTOR, at_ms=T0 + 2)
    # What a late callback may do: add `attempt.late_callback_ignored`, nothing else.
    repo.append_event(
        RUN,
        fresh.version,
        "attempt.late_callback_ignored",
        actor=EXECUTOR,
        at_ms=T0 + 2,
        attempt_id=ATT,
        payload={"callback_sequence": 1},
        dedupe_key=f"attempt.late_callback_ignored:{ATT}:1",
    )
    assert events(reader, "attempt.succeeded") == ["attempt.succeeded"]
    assert events(reader, "run.succeeded") == ["run.succeeded"]
    assert events(reader)[-1] == "attempt.late_callback_ignored"
    att = reader.get_attempt(ATT)
    run = reader.get_run(RUN)
    assert att is not None and run is not None
    assert (att.status, att.callback_sequence, run.status) == ("succeeded", 1, "succeeded")
    assert run.version == run.event_sequence == len(reader.events_of(RUN))


def test_a_duplicated_attempt_completion_on_a_live_run_is_refused_by_the_table(
    repo: Repository, reader: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    version = repo.advance(RUN, version, exit_0(version)[:1], actor=EXECUTOR, at_ms=T0).version
    before = snapshot()
    with pytest.raises(IllegalTransition) as raised:
        repo.advance(RUN, version, exit_0(version)[:1], actor=EXECUTOR, at_ms=T0 + 1)
    assert (raised.value.state, raised.value.event) == ("succeeded", "succeed")
    assert snapshot() == before
    assert events(reader, "attempt.succeeded") == ["attempt.succeeded"]


@pytest.mark.parametrize("first", ["cancel", "exit_0"])
def test_cancel_racing_exit_0_the_committed_winner_stands_and_the_late_one_only_appends(
    db_path: Path, repo: Repository, reader: Repository, first: str
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    version = repo.advance(RUN, version, [RunChange("start")], actor=SYSTEM, at_ms=T0).version
    user = connect(str(db_path))
    try:
        users = Repository(user)
        plays = {
            "cancel": (users, cancel(), Actor("user", "u1")),
            "exit_0": (repo, exit_0(version), EXECUTOR),
        }
        late = "exit_0" if first == "cancel" else "cancel"
        win_repo, win_changes, win_actor = plays[first]
        win_repo.advance(RUN, version, win_changes, actor=win_actor, at_ms=T0 + 5)
        late_repo, late_changes, late_actor = plays[late]
        with pytest.raises(Conflict):
            late_repo.advance(RUN, version, late_changes, actor=late_actor, at_ms=T0 + 6)
        # The late one re-reads, sees a terminal Attempt, and only records that it came.
        seen = late_repo.get_run(RUN)
        att = late_repo.get_attempt(ATT)
        assert seen is not None and att is not None and att.status in {"succeeded", "cancelled"}
        late_repo.append_event(
            RUN,
            seen.version,
            "attempt.late_callback_ignored",
            actor=late_actor,
            at_ms=T0 + 6,
            attempt_id=ATT,
            payload={"ignored": late},
        )
    finally:
        user.close()
    expected = "cancelled" if first == "cancel" else "succeeded"
    run, att = run_and_attempt(reader)
    assert (run.status, att.status) == (expected, expected)
    terminal = [t for t in events(reader) if t.split(".")[1] in {"succeeded", "cancelled"}]
    assert terminal == [f"attempt.{expected}", f"run.{expected}"]
    assert events(reader)[-1] == "attempt.late_callback_ignored"
    assert run.version == run.event_sequence == len(reader.events_of(RUN))


# --- busy -------------------------------------------------------------------------------------


def queued_elsewhere(db_path: Path) -> int:
    """A queued Run written on a connection of its own, closed again; the Run's version."""
    setup = connect(str(db_path))
    try:
        return run_in(Repository(setup), RUN, "queued")
    finally:
        setup.close()


@contextlib.contextmanager
def write_locked(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the write lock until it lets go (or the block ends)."""
    holder = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield holder
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()


def test_a_busy_database_is_retried_a_bounded_number_of_times_and_appends_nothing(
    db_path: Path, snapshot: Callable[[], object]
) -> None:
    from storage._connection import BUSY_TRIES

    version = queued_elsewhere(db_path)
    before = snapshot()
    conn = connect(str(db_path), busy_timeout_s=0.01)
    begins: list[str] = []
    conn.set_trace_callback(lambda s: begins.append(s) if s == "BEGIN IMMEDIATE" else None)
    with write_locked(db_path):
        started = time.monotonic()
        with pytest.raises(Busy) as raised:
            Repository(conn).advance(RUN, version, [RunChange("dispatch")], actor=SYSTEM, at_ms=T0)
        assert time.monotonic() - started < 5
    assert raised.value.tries == BUSY_TRIES
    assert len(begins) == BUSY_TRIES
    assert not conn.in_transaction
    conn.close()
    assert snapshot() == before


def test_a_busy_database_that_frees_up_is_written_once_never_twice(
    db_path: Path, reader: Repository
) -> None:
    version = queued_elsewhere(db_path)
    conn = connect(str(db_path), busy_timeout_s=0.01)
    begins: list[str] = []
    with write_locked(db_path) as holder:

        def traced(statement: str) -> None:
            if statement == "BEGIN IMMEDIATE":
                begins.append(statement)
                if len(begins) == 2:
                    # The other writer lets go just as the second try starts: no timing luck.
                    holder.execute("ROLLBACK")

        conn.set_trace_callback(traced)
        try:
            done = Repository(conn).advance(
                RUN,
                version,
                [RunChange("dispatch", dedupe_key="dispatch:1")],
                actor=SYSTEM,
                at_ms=T0,
            )
        finally:
            conn.close()
    assert len(begins) == 2
    assert done.version == version + 1
    assert events(reader, "run.dispatching") == ["run.dispatching"]
    run = reader.get_run(RUN)
    assert run is not None and run.version == run.event_sequence == len(reader.events_of(RUN))


def test_a_conflict_is_never_retried(db_path: Path, repo: Repository) -> None:
    version = run_in(repo, RUN, "queued")
    begins: list[str] = []
    repo.conn.set_trace_callback(lambda s: begins.append(s) if s == "BEGIN IMMEDIATE" else None)
    with pytest.raises(Conflict):
        repo.advance(RUN, version + 7, [RunChange("dispatch")], actor=SYSTEM, at_ms=T0)
    assert begins == ["BEGIN IMMEDIATE"]


# --- field rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "change", "why"),
    [
        ("running", RunChange("fail", set={"error_code": "E" * 129}), "128"),
        ("running", RunChange("fail", set={"error_summary": "s" * 1025}), "1024"),
        ("running", RunChange("succeed", set={"error_code": "E_NOPE"}), "error fields"),
        ("created", RunChange("queue", set={"error_summary": "why"}), "error fields"),
        ("running", RunChange("fail", set={"status": "succeeded"}), "cannot be set"),
        ("running", RunChange("fail", set={"version": 99}), "cannot be set"),
    ],
)
def test_run_field_rules_are_enforced_and_move_nothing(
    repo: Repository, snapshot: Callable[[], object], source: str, change: RunChange, why: str
) -> None:
    version = run_in(repo, RUN, source)
    before = snapshot()
    with pytest.raises(InvalidField, match=why):
        repo.advance(RUN, version, [change], actor=SYSTEM, at_ms=T0 + 1)
    assert snapshot() == before


@pytest.mark.parametrize(
    ("source", "trigger", "sets", "why"),
    [
        ("running", "fail", {"error_code": "E" * 129}, "128"),
        ("running", "succeed", {"error_code": "E_X"}, "error fields"),
        ("starting", "run", {"error_summary": "x"}, "error fields"),
        ("starting", "run", {"callback_sequence": 1}, "callback_sequence"),
        ("running", "succeed", {"callback_sequence": 2}, "callback_sequence"),
        ("running", "succeed", {"callback_sequence": 0}, "callback_sequence"),
        ("running", "succeed", {"status": "failed"}, "cannot be set"),
    ],
)
def test_attempt_field_rules_are_enforced_and_move_nothing(
    repo: Repository,
    snapshot: Callable[[], object],
    source: str,
    trigger: str,
    sets: dict[str, object],
    why: str,
) -> None:
    version = attempt_in(repo, RUN, ATT, source)
    before = snapshot()
    with pytest.raises(InvalidField, match=why):
        repo.advance(
            RUN, version, [AttemptChange(ATT, trigger, set=sets)], actor=SYSTEM, at_ms=T0 + 1
        )
    assert snapshot() == before


def test_error_fields_are_accepted_on_every_failure_target(
    repo: Repository, reader: Repository
) -> None:
    version = run_in(repo, RUN, "running")
    repo.advance(
        RUN,
        version,
        [RunChange("mark_lost", set={"error_code": "E" * 128, "error_summary": "s" * 1024})],
        actor=RECONCILER,
        at_ms=T0 + 1,
    )
    run = reader.get_run(RUN)
    assert run is not None and run.error_code == "E" * 128 and run.status == "lost"


def test_at_ms_may_not_be_earlier_than_created_or_started(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "starting", at_ms=T0)
    version = repo.advance(
        RUN,
        version,
        [AttemptChange(ATT, "run", set={"started_at_ms": T0 + 100})],
        actor=SYSTEM,
        at_ms=T0 + 100,
    ).version
    before = snapshot()
    with pytest.raises(InvalidField):
        repo.advance(RUN, version, [RunChange("start")], actor=SYSTEM, at_ms=T0 - 1)
    with pytest.raises(InvalidField):
        repo.advance(RUN, version, [AttemptChange(ATT, "fail")], actor=SYSTEM, at_ms=T0 + 50)
    with pytest.raises(InvalidField):
        repo.create_attempt(
            run_id=RUN, attempt_id="a-early", expected_version=version, at_ms=T0 - 1
        )
    with pytest.raises(InvalidField):
        repo.append_event(RUN, version, "run.reconciled", actor=RECONCILER, at_ms=T0 - 1)
    assert snapshot() == before


def test_a_terminal_run_takes_no_new_attempt(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "cancelled")
    before = snapshot()
    with pytest.raises(InvalidField):
        repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0)
    assert snapshot() == before


# --- edges drive commits ----------------------------------------------------------------------

TRUSTED = PrimaryFacts(run_status="running", first_receipt="trusted")


def test_a_committed_edge_moves_the_database_and_then_the_in_memory_model(
    repo: Repository, reader: Repository
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    with (
        attached(run_machine(), "dispatching") as run_model,
        attached(attempt_machine(), "running") as att_model,
    ):
        done = repo.fire(
            att_model,
            RUN,
            version,
            AttemptChange(ATT, "succeed_by_receipt", evidence=TRUSTED),
            actor=RECONCILER,
            at_ms=T0 + 1,
        )
        assert att_model.state == "succeeded"
        done = repo.fire(
            run_model,
            RUN,
            done.version,
            RunChange("start_by_receipt", evidence=TRUSTED),
            actor=RECONCILER,
            at_ms=T0 + 1,
        )
        assert run_model.state == "running"
    run, att = run_and_attempt(reader)
    assert (run.status, att.status, run.version) == ("running", "succeeded", done.version)


def test_a_refused_guard_moves_neither_the_database_nor_the_model(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    with attached(attempt_machine(), "running") as model:
        before = snapshot()
        refused = PrimaryFacts(run_status="dispatching", first_receipt="missing")
        with pytest.raises(GuardRefused) as raised:
            repo.fire(
                model,
                RUN,
                version,
                AttemptChange(ATT, "succeed_by_receipt", evidence=refused),
                actor=RECONCILER,
                at_ms=T0 + 1,
            )
        assert (raised.value.state, raised.value.event) == ("running", "succeed_by_receipt")
        assert model.state == "running"
    assert snapshot() == before


def test_a_failed_commit_moves_neither_the_database_nor_the_model(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    with attached(attempt_machine(), "running") as model:
        before = snapshot()
        refuse(repo, "refuse_event", "INSERT ON main.RunEvents", "event refused")
        with pytest.raises(sqlite3.IntegrityError):
            repo.fire(
                model,
                RUN,
                version,
                AttemptChange(ATT, "succeed_by_receipt", evidence=TRUSTED),
                actor=RECONCILER,
                at_ms=T0 + 1,
            )
        assert model.state == "running"
    assert snapshot() == before


def fire_refused(
    repo: Repository,
    snapshot: Callable[[], object],
    machine: Lifecycle,
    state: str,
    version: int,
    change: Change,
    expect: Expect | None = None,
) -> None:
    """``repo.fire`` on a model in ``state`` is a Conflict that moves neither the database nor
    the model."""
    with attached(machine, state) as model:
        before = snapshot()
        with pytest.raises(Conflict):
            repo.fire(model, RUN, version, change, actor=SYSTEM, at_ms=T0, expect=expect)
        assert model.state == state
    assert snapshot() == before


def test_a_model_out_of_step_with_the_database_is_a_conflict_and_stays_put(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "dispatching")
    # the database says dispatching
    fire_refused(repo, snapshot, run_machine(), "running", version, RunChange("succeed"))


def test_an_attempt_model_out_of_step_with_the_database_is_a_conflict_and_stays_put(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "starting")
    # the database says starting
    fire_refused(repo, snapshot, attempt_machine(), "running", version, AttemptChange(ATT, "fail"))


def test_an_attempt_edge_is_planned_and_fired_on_the_attempt_machine(
    repo: Repository, reader: Repository
) -> None:
    version = attempt_in(repo, RUN, ATT, "starting")
    with attached(attempt_machine(), "starting") as model:  # a state no Run has
        change = AttemptChange(ATT, "run", set={"started_at_ms": T0 + 1})
        done = repo.fire(model, RUN, version, change, actor=SYSTEM, at_ms=T0 + 1)
        assert model.state == "running"
    assert run_and_attempt(reader)[1].status == "running" and done.version == version + 1


@pytest.mark.parametrize(
    "expect",
    [Expect(attempts={ATT: {"pid": 4242}}), Expect(run={"status": "running"})],
    ids=["the Attempt's pid", "the Run's status"],
)
def test_a_fired_attempt_edge_re_checks_what_its_caller_expected_and_stays_put(
    repo: Repository, snapshot: Callable[[], object], expect: Expect
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")  # pid None, the Run dispatching
    change = AttemptChange(ATT, "fail")
    fire_refused(repo, snapshot, attempt_machine(), "running", version, change, expect)


def test_a_fired_run_edge_re_checks_what_its_caller_expected_of_an_attempt_and_stays_put(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    expect = Expect(attempts={ATT: {"status": "starting"}})
    fire_refused(repo, snapshot, run_machine(), "dispatching", version, RunChange("start"), expect)


def test_a_busy_failure_moves_neither_the_database_nor_the_model(
    db_path: Path, snapshot: Callable[[], object]
) -> None:
    version = queued_elsewhere(db_path)
    conn = connect(str(db_path), busy_timeout_s=0.005)
    with attached(run_machine(), "queued") as model:
        before = snapshot()
        try:
            with write_locked(db_path), pytest.raises(Busy):
                Repository(conn).fire(
                    model, RUN, version, RunChange("dispatch"), actor=SYSTEM, at_ms=T0
                )
            assert model.state == "queued"
        finally:
            conn.close()
    assert snapshot() == before


def test_every_event_carries_a_dedupe_key_unique_within_its_run(
    repo: Repository, reader: Repository
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    repo.append_event(
        RUN, version, "attempt.late_callback_ignored", actor=EXECUTOR, at_ms=T0, attempt_id=ATT
    )
    keys = [e.dedupe_key for e in reader.events_of(RUN)]
    assert all(keys) and len(set(keys)) == len(keys)


def test_an_expectation_on_a_field_qlfsm_does_not_read_is_refused(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "queued")
    before = snapshot()
    with pytest.raises(InvalidField):
        repo.advance(
            RUN,
            version,
            [RunChange("dispatch")],
            actor=SYSTEM,
            at_ms=T0,
            expect=Expect(run={"no_such_column": 1}),
        )
    assert snapshot() == before


def test_a_late_event_names_an_attempt_of_its_own_run_only(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    other = "019f70c0-0000-7000-8000-0000000000ff"
    repo.create_run(run_id=other, at_ms=T0)
    before = snapshot()
    with pytest.raises(NotFound):
        repo.append_event(
            other, 1, "attempt.late_callback_ignored", actor=EXECUTOR, at_ms=T0, attempt_id=ATT
        )
    assert snapshot() == before
    assert version > 1


@pytest.mark.parametrize(
    ("event_type", "attempt_id"),
    [
        ("run.succeeded", None),
        ("attempt.failed", ATT),
        ("run.whatever", None),
        ("attempt.late_callback_ignored", None),
    ],
)
def test_append_event_writes_only_the_non_moving_events_of_spec_01(
    repo: Repository, snapshot: Callable[[], object], event_type: str, attempt_id: str | None
) -> None:
    version = attempt_in(repo, RUN, ATT, "running")
    before = snapshot()
    with pytest.raises(InvalidField):
        repo.append_event(RUN, version, event_type, actor=EXECUTOR, at_ms=T0, attempt_id=attempt_id)
    assert snapshot() == before
