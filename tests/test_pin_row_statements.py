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
from _support import SYSTEM, T0, attempt_in, run_in

from storage import (
    AttemptChange,
    Conflict,
    DuplicateEvent,
    Repository,
    RowNotInserted,
    RunChange,
)

RUN = "019f70c0-0000-7000-8000-0000000000c1"
ATT = "019f70c0-0000-7000-8000-0000000000c2"


def drop_inserts_into(path: Path, table: str, statement: str = "INSERT") -> None:
    """Another application's trigger that silently drops every ``statement`` on ``table``."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute(
            f'CREATE TRIGGER drop_rows BEFORE {statement} ON "{table}" '
            "BEGIN SELECT RAISE(IGNORE); END"
        )
        conn.commit()
    finally:
        conn.close()


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
    drop_inserts_into(db_path, table)
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
    drop_inserts_into(db_path, "Runs", "UPDATE")
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
    drop_inserts_into(db_path, "RunAttempts", "UPDATE")
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
