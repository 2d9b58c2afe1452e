"""The statements of one write transaction (storage/_row_statements.py) in process: an INSERT a
trigger drops without an error is named in full (table, row, the run) and rolls the whole
write back; a compare-and-set UPDATE such a trigger drops is a conflict naming the row and what
was expected of it (spec 01: roll back, report it); and a dedupe key already in the Run's log is
refused with its words. Real SQLite
files, read back through a second connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from _support import SYSTEM, T0, attempt_in, drop_statements_on, run_in

from storage import (
    AttemptChange,
    Conflict,
    DuplicateEvent,
    Expect,
    NotFound,
    Repository,
    RowNotInserted,
    RunChange,
    WriteRefused,
    advance_read,
    transaction,
)

RUN = "019f70c0-0000-7000-8000-0000000000c1"
ATT = "019f70c0-0000-7000-8000-0000000000c2"


def dropped(table: str, what: str) -> str:
    return (
        f"an INSERT into {table} ({what}) changed no row (a trigger's RAISE(IGNORE)?): "
        f"rolled back, nothing written; drop that trigger (sqlite3 `.schema {table}` shows it) "
        "and run again"
    )


@pytest.mark.parametrize(
    ("table", "what"),
    [
        ("Runs", f"run {RUN}"),
        ("RunAttempts", f"attempt {ATT} of run {RUN}"),
        ("RunEvents", f"run.running of run {RUN}"),
    ],
)
def test_a_dropped_insert_is_named_in_full_and_nothing_is_written(
    repo: Repository,
    db_path: Path,
    snapshot: Callable[[], object],
    table: str,
    what: str,
) -> None:
    version = 0 if table == "Runs" else run_in(repo, RUN, "dispatching")
    drop_statements_on(db_path, table)
    before = snapshot()
    with pytest.raises(RowNotInserted) as raised:
        if table == "Runs":
            repo.create_run(run_id=RUN, at_ms=T0)
        elif table == "RunAttempts":
            repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0)
        else:
            repo.advance(RUN, version, [RunChange("start")], actor=SYSTEM, at_ms=T0)
    assert str(raised.value) == dropped(table, what)
    assert (raised.value.table, raised.value.what) == (table, what)
    assert not repo.conn.in_transaction
    assert snapshot() == before


def test_a_dedupe_key_already_in_the_runs_log_is_refused_with_its_words(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "queued")
    version = repo.append_event(
        RUN, version, "run.reconciled", actor=SYSTEM, at_ms=T0, dedupe_key="once"
    ).version
    before = snapshot()
    with pytest.raises(DuplicateEvent) as raised:
        repo.append_event(RUN, version, "run.reconciled", actor=SYSTEM, at_ms=T0, dedupe_key="once")
    assert str(raised.value) == "event with dedupe key 'once' already recorded for this run"
    assert (raised.value.run_id, raised.value.dedupe_key) == (RUN, "once")
    assert snapshot() == before


def test_a_runs_compare_and_set_that_changes_no_row_is_a_conflict_naming_the_run(
    repo: Repository, db_path: Path, snapshot: Callable[[], object]
) -> None:
    # spec 01: "a compare-and-set that changes no row is a conflict: roll back, report it". The
    # row was read in the same transaction, so only the database itself can make the UPDATE
    # change nothing: a trigger ending in RAISE(IGNORE).
    version = run_in(repo, RUN, "queued")
    drop_statements_on(db_path, "Runs", "UPDATE")
    before = snapshot()
    moves: list[Callable[[], object]] = [
        lambda: repo.advance(RUN, version, [RunChange("dispatch")], actor=SYSTEM, at_ms=T0),
        lambda: repo.append_event(RUN, version, "run.reconciled", actor=SYSTEM, at_ms=T0),
    ]
    for move in moves:
        with pytest.raises(Conflict) as raised:
            move()
        assert str(raised.value) == (
            f"conflict: run {RUN} is no longer at version {version} in queued; "
            "re-read and decide again"
        )
        assert (raised.value.what, raised.value.ident) == ("run", RUN)
        assert raised.value.expected == f"at version {version} in queued"
        assert not repo.conn.in_transaction
        assert snapshot() == before


def test_an_attempts_compare_and_set_that_changes_no_row_is_a_conflict_naming_the_attempt(
    repo: Repository, db_path: Path, snapshot: Callable[[], object]
) -> None:
    version = attempt_in(repo, RUN, ATT, "claimed")
    drop_statements_on(db_path, "RunAttempts", "UPDATE")
    before = snapshot()
    with pytest.raises(Conflict) as raised:
        repo.advance(RUN, version, [AttemptChange(ATT, "start")], actor=SYSTEM, at_ms=T0)
    assert str(raised.value) == (
        f"conflict: attempt {ATT} is no longer claimed at callback 0; re-read and decide again"
    )
    assert (raised.value.what, raised.value.ident) == ("attempt", ATT)
    assert raised.value.expected == "claimed at callback 0"
    assert not repo.conn.in_transaction
    assert snapshot() == before


@pytest.mark.parametrize(
    ("expect", "what", "ident", "expected"),
    [
        (Expect(run={"status": "running"}), "run", RUN, "status='running' (now 'dispatching')"),
        (
            Expect(attempts={ATT: {"status": "claimed"}}),
            "attempt",
            ATT,
            "status='claimed' (now 'starting')",
        ),
    ],
    ids=["the Run", "the Attempt"],
)
def test_an_expectation_that_no_longer_holds_names_the_row_and_the_field_it_found_moved(
    repo: Repository,
    snapshot: Callable[[], object],
    expect: Expect,
    what: str,
    ident: str,
    expected: str,
) -> None:
    version = attempt_in(repo, RUN, ATT, "starting")
    before = snapshot()
    with pytest.raises(Conflict) as raised:
        repo.advance(
            RUN, version, [AttemptChange(ATT, "run")], actor=SYSTEM, at_ms=T0, expect=expect
        )
    assert str(raised.value) == (
        f"conflict: {what} {ident} is no longer {expected}; re-read and decide again"
    )
    assert (raised.value.what, raised.value.ident, raised.value.expected) == (
        what,
        ident,
        expected,
    )
    assert snapshot() == before


def test_an_expectation_on_an_attempt_the_caller_did_not_read_is_not_found_by_its_id(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    # advance_read takes the rows as its caller read them (the ADR-0068 pass): an expectation
    # on an Attempt it did not hand over names that Attempt, and nothing is written.
    version = attempt_in(repo, RUN, ATT, "starting")
    run = repo.get_run(RUN)
    before = snapshot()
    with pytest.raises(NotFound) as raised, transaction(repo.conn) as c:
        advance_read(
            c,
            run,
            [],
            RUN,
            version,
            [RunChange("start")],
            actor=SYSTEM,
            at_ms=T0,
            expect=Expect(attempts={ATT: {"status": "starting"}}),
        )
    assert str(raised.value) == f"attempt {ATT!r} not found"
    assert (raised.value.what, raised.value.ident) == ("attempt", ATT)
    assert snapshot() == before


def test_an_event_insert_another_applications_trigger_aborts_is_not_taken_for_a_duplicate(
    repo: Repository, db_path: Path, snapshot: Callable[[], object]
) -> None:
    # Only the key found in the Run's log makes a duplicate, whatever SQLite's message says.
    version = run_in(repo, RUN, "queued")
    conn = sqlite3.connect(str(db_path))
    try:
        conn.execute(
            'CREATE TRIGGER closed BEFORE INSERT ON "RunEvents" '
            "BEGIN SELECT RAISE(ABORT, 'dedupe keys are closed here'); END"
        )
        conn.commit()
    finally:
        conn.close()
    before = snapshot()
    with pytest.raises(sqlite3.IntegrityError) as raised:
        repo.append_event(RUN, version, "run.reconciled", actor=SYSTEM, at_ms=T0, dedupe_key="k")
    assert not isinstance(raised.value, DuplicateEvent)
    assert isinstance(raised.value, WriteRefused)
    assert raised.value.why == "dedupe keys are closed here"
    assert str(raised.value).startswith("the database refused a write (dedupe keys are closed")
    assert not repo.conn.in_transaction
    assert snapshot() == before


def test_each_event_gets_its_own_time_ordered_id_as_written(
    repo: Repository, db_path: Path
) -> None:
    version = run_in(repo, RUN, "queued")
    done = repo.advance(
        RUN, version, [RunChange("dispatch"), RunChange("cancel")], actor=SYSTEM, at_ms=T0
    )
    ids = list(done.events)
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        stored = [
            row[0]
            for row in conn.execute(
                'SELECT id FROM "RunEvents" WHERE run_id = ? AND sequence > 1 ORDER BY sequence',
                (RUN,),
            )
        ]
    finally:
        conn.close()
    assert stored[-2:] == ids
    assert len(set(ids)) == 2
    assert all(isinstance(i, str) and len(i) == 36 and i[14] == "7" for i in ids)
