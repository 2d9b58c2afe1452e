"""spec 04's decision table rows 8-14 (process identity, the grace, errors), on real SQLite
files, receipt files and real child processes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    RECONCILER,
    CountingProvider,
    ForbiddenProvider,
    dead_handle,
    last_sequence,
    linux_only,
    make_candidate,
    only,
    other_connection,
    proc_root,
    receipt,
    recovery_events,
    run_pass,
    sleepers,
    status,
)

from reconciler.node import (
    FakeClock,
    FileReceiptStore,
    ProcessHandle,
    ProcProvider,
    format_handle,
    inspect_handle,
    parse_handle,
)
from reconciler.primary import reconcile_connection
from storage import Repository

# --- rows 8-11: evidence that is not enough ----------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
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


@linux_only
def test_row_9_proc_vanishing_mid_pass_is_failed_never_lost_although_the_boot_id_is_kept(
    repo: Repository, conn: Any, store: FileReceiptStore, tmp_path: Path
) -> None:
    # The boot id is read once per pass (D-13). A /proc that vanishes after that has no
    # <pid>/stat either: the next candidate's absent stat must be provider_unavailable (row 9),
    # never pid_absent -> not_running -> lost (spec 03: unknown is never gone).
    with sleepers() as [s]:
        real = parse_handle(s.handle)
        assert real is not None
        fake = proc_root(tmp_path, real.boot_id, [])  # the table is there; both pids absent
        boots: list[str] = []

        class Counting(ProcProvider):
            def boot_id(self) -> str:
                boots.append("boot_id")
                return super().boot_id()

        for n, pid in enumerate((s.pid + 100_000, s.pid + 100_001), 1):
            handle = format_handle(
                ProcessHandle(f"h-{n}", real.boot_id, pid, pid, real.start_ticks)
            )
            make_candidate(repo, f"run-{n}", f"at-{n}", handle=handle, pid=pid)
        probed: list[str] = []

        def probe(handle_text: object, provider: Any, *, platform: str = "linux") -> Any:
            evidence = inspect_handle(handle_text, provider, platform=platform)
            probed.append(evidence.reason)
            if len(probed) == 1:
                shutil.rmtree(fake.proc_root)  # /proc is gone after the first probe
            return evidence

        summary = reconcile_connection(
            conn, store, Counting(fake.proc_root), FakeClock(), probe=probe
        )
    first, second = summary["candidates"]
    assert probed == ["pid_absent", "provider_unavailable"]
    assert (first["row"], first["outcome"]) == ("13", "recovered")
    assert (second["row"], second["outcome"], second["reason"]) == (
        "9",
        "failed",
        "provider_unavailable",
    )
    assert status(repo, "run-2", "at-2") == ("running", "running")
    assert boots == ["boot_id"]  # once for the pass


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
        summary = reconcile_connection(
            conn, store, ForbiddenProvider(), FakeClock(), platform="darwin"
        )
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
