"""ADR-0068 pass details no table row shows: the one grace is measured from the YOUNGEST probe,
the quarantine's purge time, a cleanup failure after the terminal commit, a database that
cannot be written, the probe and lock budget given, and the final verifier's revocations.

Through the public ``reconcile`` only, on real SQLite and real receipt files; the clock and the
process table are the fakes that implement the same ports (time has to be controlled here).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _primary_support import T0, make_candidate, receipt, status

from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    ReadResult,
    Receipt,
    capture_handle,
    inspect_handle,
)
from reconciler.primary import reconcile_connection
from storage import LockBudget, Repository, journal_get, journal_register

GRACE_S = 0.1  # spec 04: standalone
WEEK_MS = 7 * 24 * 3600 * 1000  # docs/decisions.md D-3a: quarantine keeps a receipt 7 days


@dataclass
class SlowProbes:
    """The fake process table behind a probe that takes ``step`` seconds of the fake clock;
    records the monotonic time at which each pid's stat was read."""

    table: FakeProcessTable
    clock: FakeClock
    step: float
    probed: dict[int, list[float]] = field(default_factory=dict)

    def boot_id(self) -> str:
        return self.table.boot_id()

    def read_stat(self, pid: int) -> str | None:
        self.clock.advance(self.step)
        self.probed.setdefault(pid, []).append(self.clock.monotonic())
        return self.table.read_stat(pid)


@dataclass
class WatchedStore:
    """The real receipt store, recording when each Attempt's receipt was read; ``fail_delete``
    makes deleting a receipt fail like a broken disk."""

    inner: FileReceiptStore
    clock: FakeClock
    reads: dict[str, list[float]] = field(default_factory=dict)
    fail_delete: bool = False

    def read(self, attempt_id: str) -> ReadResult:
        self.reads.setdefault(attempt_id, []).append(self.clock.monotonic())
        return self.inner.read(attempt_id)

    def publish(self, r: Receipt) -> None:
        self.inner.publish(r)

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str:
        return self.inner.quarantine(attempt_id, ref)

    def delete(self, attempt_id: str) -> None:
        if self.fail_delete:
            raise OSError("disk gone")
        self.inner.delete(attempt_id)

    def quarantine_ref(self, attempt_id: str) -> str:
        return self.inner.quarantine_ref(attempt_id)

    def __getattr__(self, name: str) -> Any:
        # The rest of the store port (root checks, quarantine slots) is the real store's.
        return getattr(self.inner, name)


def candidate(repo: Repository, table: FakeProcessTable, n: int, *, alive: bool) -> int:
    """A running Run/Attempt `run-n`/`at-n` whose handle names a fake process; its pid."""
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    if not alive:
        table.reap(pid)
    make_candidate(repo, f"run-{n}", f"at-{n}", handle=handle, pid=pid)
    return pid


def pass_(conn: Any, store: WatchedStore, provider: Any, clock: FakeClock) -> dict[str, Any]:
    return reconcile_connection(
        conn, store, provider, clock, profile="standalone", platform="linux"
    )


def test_the_one_grace_makes_the_youngest_probe_a_full_grace_old(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = FakeProcessTable()
    probes = SlowProbes(table, clock, step=0.04)
    pids = [candidate(repo, table, n, alive=False) for n in (1, 2, 3)]
    watched = WatchedStore(store, clock)

    summary = pass_(conn, watched, probes, clock)

    assert [(c["row"], c["outcome"]) for c in summary["candidates"]] == [("13", "recovered")] * 3
    assert summary["safe"] is True
    # Probed at 0.04, 0.08, 0.12: ONE sleep, and the last probe is then a full grace old.
    assert len(clock.sleeps) == 1
    for n, pid in enumerate(pids, start=1):
        [probed_at] = probes.probed[pid]
        first, second = watched.reads[f"at-{n}"]
        assert first < probed_at  # the receipt first, then the process (ADR-0068 §2)
        assert second - probed_at >= GRACE_S - 1e-9
        assert status(repo, f"run-{n}", f"at-{n}") == ("lost", "lost")
    youngest = max(p[0] for p in probes.probed.values())
    assert min(r[1] for r in watched.reads.values()) == pytest.approx(youngest + GRACE_S)


def test_a_grace_partly_passed_while_other_candidates_were_probed_is_not_paid_again(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # run-1's process is gone, run-2's is alive: probing run-2 takes 0.06 s after run-1's probe,
    # so only the rest of run-1's grace is slept (D-3a: one sleep, the youngest probe's grace).
    clock = FakeClock(T0)
    table = FakeProcessTable()
    probes = SlowProbes(table, clock, step=0.06)
    dead = candidate(repo, table, 1, alive=False)
    candidate(repo, table, 2, alive=True)
    watched = WatchedStore(store, clock)

    summary = pass_(conn, watched, probes, clock)

    outcomes = {c["run_id"]: (c["row"], c["outcome"]) for c in summary["candidates"]}
    assert outcomes == {"run-1": ("13", "recovered"), "run-2": ("12", "remaining")}
    assert clock.sleeps == [pytest.approx(GRACE_S - 0.06)]
    [probed_at] = probes.probed[dead]
    assert watched.reads["at-1"][1] == pytest.approx(probed_at + GRACE_S)


def test_a_sleep_that_wakes_early_is_resumed_until_the_grace_is_whole(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    class EarlyWaker(FakeClock):
        """A sleep that returns after half the time asked (at least 10 ms)."""

        def sleep(self, seconds: float) -> None:
            self.sleeps.append(seconds)
            self.advance(max(seconds / 2, 0.01))

    clock = EarlyWaker(T0)
    table = FakeProcessTable()
    probes = SlowProbes(table, clock, step=0.03)  # probed at 0.03, not at the clock's zero
    candidate(repo, table, 1, alive=False)
    watched = WatchedStore(store, clock)

    summary = pass_(conn, watched, probes, clock)

    assert [(c["row"], c["outcome"]) for c in summary["candidates"]] == [("13", "recovered")]
    assert len(clock.sleeps) > 1  # woken early, it slept again
    first, second = watched.reads["at-1"]
    assert second - first >= GRACE_S - 1e-9


def test_no_sleep_at_all_without_a_not_running_candidate(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    summary = pass_(conn, WatchedStore(store, clock), SlowProbes(table, clock, 0.5), clock)
    assert [c["outcome"] for c in summary["candidates"]] == ["remaining"]
    assert clock.sleeps == []


def test_an_invalid_receipt_is_quarantined_for_seven_days_from_the_quarantine(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)
    store.publish(receipt("run-1", "at-1", token="x" * 43))  # authenticates as nothing

    summary = pass_(conn, WatchedStore(store, clock), table, clock)

    [entry] = summary["candidates"]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "6",
        "unresolved",
        "invalid_receipt:token_mismatch",
    )
    row = journal_get(conn, "at-1")
    assert row is not None
    assert (row.state, row.quarantine_ref) == ("quarantined", ".quarantine/at/at-1.json")
    assert row.purge_after_ms == T0 + WEEK_MS
    assert row.updated_at_ms == T0


def test_a_receipt_invalid_on_the_second_read_is_quarantined_from_its_own_time(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # The wrapper publishes a bad receipt during the grace: row 13 -> as row 6, after the sleep.
    class PublishingClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            store.publish(receipt("run-1", "at-1", callback_sequence=5))

    clock = PublishingClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)

    summary = pass_(conn, WatchedStore(store, clock), table, clock)

    [entry] = summary["candidates"]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "13",
        "unresolved",
        "invalid_receipt:callback_sequence_mismatch",
    )
    row = journal_get(conn, "at-1")
    assert row is not None and row.state == "quarantined"
    assert row.purge_after_ms == T0 + int(GRACE_S * 1000) + WEEK_MS
    assert status(repo, "run-1", "at-1") == ("running", "running")


def test_a_trusted_receipt_is_deleted_and_its_journal_row_resolved_after_the_commit(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    journal_register(conn, "at-1", "run-1", T0)
    store.publish(receipt("run-1", "at-1"))

    summary = pass_(conn, WatchedStore(store, clock), table, clock)

    [entry] = summary["candidates"]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "5",
        "recovered",
        "receipt_succeeded",
    )
    assert status(repo, "run-1", "at-1") == ("succeeded", "succeeded")
    assert not (Path(store.root) / "at" / "at-1.json").exists()
    assert journal_get(conn, "at-1") is None  # resolving deletes the row (spec 03)


def test_a_failed_receipt_cleanup_after_the_commit_keeps_the_decision_and_names_the_error(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    store.publish(receipt("run-1", "at-1", exit_code=3))
    watched = WatchedStore(store, clock, fail_delete=True)

    summary = pass_(conn, watched, table, clock)

    [entry] = summary["candidates"]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "5",
        "recovered",
        "receipt_failed;cleanup_failed:OSError: disk gone",
    )
    assert status(repo, "run-1", "at-1") == ("failed", "failed")  # the commit stands
    assert (Path(store.root) / "at" / "at-1.json").exists()  # the leftover is harmless
    assert summary["safe"] is True


def _two_dead(repo: Repository) -> FakeProcessTable:
    table = FakeProcessTable()
    for n in (1, 2):
        candidate(repo, table, n, alive=False)
    return table


def test_a_database_that_cannot_be_written_stops_the_pass_and_names_the_file(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # docs/decisions.md "lock budget": a write that finds the database read-only stops every
    # later write; the candidate that found it fails naming the storage error and the file,
    # each later one fails as not attempted.
    clock = FakeClock(T0)
    table = _two_dead(repo)
    conn.execute("PRAGMA query_only = ON")  # every write answers SQLITE_READONLY
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    first, second = summary["candidates"]
    assert (first["row"], first["outcome"]) == ("14", "failed")
    assert first["reason"].startswith(
        f"error:DatabaseReadOnly: database {conn.path!r} cannot be written: "
    )
    assert (second["row"], second["outcome"], second["reason"]) == (
        "14",
        "failed",
        "database_read_only:not_attempted",
    )
    assert (summary["failed"], summary["safe"]) == (2, False)
    conn.execute("PRAGMA query_only = OFF")
    assert status(repo, "run-1", "at-1") == status(repo, "run-2", "at-2") == ("running", "running")


def test_a_connection_without_a_path_reports_the_driver_error_as_it_came(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = _two_dead(repo)
    plain = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        plain.execute("PRAGMA query_only = ON")
        summary = pass_(plain, WatchedStore(store, clock), table, clock)
    finally:
        plain.close()
    first, second = summary["candidates"]
    assert first["reason"].startswith("error:OperationalError: ")
    assert "readonly" in first["reason"]
    assert second["reason"] == "database_read_only:not_attempted"


@dataclass
class RecordingProbe:
    """The real probe, recording each handle it was asked about and the lock budget the pass's
    connection was charging its writes to at that moment."""

    conn: Any
    seen: list[tuple[str, Any]] = field(default_factory=list)

    def __call__(self, handle: str, provider: Any, *, platform: str) -> Any:
        self.seen.append((platform, getattr(self.conn, "lock_budget", None)))
        return inspect_handle(handle, provider, platform=platform)


def test_the_probe_and_the_lock_budget_given_are_the_ones_the_pass_uses(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = _two_dead(repo)
    probe = RecordingProbe(conn)
    budget = LockBudget(1.25)
    summary = reconcile_connection(
        conn, store, table, clock, platform="linux", budget=budget, probe=probe
    )
    assert [c["row"] for c in summary["candidates"]] == ["13", "13"]
    assert probe.seen == [("linux", budget)] * 2
    assert getattr(conn, "lock_budget", "gone") is None  # only while the pass runs


def test_without_a_lock_budget_the_pass_charges_the_one_of_the_environment(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QLFSM_LOCK_BUDGET_S", "0.75")
    clock = FakeClock(T0)
    table = _two_dead(repo)
    probe = RecordingProbe(conn)
    reconcile_connection(conn, store, table, clock, platform="linux", probe=probe)
    assert len(probe.seen) == 2
    charged = probe.seen[0][1]
    assert probe.seen[1][1] is charged  # one budget for the whole pass
    assert isinstance(charged, LockBudget) and charged.seconds == 0.75


# --- the final verifier (ADR-0068 §5, spec 04 "Final verifier") ---------------------------------


def before_the_verifier(monkeypatch: pytest.MonkeyPatch, change: Any) -> None:
    """Run ``change`` once, after the pass's writes, just before the verifier reads the
    candidates again (someone else writing meanwhile)."""
    import reconciler.primary._verify as verify

    real = verify.primary_candidates

    def again(conn: Any, *args: Any, **kw: Any) -> Any:
        change()
        return real(conn, *args, **kw)

    monkeypatch.setattr(verify, "primary_candidates", again)


def _verified(
    conn: Any,
    store: FileReceiptStore,
    monkeypatch: pytest.MonkeyPatch,
    change: Any,
    table: FakeProcessTable,
) -> list[tuple[str, str | None, str, str, str]]:
    clock = FakeClock(T0)
    before_the_verifier(monkeypatch, change)
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    return [
        (c["run_id"], c["attempt_id"], c["row"], c["outcome"], c["reason"])
        for c in summary["candidates"]
    ]


RETAINED = ("run-1", "at-1", "12", "remaining", "process_running")


def test_a_candidate_that_appeared_during_the_pass_is_reported_new_and_unresolved(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    got = _verified(conn, store, monkeypatch, lambda: candidate(repo, table, 9, alive=True), table)
    assert got == [RETAINED, ("run-9", None, "verifier", "unresolved", "new")]


def test_a_recovered_candidate_moved_back_is_reported_reappeared(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)

    def moved_back() -> None:
        conn.execute("UPDATE \"Runs\" SET status = 'running' WHERE id = 'run-1'")
        conn.execute("UPDATE \"RunAttempts\" SET status = 'running' WHERE id = 'at-1'")

    got = _verified(conn, store, monkeypatch, moved_back, table)
    assert got == [
        ("run-1", "at-1", "13", "recovered", "process_not_running:pid_absent"),
        ("run-1", None, "verifier", "unresolved", "reappeared"),
    ]


def test_a_retained_candidate_gone_from_the_candidates_is_revoked_as_vanished(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    ended = lambda: conn.execute("UPDATE \"Runs\" SET status = 'succeeded' WHERE id = 'run-1'")  # noqa: E731
    got = _verified(conn, store, monkeypatch, ended, table)
    assert got == [("run-1", "at-1", "12", "unresolved", "verifier:vanished")]


def test_a_retained_candidate_whose_process_ended_is_revoked(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = FakeProcessTable()
    pid = candidate(repo, table, 1, alive=True)
    got = _verified(conn, store, monkeypatch, lambda: table.reap(pid), table)
    assert got[0][:4] == ("run-1", "at-1", "12", "unresolved")
    assert got[0][4].startswith("verifier:process_not_running:")


def test_a_retained_candidate_whose_receipt_appeared_is_revoked(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    got = _verified(
        conn, store, monkeypatch, lambda: store.publish(receipt("run-1", "at-1")), table
    )
    assert got == [("run-1", "at-1", "12", "unresolved", "verifier:receipt_appeared")]


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE \"RunAttempts\" SET callback_sequence = callback_sequence + 1 WHERE id = 'at-1'",
        "UPDATE \"Runs\" SET version = version + 1 WHERE id = 'run-1'",
    ],
    ids=["attempt-callback-sequence", "run-version"],
)
def test_a_retained_candidate_whose_rows_changed_is_revoked_as_fingerprint_changed(
    repo: Repository,
    conn: Any,
    store: FileReceiptStore,
    monkeypatch: pytest.MonkeyPatch,
    sql: str,
) -> None:
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    got = _verified(conn, store, monkeypatch, lambda: conn.execute(sql), table)
    assert got == [("run-1", "at-1", "12", "unresolved", "verifier:fingerprint_changed")]


# --- a pass that stops writing, and a truncated page ---------------------------------------------


def test_a_write_that_finds_the_database_read_only_in_phase_1_skips_the_grace_of_the_waiting(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # run-1's process is gone (set aside for the grace); run-2 is `claimed`, whose `lost` is
    # written in phase 1 and finds the database read-only: nothing more is waited for.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)
    make_candidate(repo, "run-2", "at-2", attempt="claimed", run="dispatching")
    conn.execute("PRAGMA query_only = ON")
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    conn.execute("PRAGMA query_only = OFF")
    first, second = summary["candidates"]
    assert (first["row"], first["outcome"], first["reason"]) == (
        "14",
        "failed",
        "database_read_only:not_attempted",
    )
    assert (second["row"], second["outcome"]) == ("14", "failed")
    assert second["reason"].startswith("error:DatabaseReadOnly: ")
    assert clock.sleeps == []
    assert (summary["failed"], summary["safe"], summary["truncated"]) == (2, False, False)


def test_a_candidate_left_remaining_when_the_pass_stopped_writing_fails_unverified(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # run-1 alive (row 12, nothing to write), run-2 dead: its `lost` finds the database
    # read-only, so the verifier is not run and run-1 cannot count as safely remaining.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    candidate(repo, table, 2, alive=False)
    conn.execute("PRAGMA query_only = ON")
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    conn.execute("PRAGMA query_only = OFF")
    first, second = summary["candidates"]
    assert (first["run_id"], first["attempt_id"], first["row"], first["outcome"]) == (
        "run-1",
        "at-1",
        "12",
        "failed",
    )
    assert first["reason"] == "verifier:not_run:database_read_only"
    assert (second["row"], second["outcome"]) == ("14", "failed")
    assert second["reason"].startswith("error:DatabaseReadOnly: ")
    assert (summary["remaining"], summary["failed"], summary["safe"]) == (0, 2, False)
    assert summary["truncated"] is False


def test_a_page_truncated_at_one_candidate_decides_nothing_and_reads_no_evidence(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reconciler.primary._pass as pass_module
    from storage import primary_candidates

    monkeypatch.setattr(pass_module, "primary_candidates", lambda c: primary_candidates(c, limit=1))
    clock = FakeClock(T0)
    table = _two_dead(repo)
    watched = WatchedStore(store, clock)
    summary = pass_(conn, watched, table, clock)
    assert summary["truncated"] is True and summary["safe"] is False
    assert summary["candidates"] == [] and summary["scanned"] == 1
    assert "dry_run" not in summary
    assert watched.reads == {} and clock.sleeps == []
    assert status(repo, "run-1", "at-1") == status(repo, "run-2", "at-2") == ("running", "running")


def test_a_complete_pass_over_a_page_that_fits_reports_it_untruncated(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    assert summary["truncated"] is False and summary["safe"] is True
    assert (summary["scanned"], summary["remaining"]) == (1, 1)


def test_the_reconciler_made_without_options_is_the_standalone_pass_that_writes(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # The class's own defaults are reconcile's: the standalone grace, and not a dry run.
    from reconciler.primary import PrimaryReconciler

    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)
    summary = PrimaryReconciler(conn, store, table, clock, platform="linux").run()
    assert "dry_run" not in summary
    assert clock.sleeps == [pytest.approx(GRACE_S)]
    assert status(repo, "run-1", "at-1") == ("lost", "lost")


def _unreadable_attempt(conn: Any, attempt_id: str) -> None:
    """Attempt ``attempt_id``'s log id no longer UTF-8: its Run's Attempts cannot be read."""
    conn.execute(
        "UPDATE \"RunAttempts\" SET log_artifact_id = CAST(X'6c6f67ff' AS TEXT) WHERE id = ?",
        (attempt_id,),
    )


@pytest.mark.parametrize("launched", ["starting", "running"])
def test_a_missing_root_beside_a_launched_attempt_raises_naming_it_past_an_unreadable_run(
    repo: Repository, conn: Any, tmp_path: Path, launched: str
) -> None:
    from reconciler.node import ReceiptRootError

    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)
    _unreadable_attempt(conn, "at-1")  # skipped by the root check, reported in phase 1
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    make_candidate(repo, "run-2", "at-2", attempt=launched, handle=handle, pid=pid)
    root = tmp_path / "no-such-receipts"
    with pytest.raises(ReceiptRootError) as raised:
        pass_(conn, WatchedStore(FileReceiptStore(str(root)), FakeClock(T0)), table, FakeClock(T0))
    assert str(raised.value) == (
        f"receipt root {str(root)!r} does not exist, yet Attempt at-2 of Run run-2 is "
        f"{launched} (the launcher creates the root before any spawn): point the receipt root "
        "at the launcher's receipt directory, or restore it"
    )
    assert status(repo, "run-2", "at-2")[1] == launched


def test_an_unreadable_candidate_row_fails_alone_naming_the_row(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    candidate(repo, table, 2, alive=True)
    # A Run id that is not UTF-8 (written by another tool): the candidate query reads it
    # leniently and names the problem.
    conn.execute(
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
        "execution_origin, execution_owner, status, version, event_sequence, created_at_ms) "
        "VALUES (CAST(X'72756e2d30ff' AS TEXT), 'default', 'task', '1', 'manual', 'manual', "
        "'runtime', 'dispatching', 3, 3, 1700000000000)"
    )
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    first, second, third = summary["candidates"]
    assert (first["run_id"], first["row"], first["outcome"]) == ("run-0\\xff", "14", "failed")
    assert first["reason"].startswith("error:BadRow: Runs.id is ")
    assert [(c["row"], c["outcome"]) for c in (second, third)] == [("12", "remaining")] * 2


def test_a_live_process_of_pid_1_is_a_valid_pid_and_remains(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # spec 03: a pid is valid from 1 on; pid 1's live process is probed like any other.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    table.spawn(pid=1)
    make_candidate(repo, "run-1", "at-1", handle=capture_handle(1, table, platform="linux"), pid=1)
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    [entry] = summary["candidates"]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "12",
        "remaining",
        "process_running",
    )


class Undescribable(OSError):
    """An error whose text cannot be read the first time it is asked for."""

    asked = 0

    def __str__(self) -> str:
        Undescribable.asked += 1
        if Undescribable.asked == 1:
            raise RuntimeError("cannot describe")
        return "described"


def test_an_error_after_the_commit_keeps_the_decision_and_appends_its_name(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Naming the cleanup failure itself fails: the candidate is still the committed completion,
    # and the error that escaped is appended to the reason it already has.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    store.publish(receipt("run-1", "at-1", exit_code=3))
    watched = WatchedStore(store, clock)

    def broken(attempt_id: str) -> None:
        raise Undescribable("disk gone")

    monkeypatch.setattr(watched, "delete", broken)
    monkeypatch.setattr(Undescribable, "asked", 0)
    summary = pass_(conn, watched, table, clock)
    [entry] = summary["candidates"]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "5",
        "recovered",
        "receipt_failed;error:RuntimeError: cannot describe",
    )
    assert status(repo, "run-1", "at-1") == ("failed", "failed")


def test_a_lock_error_escaping_a_candidate_is_named_busy_with_the_connections_wait(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # The driver's "database is locked" (as a read that waited the busy timeout raises it),
    # here from the probe port: named under its storage name with the time the connection
    # waits, and the pass stops writing.
    def locked(handle: str, provider: Any, *, platform: str) -> Any:
        raise sqlite3.OperationalError("database is locked")

    clock = FakeClock(T0)
    table = _two_dead(repo)
    assert conn.busy_timeout_s >= 0.1
    summary = reconcile_connection(conn, store, table, clock, platform="linux", probe=locked)
    first, second = summary["candidates"]
    assert (first["row"], first["outcome"]) == ("14", "failed")
    assert first["reason"] == (
        f"error:Busy: database {conn.path!r} is locked by another process (waited "
        f"{conn.busy_timeout_s:.1f} s); try again when that process has finished writing"
    )
    assert second["reason"] == "database_locked:not_attempted"


class FailsAtTheSecondRead(FakeClock):
    """A monotonic clock that fails the read phase 2 starts with (the second reading after
    the grace's sleep; the first is the grace's own check that it slept enough)."""

    def __init__(self, start_ms: int) -> None:
        super().__init__(start_ms)
        self.after_sleep = 0

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.after_sleep = 1

    def monotonic(self) -> float:
        if self.after_sleep:
            self.after_sleep += 1
            if self.after_sleep == 3:
                raise OSError("the monotonic clock is gone")
        return super().monotonic()


def test_a_clock_that_fails_before_the_second_read_fails_that_candidate_naming_the_error(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # spec 04 row 14: an error while handling the candidate, before its phase 2 read anything.
    clock = FailsAtTheSecondRead(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=False)
    summary = pass_(conn, store, table, clock)
    assert [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]] == [
        ("14", "failed", "error:OSError: the monotonic clock is gone")
    ]
    assert status(repo, "run-1", "at-1") == ("running", "running")


def test_a_page_run_with_its_own_query_is_verified_by_that_query_not_start_up_s(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # D-26: `qlfsm drain` gives each page its window; the final verifier re-reads the page
    # with that window, so what the window says (here: more candidates past it) is reported.
    from reconciler.primary import PrimaryReconciler
    from storage import primary_candidates

    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    asked: list[Any] = []

    def window(c: Any) -> tuple[list[Any], bool]:
        asked.append(c)
        return primary_candidates(c)[0], True

    page, truncated = primary_candidates(conn)
    assert truncated is False
    reconciler = PrimaryReconciler(conn, store, table, clock, platform="linux")
    summary = reconciler.run_page(page, window)
    assert asked == [conn]
    assert summary["truncated"] is True
    assert (summary["scanned"], summary["remaining"]) == (1, 1)
