"""Three differences from QingLong's recovery that docs/decisions.md D-18 names (entries 13-15),
each pinned on real files and processes: a receipt that appears while the final verifier
re-checks a live process (ADR-0068 §5), a RunningInstances finish time past 2^53 ms (spec 05,
ADR-0448), and a FIFO at a receipt path (ADR-0068 §3, spec 03)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    dead_handle,
    linux_only,
    make_candidate,
    receipt,
    sleepers,
)
from _shadow_support import T0_MS, LegacyDb

from reconciler.cli._reconcile import render
from reconciler.node import FakeClock, FileReceiptStore, ProcProvider, Receipt, receipt_path
from reconciler.primary import reconcile_connection
from storage import Repository

MAX_SAFE = 2**53 - 1
LOG = "/ql/data/log/job_a/2026-01-01-00-00-00.log"


def qlfsm(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOYMENT"))}
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True, text=True, check=False, timeout=timeout, env=env,
    )  # fmt: skip


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` read through a second, fresh, read-only connection."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as reader:
        return [tuple(r) for r in reader.execute(sql).fetchall()]


# --- 13. a receipt that appears during the final verification revokes safety ----------------


class PublishedDuringVerification(FileReceiptStore):
    """The real store; the receipt is published (atomically, as the wrapper does) right
    before the verifier's read, the second read of the Attempt (the pass read it first)."""

    def __init__(self, root: str, late: Receipt) -> None:
        super().__init__(root)
        self.late = late
        self.reads = 0

    def read(self, attempt_id: str) -> Any:
        self.reads += 1
        if self.reads == 2:
            self.publish(self.late)
        return super().read(attempt_id)


@linux_only
def test_a_receipt_published_while_the_verifier_rechecks_a_live_process_revokes_safety(
    repo: Repository, conn: Any, db_path: Path, tmp_path: Path
) -> None:
    # D-18 13: QingLong's verify() runs its receipt processor there and completes the Run;
    # qlfsm's verifier proves a retained candidate a second time or revokes (ADR-0068 §5).
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        events_before = rows(db_path, 'SELECT COUNT(*) FROM "RunEvents"')
        store = PublishedDuringVerification(str(root), receipt("run-1", "at-1"))
        summary = reconcile_connection(conn, store, ProcProvider(), FakeClock())
        assert store.reads == 2
        assert summary["safe"] is False and summary["remaining"] == 0
        assert summary["candidates"] == [
            {
                "run_id": "run-1",
                "attempt_id": "at-1",
                "row": "12",
                "outcome": "unresolved",
                "reason": "verifier:receipt_appeared",
            }
        ]
        # Nothing applied: the Run and Attempt still run, no event, the receipt where the
        # wrapper put it, no journal row; the next start-up reads it first (row 5).
        assert rows(db_path, 'SELECT status FROM "Runs"') == [("running",)]
        assert rows(db_path, 'SELECT status FROM "RunAttempts"') == [("running",)]
        assert rows(db_path, 'SELECT COUNT(*) FROM "RunEvents"') == events_before
        assert rows(db_path, 'SELECT * FROM "LocalCompletionReceiptJournal"') == []
        assert Path(receipt_path(str(root), "at-1")).is_file()
        lines = render(summary, str(db_path), str(root)).splitlines()
        assert [ln.split() for ln in lines if ln.startswith("run-1 ")] == [
            ["run-1", "at-1", "12", "unresolved", "verifier:receipt_appeared"]
        ]
        assert lines[-1] == "verdict: start-up BLOCKED"

        after = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert after.returncode == 0, after.stderr
    [cand] = json.loads(after.stdout)["primary"]["candidates"]
    assert (cand["row"], cand["outcome"], cand["reason"]) == ("5", "recovered", "receipt_succeeded")
    assert rows(db_path, 'SELECT status FROM "Runs"') == [("succeeded",)]


# --- 14. a RunningInstances finish time past 2^53 ms: that row has no finish time ----------


def shadow_cli(db: LegacyDb) -> subprocess.CompletedProcess[str]:
    db.close()
    return qlfsm("shadow", "--db", db.path, "--origins", "manual", "--json")


def outcomes(out: subprocess.CompletedProcess[str]) -> dict[str, int]:
    assert out.returncode == 0, out.stderr
    audit = json.loads(out.stdout)
    return {k: v for k, v in audit["report"]["outcomes"].items() if v}


def test_a_finish_time_past_2_53_milliseconds_is_ignored_for_that_row_only(
    tmp_path: Path,
) -> None:
    # D-18 14: QingLong's evidence reader throws and the whole candidate fails (row 12);
    # qlfsm reads that row as one without `finished_at` (spec 05: no terminal evidence), so
    # its Run is lost by row 10, and never writes a time QingLong cannot read back.
    db = LegacyDb(tmp_path / "ql.db")
    past = db.run(pid=41005, log_path=LOG)
    edge = db.run(pid=41006, log_path=LOG + ".edge")
    other = db.run(pid=41007, log_path=LOG + ".other")
    assert past.cron_id and edge.cron_id and other.cron_id
    db.instance(past.cron_id, pid=41005, log_path=LOG, status=2, finished_s=MAX_SAFE // 1000 + 1)
    # The largest finish time that fits is still a finish time: row 6, cancelled.
    db.instance(edge.cron_id, pid=41006, log_path=LOG + ".edge", status=2,
                finished_s=MAX_SAFE // 1000)  # fmt: skip
    db.instance(other.cron_id, pid=41007, log_path=LOG + ".other", status=1,
                finished_s=T0_MS // 1000 + 90)  # fmt: skip
    got = outcomes(shadow_cli(db))
    assert got == {"completed": 1, "cancelled": 1, "markedLost": 1}
    status = dict(rows(Path(db.path), 'SELECT id, status FROM "Runs"'))
    assert status == {past.run_id: "lost", edge.run_id: "cancelled", other.run_id: "succeeded"}
    widest = rows(
        Path(db.path),
        'SELECT MAX(m) FROM (SELECT finished_at_ms AS m FROM "Runs" UNION ALL '
        'SELECT finished_at_ms FROM "RunAttempts" UNION ALL SELECT created_at_ms FROM "RunEvents")',
    )[0][0]
    assert widest <= MAX_SAFE


# --- 15. a FIFO at a receipt path is an invalid receipt, read without blocking --------------


@linux_only
def test_a_fifo_at_the_receipt_path_is_an_invalid_receipt_and_start_up_does_not_hang(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    # D-18 15: QingLong's pass opens the path for reading and waits for a writer for ever;
    # qlfsm opens it O_NONBLOCK, finds no regular file: spec 04 row 6, quarantined.
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    fifo = Path(receipt_path(str(root), "at-1"))
    fifo.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.mkfifo(fifo, 0o600)

    out = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(root), timeout=60)

    assert out.returncode == 3, out.stdout + out.stderr
    [line] = [ln for ln in out.stdout.splitlines() if ln.startswith("run-1 ")]
    assert line.split() == ["run-1", "6", "blocked", "invalid_receipt:not_regular_file"]
    assert out.stdout.rstrip().endswith("verdict: start-up BLOCKED")
    assert not os.path.lexists(fifo)  # moved aside, kept for its retention (ADR-0068 §3)
    [(state, ref)] = rows(
        db_path, 'SELECT state, quarantine_ref FROM "LocalCompletionReceiptJournal"'
    )
    assert state == "quarantined" and stat.S_ISFIFO(os.lstat(root / ref).st_mode)
    assert rows(db_path, 'SELECT status FROM "Runs"') == [("running",)]


@pytest.mark.parametrize("seconds", [MAX_SAFE // 1000 + 1, 2**62])
def test_the_instance_reader_gives_no_finish_time_past_2_53_milliseconds(
    tmp_path: Path, seconds: int
) -> None:
    from storage import instance_evidence

    db = LegacyDb(tmp_path / "ql.db")
    try:
        cron = db.cron()
        db.instance(cron, pid=1, log_path=LOG, status=2, finished_s=seconds)
        db.instance(cron, pid=2, log_path=LOG + "2", status=2, finished_s=MAX_SAFE // 1000)
        evidence, truncated = instance_evidence(db.conn, cron)
    finally:
        db.close()
    assert not truncated
    assert {e.pid: e.finished_at_ms for e in evidence} == {1: None, 2: MAX_SAFE // 1000 * 1000}
