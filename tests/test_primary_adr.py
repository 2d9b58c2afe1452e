"""ADR-0068 "验证" (verification) items, the shared grace, and the final verifier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    T0,
    CountingProvider,
    ForbiddenProvider,
    dead_handle,
    last_sequence,
    linux_only,
    make_candidate,
    make_run,
    other_connection,
    receipt,
    recovery_events,
    sleepers,
)
from conftest import read_snapshot

from reconciler import _reconcile, startup
from reconciler._reconcile import primary_pass
from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    MemoryReceiptStore,
    ProcProvider,
    capture_handle,
)
from reconciler.primary import GRACE_MS, reconcile_connection
from storage import Repository, connect


def traced(conn: Any) -> list[str]:
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    return statements


# --- 1. zero candidates -----------------------------------------------------------------------

ZERO_CANDIDATES = {
    "safe": True,
    "scanned": 0,
    "recovered": 0,
    "remaining": 0,
    "unresolved": 0,
    "failed": 0,
    "truncated": False,
    "candidates": [],
}


def test_zero_candidates_cost_exactly_one_statement_and_nothing_else(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The application layer's zero-candidate short-circuit (spec 04 "Before any candidate").
    statements: list[str] = []
    real_open = _reconcile.open_database

    def traced_open(db: str, **kwargs: Any) -> Any:
        conn = real_open(db, **kwargs)  # opening runs no SQL (D-2): trace from right after it
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(_reconcile, "open_database", traced_open)
    missing_root = tmp_path / "no" / "receipts"
    provider = ForbiddenProvider()
    clock = FakeClock()
    summary = primary_pass(str(db_path), str(missing_root), "edge", clock=clock, provider=provider)
    assert len(statements) == 1 and statements[0].startswith("SELECT r.id")
    assert summary == ZERO_CANDIDATES
    assert not missing_root.exists() and not missing_root.parent.exists()
    assert provider.calls == [] and clock.sleeps == []


def test_the_primary_part_of_a_zero_candidate_startup_costs_exactly_one_statement(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # spec 04 "Before any candidate", through `startup`: the connection of its primary pass
    # runs the candidate query and nothing else (the schema check before the first write,
    # D-15, and the sweep after a SAFE pass use connections of their own).
    per_connection: list[list[str]] = []
    real_open = _reconcile.open_database

    def traced_open(db: str, **kwargs: Any) -> Any:
        conn = real_open(db, **kwargs)  # opening runs no SQL (D-2): trace from right after it
        statements: list[str] = []
        per_connection.append(statements)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(_reconcile, "open_database", traced_open)
    root = tmp_path / "receipts"
    report = startup(str(db_path), str(root), profile="edge", origins="", notify=lambda _: None)
    primary = [s for s in per_connection if any(q.startswith("SELECT r.id") for q in s)]
    assert len(primary) == 1 and len(primary[0]) == 1
    assert report.safe and report.primary.as_dict() == ZERO_CANDIDATES


def test_the_application_layer_reads_the_candidate_page_once_and_the_verifier_once_more(
    repo: Repository, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The page the zero-candidate check read is the page the pass decides (issue 28: one
    # read); the final verifier's re-read of the page is ADR-0068 §5's own.
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    statements: list[str] = []
    real_open = _reconcile.open_database

    def traced_open(db: str, **kwargs: Any) -> Any:
        conn = real_open(db, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(_reconcile, "open_database", traced_open)
    summary = primary_pass(str(db_path), str(tmp_path / "r"), "edge", clock=FakeClock())
    assert summary["recovered"] == 1
    page = [q for q in statements if q.startswith("SELECT r.id, r.status, r.version, (SELECT")]
    assert len(page) == 2


def test_zero_candidates_through_the_pass_itself_cost_exactly_one_statement_and_nothing_else(
    db_path: Path, tmp_path: Path
) -> None:
    # The same rule, applied by the pass to the page it reads when it is called directly.
    conn = connect(str(db_path))  # opening runs no SQL (D-2): trace from right after it
    statements = traced(conn)
    missing_root = tmp_path / "no" / "receipts"
    provider = ForbiddenProvider()
    clock = FakeClock()
    try:
        summary = reconcile_connection(
            conn, FileReceiptStore(str(missing_root)), provider, clock, profile="edge"
        )
    finally:
        conn.close()
    assert len(statements) == 1 and statements[0].startswith("SELECT r.id")
    assert json.dumps(summary) == json.dumps(ZERO_CANDIDATES)
    assert not missing_root.exists() and not missing_root.parent.exists()
    assert provider.calls == [] and clock.sleeps == []


def test_zero_candidates_read_no_receipt_through_the_port(conn: Any) -> None:
    store = MemoryReceiptStore()
    reconcile_connection(conn, store, ForbiddenProvider(), FakeClock())
    assert store.reads == []


# --- 2. truncation ----------------------------------------------------------------------------


def test_a_truncated_page_reads_no_evidence_and_writes_nothing(
    repo: Repository, conn: Any, db_path: Path
) -> None:
    for i in range(257):
        make_candidate(repo, f"run-{i:03d}", f"at-{i:03d}", attempt="claimed", run="dispatching")
    before = read_snapshot(db_path)
    store = MemoryReceiptStore()
    provider = ForbiddenProvider()
    clock = FakeClock()
    statements = traced(conn)
    summary = reconcile_connection(conn, store, provider, clock)
    assert summary["truncated"] is True and summary["safe"] is False
    # QingLong reports the 256 candidates it observed; none was decided (docs/decisions.md).
    assert summary["candidates"] == [] and summary["scanned"] == 256
    assert store.reads == [] and provider.calls == [] and clock.sleeps == []
    assert len(statements) == 1
    assert read_snapshot(db_path) == before


def test_exactly_256_candidates_are_not_truncated(repo: Repository, conn: Any) -> None:
    for i in range(256):
        make_candidate(repo, f"run-{i:03d}", f"at-{i:03d}", attempt="claimed", run="dispatching")
    summary = reconcile_connection(conn, MemoryReceiptStore(), ForbiddenProvider(), FakeClock())
    assert summary["truncated"] is False and summary["recovered"] == 256 and summary["safe"]


# --- 3. claimed is lost unprobed; a missing or invalid handle never is ------------------------


def test_claimed_is_lost_but_a_starting_attempt_without_a_good_handle_is_not(
    repo: Repository, conn: Any
) -> None:
    make_candidate(repo, "run-a", "at-a", attempt="claimed", run="dispatching")
    make_candidate(repo, "run-b", "at-b", attempt="starting", run="dispatching")
    make_candidate(
        repo, "run-c", "at-c", attempt="starting", run="dispatching", handle="nope", pid=9
    )
    provider = ForbiddenProvider()
    summary = reconcile_connection(conn, MemoryReceiptStore(), provider, FakeClock())
    outcomes = [(c["run_id"], c["row"], c["outcome"]) for c in summary["candidates"]]
    assert outcomes == [
        ("run-a", "7", "recovered"),
        ("run-b", "8", "unresolved"),
        ("run-c", "10", "unresolved"),
    ]
    assert provider.calls == []
    for attempt_id in ("at-b", "at-c"):
        att = repo.get_attempt(attempt_id)
        assert att is not None and att.status == "starting"


# --- 4. receipt before probe, one transaction, delete after commit ----------------------------


def test_a_receipt_is_consumed_before_any_probe_in_one_transaction_then_deleted(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    store = FileReceiptStore(str(tmp_path / "r"))
    store.publish(receipt("run-1", "at-1"))
    order: list[str] = []
    statements = traced(conn)

    class Watching(FileReceiptStore):
        def delete(self, attempt_id: str) -> None:
            order.append(f"delete after {sum(s == 'COMMIT' for s in statements)} commits")
            super().delete(attempt_id)

    provider = ForbiddenProvider()
    summary = reconcile_connection(conn, Watching(store.root), provider, FakeClock())
    assert summary["recovered"] == 1 and provider.calls == []
    begins = [s for s in statements if s.startswith("BEGIN")]
    assert begins[0] == "BEGIN IMMEDIATE"
    assert order == ["delete after 1 commits"]  # the terminal commit came first
    assert statements.count("BEGIN IMMEDIATE") == 2  # the advance, then the journal resolve


# --- 5. a live exact process: checked twice, never terminalized -------------------------------


@linux_only
def test_a_live_process_is_probed_in_the_pass_and_again_in_the_verifier(
    repo: Repository, conn: Any
) -> None:
    with sleepers(2) as procs:
        for i, s in enumerate(procs):
            make_candidate(repo, f"run-{i}", f"at-{i}", handle=s.handle, pid=s.pid)
        provider = CountingProvider()
        summary = reconcile_connection(conn, MemoryReceiptStore(), provider, FakeClock())
        for s in procs:
            assert provider.calls.count(f"stat:{s.pid}") == 2
    assert summary["remaining"] == 2 and summary["safe"] is True
    runs = [repo.get_run(f"run-{i}") for i in range(2)]
    assert [run.status if run else None for run in runs] == ["running", "running"]


# --- 6. a change during final verification revokes safety ------------------------------------


@linux_only
@pytest.mark.parametrize("change", ["process_killed", "receipt_appeared", "row_changed"])
def test_a_change_during_final_verification_revokes_safety(
    repo: Repository, conn: Any, db_path: Path, change: str
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        store = MemoryReceiptStore()
        other = other_connection(db_path)

        def during_verification(attempt_id: str) -> None:
            if len(store.reads) != 2:  # 1 = the pass, 2 = the verifier
                return
            if change == "process_killed":
                s.stop()
            elif change == "receipt_appeared":
                store.publish(receipt("run-1", "at-1"))
            else:
                other.execute('UPDATE "Runs" SET version = version + 1 WHERE id = ?', ("run-1",))

        store.on_read.append(during_verification)
        try:
            summary = reconcile_connection(conn, store, ProcProvider(), FakeClock())
        finally:
            other.close()
    entry = summary["candidates"][0]
    assert summary["safe"] is False and summary["remaining"] == 0 and summary["unresolved"] == 1
    assert (entry["row"], entry["outcome"]) == ("12", "unresolved")
    assert entry["reason"].startswith("verifier:")


def test_a_candidate_that_appears_during_the_pass_revokes_safety(
    repo: Repository, conn: Any, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    store = MemoryReceiptStore()

    def a_new_run_starts_dispatching(attempt_id: str) -> None:
        other_repo = Repository(connect(str(db_path)))
        try:
            make_run(other_repo, "run-9", "dispatching")
        finally:
            other_repo.conn.close()

    store.on_read.append(a_new_run_starts_dispatching)
    summary = reconcile_connection(conn, store, ForbiddenProvider(), FakeClock())
    assert summary["safe"] is False
    assert summary["candidates"][-1] == {
        "run_id": "run-9",
        "attempt_id": None,
        "row": "verifier",
        "outcome": "unresolved",
        "reason": "new",
    }
    assert summary["scanned"] == 2 == summary["recovered"] + summary["unresolved"]


# --- the grace --------------------------------------------------------------------------------


@linux_only
def test_a_receipt_published_during_the_grace_gives_succeeded_never_lost(
    repo: Repository, conn: Any
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    store = MemoryReceiptStore()

    class PublishingClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            store.publish(receipt("run-1", "at-1"))  # the launcher finishes its publication

    before = last_sequence(repo, "run-1")
    clock = PublishingClock()
    summary = reconcile_connection(conn, store, ProcProvider(), clock)
    entry = summary["candidates"][0]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "13",
        "recovered",
        "receipt_succeeded_after_grace",
    )
    assert [t for t, _, _ in recovery_events(repo, "run-1", before)] == [
        "attempt.succeeded",
        "run.succeeded",
    ]
    assert clock.sleeps == [0.1] and store.files == {}


def dead_candidates(repo: Repository, suffixes: list[str]) -> FakeProcessTable:
    """A runtime candidate `run-<s>`/`at-<s>` per suffix, its process already reaped."""
    table = FakeProcessTable()
    for s in suffixes:
        pid = table.spawn()
        handle = capture_handle(pid, table, platform="linux")
        table.reap(pid)
        make_candidate(repo, f"run-{s}", f"at-{s}", handle=handle, pid=pid)
    return table


def test_256_dead_processes_cost_one_grace(repo: Repository, conn: Any) -> None:
    table = dead_candidates(repo, [f"{i:03d}" for i in range(256)])
    clock = FakeClock()
    summary = reconcile_connection(
        conn, MemoryReceiptStore(), table, clock, profile="edge", platform="linux"
    )
    assert clock.sleeps == [GRACE_MS["edge"] / 1000]
    assert summary["recovered"] == 256 and summary["safe"] is True
    assert {c["row"] for c in summary["candidates"]} == {"13"}


def test_each_second_read_is_a_full_grace_after_its_own_probe(repo: Repository, conn: Any) -> None:
    table = dead_candidates(repo, [str(i) for i in range(5)])

    class TickingClock(FakeClock):
        """Time passes while probing: 7 ms per reading of the monotonic clock."""

        def monotonic(self) -> float:
            self.advance(0.007)
            return super().monotonic()

    clock = TickingClock()
    store = MemoryReceiptStore()
    reads: dict[str, list[float]] = {}
    store.on_read.append(lambda a: reads.setdefault(a, []).append(clock.monotonic()))
    reconcile_connection(conn, store, table, clock, platform="linux")
    assert len(clock.sleeps) == 1 and clock.sleeps[0] < 0.1  # less: earlier probes aged already
    for first, second in reads.values():
        assert second - first >= 0.1


def test_profiles_set_the_grace_and_cluster_profiles_refuse(conn: Any) -> None:
    from reconciler import ProfileError

    assert GRACE_MS == {"edge": 50, "standalone": 100}
    for profile in ("cluster-control", "worker", "laptop"):
        with pytest.raises(ProfileError):
            reconcile_connection(
                conn, MemoryReceiptStore(), ForbiddenProvider(), FakeClock(), profile=profile
            )


# --- 7. the zero-candidate start-up stays light -----------------------------------------------


def test_the_zero_candidate_cli_path_is_safe_and_imports_no_test_library(
    db_path: Path, tmp_path: Path
) -> None:
    # ADR-0068 item 7 asks for a small production closure: the start-up path never loads a
    # test library (the one-statement fact is pinned by the trace tests above).
    code = (
        "import sys, json\n"
        "from reconciler._reconcile import primary_pass\n"
        "from reconciler.cli._reconcile import exit_code\n"
        f"summary = primary_pass({str(db_path)!r}, {str(tmp_path / 'r')!r}, 'edge')\n"
        "rc = exit_code(summary)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'hypothesis', 'pytest'})\n"
        "print(json.dumps([summary['safe'], rc, heavy]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == [True, 0, []]


def test_recovery_at_times_never_precede_the_rows_they_move(repo: Repository, conn: Any) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    reconcile_connection(
        conn, MemoryReceiptStore(), ForbiddenProvider(), FakeClock(start_ms=T0 - 5_000)
    )
    assert all(e.created_at_ms >= T0 for e in repo.events_of("run-1"))


@linux_only
def test_a_proc_outage_during_final_verification_fails_the_retained_candidate(
    repo: Repository, conn: Any
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        provider = CountingProvider()
        store = MemoryReceiptStore()

        def proc_goes_away(attempt_id: str) -> None:
            if len(store.reads) == 2:  # the verifier's read: /proc is gone from now on
                provider.inner = ProcProvider("/nonexistent-proc")

        store.on_read.append(proc_goes_away)
        summary = reconcile_connection(conn, store, provider, FakeClock())
    entry = summary["candidates"][0]
    assert (entry["outcome"], entry["reason"]) == ("failed", "verifier:provider_unavailable")
    assert summary["safe"] is False and summary["failed"] == 1
