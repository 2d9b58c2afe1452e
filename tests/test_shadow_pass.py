"""The ADR-0448 pass itself (spec 05 "Supervisor", "Per candidate"), on real SQLite files made
by `db init`: what it hands its ports (clock, busy timeout, lock budget, resume cursor, hooks),
where it stops, what it raises, and the facts it gathers for the table."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from typing import Any

import pytest
from _shadow_support import T0_MS, LegacyDb

from fsm.qinglong import LegacyFacts
from reconciler.node import FakeClock
from reconciler.shadow import Budget, PassHooks, PassOutcome, PassPorts, gather, run_pass
from reconciler.shadow._writes import Context
from storage import (
    DatabaseReadOnly,
    LegacyCandidate,
    LockBudget,
    NotAQingLongDatabase,
    Repository,
    check_schema,
    connect,
    legacy_candidates,
)

ORIGINS = ("manual", "scheduled_node", "scheduled_system")
NOW_MS = T0_MS + 10_000


def budget(page_size: int = 50, max_pages: int = 4) -> Budget:
    return Budget(page_size=page_size, max_pages=max_pages)


def run(db: LegacyDb, **kw: Any) -> PassOutcome:
    kw.setdefault("budget", budget())
    kw.setdefault("clock", FakeClock(NOW_MS))
    return run_pass(db.path, origins=ORIGINS, **kw)


def lost_candidate(db: LegacyDb) -> Any:
    """A `running` Run whose `running` Attempt has no instance row: row 10, marked lost."""
    return db.run(pid=42001)


# --- what the pass hands its ports ---------------------------------------------------------------


def test_the_writes_are_stamped_by_the_clock_the_pass_was_given(db: LegacyDb) -> None:
    made = lost_candidate(db)
    run(db, clock=FakeClock(NOW_MS + 123))
    assert db.status(made) == ("lost", ["lost"])
    # Nothing the aggregate carries is later than the clock: the clock's time is the time.
    assert [r["created_at_ms"] for r in db.event_rows(made)] == [NOW_MS + 123] * 2


def test_the_busy_timeout_and_the_database_path_reach_the_opener(db: LegacyDb) -> None:
    opened: list[tuple[str, float | None]] = []

    def opener(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        opened.append((path, busy_timeout_s))
        return connect(path)

    run(db, busy_timeout_s=2.5, ports=PassPorts(open=opener))
    assert opened == [(db.path, 2.5)]


class Recording(PassHooks):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def before_decide(self, conn: sqlite3.Connection, cand: LegacyCandidate) -> None:
        self.seen.append(("before", conn, cand, getattr(conn, "lock_budget", None)))

    def after_decide(self, conn: sqlite3.Connection, cand: LegacyCandidate, state: str) -> None:
        self.seen.append(("after", conn, cand, state))


def test_each_candidate_passes_the_hooks_with_the_pass_connection_and_its_decision(
    db: LegacyDb,
) -> None:
    made = lost_candidate(db)
    hooks = Recording()
    connections: list[sqlite3.Connection] = []

    def opener(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        connections.append(connect(path))
        return connections[-1]

    lock = LockBudget(3.0)
    run(db, lock=lock, ports=PassPorts(open=opener, hooks=hooks))
    (conn,) = connections
    assert [(s[0], s[1], s[2].run_id) for s in hooks.seen] == [
        ("before", conn, made.run_id),
        ("after", conn, made.run_id),
    ]
    # Every write of the pass is charged to the lock budget it was given ...
    assert hooks.seen[0][3] is lock
    assert hooks.seen[1][3] == "marked_lost"
    # ... and only while the pass runs.
    assert getattr(conn, "lock_budget", "closed") is None


def test_a_resumed_pass_asks_for_the_page_after_the_cursor_it_was_given(db: LegacyDb) -> None:
    asked: list[tuple[int, str] | None] = []

    def pages(
        conn: sqlite3.Connection, origins: Sequence[str], after: tuple[int, str] | None, n: int
    ) -> tuple[list[LegacyCandidate], bool]:
        asked.append(after)
        return legacy_candidates(conn, origins, after, n)

    made = lost_candidate(db)
    resume = (T0_MS - 1, "0")
    outcome = run(db, resume=resume, ports=PassPorts(candidates=pages))
    assert asked == [resume]
    assert db.status(made) == ("lost", ["lost"])
    assert outcome.counts.stop_reason == "complete"


def test_a_pass_that_completes_returns_no_cursor_and_one_that_runs_out_of_pages_does(
    db: LegacyDb,
) -> None:
    for _ in range(3):
        lost_candidate(db)
    done = run(db)
    assert (done.counts.stop_reason, done.counts.resume_available, done.cursor) == (
        "complete",
        False,
        None,
    )
    for _ in range(3):
        lost_candidate(db)
    cut = run(db, budget=budget(page_size=1, max_pages=2))
    assert (cut.counts.stop_reason, cut.counts.resume_available) == ("page_limit", True)
    assert cut.cursor is not None


def _page(db: LegacyDb, problem_last: bool) -> list[LegacyCandidate]:
    conn = connect(db.path)
    try:
        page, _ = legacy_candidates(conn, ORIGINS, None, 10)
    finally:
        conn.close()
    if problem_last:
        unreadable = LegacyCandidate("row 3", "running", 1, "manual", None, T0_MS + 5, 0, None)
        page.append(unreadable._replace(problem="not_utf8"))
    return page


@pytest.mark.parametrize("truncated", [True, False])
def test_an_unreadable_row_at_the_end_of_a_truncated_page_stalls_the_cursor_there(
    db: LegacyDb, truncated: bool
) -> None:
    made = lost_candidate(db)
    page = _page(db, problem_last=True)
    calls: list[object] = []

    def pages(
        conn: sqlite3.Connection, origins: Sequence[str], after: tuple[int, str] | None, n: int
    ) -> tuple[list[LegacyCandidate], bool]:
        calls.append(after)
        return page, truncated

    outcome = run(db, ports=PassPorts(candidates=pages))
    assert db.status(made) == ("lost", ["lost"])
    assert outcome.counts.by_origin["manual"] == {"markedLost": 1, "failed": 1}
    assert calls == [None]  # never a second page: its key cannot be a keyset cursor
    stop = "cursor_stalled" if truncated else "complete"
    assert (outcome.counts.pages, outcome.counts.stop_reason) == (1, stop)
    assert (outcome.counts.resume_available, outcome.cursor) == (False, None)


# --- what the pass raises instead of deciding ----------------------------------------------------


def _read_only(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
    conn = connect(path)
    conn.execute("PRAGMA query_only = ON")  # every write answers SQLITE_READONLY
    return conn


def test_a_database_that_cannot_be_written_ends_the_pass_naming_the_file(db: LegacyDb) -> None:
    made = lost_candidate(db)
    second = lost_candidate(db)
    hooks = Recording()
    with pytest.raises(DatabaseReadOnly) as refused:
        run(db, ports=PassPorts(open=_read_only, hooks=hooks))
    assert refused.value.path == db.path
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    # It is the pass's failure, not the candidate's: no later candidate is tried.
    assert [s[0] for s in hooks.seen] == ["before"]
    assert db.status(made) == ("running", ["running"]) == db.status(second)


def test_a_connection_that_knows_no_path_raises_the_driver_error_as_it_came(
    db: LegacyDb,
) -> None:
    lost_candidate(db)

    def plain(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA query_only = ON")
        return conn

    with pytest.raises(sqlite3.OperationalError) as refused:
        run(db, ports=PassPorts(open=plain))
    assert not isinstance(refused.value, DatabaseReadOnly)
    assert "readonly" in str(refused.value)


# --- the schema, checked once, before the first write (docs/decisions.md D-15) -----------------


def _without_the_journal(db: LegacyDb) -> None:
    # A table qlfsm reads but the candidate query (Runs alone) does not.
    db.conn.execute('DROP TABLE "LocalCompletionReceiptJournal"')


def test_a_file_that_lacks_a_table_qlfsm_reads_fails_the_pass_before_any_write_naming_it(
    db: LegacyDb,
) -> None:
    made = lost_candidate(db)
    _without_the_journal(db)
    hooks = Recording()
    with pytest.raises(NotAQingLongDatabase) as refused:
        run(db, ports=PassPorts(hooks=hooks))
    assert (refused.value.path, refused.value.why) == (
        db.path,
        "table LocalCompletionReceiptJournal is missing",
    )
    assert hooks.seen == []  # no candidate was decided
    assert db.status(made) == ("running", ["running"])


def test_a_connection_that_knows_no_path_names_the_database_it_refuses_as_db(
    db: LegacyDb,
) -> None:
    lost_candidate(db)
    _without_the_journal(db)

    def plain(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    with pytest.raises(NotAQingLongDatabase) as refused:
        run(db, ports=PassPorts(open=plain))
    assert refused.value.path == "<db>"


def test_a_pass_with_no_candidate_writes_nothing_and_checks_no_schema(db: LegacyDb) -> None:
    _without_the_journal(db)
    outcome = run(db)
    assert (outcome.counts.pages, outcome.counts.stop_reason) == (1, "complete")


def test_the_schema_is_checked_once_on_the_first_page_with_candidates_not_on_every_page(
    db: LegacyDb,
) -> None:
    made = [lost_candidate(db) for _ in range(3)]
    statements: list[str] = []

    def traced(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        # The real opener, with every statement the pass runs recorded.
        conn = (
            connect(path)
            if busy_timeout_s is None
            else connect(path, busy_timeout_s=busy_timeout_s)
        )
        conn.set_trace_callback(statements.append)
        return conn

    outcome = run(db, budget=budget(page_size=1, max_pages=5), ports=PassPorts(open=traced))
    assert outcome.counts.pages >= 3
    # D-15: storage.check_schema reads each table's columns; the pass runs it once, for the
    # first page, and no page after it.
    one_check: list[str] = []
    with closing(connect(db.path)) as conn:
        conn.set_trace_callback(one_check.append)
        check_schema(conn)
    columns_read = [s for s in one_check if s.startswith("PRAGMA table_info")]
    assert columns_read
    assert [s for s in statements if s.startswith("PRAGMA table_info")] == columns_read
    assert all(db.status(m) == ("lost", ["lost"]) for m in made)


# --- the facts gathered for the table ----------------------------------------------------------


def _gather(db: LegacyDb, made: Any, enabled: Sequence[str] = ORIGINS) -> tuple[Any, Any]:
    conn = connect(db.path)
    try:
        page, _ = legacy_candidates(conn, ORIGINS, None, 50)
        (cand,) = [c for c in page if c.run_id == made.run_id]
        return gather(conn, Repository(conn), cand, frozenset(enabled))
    finally:
        conn.close()


def test_a_run_gone_since_the_page_is_gathered_as_not_present_and_nothing_else(
    db: LegacyDb,
) -> None:
    made = lost_candidate(db)
    conn = connect(db.path)
    try:
        page, _ = legacy_candidates(conn, ORIGINS, None, 50)
        conn.execute('DELETE FROM "RunAttempts" WHERE run_id = ?', (made.run_id,))
        conn.execute('DELETE FROM "Runs" WHERE id = ?', (made.run_id,))
        facts, ctx = gather(conn, Repository(conn), page[0], frozenset(ORIGINS))
    finally:
        conn.close()
    assert facts == LegacyFacts(run_present=False)
    assert ctx == Context()


def test_two_active_attempts_are_gathered_as_their_count_and_no_evidence_is_read(
    db: LegacyDb,
) -> None:
    made = db.run(attempts=("running", "starting", "claimed"))
    facts, ctx = _gather(db, made)
    assert facts == LegacyFacts(
        run_present=True,
        run_owner="legacy",
        origin="manual",
        origin_enabled=True,
        run_status="running",
        active_attempts=3,
    )
    assert ctx.attempt is None and ctx.latest is None


def test_a_run_of_no_cron_has_no_evidence_and_its_selection_says_none(db: LegacyDb) -> None:
    made = db.run(cron=False, pid=42002)
    facts, ctx = _gather(db, made, enabled=("scheduled_node",))
    assert facts == LegacyFacts(
        run_present=True,
        run_owner="legacy",
        origin="manual",
        origin_enabled=False,
        run_status="running",
    )
    made = db.run(cron=False, pid=42003)
    facts, ctx = _gather(db, made)
    assert facts == LegacyFacts(
        run_present=True,
        run_owner="legacy",
        origin="manual",
        origin_enabled=True,
        run_status="running",
        active_attempts=1,
        attempt_status="running",
        evidence_truncated=False,
        selection="none",
    )
    assert facts.evidence_truncated is False
    assert ctx.attempt is not None and ctx.attempt.pid == 42003
    assert (ctx.evidence_at_ms, ctx.matched_status, ctx.exit_code) == (None, None, None)


class RecordingReads(Recording):
    def after_read(self, conn: sqlite3.Connection, cand: LegacyCandidate) -> None:
        self.seen.append(("read", conn, cand, None))


def test_the_read_hook_gets_the_pass_connection_and_the_candidate_between_the_other_two(
    db: LegacyDb,
) -> None:
    # spec 05: the window between reading a candidate and writing its decision, where another
    # writer may move what the decision used, is handed the pass's own connection.
    made = lost_candidate(db)
    hooks = RecordingReads()
    connections: list[sqlite3.Connection] = []

    def opener(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        connections.append(connect(path))
        return connections[-1]

    run(db, ports=PassPorts(open=opener, hooks=hooks))
    (conn,) = connections
    assert [(s[0], s[1], s[2].run_id) for s in hooks.seen] == [
        ("before", conn, made.run_id),
        ("read", conn, made.run_id),
        ("after", conn, made.run_id),
    ]
