"""spec 04's decision table, row by row, on real SQLite files, receipt files and processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_primary_support import (
    T0,
    CountingProvider,
    ForbiddenProvider,
    dead_handle,
    last_sequence,
    linux_only,
    make_candidate,
    make_run,
    other_connection,
    proc_root,
    receipt,
    recovery_events,
    sleepers,
)

from reconciler._clock import FakeClock
from reconciler._identity import ProcessProvider, ProcProvider, format_handle, parse_handle
from reconciler._primary import reconcile
from reconciler._receipt_store import FileReceiptStore, MemoryReceiptStore, ReceiptStore
from storage import Repository, connect, journal_get, journal_register

RECONCILER = ("reconciler", "local-startup")
RECEIPT = ("executor", "completion-receipt")


@pytest.fixture
def conn(db_path: Path) -> Iterator[Any]:
    c = connect(str(db_path))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def store(tmp_path: Path) -> FileReceiptStore:
    return FileReceiptStore(str(tmp_path / "receipts"))


def run_pass(
    conn: Any,
    store: ReceiptStore,
    provider: ProcessProvider | None = None,
    clock: FakeClock | None = None,
) -> dict[str, Any]:
    return reconcile(conn, store, provider or ProcProvider(), clock or FakeClock())


def only(summary: dict[str, Any]) -> dict[str, Any]:
    [entry] = summary["candidates"]
    return dict(entry)


def status(repo: Repository, run_id: str, attempt_id: str | None = None) -> tuple[str, ...]:
    run = repo.get_run(run_id)
    assert run is not None
    if attempt_id is None:
        return (run.status,)
    att = repo.get_attempt(attempt_id)
    assert att is not None
    return run.status, att.status


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
    from test_primary_support import TOKEN

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
    from test_primary_support import TOKEN_HASH

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


# --- rows 8-11: evidence that is not enough ----------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"executor_type": "docker", "handle": "x", "pid": 5}, "executor_not_local_process"),
        ({}, "handle_missing"),
        ({"pid": 0}, "handle_missing"),
    ],
)
def test_row_8_a_starting_attempt_without_usable_identity_is_unresolved_never_lost(
    repo: Repository, conn: Any, store: FileReceiptStore, kwargs: dict[str, Any], reason: str
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="starting", run="dispatching", **kwargs)
    entry = only(run_pass(conn, store, ForbiddenProvider()))
    assert (entry["row"], entry["outcome"], entry["reason"]) == ("8", "unresolved", reason)
    assert status(repo, "run-1", "at-1") == ("dispatching", "starting")


@linux_only
def test_row_8_a_pid_that_is_not_positive_is_unresolved(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=-4)
        entry = only(run_pass(conn, store, ForbiddenProvider()))
    assert (entry["row"], entry["reason"]) == ("8", "pid_invalid")


@linux_only
def test_row_9_an_unreadable_proc_is_failed(
    repo: Repository, conn: Any, store: FileReceiptStore, tmp_path: Path
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        broken = ProcProvider(str(tmp_path / "no-proc-here"))
        summary = run_pass(conn, store, broken)
    entry = only(summary)
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "9",
        "failed",
        "provider_unavailable",
    )
    assert summary["failed"] == 1 and summary["safe"] is False
    assert status(repo, "run-1", "at-1") == ("running", "running")


def test_row_10_an_invalid_handle_is_unresolved_without_reading_proc(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.garbage", pid=42)
    provider = ForbiddenProvider()
    entry = only(run_pass(conn, store, provider))
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "10",
        "unresolved",
        "invalid_handle",
    )
    assert provider.calls == []


@linux_only
def test_row_10_an_unsupported_platform_is_unresolved(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        summary = reconcile(conn, store, ForbiddenProvider(), FakeClock(), platform="darwin")
    assert (only(summary)["row"], only(summary)["reason"]) == ("10", "unsupported_platform")


@linux_only
def test_row_11_a_handle_naming_another_pid_is_unresolved(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid + 1)
        entry = only(run_pass(conn, store))
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "11",
        "unresolved",
        "handle_pid_mismatch",
    )


# --- row 12: the exact process is alive --------------------------------------------------------


@linux_only
def test_row_12_a_live_sleep_is_retained_and_proven_again_by_the_verifier(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        before = last_sequence(repo, "run-1")
        provider = CountingProvider()
        clock = FakeClock()
        summary = run_pass(conn, store, provider, clock)
    assert only(summary) == {
        "run_id": "run-1",
        "attempt_id": "at-1",
        "row": "12",
        "outcome": "remaining",
        "reason": "process_running",
    }
    assert summary["safe"] is True and summary["remaining"] == 1
    assert provider.calls.count(f"stat:{s.pid}") == 2  # the pass, then the verifier
    assert clock.sleeps == []
    assert recovery_events(repo, "run-1", before) == []  # already running: nothing to write


@linux_only
def test_row_12_a_live_process_of_a_starting_attempt_is_adopted_as_running(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(
            repo, "run-1", "at-1", attempt="starting", run="dispatching", handle=s.handle, pid=s.pid
        )
        before = last_sequence(repo, "run-1")
        summary = run_pass(conn, store)
    assert only(summary)["outcome"] == "remaining" and summary["safe"] is True
    assert status(repo, "run-1", "at-1") == ("running", "running")
    assert recovery_events(repo, "run-1", before) == [
        ("attempt.running", *RECONCILER),
        ("run.running", *RECONCILER),
    ]
    att_event, run_event = repo.events_of("run-1")[before:]
    assert att_event.payload["evidence"] == "durable_process_identity"
    assert att_event.dedupe_key == "local-recovery:attempt:at-1:0:running"
    assert run_event.dedupe_key == f"local-recovery:run:run-1:at-1:{before + 1}:running"


# --- row 13: trusted negative evidence, the grace, the receipt again ---------------------------


def _lost_after_grace(repo: Repository, before: int, entry: dict[str, Any], why: str) -> None:
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "13",
        "recovered",
        f"process_not_running:{why}",
    )
    assert status(repo, "run-1", "at-1") == ("lost", "lost")
    assert recovery_events(repo, "run-1", before) == [
        ("attempt.lost", *RECONCILER),
        ("run.lost", *RECONCILER),
    ]
    att_event, run_event = repo.events_of("run-1")[before:]
    assert att_event.payload["error_code"] == "RECOVERY_PROCESS_NOT_RUNNING"
    assert att_event.dedupe_key == "local-recovery:attempt:at-1:0:process_not_running"
    assert run_event.dedupe_key == f"local-recovery:run:run-1:at-1:{before}:process_not_running"
    run = repo.get_run("run-1")
    assert run is not None and run.finished_at_ms is None


@linux_only
def test_row_13_an_exited_process_is_lost_after_one_grace(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    before = last_sequence(repo, "run-1")
    clock = FakeClock()
    summary = run_pass(conn, store, ProcProvider(), clock)
    _lost_after_grace(repo, before, only(summary), "pid_absent")
    assert clock.sleeps == [0.1]  # standalone: 100 ms, once
    assert summary["safe"] is True


@linux_only
def test_row_13_a_reused_pid_with_other_start_ticks_is_lost(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        real = parse_handle(s.handle)
        assert real is not None
        earlier = format_handle(
            type(real)(
                real.handle_id,
                real.boot_id,
                real.pid,
                real.pgid,
                str(int(real.start_ticks) - 1 or 2),
            )
        )
        make_candidate(repo, "run-1", "at-1", handle=earlier, pid=s.pid)
        before = last_sequence(repo, "run-1")
        summary = run_pass(conn, store)
        assert s.proc.poll() is None  # the process now holding the pid is left alone
    _lost_after_grace(repo, before, only(summary), "start_ticks_differ")


@linux_only
def test_row_13_a_handle_from_another_boot_is_lost(
    repo: Repository, conn: Any, store: FileReceiptStore, tmp_path: Path
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        rebooted = proc_root(tmp_path, "11111111-2222-4333-8444-555555555555", [s.pid])
        before = last_sequence(repo, "run-1")
        summary = run_pass(conn, store, rebooted)
    _lost_after_grace(repo, before, only(summary), "boot_id_differs")


@linux_only
def test_row_13_a_run_changed_during_the_grace_is_not_lost(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    other = other_connection(db_path)

    class MovingClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            other.execute('UPDATE "Runs" SET version = version + 1 WHERE id = ?', ("run-1",))

    try:
        entry = only(run_pass(conn, store, ProcProvider(), MovingClock()))
    finally:
        other.close()
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "13",
        "unresolved",
        "changed_before_lost",
    )
    assert status(repo, "run-1", "at-1") == ("running", "running")


# --- row 14: an error rolls the advance back ---------------------------------------------------


@linux_only
def test_row_14_a_conflicting_writer_fails_the_candidate_and_nothing_is_written(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", handle=dead_handle()[0], pid=7)
    store.publish(receipt("run-1", "at-1"))
    other = other_connection(db_path)

    class RacingStore(FileReceiptStore):
        def read(self, attempt_id: str) -> Any:
            found = super().read(attempt_id)
            # After the decision's read, before its transaction: the CAS must fail.
            other.execute('UPDATE "Runs" SET version = version + 1 WHERE id = ?', ("run-1",))
            return found

    before = last_sequence(repo, "run-1")
    try:
        summary = run_pass(conn, RacingStore(store.root), ForbiddenProvider())
    finally:
        other.close()
    entry = only(summary)
    assert (entry["row"], entry["outcome"]) == ("14", "failed")
    assert entry["reason"].startswith("error:Conflict")
    assert status(repo, "run-1", "at-1") == ("running", "running")
    assert recovery_events(repo, "run-1", before) == []
    assert (Path(store.root) / "at" / "at-1.json").exists()  # never delete-then-commit


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
