"""The receipt journal's writes (``storage._journal``, spec 03, D-16) on a real SQLite file:
the statements a registration costs, a row a trigger drops, the quarantine's "when it happened"
by every clock the database shows, and a withdrawal's answer (issue 28)."""

from __future__ import annotations

import sqlite3

import pytest
from _support import T0, attempt_in

from storage import (
    Conflict,
    RegistrationConflict,
    Repository,
    RowNotInserted,
    journal_get,
    journal_quarantine,
    journal_register,
    journal_withdraw_quarantine,
    transaction,
)

RUN, ATT = "run-p", "att-p"
IGNORE_INSERTS = (
    'CREATE TRIGGER drop_rows BEFORE INSERT ON "LocalCompletionReceiptJournal" '
    "BEGIN SELECT RAISE(IGNORE); END"
)


@pytest.fixture
def ready(repo: Repository) -> Repository:
    attempt_in(repo, RUN, ATT, "claimed")
    return repo


def test_a_fresh_registration_is_one_insert_and_nothing_more(ready: Repository) -> None:
    statements: list[str] = []
    with transaction(ready.conn) as c:
        c.set_trace_callback(statements.append)
        journal_register(c, ATT, RUN, T0)
        c.set_trace_callback(None)
    assert len(statements) == 1 and statements[0].startswith("INSERT")


def test_a_registration_that_conflicts_names_the_row_it_conflicts_with(
    ready: Repository,
) -> None:
    with transaction(ready.conn) as c:
        journal_register(c, ATT, RUN, T0)
    with pytest.raises(RegistrationConflict) as raised, transaction(ready.conn) as c:
        journal_register(c, ATT, "run-other", T0 + 5)
    conflict = raised.value
    assert isinstance(conflict, Conflict)
    assert (conflict.what, conflict.ident, conflict.expected) == (
        "receipt journal row of Attempt",
        ATT,
        "absent",
    )
    assert str(conflict) == (
        f"Attempt {ATT} already has a completion-receipt journal row (pending, run {RUN}, "
        f"registered at {T0} ms): a new registration conflicts with it; inspect the run "
        f"(`qlfsm inspect --run {RUN}`) and settle that row before launching"
    )


def test_a_registration_a_trigger_dropped_is_a_conflict_with_an_unknown_row(
    ready: Repository,
) -> None:
    ready.conn.execute(IGNORE_INSERTS)
    with pytest.raises(RegistrationConflict) as raised, transaction(ready.conn) as c:
        journal_register(c, ATT, RUN, T0)
    assert raised.value.row == (ATT, RUN, "unknown", None, None, T0, T0)
    assert str(raised.value).startswith(
        f"Attempt {ATT} already has a completion-receipt journal row (unknown, run {RUN}, "
        f"registered at {T0} ms)"
    )


def test_a_quarantine_a_trigger_dropped_stops_with_its_exact_message(ready: Repository) -> None:
    ready.conn.execute(IGNORE_INSERTS)
    with pytest.raises(RowNotInserted) as raised:
        journal_quarantine(ready.conn, ATT, RUN, "ref", T0, T0 + 1000)
    assert (raised.value.table, raised.value.what) == (
        "LocalCompletionReceiptJournal",
        f"quarantine of {ATT}",
    )
    assert journal_get(ready.conn, ATT) is None


def test_a_quarantine_counts_from_a_registration_made_by_a_clock_ahead_of_it(
    ready: Repository,
) -> None:
    with transaction(ready.conn) as c:
        journal_register(c, ATT, RUN, T0 + 100)
    happened = journal_quarantine(ready.conn, ATT, RUN, "ref", T0, T0 + 1000)
    assert happened == T0 + 100
    row = journal_get(ready.conn, ATT)
    assert row is not None
    assert (row.registered_at_ms, row.updated_at_ms, row.purge_after_ms) == (
        T0 + 100,
        T0 + 100,
        T0 + 1100,
    )


def test_a_second_quarantine_by_a_clock_behind_the_first_happened_no_earlier_than_it(
    ready: Repository,
) -> None:
    with transaction(ready.conn) as c:
        journal_register(c, ATT, RUN, T0)
    journal_quarantine(ready.conn, ATT, RUN, "first", T0 + 500, T0 + 1500)
    happened = journal_quarantine(ready.conn, ATT, RUN, "second", T0 + 10, T0 + 1010)
    assert happened == T0 + 500
    row = journal_get(ready.conn, ATT)
    assert row is not None and (row.quarantine_ref, row.purge_after_ms) == ("second", T0 + 1500)


def test_a_quarantine_of_a_run_the_database_does_not_hold_is_refused_by_its_foreign_key(
    ready: Repository,
) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        journal_quarantine(ready.conn, "att-x", "run-gone", "ref", T0, T0 + 7)
    assert journal_get(ready.conn, "att-x") is None


def test_a_quarantine_at_the_epoch_of_a_run_made_at_the_epoch_happened_at_zero(
    repo: Repository,
) -> None:
    attempt_in(repo, "run-e", "att-e", "claimed", at_ms=0)
    assert journal_quarantine(repo.conn, "att-e", "run-e", "ref", 0, 1000) == 0
    row = journal_get(repo.conn, "att-e")
    assert row is not None
    assert (row.registered_at_ms, row.updated_at_ms, row.purge_after_ms) == (0, 0, 1000)


def test_a_withdrawal_says_whether_the_row_still_named_its_quarantine(
    ready: Repository,
) -> None:
    journal_quarantine(ready.conn, ATT, RUN, "mine", T0, T0 + 1000)
    assert journal_withdraw_quarantine(ready.conn, ATT, "someone-elses", None) is False
    assert journal_get(ready.conn, ATT) is not None
    assert journal_withdraw_quarantine(ready.conn, ATT, "mine", None) is True
    assert journal_get(ready.conn, ATT) is None
