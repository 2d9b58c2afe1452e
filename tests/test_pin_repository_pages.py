"""A run's history read a keyset page at a time (issue 29): `events_page`, `iter_events` and
`iter_event_columns` on a real SQLite file, every event once and in order, and the pages they
ask SQLite for (the statements seen through the connection's trace callback)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from _support import T0, run_in
from history_support import add_storm

from storage import Repository

RUN = "019f70c0-0000-7000-8000-0000000000b1"
ATT = "019f70c0-0000-7000-8000-0000000000b2"
# The page a statement reads: its run, its `after` and its limit (matched whatever the case of
# its keywords and names, which SQLite does not read).
PAGE = re.compile(
    r"WHERE run_id = '([^']*)' AND sequence > (\S+) ORDER BY sequence LIMIT (\S+)", re.IGNORECASE
)


def with_events(repo: Repository, count: int) -> None:
    """RUN with ``count`` events (at least 4): created, queued, dispatched and its Attempt
    claimed, then events that move nothing."""
    version = run_in(repo, RUN, "dispatching")
    repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0)
    if count > 4:
        add_storm(repo.conn, RUN, ATT, count - 4, T0)


@pytest.fixture
def pages(repo: Repository) -> Iterator[list[tuple[str, str, str]]]:
    """(run id, after, limit) of every page the repository's connection reads from now on."""
    seen: list[tuple[str, str, str]] = []

    def trace(sql: str) -> None:
        found = PAGE.search(sql)
        if found:
            seen.append((found[1], found[2], found[3]))

    repo.conn.set_trace_callback(trace)
    yield seen
    repo.conn.set_trace_callback(None)


def test_a_page_of_events_starts_at_the_first_event_and_holds_at_most_500_by_default(
    repo: Repository,
) -> None:
    with_events(repo, 502)
    page = repo.events_page(RUN)
    assert [e.sequence for e in page] == list(range(1, 501))
    assert (page[0].type, page[0].run_id, page[0].payload["to_status"]) == (
        "run.created",
        RUN,
        "created",
    )


def test_a_page_of_events_holds_the_run_s_events_after_the_given_sequence_up_to_the_limit(
    repo: Repository, reader: Repository
) -> None:
    with_events(repo, 6)
    page = reader.events_page(RUN, after=2, limit=3)
    assert [(e.sequence, e.type) for e in page] == [
        (3, "run.dispatching"),
        (4, "attempt.claimed"),
        (5, "attempt.late_callback_ignored"),
    ]
    assert page == reader.events_of(RUN)[2:5]
    assert reader.events_page("019f70c0-0000-7000-8000-0000000000ff") == []


@pytest.mark.parametrize("page", [1, 2, 3, 5, 7])
def test_every_event_is_read_once_and_in_order_whatever_the_page(
    repo: Repository, reader: Repository, page: int
) -> None:
    with_events(repo, 7)
    every = reader.events_of(RUN)
    assert [e.sequence for e in every] == [1, 2, 3, 4, 5, 6, 7]
    assert list(reader.iter_events(RUN, page=page)) == every
    columns = list(reader.iter_event_columns(RUN, page=page))
    assert [c[2] for c in columns] == [1, 2, 3, 4, 5, 6, 7]
    assert [c[0] for c in columns] == [e.id for e in every]


def test_the_history_is_read_in_pages_of_500_by_default(
    repo: Repository, pages: list[tuple[str, str, str]]
) -> None:
    with_events(repo, 4)
    assert [e.sequence for e in repo.iter_events(RUN)] == [1, 2, 3, 4]
    assert [c[2] for c in repo.iter_event_columns(RUN)] == [1, 2, 3, 4]
    assert pages == [(RUN, "0", "500"), (RUN, "0", "500")]


def test_the_history_is_read_in_pages_of_the_size_asked_for_each_after_the_last_one(
    repo: Repository, pages: list[tuple[str, str, str]]
) -> None:
    with_events(repo, 5)
    assert [e.sequence for e in repo.iter_events(RUN, page=2)] == [1, 2, 3, 4, 5]
    # 2 + 2 + 1 events: the short third page ends the read, no fourth statement.
    assert pages == [(RUN, "0", "2"), (RUN, "2", "2"), (RUN, "4", "2")]


def test_a_history_that_fills_its_last_page_is_read_up_to_an_empty_page(
    repo: Repository, pages: list[tuple[str, str, str]]
) -> None:
    with_events(repo, 4)
    assert [c[2] for c in repo.iter_event_columns(RUN, page=2)] == [1, 2, 3, 4]
    assert pages == [(RUN, "0", "2"), (RUN, "2", "2"), (RUN, "4", "2")]
