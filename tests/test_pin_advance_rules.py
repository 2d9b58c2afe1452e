"""The rules of one advance (`storage.advance_read`, spec 01) in their exact words: an Attempt
the rows read do not hold, an Attempt of a terminal Run, a column an Attempt edge may not set,
and an Attempt started earlier in the same change set. Each is seen on a real SQLite file and
read back through a second connection: nothing of a refused change set is written."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import (
    Actor,
    AttemptChange,
    Conflict,
    InvalidField,
    NotFound,
    Repository,
    RunChange,
    advance_read,
    connect,
    in_transaction,
    init_schema,
)

T0 = 1_700_000_000_000
SYSTEM = Actor("system")


def _dispatched(path: Path) -> tuple[sqlite3.Connection, int]:
    """A `dispatching` Run `r1` with a `claimed` Attempt `a1`, created at T0."""
    conn = connect(str(path), create=True)
    init_schema(conn, path=str(path))
    repo = Repository(conn)
    v = repo.create_run(run_id="r1", at_ms=T0).version
    for trigger in ("queue", "dispatch"):
        v = repo.advance("r1", v, [RunChange(trigger)], actor=SYSTEM, at_ms=T0).version
    v = repo.create_attempt(run_id="r1", attempt_id="a1", expected_version=v, at_ms=T0).version
    return conn, v


@pytest.fixture
def dispatched(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection, int]]:
    """The file of `_dispatched`, a connection to it (closed after the test) and the version."""
    path = tmp_path / "ql.db"
    conn, v = _dispatched(path)
    with contextlib.closing(conn):
        yield path, conn, v


def _advance(
    conn: sqlite3.Connection, version: int, changes: list[AttemptChange | RunChange], at_ms: int
) -> None:
    repo = Repository(conn)
    run, attempts = repo.get_run("r1"), repo.attempts_of("r1")
    in_transaction(
        conn,
        lambda c: advance_read(c, run, attempts, "r1", version, changes, actor=SYSTEM, at_ms=at_ms),
    )


def _unchanged(path: Path, version: int) -> None:
    other = sqlite3.connect(path)
    try:
        assert other.execute("SELECT status, version FROM Runs").fetchall() == [
            ("dispatching", version)
        ]
        assert other.execute("SELECT status, started_at_ms FROM RunAttempts").fetchall() == [
            ("claimed", None)
        ]
    finally:
        other.close()


def test_an_attempt_the_rows_read_do_not_hold_is_not_found_by_its_id(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    with pytest.raises(NotFound) as missing:
        _advance(conn, v, [AttemptChange("a-elsewhere", "start")], T0 + 1)
    assert str(missing.value) == "attempt 'a-elsewhere' not found"
    assert (missing.value.what, missing.value.ident) == ("attempt", "a-elsewhere")
    _unchanged(path, v)


def test_an_attempt_of_a_run_made_terminal_earlier_in_the_change_set_is_a_named_conflict(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    with pytest.raises(Conflict) as frozen:
        _advance(conn, v, [RunChange("cancel"), AttemptChange("a1", "cancel")], T0 + 1)
    assert str(frozen.value) == (
        "conflict: run r1 is no longer non-terminal (its attempts are frozen); "
        "re-read and decide again"
    )
    _unchanged(path, v)


def test_a_column_an_attempt_edge_may_not_set_is_refused_naming_the_attempt(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    with pytest.raises(InvalidField) as bad:
        _advance(conn, v, [AttemptChange("a1", "start", set={"run_id": "r2"})], T0 + 1)
    assert str(bad.value) == "attempt columns ['run_id'] cannot be set along an edge"
    _unchanged(path, v)


def test_an_attempt_started_by_an_earlier_edge_of_the_change_set_bounds_the_next_edge_s_time(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    # The first edge sets the start after the change set's time: the second edge's time is
    # checked against that start, not against the start the row had before the change set.
    path, conn, v = dispatched
    with pytest.raises(InvalidField) as early:
        _advance(
            conn,
            v,
            [
                AttemptChange("a1", "start", set={"started_at_ms": T0 + 100}),
                AttemptChange("a1", "run"),
            ],
            T0 + 50,
        )
    assert str(early.value) == (
        f"at_ms {T0 + 50} is earlier than the attempt's created/started time"
    )
    _unchanged(path, v)


def test_a_callback_sequence_on_an_edge_that_is_not_terminal_is_refused_naming_the_next_one(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    with pytest.raises(InvalidField) as bad:
        _advance(conn, v, [AttemptChange("a1", "start", set={"callback_sequence": 1})], T0)
    assert str(bad.value) == (
        "callback_sequence is set only on a terminal attempt and must be the stored "
        "sequence + 1 (1)"
    )
    _unchanged(path, v)


def test_an_attempt_event_field_that_is_not_an_edge_field_is_refused_naming_the_choice(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    with pytest.raises(InvalidField) as bad:
        _advance(conn, v, [AttemptChange("a1", "start", event_fields=("pid", "exit_code"))], T0)
    assert str(bad.value) == (
        "attempt event fields ['pid'] are not edge fields; use some of "
        "['attempt', 'callback_sequence', 'error_code', 'exit_code']"
    )
    _unchanged(path, v)


def test_a_run_edge_earlier_than_the_run_s_start_is_refused(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    started = [RunChange("start", set={"started_at_ms": T0 + 100})]
    v = Repository(conn).advance("r1", v, started, actor=SYSTEM, at_ms=T0 + 100).version
    with pytest.raises(InvalidField) as early:
        _advance(conn, v, [RunChange("cancel")], T0 + 50)
    assert str(early.value) == f"at_ms {T0 + 50} is earlier than the run's created/started time"
    with contextlib.closing(sqlite3.connect(path)) as other:
        assert other.execute("SELECT status, version FROM Runs").fetchall() == [("running", v)]


def test_a_run_started_by_an_earlier_edge_of_the_change_set_bounds_the_next_edge_s_time(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    with pytest.raises(InvalidField) as early:
        _advance(
            conn,
            v,
            [RunChange("start", set={"started_at_ms": T0 + 100}), RunChange("cancel")],
            T0 + 50,
        )
    assert str(early.value) == f"at_ms {T0 + 50} is earlier than the run's created/started time"
    _unchanged(path, v)


def test_a_run_edge_naming_an_attempt_the_rows_read_do_not_hold_is_not_found_by_its_id(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    path, conn, v = dispatched
    with pytest.raises(NotFound) as missing:
        _advance(conn, v, [RunChange("cancel", attempt_id="a-elsewhere")], T0 + 1)
    assert str(missing.value) == "attempt 'a-elsewhere' not found"
    assert (missing.value.what, missing.value.ident) == ("attempt", "a-elsewhere")
    _unchanged(path, v)


def test_an_advance_answers_its_run_its_new_version_and_its_steps(
    dispatched: tuple[Path, sqlite3.Connection, int],
) -> None:
    _, conn, v = dispatched
    repo = Repository(conn)
    run, attempts = repo.get_run("r1"), repo.attempts_of("r1")
    done = in_transaction(
        conn,
        lambda c: advance_read(
            c, run, attempts, "r1", v, [AttemptChange("a1", "start")], actor=SYSTEM, at_ms=T0
        ),
    )
    assert (done.run_id, done.version, len(done.steps), len(done.events)) == ("r1", v + 1, 1, 1)
    assert (done.steps[0].source, done.steps[0].dest) == ("claimed", "starting")
