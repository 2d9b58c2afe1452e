"""ADR-0068 §2, gathering the evidence the core asks for and the one grace, where no row of
spec 04 shows it: the monotonic clock is read only as differences, and a receipt is
authenticated against the Attempt's recorded start.

Through the public ``reconcile`` only, on real SQLite and real receipt files; the clock and the
process table are the fakes that implement the same ports.
"""

from __future__ import annotations

from typing import Any

import pytest
from _primary_support import T0, receipt, status
from test_pin_primary_pass import GRACE_S, WatchedStore, candidate, pass_

from reconciler.node import FakeClock, FakeProcessTable, FileReceiptStore
from storage import Repository, journal_get


class NegativeMonotonic(FakeClock):
    """A monotonic clock whose readings are all below zero: only differences between two
    readings mean anything (its reference point is undefined, as `time.monotonic`'s is)."""

    def __init__(self, start_ms: int) -> None:
        super().__init__(start_ms)
        self._mono = -1000.0


def test_a_monotonic_clock_below_zero_still_pays_exactly_one_grace(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = NegativeMonotonic(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)
    watched = WatchedStore(store, clock)
    summary = pass_(conn, watched, table, clock)
    assert [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]] == [
        ("13", "recovered", "process_not_running:pid_absent")
    ]
    assert clock.sleeps == [pytest.approx(GRACE_S)]
    first, second = watched.reads["at-1"]
    assert second - first == pytest.approx(GRACE_S)
    assert status(repo, "run-1", "at-1") == ("lost", "lost")


def test_a_receipt_started_before_its_attempt_was_started_is_quarantined(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # spec 03 "Authentication": the receipt is checked against the Attempt's recorded start as
    # well as its creation; here it starts after the creation, 40 ms before the start.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    conn.execute("UPDATE \"RunAttempts\" SET started_at_ms = ? WHERE id = 'at-1'", (T0 + 50,))
    store.publish(receipt("run-1", "at-1", started_at_ms=T0 + 10))
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    assert [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]] == [
        ("6", "unresolved", "invalid_receipt:started_before_attempt_started")
    ]
    row = journal_get(conn, "at-1")
    assert row is not None and row.state == "quarantined"
    assert status(repo, "run-1", "at-1") == ("running", "running")
