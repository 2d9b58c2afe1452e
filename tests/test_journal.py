"""The completion receipt journal (spec 02/03) on a real file, read back by a second connection."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _support import T0, attempt_in

from storage import (
    RegistrationConflict,
    Repository,
    connect,
    journal_get,
    journal_quarantine,
    journal_register,
    journal_resolve,
    transaction,
)

RUN, ATT = "run-j", "att-j"


@pytest.fixture
def ready(repo: Repository) -> Repository:
    attempt_in(repo, RUN, ATT, "claimed")
    return repo


def second(db_path: Path) -> sqlite3.Connection:
    return connect(str(db_path))


def test_register_is_part_of_the_callers_transaction(ready: Repository, db_path: Path) -> None:
    with pytest.raises(RuntimeError), transaction(ready.conn) as c:
        journal_register(c, ATT, RUN, T0)
        raise RuntimeError("the launcher failed before committing")
    other = second(db_path)
    try:
        assert journal_get(other, ATT) is None
        with transaction(ready.conn) as c:
            journal_register(c, ATT, RUN, T0)
            journal_register(c, ATT, RUN, T0)  # the very same registration changes nothing
        # One registered at another time conflicts (QingLong refuses it too) and changes nothing.
        with pytest.raises(RegistrationConflict, match="conflicts"), transaction(ready.conn) as c:
            journal_register(c, ATT, RUN, T0 + 9)
        row = journal_get(other, ATT)
        assert row is not None
        assert (row.state, row.registered_at_ms, row.updated_at_ms) == ("pending", T0, T0)
        assert (row.quarantine_ref, row.purge_after_ms) == (None, None)
    finally:
        other.close()


def test_quarantine_commits_its_intent_and_keeps_the_registration_time(
    ready: Repository, db_path: Path
) -> None:
    with transaction(ready.conn) as c:
        journal_register(c, ATT, RUN, T0)
    journal_quarantine(ready.conn, ATT, RUN, "quarantine/att-j.1", T0 + 10, T0 + 5)
    other = second(db_path)
    try:
        row = journal_get(other, ATT)
        assert row is not None
        assert (row.state, row.quarantine_ref, row.registered_at_ms, row.updated_at_ms) == (
            "quarantined",
            "quarantine/att-j.1",
            T0,
            T0 + 10,
        )
        # A purge time before the update would break the CHECK: it is raised to the update.
        assert row.purge_after_ms == T0 + 10
    finally:
        other.close()


def test_quarantine_without_a_registration_creates_the_row(ready: Repository) -> None:
    journal_quarantine(ready.conn, ATT, RUN, "q", T0, T0 + 1000)
    row = journal_get(ready.conn, ATT)
    assert row is not None and (row.state, row.purge_after_ms) == ("quarantined", T0 + 1000)


def test_resolve_deletes_a_pending_row_only(ready: Repository, db_path: Path) -> None:
    with transaction(ready.conn) as c:
        journal_register(c, ATT, RUN, T0)
    journal_resolve(ready.conn, ATT)
    assert journal_get(ready.conn, ATT) is None
    journal_quarantine(ready.conn, ATT, RUN, "q", T0, T0 + 1)
    journal_resolve(ready.conn, ATT)
    other = second(db_path)
    try:
        row = journal_get(other, ATT)
        assert row is not None and row.state == "quarantined"
    finally:
        other.close()
