"""The bounded retry of one transaction (``storage.in_transaction``, spec 01 "SQLITE_BUSY gets a
bounded retry") and its lock budget, against a real lock held by a second connection; the
rollback of a failed transaction and of a failed COMMIT; what counts as busy
(``storage.write_blocker``)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import Busy, LockBudget, connect, in_transaction, lock_budget, write_blocker


def a_database(path: Path) -> Path:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
    return path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def write(c: sqlite3.Connection) -> None:
    c.execute("INSERT INTO t VALUES (1)")


def test_an_unbudgeted_busy_write_is_retried_a_bounded_number_of_times_with_growing_pauses(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db")
    pauses: list[float] = []
    with (
        contextlib.closing(connect(str(path), busy_timeout_s=0)) as conn,
        locked(path),
        pytest.raises(Busy) as raised,
    ):
        in_transaction(conn, write, tries=3, backoff_s=0.01, sleep=pauses.append)
    assert pauses == [0.01, 0.02]
    assert raised.value.tries == 3
    assert 0 < raised.value.waited_s < 5  # what the tries took, not counting the fake pauses
    assert raised.value.path is None


def test_a_budgeted_busy_write_charges_every_try_and_pause_then_blocks_the_budget(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db")
    pauses: list[float] = []
    budget = LockBudget(1.0)
    with (
        contextlib.closing(connect(str(path), busy_timeout_s=0)) as conn,
        lock_budget(conn, budget),
        locked(path),
    ):
        with pytest.raises(Busy) as raised:
            in_transaction(conn, write, tries=3, backoff_s=0.01, sleep=pauses.append)
        assert pauses == [0.01, 0.02]
        assert budget.tries == 3 and budget.blocked is True
        assert budget.spent > 0.03  # both pauses and the three BEGINs
        assert (raised.value.tries, raised.value.waited_s) == (3, budget.spent)
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        with pytest.raises(Busy) as again:  # blocked: Busy at once, nothing tried
            in_transaction(conn, write, tries=3, backoff_s=0.01, sleep=pauses.append)
        assert seen == [] and pauses == [0.01, 0.02]
        assert (again.value.tries, again.value.waited_s) == (3, budget.spent)


def test_a_spent_budget_blocks_at_the_first_busy_try(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db")
    pauses: list[float] = []
    budget = LockBudget(0.0)
    with (
        contextlib.closing(connect(str(path), busy_timeout_s=0)) as conn,
        lock_budget(conn, budget),
        locked(path),
        pytest.raises(Busy) as raised,
    ):
        in_transaction(conn, write, tries=3, backoff_s=0.01, sleep=pauses.append)
    assert pauses == [] and budget.tries == 1 and budget.blocked is True
    assert (raised.value.tries, raised.value.waited_s) == (1, budget.spent)


def test_a_write_that_succeeds_charges_its_begin_to_the_budget(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db")
    budget = LockBudget(1.0)
    with contextlib.closing(connect(str(path))) as conn, lock_budget(conn, budget):
        in_transaction(conn, write)
        first = budget.spent
        in_transaction(conn, write)
    assert 0 < first < budget.spent < 1.0
    assert budget.tries == 0 and budget.blocked is False


def test_a_failed_transaction_and_a_failed_commit_are_rolled_back(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as setup:
        setup.execute("CREATE TABLE p (id INTEGER PRIMARY KEY)")
        setup.execute("CREATE TABLE c (p INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)")
    with contextlib.closing(connect(str(path))) as conn:
        in_transaction(conn, lambda c: None)  # the write pragmas (foreign keys on) applied
        seen: list[str] = []
        conn.set_trace_callback(seen.append)

        def fails(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO p VALUES (1)")
            raise LookupError("work failed")

        with pytest.raises(LookupError):
            in_transaction(conn, fails)
        assert seen[-1] == "ROLLBACK" and not conn.in_transaction
        seen.clear()
        # A deferred foreign key fails the COMMIT itself, which leaves the transaction open.
        with pytest.raises(sqlite3.IntegrityError):
            in_transaction(conn, lambda c: c.execute("INSERT INTO c VALUES (7)"))
        assert seen == ["BEGIN IMMEDIATE", "INSERT INTO c VALUES (7)", "COMMIT", "ROLLBACK"]
        assert not conn.in_transaction
        assert conn.execute("SELECT COUNT(*) FROM p").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM c").fetchone()[0] == 0


def coded(message: str, code: int | None) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    if code is not None:
        error.sqlite_errorcode = code
    return error


def test_busy_is_read_from_the_code_and_from_the_words_only_without_one() -> None:
    assert write_blocker(coded("anything", sqlite3.SQLITE_BUSY)) == "database_locked"
    assert write_blocker(coded("anything", sqlite3.SQLITE_LOCKED)) == "database_locked"
    assert write_blocker(coded("database is locked", sqlite3.SQLITE_ERROR)) is None
    assert write_blocker(coded("database is locked", None)) == "database_locked"
    assert write_blocker(coded("database is busy", None)) == "database_locked"
    assert write_blocker(coded("no such table: t", None)) is None
    assert write_blocker(sqlite3.DatabaseError("database is locked")) is None


def test_no_tries_means_nothing_is_tried(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db")
    ran: list[sqlite3.Connection] = []
    with contextlib.closing(connect(str(path))) as conn:
        with pytest.raises(Busy) as raised:
            in_transaction(conn, ran.append, tries=0)
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0
    assert ran == [] and raised.value.tries == 0
