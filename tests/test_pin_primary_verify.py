"""ADR-0068 §5, the final verifier, where no row of spec 04 shows it: the second proof of a
retained candidate reads the receipt root, probes on the pass's platform, re-reads the Run and
its Attempts, and an error while proving one candidate fails that candidate alone.

Through the public ``reconcile`` only, on real SQLite and real receipt files; the clock, the
process table and the probe are the fakes that implement the same ports.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from _primary_support import T0, decisions, insert_bare_runs
from test_pin_primary_pass import (
    RecordingProbe,
    WatchedStore,
    before_the_verifier,
    candidate,
    pass_,
)

from reconciler.node import Evidence, FakeClock, FakeProcessTable, FileReceiptStore, inspect_handle
from reconciler.primary import reconcile_connection
from storage import LockBudget, Repository


def test_a_retained_candidate_whose_receipt_root_vanished_is_revoked_naming_the_root(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # D-3c: a missing root beside a `running` Attempt is configuration, not "no receipt": the
    # verifier cannot prove the candidate a second time and says why.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    before_the_verifier(monkeypatch, lambda: shutil.rmtree(store.root))
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    assert decisions(summary) == [
        ("run-1", "at-1", "12", "unresolved", f"verifier:receipt_root_missing:{store.root}")
    ]
    assert summary["safe"] is False


def test_a_retained_candidate_whose_attempts_were_deleted_is_revoked_as_fingerprint_changed(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Run is still a candidate (same status, same version) and its process still runs,
    # but it has no Attempt any more: nothing is left to prove the fingerprint against.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)

    def deleted() -> None:
        conn.execute("DELETE FROM \"RunAttempts\" WHERE id = 'at-1'")

    before_the_verifier(monkeypatch, deleted)
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    assert decisions(summary) == [
        ("run-1", "at-1", "12", "unresolved", "verifier:fingerprint_changed")
    ]


def test_the_verifier_probes_on_the_platform_and_budget_of_the_pass(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # The second probe is the same inspection as the first (spec 03 "Inspection"), on the
    # platform the pass was given, while the pass's lock budget is charged.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    probe = RecordingProbe(conn)
    budget = LockBudget(1.5)
    summary = reconcile_connection(
        conn, store, table, clock, platform="linux", budget=budget, probe=probe
    )
    assert decisions(summary) == [("run-1", "at-1", "12", "remaining", "process_running")]
    assert probe.seen == [("linux", budget)] * 2  # phase 1, then the verifier


def test_an_error_while_verifying_fails_that_candidate_naming_the_error(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # ADR-0068 §5: a candidate the verifier could not prove is not safely remaining; the error
    # is named and the next candidate is still verified.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    broken_pid = candidate(repo, table, 1, alive=True)
    candidate(repo, table, 2, alive=True)
    calls: dict[int, int] = {}

    def probe(handle: str, provider: Any, *, platform: str) -> Any:
        evidence = inspect_handle(handle, provider, platform=platform)
        calls[evidence.pid] = calls.get(evidence.pid, 0) + 1
        if evidence.pid == broken_pid and calls[evidence.pid] == 2:
            raise OSError("proc  table\n gone")
        return evidence

    summary = reconcile_connection(conn, store, table, clock, platform="linux", probe=probe)
    assert decisions(summary) == [
        ("run-1", "at-1", "12", "failed", "verifier_error:OSError: proc table gone"),
        ("run-2", "at-2", "12", "remaining", "process_running"),
    ]
    assert (summary["remaining"], summary["failed"], summary["safe"]) == (1, 1, False)


def test_a_retained_candidate_whose_attempt_pid_moved_during_the_pass_is_revoked(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # spec 04 "Final verifier": `RunAttempts.pid` is one of the fields a retained candidate must
    # keep. Its handle, status, sequence and version are untouched and its process still runs:
    # only the stored pid moved after row 12 was committed.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    pid = candidate(repo, table, 1, alive=True)

    def moved() -> None:
        conn.execute("UPDATE \"RunAttempts\" SET pid = ? WHERE id = 'at-1'", (pid + 1,))

    before_the_verifier(monkeypatch, moved)
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    assert decisions(summary) == [
        ("run-1", "at-1", "12", "unresolved", "verifier:fingerprint_changed")
    ]
    assert summary["safe"] is False


def test_a_retained_candidate_whose_second_probe_names_another_pid_is_revoked(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # ADR-0068 §5: the second proof is the exact identity again, `RunAttempts.pid` included
    # (row 11's comparison): a running process under another pid proves nothing about this one.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    calls: list[str] = []

    def probe(handle: str, provider: Any, *, platform: str) -> Any:
        evidence = inspect_handle(handle, provider, platform=platform)
        calls.append(evidence.verdict)
        if len(calls) == 2:  # the verifier's probe
            return Evidence(evidence.verdict, evidence.reason, evidence.pid + 1)
        return evidence

    summary = reconcile_connection(conn, store, table, clock, platform="linux", probe=probe)
    assert calls == ["running", "running"]
    assert decisions(summary) == [
        ("run-1", "at-1", "12", "unresolved", "verifier:process_running:identity_matches")
    ]
    assert summary["safe"] is False


def test_a_retained_candidate_beyond_a_truncated_second_page_is_not_revoked_as_vanished(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # spec 04 "Final verifier" reads the page again; when that page is truncated, a retained
    # candidate missing from it may lie beyond it: absence proves nothing, so it is not
    # `vanished`. It is not proven a second time either, and the summary says so: truncated,
    # not safe. `run-9` sorts after the 257 Runs written meanwhile (`run-000`...).
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 9, alive=True)
    before_the_verifier(monkeypatch, lambda: insert_bare_runs(conn, 257))
    summary = pass_(conn, WatchedStore(store, clock), table, clock)
    got = decisions(summary)
    assert got[-1] == ("run-9", "at-9", "12", "remaining", "process_running")
    assert got[:-1] == [(f"run-{i:03d}", None, "verifier", "unresolved", "new") for i in range(256)]
    assert (summary["truncated"], summary["safe"], summary["remaining"]) == (True, False, 1)


def test_a_retained_candidate_whose_run_is_deleted_while_the_verifier_probes_is_revoked(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # The verifier's candidate query still saw the Run; it is gone when read again after the
    # second probe: nothing is left to prove, which is `fingerprint_changed`, not an error.
    clock = FakeClock(T0)
    table = FakeProcessTable()
    candidate(repo, table, 1, alive=True)
    calls: list[str] = []

    def probe(handle: str, provider: Any, *, platform: str) -> Any:
        calls.append(handle)
        if len(calls) == 2:  # the verifier's probe
            conn.execute("PRAGMA foreign_keys = OFF")
            conn.execute("DELETE FROM \"Runs\" WHERE id = 'run-1'")
            conn.execute("PRAGMA foreign_keys = ON")
        return inspect_handle(handle, provider, platform=platform)

    summary = reconcile_connection(conn, store, table, clock, platform="linux", probe=probe)
    assert len(calls) == 2
    assert decisions(summary) == [
        ("run-1", "at-1", "12", "unresolved", "verifier:fingerprint_changed")
    ]
    assert summary["safe"] is False
