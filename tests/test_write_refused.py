"""A write SQLite refuses with an error (a constraint that fails, or another application's
trigger ending in `RAISE(ABORT, ...)`: QingLong's schema has none) is the named
`storage.WriteRefused`: the whole transaction rolled back, the database's own words kept, and
one line naming the fix where a command meets it (spec 01 rule 5, spec 06). It stays an
`sqlite3.IntegrityError` for callers that catch that. Real SQLite files, read back through a
second connection; the real CLI."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from _primary_support import dead_handle, linux_only, make_candidate, qlfsm
from conftest import read_snapshot
from test_dropped_inserts import one_error_line

from storage import Repository, StorageError, WriteRefused, transaction

FROZEN = "events are frozen by the backup job"


def abort_inserts_into(path: Path, table: str, words: str = FROZEN) -> None:
    """Another application's trigger that refuses every INSERT into ``table`` with ``words``."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute(
            f'CREATE TRIGGER refuse_rows BEFORE INSERT ON "{table}" '
            f"BEGIN SELECT RAISE(ABORT, '{words}'); END"
        )
        conn.commit()
    finally:
        conn.close()


def says_the_write_was_refused(text: str, db_path: Path, words: str = FROZEN) -> None:
    assert text.startswith(f"the database refused a write ({words}): "), text
    assert "rolled back, nothing written" in text, text
    assert f"sqlite3 {db_path} .schema shows them" in text, text
    assert "drop that trigger or mend the row it names, and run again" in text, text


def test_a_statement_a_trigger_aborts_is_a_named_refusal_and_the_transaction_rolls_back(
    repo: Repository, db_path: Path
) -> None:
    abort_inserts_into(db_path, "RunEvents")
    before = read_snapshot(db_path)
    with pytest.raises(WriteRefused) as raised:
        repo.create_run(run_id="run-1", at_ms=1_700_000_000_000)
    assert isinstance(raised.value, sqlite3.IntegrityError)
    assert isinstance(raised.value, StorageError)
    assert raised.value.why == FROZEN
    assert isinstance(raised.value.__cause__, sqlite3.IntegrityError)
    assert not isinstance(raised.value.__cause__, WriteRefused)
    says_the_write_was_refused(str(raised.value), db_path)
    assert not repo.conn.in_transaction
    assert read_snapshot(db_path) == before  # the Run's INSERT went back with its event's


def test_a_constraint_that_fails_only_at_commit_is_a_named_refusal_and_rolls_back(
    repo: Repository, db_path: Path
) -> None:
    # A deferred foreign key is checked by COMMIT itself: the refusal named there too.
    before = read_snapshot(db_path)
    with pytest.raises(WriteRefused) as raised, transaction(repo.conn) as c:
        c.execute("PRAGMA defer_foreign_keys = ON")
        c.execute(
            'INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, '
            "actor_id, attempt_id, payload, created_at_ms) "
            "VALUES ('e-1', 'no-such-run', 1, 'run.created', 'k', 'system', NULL, NULL, '{}', 1)"
        )
    assert raised.value.why == "FOREIGN KEY constraint failed"
    says_the_write_was_refused(str(raised.value), db_path, "FOREIGN KEY constraint failed")
    assert not repo.conn.in_transaction
    assert read_snapshot(db_path) == before


def test_an_error_that_is_not_a_refusal_goes_on_as_it_is(repo: Repository) -> None:
    missing = pytest.raises(sqlite3.OperationalError, match="no such table")
    with missing, transaction(repo.conn) as c:
        c.execute('SELECT * FROM "NoSuchTable"')
    with pytest.raises(KeyError), transaction(repo.conn):
        raise KeyError("mine")
    assert not repo.conn.in_transaction


def test_a_refusal_raised_again_inside_a_transaction_is_not_wrapped_twice(
    repo: Repository, db_path: Path
) -> None:
    refusal = WriteRefused(str(db_path), FROZEN)
    with pytest.raises(WriteRefused) as raised, transaction(repo.conn):
        raise refusal
    assert raised.value is refusal


def test_a_refusal_on_a_plain_sqlite3_connection_points_at_sqlites_schema_command(
    tmp_path: Path,
) -> None:
    # The helper takes any sqlite3 connection; only qlfsm's own know their file's path.
    conn = sqlite3.connect(str(tmp_path / "plain.db"), isolation_level=None)
    try:
        conn.execute("CREATE TABLE t (n INTEGER CHECK (n > 0))")
        with pytest.raises(WriteRefused) as raised, transaction(conn) as c:
            c.execute("INSERT INTO t VALUES (0)")
        assert not conn.in_transaction
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)
    finally:
        conn.close()
    text = str(raised.value)
    assert raised.value.why == "CHECK constraint failed: n > 0"
    assert text.startswith("the database refused a write (CHECK constraint failed: n > 0): ")
    assert "(sqlite3's `.schema` shows them)" in text


def refused_candidate(repo: Repository, db_path: Path) -> object:
    """A dead local process's running Run (row 13 would mark it lost) in a database whose
    RunEvents another application's trigger refuses; the file's snapshot before anything."""
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    abort_inserts_into(db_path, "RunEvents")
    return read_snapshot(db_path)


@linux_only
def test_resolve_says_a_refused_write_in_one_line_and_writes_nothing(
    repo: Repository, db_path: Path
) -> None:
    before = refused_candidate(repo, db_path)
    done = qlfsm("resolve", "--db", str(db_path), "--run", "run-1", "--to", "lost", "--reason", "x")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    line = one_error_line(done.stderr)  # one line, no traceback
    says_the_write_was_refused(line.removeprefix("qlfsm: error: "), db_path)
    assert read_snapshot(db_path) == before


@linux_only
def test_reconcile_fails_the_candidate_at_row_14_naming_the_refusal_and_writes_nothing(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    before = refused_candidate(repo, db_path)
    root = tmp_path / "receipts"
    root.mkdir()
    done = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert done.returncode == 3, done.stderr
    [candidate] = json.loads(done.stdout)["candidates"]
    assert (candidate["row"], candidate["outcome"]) == ("14", "failed")
    refused = f"error:WriteRefused: the database refused a write ({FROZEN}): rolled back"
    assert candidate["reason"].startswith(refused), candidate
    assert read_snapshot(db_path) == before
