"""spec 04's decision table rows 1-7 (the database and the receipt decide), on real SQLite
files and real receipt files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    RECEIPT,
    RECONCILER,
    T0,
    ForbiddenProvider,
    dead_handle,
    last_sequence,
    make_candidate,
    make_run,
    only,
    other_connection,
    receipt,
    recovery_events,
    run_pass,
    status,
)

from reconciler.node import FakeClock, FileReceiptStore, MemoryReceiptStore
from storage import Repository, journal_get, journal_register

# --- rows 1-4: the database alone decides ------------------------------------------------------


def test_row_1_more_than_one_active_attempt_is_unresolved(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    v = make_candidate(repo, "run-1", "at-1", attempt="starting", run="dispatching")
    repo.create_attempt(run_id="run-1", attempt_id="at-2", expected_version=v, at_ms=T0)
    provider = ForbiddenProvider()
    summary = run_pass(conn, store, provider)
    assert only(summary) == {
        "run_id": "run-1",
        "attempt_id": None,
        "row": "1",
        "outcome": "unresolved",
        "reason": "multiple_active_attempts",
    }
    assert summary["safe"] is False and provider.calls == []
    assert status(repo, "run-1") == ("dispatching",)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("DELETE FROM \"Runs\" WHERE id = 'run-2'", "run_gone"),
        ("UPDATE \"Runs\" SET execution_owner = 'legacy' WHERE id = 'run-2'", "not_runtime_owned"),
        ("UPDATE \"Runs\" SET status = 'running' WHERE id = 'run-2'", "status_changed"),
    ],
)
def test_row_2_a_run_that_changed_since_the_page_is_unresolved(
    repo: Repository, conn: Any, db_path: Path, change: str, reason: str
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    make_candidate(repo, "run-2", "at-2", attempt="claimed", run="dispatching")
    store = MemoryReceiptStore()
    other = other_connection(db_path)

    def someone_else_moves_run_2(attempt_id: str) -> None:
        if attempt_id == "at-1":  # while run-1 is handled, after the page was read
            other.execute(change)

    store.on_read.append(someone_else_moves_run_2)
    try:
        summary = run_pass(conn, store, ForbiddenProvider())
    finally:
        other.close()
    second = summary["candidates"][1]
    assert (second["run_id"], second["row"], second["outcome"], second["reason"]) == (
        "run-2",
        "2",
        "unresolved",
        reason,
    )


def test_row_3_a_dispatching_run_without_any_attempt_is_lost(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_run(repo, "run-1", "dispatching")
    before = last_sequence(repo, "run-1")
    summary = run_pass(conn, store, ForbiddenProvider())
    assert only(summary)["row"] == "3" and only(summary)["outcome"] == "recovered"
    assert status(repo, "run-1") == ("lost",)
    assert recovery_events(repo, "run-1", before) == [("run.lost", *RECONCILER)]
    [event] = repo.events_of("run-1")[before:]
    assert event.attempt_id is None
    assert event.dedupe_key == f"local-recovery:run:run-1:{before}:missing-attempt"
    assert event.payload["error_code"] == "RECOVERY_ATTEMPT_MISSING_BEFORE_START"
    run = repo.get_run("run-1")
    assert run is not None and run.finished_at_ms is None  # lost is not terminal (spec 01)
    assert summary["safe"] is True


def test_row_3b_a_running_run_without_an_active_attempt_is_unresolved(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_run(repo, "run-1", "running")
    assert only(run_pass(conn, store, ForbiddenProvider()))["row"] == "3b"
    assert status(repo, "run-1") == ("running",)


def test_row_4_an_older_active_attempt_behind_a_finished_latest_is_unresolved(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    v = make_candidate(repo, "run-1", "at-1", attempt="starting", run="dispatching")
    repo.create_attempt(run_id="run-1", attempt_id="at-2", expected_version=v, at_ms=T0)
    other = other_connection(db_path)
    other.execute("UPDATE \"RunAttempts\" SET status = 'failed' WHERE id = 'at-2'")
    other.close()
    entry = only(run_pass(conn, store, ForbiddenProvider()))
    assert (entry["row"], entry["attempt_id"], entry["reason"]) == (
        "4",
        "at-2",
        "latest_attempt_not_active",
    )


# --- row 5: a trusted receipt, before any probe ------------------------------------------------


@pytest.mark.parametrize(
    ("exit_code", "cancel", "terminal", "error"),
    [
        (0, None, "succeeded", None),
        (3, None, "failed", "EXECUTION_FAILED"),
        (0, "user", "cancelled", "EXECUTION_CANCELLED"),
        (1, "timeout", "timed_out", "EXECUTION_TIMED_OUT"),
    ],
)
def test_row_5_a_trusted_receipt_terminalizes_attempt_then_run_and_is_deleted_after_commit(
    repo: Repository,
    conn: Any,
    db_path: Path,
    store: FileReceiptStore,
    exit_code: int,
    cancel: str | None,
    terminal: str,
    error: str | None,
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    if cancel is not None:
        other = other_connection(db_path)
        other.execute(
            'UPDATE "Runs" SET cancel_requested_at_ms = ?, cancel_reason = ? WHERE id = ?',
            (T0, cancel, "run-1"),
        )
        other.close()
    journal_register(conn, "at-1", "run-1", T0)  # autocommit: the launcher's pending row
    store.publish(receipt("run-1", "at-1", exit_code))
    before = last_sequence(repo, "run-1")
    provider = ForbiddenProvider()
    summary = run_pass(conn, store, provider)
    assert only(summary) == {
        "run_id": "run-1",
        "attempt_id": "at-1",
        "row": "5",
        "outcome": "recovered",
        "reason": f"receipt_{terminal}",
    }
    assert provider.calls == []  # receipt first: no process was probed (ADR-0068 §2)
    assert status(repo, "run-1", "at-1") == (terminal, terminal)
    assert recovery_events(repo, "run-1", before) == [
        (f"attempt.{terminal}", *RECEIPT),
        (f"run.{terminal}", *RECEIPT),
    ]
    att_event, run_event = repo.events_of("run-1")[before:]
    assert att_event.dedupe_key == "local-completion:at-1:1:attempt"
    assert run_event.dedupe_key == "local-completion:at-1:1:run"
    assert att_event.payload["exit_code"] == exit_code
    assert att_event.payload["callback_sequence"] == 1
    att = repo.get_attempt("at-1")
    assert att is not None and att.callback_sequence == 1 and att.exit_code == exit_code
    assert att.error_code == error
    assert store.read("at-1").__class__.__name__ == "Missing"
    assert not (Path(store.root) / "at" / "at-1.json").exists()
    assert journal_get(conn, "at-1") is None
    assert token_absent_from(db_path)


def token_absent_from(db_path: Path) -> bool:
    from _primary_support import TOKEN

    return TOKEN.encode() not in db_path.read_bytes()


def test_row_5_a_receipt_for_a_starting_attempt_walks_legal_edges_through_running(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # D-3: dispatching/starting -> running -> succeeded, one event per edge, one transaction.
    make_candidate(repo, "run-1", "at-1", attempt="starting", run="dispatching")
    store.publish(receipt("run-1", "at-1"))
    before = last_sequence(repo, "run-1")
    entry = only(run_pass(conn, store, ForbiddenProvider()))
    assert (entry["row"], entry["outcome"]) == ("5", "recovered")
    assert recovery_events(repo, "run-1", before) == [
        ("attempt.running", *RECEIPT),
        ("run.running", *RECEIPT),
        ("attempt.succeeded", *RECEIPT),
        ("run.succeeded", *RECEIPT),
    ]
    versions = [e.payload["version"] for e in repo.events_of("run-1")[before:]]
    assert versions == [before + 1, before + 2, before + 3, before + 4]
    att = repo.get_attempt("at-1")
    assert att is not None and att.started_at_ms == T0 + 10  # the receipt's start


def test_row_5_a_receipt_for_a_claimed_attempt_starts_it_first(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    from _primary_support import TOKEN_HASH

    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    other = other_connection(db_path)
    other.execute(
        'UPDATE "RunAttempts" SET callback_token_hash = ? WHERE id = ?', (TOKEN_HASH, "at-1")
    )
    other.close()
    store.publish(receipt("run-1", "at-1", 2))
    before = last_sequence(repo, "run-1")
    assert only(run_pass(conn, store, ForbiddenProvider()))["reason"] == "receipt_failed"
    assert [t for t, _, _ in recovery_events(repo, "run-1", before)] == [
        "attempt.starting",
        "attempt.running",
        "run.running",
        "attempt.failed",
        "run.failed",
    ]


# --- row 6: an invalid receipt -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["garbage", "wrong_token", "wrong_sequence"])
def test_row_6_an_invalid_receipt_is_quarantined_and_the_candidate_stays_unresolved(
    repo: Repository, conn: Any, store: FileReceiptStore, kind: str
) -> None:
    make_candidate(repo, "run-1", "at-1", handle=dead_handle()[0], pid=1)
    path = Path(store.root) / "at" / "at-1.json"
    if kind == "garbage":
        path.parent.mkdir(parents=True)
        path.write_bytes(b"{not json")
    elif kind == "wrong_token":
        store.publish(receipt("run-1", "at-1", token="x" * 43))
    else:
        store.publish(receipt("run-1", "at-1", callback_sequence=2))
    before = last_sequence(repo, "run-1")
    provider = ForbiddenProvider()
    summary = run_pass(conn, store, provider)
    entry = only(summary)
    assert (entry["row"], entry["outcome"]) == ("6", "unresolved")
    assert entry["reason"].startswith("invalid_receipt:")
    assert summary["safe"] is False and provider.calls == []
    assert status(repo, "run-1", "at-1") == ("running", "running")
    assert recovery_events(repo, "run-1", before) == []  # never a task failure
    assert not path.exists()
    assert (Path(store.root) / ".quarantine" / "at" / "at-1.json").exists()
    row = journal_get(conn, "at-1")
    assert row is not None and row.state == "quarantined"
    assert row.quarantine_ref == ".quarantine/at/at-1.json"


# --- row 7: an unstarted claim -----------------------------------------------------------------


def test_row_7_a_claimed_attempt_is_lost_without_probing_any_process(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    before = last_sequence(repo, "run-1")
    provider = ForbiddenProvider()
    clock = FakeClock()
    entry = only(run_pass(conn, store, provider, clock))
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "7",
        "recovered",
        "unstarted_claim",
    )
    assert provider.calls == [] and clock.sleeps == []
    assert status(repo, "run-1", "at-1") == ("lost", "lost")
    assert recovery_events(repo, "run-1", before) == [
        ("attempt.lost", *RECONCILER),
        ("run.lost", *RECONCILER),
    ]
    att_event, run_event = repo.events_of("run-1")[before:]
    assert att_event.dedupe_key == "local-recovery:attempt:at-1:0:unstarted_claim"
    assert run_event.dedupe_key == f"local-recovery:run:run-1:at-1:{before}:unstarted_claim"
    assert att_event.payload["error_code"] == "RECOVERY_UNSTARTED_CLAIM"


def test_the_summary_has_exactly_spec_04s_keys_and_no_secret(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    summary = run_pass(conn, store, ForbiddenProvider())
    assert list(summary) == [
        "safe",
        "scanned",
        "recovered",
        "remaining",
        "unresolved",
        "failed",
        "truncated",
        "candidates",
    ]
    assert set(summary["candidates"][0]) == {"run_id", "attempt_id", "row", "outcome", "reason"}
    assert summary["scanned"] == 1 == summary["recovered"]
    assert "tok_" not in json.dumps(summary)


def test_row_6_a_quarantined_receipt_keeps_blocking_on_the_next_start_up(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    store.publish(receipt("run-1", "at-1", token="y" * 43))
    assert only(run_pass(conn, store))["reason"] == "invalid_receipt:token_mismatch"
    # Next boot: the file sits in quarantine; the process is still gone. Not lost: blocked.
    provider = ForbiddenProvider()
    entry = only(run_pass(conn, store, provider))
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "6",
        "unresolved",
        "receipt_quarantined_earlier",
    )
    assert provider.calls == []
    assert status(repo, "run-1", "at-1") == ("running", "running")
