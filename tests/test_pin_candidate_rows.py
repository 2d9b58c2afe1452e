"""Reading candidate rows whose values are not what the schema promises (``storage._candidates``,
spec 04 row 14, spec 05 row 12): each value's reading, the exact problem a failed candidate
carries and the stand-in that names it; and the one statement that reads a Run with its
Attempts and journal row (issue 28)."""

from __future__ import annotations

import pytest
from _support import T0, attempt_in

from storage import (
    BadRow,
    PrimaryCandidate,
    Repository,
    journal_quarantine,
    primary_candidates,
    run_with_attempts,
)
from storage._candidates import (
    BadText,
    _candidate,
    integer,
    lenient_text,
    optional_text,
    shown,
    text,
)


def problem(read: object) -> str:
    with pytest.raises(BadRow) as raised:
        read()  # type: ignore[operator]
    return str(raised.value)


def test_text_is_read_as_it_is_and_anything_else_is_named_with_its_kind() -> None:
    assert text("run-1", "Runs.id") == "run-1"
    assert problem(lambda: text(BadText(b"\xff"), "Runs.id")) == "Runs.id is not valid UTF-8 text"
    assert problem(lambda: text(None, "Runs.id")) == "Runs.id is NULL, not text"
    assert problem(lambda: text(b"\x01", "Runs.id")) == "Runs.id is a blob, not text"
    assert problem(lambda: text(1.5, "Runs.id")) == "Runs.id is a real number, not text"
    assert problem(lambda: text(7, "Runs.id")) == "Runs.id is int, not text"
    assert optional_text(None, "x") is None
    assert optional_text("a", "x") == "a"
    assert problem(lambda: optional_text(7, "Runs.owner")) == "Runs.owner is int, not text"


def test_an_integer_column_takes_integers_and_whole_reals_only() -> None:
    assert integer(5, "v") == 5
    whole = integer(3.0, "v")
    assert whole == 3 and type(whole) is int
    assert problem(lambda: integer(True, "v")) == "v is bool, not an integer"
    assert problem(lambda: integer(2.5, "v")) == "v is a real number, not an integer"
    assert problem(lambda: integer("7", "v")) == "v is text, not an integer"
    assert problem(lambda: integer(None, "v")) == "v is NULL, not an integer"
    assert problem(lambda: integer(BadText(b"\xff"), "v")) == (
        "v is text that is not valid UTF-8, not an integer"
    )


def test_a_value_is_shown_printably_whatever_it_is() -> None:
    assert shown("run-1") == "run-1"
    assert shown(BadText(b"run-\xff")) == "run-\\xff"
    assert shown(b"\x01\xab") == "x'01ab'"
    assert shown(None) == "None"
    assert shown(42) == "42"
    assert lenient_text("é".encode()) == "é"
    bad = lenient_text(b"\xff")
    assert isinstance(bad, BadText) and bytes(bad) == b"\xff"


def test_a_row_as_the_schema_says_is_a_candidate_without_a_problem() -> None:
    assert _candidate(("r", "running", 3, 1)) == PrimaryCandidate("r", "running", 3, 1, None)  # type: ignore[arg-type]
    assert _candidate(("r", "running", 3.0, 1)) == PrimaryCandidate("r", "running", 3, 1, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            (BadText(b"r\xff"), "running", 3, 1),
            ("r\\xff", "running", -1, 0, "Runs.id is not valid UTF-8 text"),
        ),
        (("r", BadText(b"\xff"), 3, 1), ("r", "", -1, 0, "Runs.status is not valid UTF-8 text")),
        (("r", None, 3, 1), ("r", "", -1, 0, "Runs.status is NULL, not text")),
        (("r", "running", "3", 1), ("r", "running", -1, 0, "Runs.version is text, not an integer")),
        (
            ("r", "running", 3, 1.5),
            ("r", "running", -1, 0, "the active Attempt count is a real number, not an integer"),
        ),
    ],
    ids=["id not UTF-8", "status not UTF-8", "status NULL", "version text", "count fraction"],
)
def test_a_row_that_cannot_be_read_is_one_failed_candidate_naming_the_column(
    row: tuple[object, ...], expected: tuple[object, ...]
) -> None:
    assert tuple(_candidate(row)) == expected  # type: ignore[arg-type]


def test_a_page_fetches_one_row_more_than_its_limit_to_know_whether_more_exist(
    repo: Repository,
) -> None:
    for n in range(3):
        attempt_in(repo, f"run-{n}", f"att-{n}", "running")
    statements: list[str] = []
    repo.conn.set_trace_callback(statements.append)
    page, more = primary_candidates(repo.conn, 2)
    repo.conn.set_trace_callback(None)
    assert [c.run_id for c in page] == ["run-0", "run-1"] and more is True
    assert statements[-1].endswith("LIMIT 3")
    assert primary_candidates(repo.conn, 3)[1] is False


def test_the_journal_row_read_with_a_run_is_its_latest_attempts_only(repo: Repository) -> None:
    attempt_in(repo, "run-j", "att-j", "running")
    run, attempts, journal = run_with_attempts(repo.conn, "run-j")
    assert run is not None and [a.id for a in attempts] == ["att-j"] and journal is None
    journal_quarantine(repo.conn, "att-j", "run-j", "ref", T0, T0 + 1000)
    journal = run_with_attempts(repo.conn, "run-j")[2]
    assert journal is not None and journal.quarantine_ref == "ref"
    assert run_with_attempts(repo.conn, "run-none") == (None, [], None)


def rowid(repo: Repository, run_id: str) -> int:
    return int(repo.conn.execute('SELECT rowid FROM "Runs" WHERE id = ?', (run_id,)).fetchone()[0])


def test_a_drain_window_takes_the_candidates_after_and_up_to_its_bounds_in_id_order(
    repo: Repository,
) -> None:
    from storage import candidate_window, last_candidate

    assert last_candidate(repo.conn) is None
    assert candidate_window(repo.conn) == ([], False, None)
    for n in (3, 0, 4, 1, 2):  # created out of id order
        attempt_in(repo, f"run-{n}", f"att-{n}", "running")
    ids = {n: rowid(repo, f"run-{n}") for n in range(5)}
    assert last_candidate(repo.conn) == ids[4]

    statements: list[str] = []
    repo.conn.set_trace_callback(statements.append)
    page, more, last = candidate_window(repo.conn, limit=3)
    repo.conn.set_trace_callback(None)
    assert statements[-1].endswith("LIMIT 4")  # one row more than the page, no more
    assert [c.run_id for c in page] == ["run-0", "run-1", "run-2"]
    assert (more, last) == (True, ids[2])
    assert all((c.status, c.active_attempts, c.problem) == ("dispatching", 1, None) for c in page)

    page, more, last = candidate_window(repo.conn, ids[0], ids[3], limit=5)
    assert [c.run_id for c in page] == ["run-1", "run-2", "run-3"]
    assert (more, last) == (False, ids[3])

    page, more, last = candidate_window(repo.conn, None, ids[1], limit=2)
    assert [c.run_id for c in page] == ["run-0", "run-1"]
    assert (more, last) == (False, ids[1])  # exactly the limit: no more in the window

    assert candidate_window(repo.conn, ids[4]) == ([], False, None)
