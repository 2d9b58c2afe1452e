"""The receipt root is checked as a root, not as receipts (D-3c): a root or shard that is not a
real directory is configuration, never a journal row; a quarantine that did not happen is never
claimed; and a mistake, once fixed, leaves nothing behind that blocks. Real SQLite files, real
receipt roots, real processes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    NOT_A_DIRECTORY,
    ForbiddenProvider,
    dead_handle,
    linux_only,
    make_candidate,
    only,
    plant_not_a_directory,
    qlfsm,
    receipt,
    run_pass,
    sleepers,
    status,
)
from conftest import Snapshot

from reconciler import UsageError
from reconciler.node import (
    FakeClock,
    FileReceiptStore,
    MemoryReceiptStore,
    ReceiptRootError,
    quarantine_ref,
)
from reconciler.primary import reconcile_connection
from storage import Repository, journal_get, journal_register

pytestmark = linux_only

ROOT_KINDS = list(NOT_A_DIRECTORY)
plant_root = plant_not_a_directory


def reconcile_cli(db_path: Path, root: Path | str) -> Any:
    return qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json")


# --- a root that exists but is not a real directory: exit 2, nothing written ------------------


@pytest.mark.parametrize("kind", ROOT_KINDS)
def test_a_root_that_is_not_a_real_directory_exits_2_before_anything_is_written(
    repo: Repository,
    db_path: Path,
    tmp_path: Path,
    snapshot: Callable[[], Snapshot],
    kind: str,
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)  # would be lost
    make_candidate(repo, "run-2", "at-2", attempt="claimed", run="dispatching")  # would be lost
    root = tmp_path / "receipts"
    plant_root(root, kind)
    before = snapshot()
    out = reconcile_cli(db_path, root)
    assert out.returncode == 2, out.stderr
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and str(root) in out.stderr
    assert "not a directory" in out.stderr
    assert snapshot() == before  # no journal row, no event, no state change
    assert not (tmp_path / "real-receipts" / ".quarantine").exists()  # (symlink_to_directory)


def test_the_same_root_check_applies_to_startup(
    repo: Repository, db_path: Path, tmp_path: Path, snapshot: Callable[[], Snapshot]
) -> None:
    make_candidate(repo, "run-1", "at-1", handle=dead_handle()[0], pid=1)
    root = tmp_path / "receipts"
    plant_root(root, "regular_file")
    before = snapshot()
    out = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert out.returncode == 2 and "not a directory" in out.stderr, out.stderr
    assert snapshot() == before


def test_zero_candidates_still_refuse_a_root_that_is_a_regular_file_without_any_sql(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # README's fault table: a root that is a file is exit 2, whatever the candidates (one
    # lstat, taken before the database is opened: not even the candidate statement runs).
    root = tmp_path / "receipts"
    plant_root(root, "regular_file")
    out = reconcile_cli(db_path, root)
    assert out.returncode == 2, out.stderr
    assert out.stdout == "" and out.stderr.count("\n") == 1
    assert str(root) in out.stderr and "a regular file, not a directory" in out.stderr
    assert root.read_bytes() == b"not a directory\n"
    from reconciler import _reconcile

    opened: list[str] = []
    monkeypatch.setattr(_reconcile, "open_database", lambda db, **_: opened.append(db))
    with pytest.raises(UsageError, match="regular file"):
        _reconcile.primary_pass(str(db_path), str(root), "edge")
    assert opened == []


def test_the_api_raises_the_root_error_before_any_write(
    repo: Repository, conn: Any, tmp_path: Path, snapshot: Callable[[], Snapshot]
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    root = tmp_path / "receipts"
    plant_root(root, "symlink_loop")
    before = snapshot()
    with pytest.raises(ReceiptRootError, match="symbolic link"):
        reconcile_connection(conn, FileReceiptStore(str(root)), ForbiddenProvider(), FakeClock())
    assert snapshot() == before


# --- a missing root ---------------------------------------------------------------------------


def test_a_missing_root_beside_a_launched_attempt_is_a_configuration_error(
    repo: Repository, db_path: Path, tmp_path: Path, snapshot: Callable[[], Snapshot]
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-2", "at-2", attempt="claimed", run="dispatching")
    make_candidate(repo, "run-9", "at-9", handle=handle, pid=pid)
    root = tmp_path / "no-such-receipts"
    before = snapshot()
    out = reconcile_cli(db_path, root)
    # Not "no receipt" (which would make the dead run-9 `lost` and hide a completion published
    # under the real root): exit 2, naming the root and the launched Attempt, nothing written.
    assert out.returncode == 2, out.stderr
    assert str(root) in out.stderr and "at-9" in out.stderr and "does not exist" in out.stderr
    assert out.stderr.count("\n") == 1
    assert snapshot() == before
    assert not root.exists()


def test_a_missing_root_with_only_unlaunched_claims_is_no_receipt(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    root = tmp_path / "no-such-receipts"
    summary = run_pass(conn, FileReceiptStore(str(root)), ForbiddenProvider())
    assert (only(summary)["row"], only(summary)["outcome"]) == ("7", "recovered")
    assert not root.exists()  # reading never creates it


def test_a_root_that_vanishes_mid_pass_leaves_a_launched_candidate_unresolved(
    repo: Repository, conn: Any
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    make_candidate(repo, "run-2", "at-2", handle=dead_handle()[0], pid=7)
    store = MemoryReceiptStore()

    def root_removed(attempt_id: str) -> None:
        store.root_state = "missing"

    store.on_read.append(root_removed)
    provider = ForbiddenProvider()
    summary = run_pass(conn, store, provider)
    first, second = summary["candidates"]
    assert (first["row"], first["outcome"]) == ("7", "recovered")  # a claim: no receipt
    assert (second["row"], second["outcome"], second["reason"]) == (
        "receipt_root",
        "unresolved",
        "receipt_root_missing:memory:",
    )
    assert provider.calls == [] and summary["safe"] is False
    assert journal_get(conn, "at-2") is None


# --- a shard that is not a real directory: that candidate unresolved, never a journal row ------


@pytest.mark.parametrize("kind", ["regular_file", "symlink_to_directory", "symlink_loop"])
def test_a_stray_shard_blocks_its_candidate_only_and_writes_no_journal_row(
    repo: Repository, conn: Any, store: FileReceiptStore, tmp_path: Path, kind: str
) -> None:
    # UUIDv7 Attempt ids share their first two characters for years: one stray file at
    # <root>/01 shadows every Attempt of that shard.
    bad, good = "01-bad", "02-good"
    make_candidate(repo, "run-1", bad, handle=dead_handle()[0], pid=11)
    make_candidate(repo, "run-2", good, attempt="claimed", run="dispatching")
    shard = Path(store.root) / "01"
    if kind == "regular_file":
        shard.write_bytes(b"stray")
    elif kind == "symlink_to_directory":
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / f"{bad}.json").write_bytes(b"{not json")
        shard.symlink_to(elsewhere)
    else:
        shard.symlink_to(shard)
    provider = ForbiddenProvider()
    summary = run_pass(conn, store, provider)
    first, second = summary["candidates"]
    reason = "shard_not_directory" if kind == "regular_file" else "shard_is_symlink"
    assert first == {
        "run_id": "run-1",
        "attempt_id": bad,
        "row": "receipt_root",
        "outcome": "unresolved",
        "reason": f"receipt_root_unusable:{reason}:{shard}",
    }
    assert provider.calls == []  # no probe: configuration is not process evidence
    assert journal_get(conn, bad) is None
    assert not (Path(store.root) / ".quarantine").exists()
    assert status(repo, "run-1", bad) == ("running", "running")
    # The healthy candidate beside it is decided on its own evidence.
    assert (second["attempt_id"], second["row"], second["outcome"]) == (good, "7", "recovered")
    if kind == "symlink_to_directory":
        assert (tmp_path / "elsewhere" / f"{bad}.json").read_bytes() == b"{not json"


def test_after_the_mistake_is_fixed_the_next_pass_decides_normally(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "01-a", handle=handle, pid=pid)
    root = tmp_path / "receipts"
    root.mkdir()
    (root / "01").write_bytes(b"stray")
    blocked = reconcile_cli(db_path, root)
    assert blocked.returncode == 3, blocked.stderr
    assert json.loads(blocked.stdout)["candidates"][0]["row"] == "receipt_root"
    (root / "01").unlink()  # the operator removes the stray file
    fixed = reconcile_cli(db_path, root)
    assert fixed.returncode == 0, fixed.stderr
    entry = json.loads(fixed.stdout)["candidates"][0]
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "13",
        "recovered",
        "process_not_running:pid_absent",
    )
    assert status(repo, "run-1", "01-a") == ("lost", "lost")


def test_a_root_file_then_fixed_leaves_nothing_that_blocks(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "01-live", handle=s.handle, pid=s.pid)
        root = tmp_path / "receipts"
        plant_root(root, "regular_file")
        assert reconcile_cli(db_path, root).returncode == 2
        root.unlink()
        root.mkdir()
        fixed = reconcile_cli(db_path, root)
        assert fixed.returncode == 0, fixed.stderr
        assert json.loads(fixed.stdout)["candidates"][0]["reason"] == "process_running"


# --- no row claims a quarantine that did not happen -------------------------------------------


def _bogus_quarantined_row(repo: Repository, conn: Any) -> None:
    """What an older qlfsm left after a root mistake: a dead candidate `run-1`/`at-1` whose
    journal row (registered at 5) is `quarantined`, naming a copy that never existed."""
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    journal_register(conn, "at-1", "run-1", 5)
    conn.execute(
        "UPDATE \"LocalCompletionReceiptJournal\" SET state = 'quarantined', "
        "quarantine_ref = ?, purge_after_ms = 99, updated_at_ms = 9 WHERE attempt_id = 'at-1'",
        (quarantine_ref("at-1"),),
    )


def test_a_bogus_quarantined_row_from_an_earlier_mistake_is_withdrawn_and_the_run_decided(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # What an older qlfsm left after a root mistake: a `quarantined` row naming a file that
    # never existed. The receipt path is empty and the process is dead.
    _bogus_quarantined_row(repo, conn)
    entry = only(run_pass(conn, store))
    assert (entry["row"], entry["outcome"]) == ("13", "recovered")
    row = journal_get(conn, "at-1")
    assert row is not None
    assert (row.state, row.quarantine_ref, row.purge_after_ms, row.registered_at_ms) == (
        "pending",
        None,
        None,
        5,
    )


@pytest.mark.parametrize(("now_ms", "stamped"), [(5_000, 5_000), (3, 5)])
def test_a_withdrawn_quarantine_row_is_stamped_at_the_clock_never_before_its_registration(
    repo: Repository, conn: Any, store: FileReceiptStore, now_ms: int, stamped: int
) -> None:
    # The withdrawal is a write of this pass: its time is the pass's clock, or the row's
    # registration when the clock is behind it (a row never changes before it was made).
    _bogus_quarantined_row(repo, conn)
    run_pass(conn, store, clock=FakeClock(now_ms))
    row = journal_get(conn, "at-1")
    assert row is not None
    assert (row.state, row.updated_at_ms) == ("pending", stamped)


def test_a_quarantined_row_whose_copy_exists_keeps_blocking(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    store.publish(receipt("run-1", "at-1", token="z" * 43))
    assert only(run_pass(conn, store))["reason"] == "invalid_receipt:token_mismatch"
    provider = ForbiddenProvider()
    entry = only(run_pass(conn, store, provider))
    assert entry["reason"] == "receipt_quarantined_earlier" and provider.calls == []


# A directory at the receipt path is not a failed move but row 6 with nothing written
# (docs/decisions.md D-16): tests/test_root_safety.py.


def test_a_quarantine_move_that_fails_withdraws_its_journal_intent_in_the_same_pass(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", handle=dead_handle()[0], pid=1)
    journal_register(conn, "at-1", "run-1", 3)  # the launcher's row, to be restored exactly
    before = journal_get(conn, "at-1")
    path = Path(store.root) / "at" / "at-1.json"
    path.parent.mkdir()
    path.write_bytes(b"{garbage")
    (Path(store.root) / ".quarantine").write_bytes(b"")
    entry = only(run_pass(conn, store, ForbiddenProvider()))
    assert (entry["row"], entry["outcome"]) == ("14", "failed")
    assert "QuarantineNotDone" in entry["reason"]
    assert journal_get(conn, "at-1") == before  # the intent was withdrawn
    assert path.read_bytes() == b"{garbage"  # and the invalid receipt stayed where it was


def test_a_quarantine_move_that_fails_without_an_earlier_row_leaves_no_row(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", handle=dead_handle()[0], pid=1)
    path = Path(store.root) / "at" / "at-1.json"
    path.parent.mkdir()
    path.write_bytes(b"{garbage")
    (Path(store.root) / ".quarantine").write_bytes(b"")
    assert only(run_pass(conn, store, ForbiddenProvider()))["outcome"] == "failed"
    assert journal_get(conn, "at-1") is None


# --- the verifier ------------------------------------------------------------------------------


def test_a_root_that_goes_wrong_before_the_final_verifier_revokes_a_retained_candidate(
    repo: Repository, conn: Any
) -> None:
    store = MemoryReceiptStore()
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        reads: list[str] = []

        def second_read_finds_a_file_root(attempt_id: str) -> None:
            reads.append(attempt_id)
            if len(reads) == 2:  # the verifier's read
                store.root_state = "file"

        store.on_read.append(second_read_finds_a_file_root)
        summary = reconcile_connection(conn, store, _live(), FakeClock())
    entry = only(summary)
    assert (entry["outcome"], entry["reason"]) == (
        "unresolved",
        "verifier:receipt_root_unusable:root_not_directory:memory:",
    )


def _live() -> Any:
    from reconciler.node import ProcProvider

    return ProcProvider()


def test_reading_a_wrong_root_never_creates_or_changes_anything(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    plant_root(root, "regular_file")
    store = FileReceiptStore(str(root))
    with pytest.raises(ReceiptRootError):
        store.check_root()
    assert store.read("01-a").__class__.__name__ == "Unusable"
    assert root.read_bytes() == b"not a directory\n"
    assert sorted(os.listdir(tmp_path)) == ["receipts"]


def test_a_receipt_that_vanishes_before_its_move_leaves_no_quarantine_claim(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    class VanishingStore(FileReceiptStore):
        """Someone removes the invalid receipt right after the store picked its slot."""

        def quarantine_target(self, attempt_id: str, previous_ref: str | None = None) -> str:
            ref = super().quarantine_target(attempt_id, previous_ref)
            Path(self.root, "at", f"{attempt_id}.json").unlink()
            return ref

    make_candidate(repo, "run-1", "at-1", handle=dead_handle()[0], pid=1)
    path = Path(store.root) / "at" / "at-1.json"
    path.parent.mkdir()
    path.write_bytes(b"{garbage")
    entry = only(run_pass(conn, VanishingStore(store.root), ForbiddenProvider()))
    assert (entry["row"], entry["outcome"]) == ("14", "failed")
    assert "vanished" in entry["reason"]
    assert journal_get(conn, "at-1") is None
