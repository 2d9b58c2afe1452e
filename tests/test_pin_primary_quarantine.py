"""The ADR-0068 pass's quarantine of an invalid receipt (spec 04 rows 6 and 13, spec 03's
journal intent first, docs/decisions.md D-3c and D-16), through the public ``reconcile``.

What the row tests leave open: the retention counted from the latest clock in sight (the
kernel's, the database's newest time for the Run) and the one warning naming which clock ran
behind and by how many whole seconds, only past the minute of tolerance; the same warning for
a receipt found invalid on the second read (phase 2); a directory at the receipt path moved
nowhere and recorded nowhere; and a move that cannot happen withdrawing its intent back to the
quarantine the journal row held before.

Real SQLite files and a real receipt root; the clock and the process table are the fakes of
their ports. The journal is read back through a second connection.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from _primary_support import T0, make_candidate, receipt

from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    QuarantineNotDone,
    capture_handle,
    quarantine_ref,
)
from reconciler.primary import QUARANTINE_KEEP_MS, reconcile_connection
from storage import Repository

BAD_TOKEN = "z" * 43  # authenticates as nothing: invalid (token_mismatch), spec 04 row 6
# More than the minute of tolerance (D-16), and not whole seconds: the warning floors them.
BEHIND_MS = 3_600_500
GRACE_MS = 100  # spec 04: the standalone profile's grace


def journal(db_path: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as second:
        return second.execute(
            "SELECT attempt_id, state, quarantine_ref, purge_after_ms "
            'FROM "LocalCompletionReceiptJournal" ORDER BY attempt_id'
        ).fetchall()


def dead_candidate(repo: Repository, run_id: str = "run-1", attempt_id: str = "at-1") -> Any:
    """A running Run/Attempt whose process is gone (every time recorded at T0)."""
    table = FakeProcessTable()
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    table.reap(pid)
    make_candidate(repo, run_id, attempt_id, handle=handle, pid=pid)
    return table


def pass_(conn: Any, store: Any, table: Any, clock: FakeClock) -> dict[str, Any]:
    return reconcile_connection(conn, store, table, clock, profile="standalone", platform="linux")


def entries(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]]


def test_a_clock_behind_the_kernels_counts_the_retention_from_the_kernel_and_warns_naming_it(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    table = dead_candidate(repo)
    store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))
    kernel = T0 + 3 * 24 * 3600 * 1000  # later than every time the database recorded
    clock = FakeClock(kernel - BEHIND_MS, witness_ms=kernel)

    summary = pass_(conn, store, table, clock)

    assert entries(summary) == [("6", "unresolved", "invalid_receipt:token_mismatch")]
    # D-16: never before the retention after the latest moment by any clock in sight.
    assert journal(db_path) == [
        ("at-1", "quarantined", quarantine_ref("at-1"), kernel + QUARANTINE_KEEP_MS)
    ]
    assert summary["warnings"] == [
        "the clock runs 3600 s behind the kernel's clock: the quarantined receipt of Attempt "
        "at-1 is kept for the retention counted from that time; set the clock right (NTP)"
    ]


def test_a_clock_behind_the_database_counts_the_retention_from_its_newest_time_naming_the_run(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    table = dead_candidate(repo)
    store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))
    # No kernel clock to read (witness None): the database's newest time for the Run is T0.
    summary = pass_(conn, store, table, FakeClock(T0 - BEHIND_MS))

    assert entries(summary) == [("6", "unresolved", "invalid_receipt:token_mismatch")]
    assert journal(db_path) == [
        ("at-1", "quarantined", quarantine_ref("at-1"), T0 + QUARANTINE_KEEP_MS)
    ]
    assert summary["warnings"] == [
        "the clock runs 3600 s behind the newest time the database recorded for run run-1: "
        "the quarantined receipt of Attempt at-1 is kept for the retention counted from that "
        "time; set the clock right (NTP)"
    ]


def test_a_kernel_clock_behind_the_pass_clock_is_not_the_moment_of_the_quarantine(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # The latest clock wins: a kernel clock BEHIND the pass's moves nothing, warns of nothing.
    table = dead_candidate(repo)
    store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))
    now = T0 + 5_000
    summary = pass_(conn, store, table, FakeClock(now, witness_ms=now - BEHIND_MS))
    assert "warnings" not in summary
    assert journal(db_path)[0][3] == now + QUARANTINE_KEEP_MS


def test_a_clock_exactly_one_minute_behind_is_tolerated_and_one_millisecond_more_is_named(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore, tmp_path: Path
) -> None:
    # D-16: "behind by MORE than a minute" is named; a minute is an NTP step or two clocks.
    table = dead_candidate(repo)
    store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))
    minute = pass_(conn, store, table, FakeClock(T0 - 60_000))
    assert "warnings" not in minute
    assert journal(db_path)[0][3] == T0 + QUARANTINE_KEEP_MS

    table = dead_candidate(repo, "run-2", "at-2")
    store.publish(receipt("run-2", "at-2", token=BAD_TOKEN))
    more = pass_(conn, store, table, FakeClock(T0 - 60_001))
    assert entries(more) == [
        ("6", "unresolved", "receipt_quarantined_earlier"),
        ("6", "unresolved", "invalid_receipt:token_mismatch"),
    ]
    # run-1's copy was quarantined by the first pass (nothing moved now); only the second
    # quarantine happens behind the database's clock.
    assert more["warnings"] == [
        "the clock runs 60 s behind the newest time the database recorded for run run-2: "
        "the quarantined receipt of Attempt at-2 is kept for the retention counted from that "
        "time; set the clock right (NTP)"
    ]


def test_a_receipt_found_invalid_on_the_second_read_warns_of_a_clock_behind_too(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # spec 04 row 13: the wrapper publishes a bad receipt during the grace; the second read
    # quarantines it as row 6 would, with the same D-16 floor and warning.
    class PublishingClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))

    table = dead_candidate(repo)
    summary = pass_(conn, store, table, PublishingClock(T0 - BEHIND_MS))

    assert entries(summary) == [("13", "unresolved", "invalid_receipt:token_mismatch")]
    assert journal(db_path) == [
        ("at-1", "quarantined", quarantine_ref("at-1"), T0 + QUARANTINE_KEEP_MS)
    ]
    # The grace (0.1 s of the fake clock) passed before the quarantine: 3600.4 s behind.
    assert summary["warnings"] == [
        "the clock runs 3600 s behind the newest time the database recorded for run run-1: "
        "the quarantined receipt of Attempt at-1 is kept for the retention counted from that "
        "time; set the clock right (NTP)"
    ]


def test_a_directory_at_the_receipt_path_is_neither_moved_nor_recorded_and_stays_unresolved(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # D-16: a directory cannot be moved into the quarantine; row 6 writes nothing and stays
    # unresolved until the operator removes it.
    table = dead_candidate(repo)
    path = Path(store.root) / "at" / "at-1.json"
    path.mkdir(parents=True)

    summary = pass_(conn, store, table, FakeClock(T0))

    assert entries(summary) == [("6", "unresolved", f"invalid_receipt:directory:{path}")]
    assert path.is_dir()
    assert journal(db_path) == []
    assert not list(Path(store.root).rglob(".quarantine/**/*.json"))


class RefusingStore(FileReceiptStore):
    """The real store, whose moves into the quarantine cannot happen (every slot taken)."""

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str:
        raise QuarantineNotDone(f"all quarantine slots of Attempt {attempt_id} are taken")


def test_a_second_quarantine_that_cannot_move_restores_the_journal_row_to_the_first_copy(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # spec 03: the intent is committed first; a move that did not happen is withdrawn, and
    # the row stands again for the copy it stood for (D-3c: every copy stays until its purge).
    table = dead_candidate(repo)
    store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))
    pass_(conn, store, table, FakeClock(T0))
    first = journal(db_path)
    assert first == [("at-1", "quarantined", quarantine_ref("at-1"), T0 + QUARANTINE_KEEP_MS)]

    store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))  # a second invalid receipt
    summary = pass_(conn, RefusingStore(store.root), table, FakeClock(T0 + 1000))

    # spec 04 row 14: the candidate fails naming why nothing was moved.
    assert entries(summary) == [
        ("14", "failed", "error:QuarantineNotDone: all quarantine slots of Attempt at-1 are taken")
    ]
    assert journal(db_path) == first
    assert (Path(store.root) / "at" / "at-1.json").exists()  # the receipt stays put
