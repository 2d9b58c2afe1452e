"""ADR-0068 §4: the write transaction of the primary pass (``reconciler/primary/_writes.py``).

What the row tests do not show: the re-read inside the write transaction names what moved
(the Run by its id, an Attempt field the decision used before the decision is taken again), a
Run changed under the same version is not written on a decision it no longer gets, row 12
adopts a `dispatching` Run beside an Attempt already `running`, row 13's re-check refuses a
gone Run, a second active Attempt and every compare-and-set field the fingerprint leaves out,
a cleanup after the commit that finds the database read-only stops the pass, and a third
invalid receipt is quarantined above the journal row's newest copy. Each write's plan
(``reconciler/primary/_edges.py``): rows 3, 7, 12 and 13 stamped at the latest of the clock and
every time the Run and its Attempt carry (each made the latest in turn, the epoch included),
row 3's Run fields each named when they moved, row 12 starting only what has no start yet, and
a receipt's D-3 chain edges each with its own dedupe key, evidence word and decision.

Through the public ``reconcile`` only, on real SQLite files and real receipt files; what
was committed is read back through a second connection. The clock and the process table are the
fakes of their ports, and someone else's write happens through the probe or clock port at the
moment the test needs it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _decisions import decision as decision_of
from _primary_support import (
    RECONCILER,
    SYSTEM,
    T0,
    TOKEN_HASH,
    make_candidate,
    make_run,
    other_connection,
    receipt,
)

from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    capture_handle,
    inspect_handle,
    quarantine_ref,
)
from reconciler.primary import reconcile_connection
from storage import AttemptChange, Repository, RunChange, journal_get, journal_register

Change = Callable[[sqlite3.Connection], object]


def spawned(table: FakeProcessTable, *, alive: bool) -> tuple[str, int]:
    """A fake process's handle and pid; reaped unless ``alive``."""
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    if not alive:
        table.reap(pid)
    return handle, pid


def second_connection(db_path: Path) -> contextlib.closing[sqlite3.Connection]:
    """A fresh read-only connection: what was committed, not what the pass's connection saw."""
    return contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True))


def someone_else_writes(db_path: Path, sql: str, *args: object) -> None:
    """``sql`` committed by another writer, on its own connection."""
    other = other_connection(db_path)
    try:
        other.execute(sql, args)
    finally:
        other.close()


def read_back(db_path: Path, run_id: str, attempt_id: str) -> tuple[str | None, str | None]:
    """The Run's and the Attempt's status as committed."""
    with second_connection(db_path) as c:
        run = c.execute('SELECT status FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
        att = c.execute('SELECT status FROM "RunAttempts" WHERE id = ?', (attempt_id,)).fetchone()
    return (run[0] if run else None), (att[0] if att else None)


def events_after(reader: Repository, run_id: str, sequence: int) -> list[tuple[str, str, Any]]:
    return [
        (e.type, e.actor_type, e.actor_id)
        for e in reader.events_of(run_id)
        if e.sequence > sequence
    ]


def summary_of(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]]


@dataclass
class MeddlingProbe:
    """The real probe over the fake process table; while the FIRST probe runs (after the
    decision's read of the Run, before its write transaction) someone else writes ``sql``."""

    db_path: Path
    sql: str
    done: bool = False

    def __call__(self, handle: str, provider: Any, *, platform: str) -> Any:
        if not self.done:
            self.done = True
            someone_else_writes(self.db_path, self.sql)
        return inspect_handle(handle, provider, platform=platform)


def adoptable(repo: Repository, table: FakeProcessTable) -> int:
    """Row 12's write case: a `starting` Attempt of a `dispatching` Run, its process alive."""
    handle, pid = spawned(table, alive=True)
    return make_candidate(
        repo, "run-1", "at-1", attempt="starting", run="dispatching", handle=handle, pid=pid
    )


def pass_with(conn: Any, store: Any, table: FakeProcessTable, clock: FakeClock, **kw: Any) -> Any:
    return reconcile_connection(
        conn, store, table, clock, profile="standalone", platform="linux", **kw
    )


# --- the re-read inside the write transaction (ADR-0068 §4) ------------------------------------


def test_a_run_whose_version_moved_before_the_write_fails_naming_that_run(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    table = FakeProcessTable()
    version = adoptable(repo, table)
    probe = MeddlingProbe(db_path, "UPDATE \"Runs\" SET version = version + 1 WHERE id = 'run-1'")

    summary = pass_with(conn, store, table, FakeClock(T0), probe=probe)

    # spec 01 rule 3: the compare-and-set names the aggregate it found moved, and how.
    assert summary_of(summary) == [
        (
            "14",
            "failed",
            f"error:Conflict: conflict: run run-1 is no longer at version {version} "
            f"(now {version + 1}); re-read and decide again",
        )
    ]
    assert read_back(db_path, "run-1", "at-1") == ("dispatching", "starting")


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        (
            "UPDATE \"RunAttempts\" SET status = 'failed' WHERE id = 'at-1'",
            "attempt at-1 is no longer status='starting' (now 'failed')",
        ),
        (
            "UPDATE \"Runs\" SET execution_owner = 'legacy' WHERE id = 'run-1'",
            "run run-1 is no longer execution_owner='runtime' (now 'legacy')",
        ),
    ],
    ids=["attempt-status", "run-owner"],
)
def test_a_field_the_decision_used_that_moved_without_the_version_is_named_as_it_moved(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore, sql: str, named: str
) -> None:
    # ADR-0068 §4: every field the decision used (the Attempt's too) is checked first, with
    # the same error as ever; only then is the decision taken again on the re-read, which here
    # would have given another row and hidden which field moved.
    table = FakeProcessTable()
    adoptable(repo, table)

    summary = pass_with(conn, store, table, FakeClock(T0), probe=MeddlingProbe(db_path, sql))

    assert summary_of(summary) == [
        ("14", "failed", f"error:Conflict: conflict: {named}; re-read and decide again")
    ]
    assert summary["safe"] is False
    with second_connection(db_path) as c:
        events = c.execute(
            "SELECT COUNT(*) FROM \"RunEvents\" WHERE run_id = 'run-1' AND actor_type = ?",
            (RECONCILER[0],),
        ).fetchone()[0]
    assert events == 0


def test_a_run_changed_under_the_same_version_is_not_written_on_a_decision_it_no_longer_gets(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # Someone else adds a second active Attempt without moving the version: every checked
    # field still holds, but the core, fed the re-read, now decides row 1 where it asked for
    # the receipt before. ADR-0068 §4: the same decision again, or nothing is written.
    table = FakeProcessTable()
    adoptable(repo, table)
    probe = MeddlingProbe(
        db_path,
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
        "created_at_ms) VALUES ('at-2', 'run-1', 2, 'claimed', 'local_process', "
        f"{T0})",
    )

    summary = pass_with(conn, store, table, FakeClock(T0), probe=probe)

    assert summary_of(summary) == [
        (
            "14",
            "failed",
            "error:Conflict: conflict: run run-1 is no longer what row 12 was decided on; "
            "re-read and decide again",
        )
    ]
    assert read_back(db_path, "run-1", "at-1") == ("dispatching", "starting")


# --- row 12: only the aggregate not yet running moves -----------------------------------------


def test_a_dispatching_run_beside_an_attempt_already_running_is_adopted_alone(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # The launcher's crash between the Attempt's `running` and the Run's: row 12 moves the Run,
    # and the final verifier finds the rows exactly as that commit left them.
    table = FakeProcessTable()
    handle, pid = spawned(table, alive=True)
    version = make_candidate(
        repo, "run-1", "at-1", attempt="running", run="dispatching", handle=handle, pid=pid
    )
    before = max(e.sequence for e in reader.events_of("run-1"))

    summary = pass_with(conn, store, table, FakeClock(T0))

    assert summary_of(summary) == [("12", "remaining", "process_running")]
    assert summary["safe"] is True
    assert read_back(db_path, "run-1", "at-1") == ("running", "running")
    assert events_after(reader, "run-1", before) == [("run.running", *RECONCILER)]
    run = reader.get_run("run-1")
    assert run is not None and run.version == version + 1


# --- row 13: the re-check and the compare-and-set of `lost` (ADR-0068 §2, §4) ------------------


class MeddlingClock(FakeClock):
    """A fake clock whose sleep (the one grace) ends with someone else's write."""

    def __init__(self, db_path: Path, change: Change) -> None:
        super().__init__(T0)
        self.db_path, self.change = db_path, change

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        other = other_connection(self.db_path)
        try:
            self.change(other)
        finally:
            other.close()


def test_a_run_deleted_during_the_grace_is_not_lost(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    table = FakeProcessTable()
    handle, pid = spawned(table, alive=False)
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    clock = MeddlingClock(db_path, lambda c: c.execute("DELETE FROM \"Runs\" WHERE id = 'run-1'"))

    summary = pass_with(conn, store, table, clock)

    assert summary_of(summary) == [("13", "unresolved", "changed_before_lost")]
    assert len(clock.sleeps) == 1
    assert read_back(db_path, "run-1", "at-1") == (None, None)


def test_a_second_active_attempt_appearing_during_the_grace_is_a_change_and_nothing_is_lost(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # at-1 finished, at-2 (the latest) running with a dead process. During the grace someone
    # puts at-1 back to `starting` without the version: the latest Attempt and the version are
    # as probed, but ADR-0068 row 1's fact (more than one active Attempt) now holds.
    table = FakeProcessTable()
    handle, pid = spawned(table, alive=False)
    v = make_candidate(repo, "run-1", "at-1", attempt="starting", run="dispatching")
    v = repo.create_attempt(run_id="run-1", attempt_id="at-2", expected_version=v, at_ms=T0).version
    v = repo.advance(
        "run-1",
        v,
        [AttemptChange("at-2", "start", set={"callback_token_hash": TOKEN_HASH})],
        actor=SYSTEM,
        at_ms=T0,
    ).version
    setup = other_connection(db_path)
    setup.execute("UPDATE \"RunAttempts\" SET status = 'failed' WHERE id = 'at-1'")
    setup.close()
    v = repo.advance(
        "run-1",
        v,
        [
            AttemptChange(
                "at-2",
                "run",
                set={"started_at_ms": T0, "executor_handle": handle, "pid": pid},
            )
        ],
        actor=SYSTEM,
        at_ms=T0,
    ).version
    v = repo.advance("run-1", v, [RunChange("start")], actor=SYSTEM, at_ms=T0).version
    before = max(e.sequence for e in reader.events_of("run-1"))
    clock = MeddlingClock(
        db_path,
        lambda c: c.execute("UPDATE \"RunAttempts\" SET status = 'starting' WHERE id = 'at-1'"),
    )

    summary = pass_with(conn, store, table, clock)

    assert [
        (c["attempt_id"], c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]
    ] == [("at-2", "13", "unresolved", "changed_before_lost")]
    assert read_back(db_path, "run-1", "at-2") == ("running", "running")
    assert events_after(reader, "run-1", before) == []
    run = reader.get_run("run-1")
    assert run is not None and run.version == v


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        (
            "UPDATE \"RunAttempts\" SET callback_token_hash = 'ff' WHERE id = 'at-1'",
            f"attempt at-1 is no longer callback_token_hash={TOKEN_HASH!r} (now 'ff')",
        ),
        (
            "UPDATE \"Runs\" SET execution_owner = 'legacy' WHERE id = 'run-1'",
            "run run-1 is no longer execution_owner='runtime' (now 'legacy')",
        ),
    ],
    ids=["attempt-token-hash", "run-owner"],
)
def test_a_checked_field_outside_the_fingerprint_that_moved_during_the_grace_fails_the_lost(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore, sql: str, named: str
) -> None:
    # The re-check compares the fingerprint (status, version, sequence, handle, pid); the
    # token hash and the owner are not in it, yet the decision used them: the compare-and-set
    # of `lost` re-checks them (ADR-0068 §4), so nothing is written.
    table = FakeProcessTable()
    handle, pid = spawned(table, alive=False)
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    clock = MeddlingClock(db_path, lambda c: c.execute(sql))

    summary = pass_with(conn, store, table, clock)

    assert summary_of(summary) == [
        ("14", "failed", f"error:Conflict: conflict: {named}; re-read and decide again")
    ]
    assert read_back(db_path, "run-1", "at-1") == ("running", "running")


# --- after the commit: the receipt's cleanup (spec 03) -----------------------------------------


@dataclass
class ReadOnlyAfterDelete:
    """The real receipt store; deleting a receipt succeeds, and right after it the database
    can no longer be written (as when its filesystem is remounted read-only)."""

    inner: FileReceiptStore
    conn: Any

    def delete(self, attempt_id: str) -> None:
        self.inner.delete(attempt_id)
        self.conn.execute("PRAGMA query_only = ON")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_cleanup_that_finds_the_database_read_only_stops_every_later_write(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # docs/decisions.md "lock budget": a read-only database stops the pass's writes, whichever
    # write finds it, the journal's resolve after a committed completion included.
    table = FakeProcessTable()
    handle, pid = spawned(table, alive=True)
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    journal_register(conn, "at-1", "run-1", T0)
    store.publish(receipt("run-1", "at-1"))
    handle, pid = spawned(table, alive=False)
    make_candidate(repo, "run-2", "at-2", handle=handle, pid=pid)
    clock = FakeClock(T0)

    try:
        summary = pass_with(conn, ReadOnlyAfterDelete(store, conn), table, clock)
    finally:
        conn.execute("PRAGMA query_only = OFF")

    first, second = summary["candidates"]
    assert (first["row"], first["outcome"]) == ("5", "recovered")
    assert first["reason"].startswith("receipt_succeeded;cleanup_failed:")
    assert (second["row"], second["outcome"], second["reason"]) == (
        "14",
        "failed",
        "database_read_only:not_attempted",
    )
    assert clock.sleeps == []  # nothing more is waited for either
    assert (summary["failed"], summary["safe"]) == (1, False)
    assert read_back(db_path, "run-1", "at-1") == ("succeeded", "succeeded")
    assert read_back(db_path, "run-2", "at-2") == ("running", "running")
    assert not (Path(store.root) / "at" / "at-1.json").exists()
    with second_connection(db_path) as c:
        [state] = c.execute(
            "SELECT state FROM \"LocalCompletionReceiptJournal\" WHERE attempt_id = 'at-1'"
        ).fetchone()
    assert state == "pending"  # the resolve did not happen; the next pass finds no receipt


# --- the quarantine slot (D-3c) -----------------------------------------------------------------


def test_a_third_invalid_receipt_goes_above_the_journals_newest_copy_though_a_lower_slot_is_free(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # D-3c: the journal row names the newest copy and stands for every slot up to it (the
    # purge removes slots 1..its slot). Someone removed the oldest copy by hand: the next copy
    # still goes above the newest, or the copy in slot 2 would outlive every purge.
    table = FakeProcessTable()
    handle, pid = spawned(table, alive=False)
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    root = Path(store.root)
    clock = FakeClock(T0)
    for n in (1, 2):
        store.publish(receipt("run-1", "at-1", token=str(n) * 43))
        assert summary_of(pass_with(conn, store, table, clock)) == [
            ("6", "unresolved", "invalid_receipt:token_mismatch")
        ]
        clock.advance(60.0)
    (root / quarantine_ref("at-1")).unlink()
    store.publish(receipt("run-1", "at-1", token="3" * 43))

    summary = pass_with(conn, store, table, clock)

    assert summary_of(summary) == [("6", "unresolved", "invalid_receipt:token_mismatch")]
    with second_connection(db_path) as c:
        row = journal_get(c, "at-1")
    assert row is not None
    assert (row.state, row.quarantine_ref) == ("quarantined", quarantine_ref("at-1", 3))
    assert not (root / quarantine_ref("at-1")).exists()
    assert b'"' + b"3" * 43 in (root / quarantine_ref("at-1", 3)).read_bytes()
    assert b'"' + b"2" * 43 in (root / quarantine_ref("at-1", 2)).read_bytes()
    assert store.purge_quarantine(row.quarantine_ref) == 2  # both copies the row stands for
    assert read_back(db_path, "run-1", "at-1") == ("running", "running")


# --- each write's plan (reconciler/primary/_edges.py): its time, start times, chain events ----
#
# spec 01 (QingLong's atOrAfter): an edge is stamped at the clock, or at the latest time the
# Run and its Attempt already carry when the clock is behind it; storage refuses an event
# earlier than the created/started time of the aggregate it moves. Each case below makes ONE
# of those times the latest, so a plan that leaves it out is either refused or stamped
# elsewhere.

HOUR = 3_600_000


def set_times(db_path: Path, table: str, row_id: str, **times: int) -> None:
    """Someone else's times on a row (a Run started once and retried, a clock that ran
    ahead on another writer), written before the pass."""
    for column, value in times.items():
        someone_else_writes(
            db_path, f'UPDATE "{table}" SET {column} = ? WHERE id = ?', value, row_id
        )


def stamps(reader: Repository, run_id: str, after: int) -> list[tuple[str, int]]:
    """(type, time) of the Run's events past sequence ``after``."""
    return [(e.type, e.created_at_ms) for e in reader.events_of(run_id) if e.sequence > after]


def last_event(reader: Repository, run_id: str) -> int:
    return max(e.sequence for e in reader.events_of(run_id))


@pytest.mark.parametrize(
    ("clock_ms", "stamped"),
    [(T0 + 60_000, T0 + 60_000), (T0 - 60_000, T0)],
    ids=["clock-ahead", "clock-behind-the-runs-creation"],
)
def test_row_3_is_stamped_at_the_clock_or_at_the_runs_creation_whichever_is_later(
    repo: Repository, reader: Repository, conn: Any, store: FileReceiptStore,
    clock_ms: int, stamped: int,
) -> None:  # fmt: skip
    make_run(repo, "run-1", "dispatching")
    before = last_event(reader, "run-1")

    summary = pass_with(conn, store, FakeProcessTable(), FakeClock(clock_ms))

    assert summary_of(summary) == [("3", "recovered", "attempt_missing_before_start")]
    assert stamps(reader, "run-1", before) == [("run.lost", stamped)]


class ClockWithAWriter(FakeClock):
    """A fake clock whose first wall-time reading (the one right before the pass's first
    write transaction) lets someone else write ``sql`` first."""

    def __init__(self, db_path: Path, sql: str) -> None:
        super().__init__(T0)
        self.db_path, self.sql = db_path, sql
        self.done = False

    def now_ms(self) -> int:
        if not self.done:
            self.done = True
            someone_else_writes(self.db_path, self.sql)
        return super().now_ms()


def test_a_row_3_write_names_the_run_owner_that_moved_without_the_version(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # ADR-0068 §4: row 3 used the Run's fields alone; each is checked with its own error
    # before the decision is taken again on the re-read (which would only say "row 3").
    make_run(repo, "run-1", "dispatching")
    before = last_event(reader, "run-1")
    clock = ClockWithAWriter(
        db_path, "UPDATE \"Runs\" SET execution_owner = 'legacy' WHERE id = 'run-1'"
    )

    summary = pass_with(conn, store, FakeProcessTable(), clock)

    assert summary_of(summary) == [
        (
            "14",
            "failed",
            "error:Conflict: conflict: run run-1 is no longer execution_owner='runtime' "
            "(now 'legacy'); re-read and decide again",
        )
    ]
    assert stamps(reader, "run-1", before) == []


@pytest.mark.parametrize(
    ("clock_ms", "run_times", "attempt_times", "stamped"),
    [
        (T0 + 60_000, {}, {}, T0 + 60_000),
        # An Attempt row written by a writer whose clock ran behind the Run's creation.
        (T0 - 60_000, {}, {"created_at_ms": T0 - 30_000}, T0),
        # A Run that started once, was retried, and is `dispatching` again.
        (T0, {"started_at_ms": T0 + 5_000}, {}, T0 + 5_000),
        # An Attempt created by a writer whose clock ran ahead of this one.
        (T0, {}, {"created_at_ms": T0 + 5_000}, T0 + 5_000),
    ],
    ids=["clock", "run-created", "run-started", "attempt-created"],
)
def test_row_7_is_stamped_at_the_latest_of_the_clock_and_every_time_the_run_and_attempt_carry(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore,
    clock_ms: int, run_times: dict[str, int], attempt_times: dict[str, int], stamped: int,
) -> None:  # fmt: skip
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    set_times(db_path, "Runs", "run-1", **run_times)
    set_times(db_path, "RunAttempts", "at-1", **attempt_times)
    before = last_event(reader, "run-1")

    summary = pass_with(conn, store, FakeProcessTable(), FakeClock(clock_ms))

    assert summary_of(summary) == [("7", "recovered", "unstarted_claim")]
    assert stamps(reader, "run-1", before) == [("attempt.lost", stamped), ("run.lost", stamped)]


def test_row_7_at_the_epoch_is_stamped_at_the_epoch(
    repo: Repository, reader: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # Neither the Run nor its claimed Attempt has started: an absent start is no time at all.
    v = repo.create_run(run_id="run-1", at_ms=0).version
    for trigger in ("queue", "dispatch"):
        v = repo.advance("run-1", v, [RunChange(trigger)], actor=SYSTEM, at_ms=0).version
    repo.create_attempt(run_id="run-1", attempt_id="at-1", expected_version=v, at_ms=0)
    before = last_event(reader, "run-1")

    summary = pass_with(conn, store, FakeProcessTable(), FakeClock(0))

    assert [c["row"] for c in summary["candidates"]] == ["7"]
    assert stamps(reader, "run-1", before) == [("attempt.lost", 0), ("run.lost", 0)]


def test_row_13_is_stamped_at_the_attempts_own_start_when_the_clock_is_still_behind_it(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # The launcher's clock ran an hour ahead: after the one grace the clock is still behind
    # the Attempt's start, which is the latest time in sight.
    table = FakeProcessTable()
    handle, pid = spawned(table, alive=False)
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    set_times(db_path, "RunAttempts", "at-1", started_at_ms=T0 + HOUR)
    before = last_event(reader, "run-1")

    summary = pass_with(conn, store, table, FakeClock(T0))

    assert summary_of(summary) == [("13", "recovered", "process_not_running:pid_absent")]
    assert stamps(reader, "run-1", before) == [
        ("attempt.lost", T0 + HOUR),
        ("run.lost", T0 + HOUR),
    ]


def started_times(reader: Repository) -> tuple[int | None, int | None]:
    """The Run's and the Attempt's ``started_at_ms`` as committed."""
    run, att = reader.get_run("run-1"), reader.get_attempt("at-1")
    assert run is not None and att is not None
    return run.started_at_ms, att.started_at_ms


@pytest.mark.parametrize(
    ("clock_ms", "run_times", "attempt_times", "stamped", "started"),
    [
        # Neither has started: both start at the moment of the adoption.
        (T0 + 60_000, {}, {}, T0 + 60_000, (T0 + 60_000, T0 + 60_000)),
        # Each carries a start already (the launcher wrote it before it crashed): kept.
        (
            T0 + 60_000, {"started_at_ms": T0 + 5}, {"started_at_ms": T0 + 5},
            T0 + 60_000, (T0 + 5, T0 + 5),
        ),
        # The clock is behind the Attempt's creation: stamped, and started, at that.
        (T0, {}, {"created_at_ms": T0 + 5_000}, T0 + 5_000, (T0 + 5_000, T0 + 5_000)),
    ],
    ids=["none-started", "both-started", "clock-behind-the-attempt"],
)  # fmt: skip
def test_row_12_starts_each_aggregate_it_moves_at_the_adoption_unless_it_carries_a_start(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore,
    clock_ms: int, run_times: dict[str, int], attempt_times: dict[str, int], stamped: int,
    started: tuple[int, int],
) -> None:  # fmt: skip
    table = FakeProcessTable()
    adoptable(repo, table)
    set_times(db_path, "Runs", "run-1", **run_times)
    set_times(db_path, "RunAttempts", "at-1", **attempt_times)
    before = last_event(reader, "run-1")

    summary = pass_with(conn, store, table, FakeClock(clock_ms))

    assert summary_of(summary) == [("12", "remaining", "process_running")]
    assert stamps(reader, "run-1", before) == [
        ("attempt.running", stamped),
        ("run.running", stamped),
    ]
    assert started_times(reader) == started


def test_a_receipt_for_a_claimed_attempt_walks_each_chain_edge_with_its_own_key_and_evidence(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # D-3: claimed -> starting -> running for the Attempt, dispatching -> running for the Run,
    # each its own event keyed on the receipt (QingLong's completion processor's keys), each
    # carrying the word of the evidence and the decision; both start at the receipt's start.
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    someone_else_writes(
        db_path, 'UPDATE "RunAttempts" SET callback_token_hash = ? WHERE id = ?', TOKEN_HASH, "at-1"
    )
    store.publish(receipt("run-1", "at-1"))  # started T0 + 10, finished T0 + 20
    before = last_event(reader, "run-1")

    summary = pass_with(conn, store, FakeProcessTable(), FakeClock(T0))

    assert summary_of(summary) == [("5", "recovered", "receipt_succeeded")]
    events = [e for e in reader.events_of("run-1") if e.sequence > before]
    # No process was probed: neither a verdict nor a pid match is recorded (both null).
    decision = decision_of("5", "receipt_succeeded", receipt="trusted")
    assert [
        (e.type, e.dedupe_key, e.payload.get("evidence"), e.payload.get("decision"))
        for e in events
    ] == [
        ("attempt.starting", "local-completion:at-1:1:starting", "completion_receipt", decision),
        (
            "attempt.running", "local-completion:at-1:1:attempt-running", "completion_receipt",
            decision,
        ),
        ("run.running", "local-completion:at-1:1:run-running", "completion_receipt", decision),
        ("attempt.succeeded", "local-completion:at-1:1:attempt", None, decision),
        ("run.succeeded", "local-completion:at-1:1:run", None, decision),
    ]  # fmt: skip
    assert started_times(reader) == (T0 + 10, T0 + 10)


def test_a_receipt_completion_keeps_the_start_times_the_run_and_attempt_already_carry(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # D-3: the receipt's start fills only a start that is missing; a `starting` Attempt and a
    # `dispatching` Run that carry one keep it through the chain's `running` edges.
    make_candidate(repo, "run-1", "at-1", attempt="starting", run="dispatching")
    set_times(db_path, "Runs", "run-1", started_at_ms=T0 + 5)
    set_times(db_path, "RunAttempts", "at-1", started_at_ms=T0 + 5)
    store.publish(receipt("run-1", "at-1"))  # started T0 + 10

    summary = pass_with(conn, store, FakeProcessTable(), FakeClock(T0))

    assert summary_of(summary) == [("5", "recovered", "receipt_succeeded")]
    assert started_times(reader) == (T0 + 5, T0 + 5)
