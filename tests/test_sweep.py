"""`qlfsm sweep` (and the sweep `startup` runs after a safe pass): what ended runs left behind is
removed, bounded and idempotent, nothing of an active Attempt is touched, and a crash (a real
SIGKILL) between a file's removal and its journal row's delete loses nothing a later pass needs.
Real SQLite files, real receipt files, real processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    T0,
    dead_handle,
    linux_only,
    make_candidate,
    qlfsm,
    receipt,
    run_pass,
    sleepers,
)

from reconciler import _sweep
from reconciler.node import (
    FakeClock,
    FileReceiptStore,
    ProcProvider,
    ReceiptRootError,
    quarantine_ref,
)
from reconciler.ops import operator_actor, resolve, sweep
from storage import Repository, journal_quarantine, journal_register, transaction
from storage._operator import PENDING_PAGE_SQL, QUARANTINED_PAGE_SQL

DAY_MS = 24 * 3600 * 1000


def register(conn: Any, attempt_id: str, run_id: str) -> None:
    """The launcher's `pending` row (spec 03), registered before the spawn."""
    with transaction(conn):
        journal_register(conn, attempt_id, run_id, T0)


def journal(conn: Any) -> dict[str, tuple[str, str | None]]:
    rows = conn.execute(
        "SELECT attempt_id, state, quarantine_ref FROM LocalCompletionReceiptJournal"
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def swept(conn: Any, store: FileReceiptStore, **kw: Any) -> dict[str, Any]:
    return sweep(conn, store, ProcProvider(), FakeClock(T0 + 30 * DAY_MS), **kw).as_dict()


def receipt_file(store: FileReceiptStore, attempt_id: str) -> Path:
    return Path(store.root) / attempt_id[:2] / f"{attempt_id}.json"


def kill_in(db: Path, root: str, setup: str, call: str) -> subprocess.CompletedProcess[str]:
    """Run ``call`` in a child whose ``setup`` patches a step to SIGKILL the child itself."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from reconciler.node import _receipt_store as rs
        def die():
            os.kill(os.getpid(), signal.SIGKILL)
        {setup}
        {call}
        """
    )
    env = {**os.environ, "DB": str(db), "ROOT": root}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )


# --- the two leftover kinds --------------------------------------------------------------------


@linux_only
def test_a_receipt_published_after_its_attempt_was_made_lost_is_removed_with_its_row(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    register(conn, "at-1", "run-1")
    assert run_pass(conn, store)["candidates"][0]["reason"] == "process_not_running:pid_absent"
    store.publish(receipt("run-1", "at-1"))  # a wrapper that published too late
    assert journal(conn) == {"at-1": ("pending", None)}
    result = swept(conn, store)
    assert result["receipts"] == {
        "examined": 1,
        "receipts_removed": 1,
        "rows_resolved": 1,
        "kept_active": 0,
        "kept_process_alive": 0,
        "errors": 0,
    }
    assert not receipt_file(store, "at-1").exists() and journal(conn) == {}
    assert swept(conn, store)["receipts"]["examined"] == 0  # idempotent: nothing left


@linux_only
def test_a_receipt_and_pending_row_left_by_a_kill_between_commit_and_delete_are_removed(
    repo: Repository, conn: Any, store: FileReceiptStore, db_path: Path
) -> None:
    # The ADR-0068 pass commits the receipt's terminal edges, then is SIGKILLed right before
    # it deletes the receipt (spec 03: never delete-then-commit).
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    register(conn, "at-1", "run-1")
    store.publish(receipt("run-1", "at-1"))
    child = kill_in(
        db_path,
        store.root,
        "rs.FileReceiptStore.delete = lambda self, attempt_id: die()",
        "from reconciler._reconcile import primary_pass\n"
        "        primary_pass(os.environ['DB'], os.environ['ROOT'], 'edge')",
    )
    assert child.returncode == -9, child.stderr
    run = repo.get_run("run-1")
    assert run is not None and run.status == "succeeded"
    assert receipt_file(store, "at-1").exists() and journal(conn) == {"at-1": ("pending", None)}
    out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", store.root, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["receipts"]["receipts_removed"] == 1
    assert result["receipts"]["rows_resolved"] == 1
    assert not receipt_file(store, "at-1").exists() and journal(conn) == {}


# --- nothing of an active Attempt ------------------------------------------------------------


@linux_only
def test_an_active_attempts_receipt_and_rows_are_never_touched(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers(2) as [alive, other]:
        make_candidate(repo, "run-1", "at-1", handle=alive.handle, pid=alive.pid)
        register(conn, "at-1", "run-1")
        store.publish(receipt("run-1", "at-1"))  # evidence for the next ADR-0068 pass
        make_candidate(repo, "run-2", "at-2", handle=other.handle, pid=other.pid)
        bad = Path(store.root) / quarantine_ref("at-2")
        bad.parent.mkdir(parents=True)
        bad.write_bytes(b"invalid")
        journal_quarantine(conn, "at-2", "run-2", quarantine_ref("at-2"), T0, T0 + DAY_MS)
        before = journal(conn)
        result = swept(conn, store)  # 30 days later: the quarantine is long due
    assert result["receipts"]["kept_active"] == 1 and result["quarantine"]["kept_active"] == 1
    assert (
        result["receipts"]["receipts_removed"] == 0 and result["quarantine"]["copies_purged"] == 0
    )
    assert receipt_file(store, "at-1").exists() and bad.exists() and journal(conn) == before


@linux_only
def test_a_terminal_attempt_whose_process_is_still_alive_keeps_its_row_until_it_ends(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        register(conn, "at-1", "run-1")
        resolve(
            conn, "run-1", "failed", "forced", force=True, provider=ProcProvider(),
            clock=FakeClock(T0 + 1000), actor=operator_actor("alice"),
        )  # fmt: skip
        result = swept(conn, store)
        assert result["receipts"]["kept_process_alive"] == 1
        assert journal(conn) == {"at-1": ("pending", None)}
    # The process ended (its wrapper would publish now): the next pass removes both.
    store.publish(receipt("run-1", "at-1"))
    result = swept(conn, store)
    assert result["receipts"]["receipts_removed"] == 1 and journal(conn) == {}


# --- quarantine past its purge time ----------------------------------------------------------


def quarantined_terminal(repo: Repository, conn: Any, store: FileReceiptStore, n: int) -> Path:
    """A failed Attempt with ``n`` quarantined copies and its row, due in one day."""
    make_candidate(repo, "run-q", "at-q", attempt="claimed", run="dispatching")
    resolve(
        conn, "run-q", "cancelled", "x", force=False, provider=ProcProvider(), clock=FakeClock(),
        actor=operator_actor(None),
    )  # fmt: skip
    q = Path(store.root) / ".quarantine" / "at"
    q.mkdir(parents=True)
    for slot in range(1, n + 1):
        (Path(store.root) / quarantine_ref("at-q", slot)).write_bytes(b"bad %d" % slot)
    journal_quarantine(conn, "at-q", "run-q", quarantine_ref("at-q", n), T0, T0 + DAY_MS)
    return q


def test_quarantined_copies_past_their_purge_time_are_removed_with_their_row(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    q = quarantined_terminal(repo, conn, store, 2)
    early = sweep(conn, store, ProcProvider(), FakeClock(T0 + DAY_MS - 1)).as_dict()
    assert early["quarantine"]["examined"] == 0 and len(list(q.iterdir())) == 2
    result = sweep(conn, store, ProcProvider(), FakeClock(T0 + DAY_MS)).as_dict()
    assert result["quarantine"] == {
        "examined": 1,
        "copies_purged": 2,
        "rows_removed": 1,
        "kept_active": 0,
        "errors": 0,
    }
    assert list(q.iterdir()) == [] and journal(conn) == {}


def test_a_crash_between_purge_and_row_delete_loses_nothing(
    repo: Repository, conn: Any, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = quarantined_terminal(repo, conn, store, 1)

    def crash(*_: Any) -> bool:
        raise RuntimeError("simulated crash after the purge, before the row delete")

    monkeypatch.setattr(_sweep, "delete_quarantined_of_ended", crash)
    with pytest.raises(RuntimeError):
        swept(conn, store)
    assert list(q.iterdir()) == [] and journal(conn)["at-q"][0] == "quarantined"
    monkeypatch.undo()
    result = swept(conn, store)
    assert result["quarantine"]["copies_purged"] == 0 and result["quarantine"]["rows_removed"] == 1
    assert journal(conn) == {}


# --- crashes: a real SIGKILL between the steps ----------------------------------------------------


SWEEP_CALL = (
    "from reconciler._startup import run_sweep\n"
    "        run_sweep(os.environ['DB'], os.environ['ROOT'])"
)


@linux_only
def test_a_kill_between_receipt_removal_and_row_delete_loses_nothing(
    repo: Repository, conn: Any, store: FileReceiptStore, db_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    register(conn, "at-1", "run-1")
    run_pass(conn, store)
    store.publish(receipt("run-1", "at-1"))
    after_removal = (
        "real = rs.FileReceiptStore.remove_receipt\n"
        "        rs.FileReceiptStore.remove_receipt = lambda s, a: (real(s, a), die())[0]"
    )
    child = kill_in(db_path, store.root, after_removal, SWEEP_CALL)
    assert child.returncode == -9, child.stderr
    assert not receipt_file(store, "at-1").exists()
    assert journal(conn) == {"at-1": ("pending", None)}  # the row a later pass needs
    result = swept(conn, store)
    assert result["receipts"]["receipts_removed"] == 0 and result["receipts"]["rows_resolved"] == 1
    assert journal(conn) == {}


@linux_only
def test_a_kill_before_the_receipt_is_removed_leaves_both_for_the_next_pass(
    repo: Repository, conn: Any, store: FileReceiptStore, db_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    register(conn, "at-1", "run-1")
    run_pass(conn, store)
    store.publish(receipt("run-1", "at-1"))
    child = kill_in(
        db_path, store.root, "rs.FileReceiptStore.remove_receipt = lambda s, a: die()", SWEEP_CALL
    )
    assert child.returncode == -9, child.stderr
    assert receipt_file(store, "at-1").exists() and journal(conn) == {"at-1": ("pending", None)}
    assert swept(conn, store)["receipts"]["receipts_removed"] == 1 and journal(conn) == {}


def test_a_kill_between_quarantine_purge_and_row_delete_loses_nothing(
    repo: Repository, conn: Any, store: FileReceiptStore, db_path: Path
) -> None:
    q = quarantined_terminal(repo, conn, store, 1)
    after_purge = (
        "real = rs.FileReceiptStore.purge_quarantine\n"
        "        rs.FileReceiptStore.purge_quarantine = lambda s, r: (real(s, r), die())[0]"
    )
    child = kill_in(db_path, store.root, after_purge, SWEEP_CALL)
    assert child.returncode == -9, child.stderr
    assert list(q.iterdir()) == [] and journal(conn)["at-q"][0] == "quarantined"
    assert swept(conn, store)["quarantine"]["rows_removed"] == 1 and journal(conn) == {}


# --- bounds, links, the root ------------------------------------------------------------------


def test_a_pass_is_bounded_and_the_next_one_goes_on(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    for n in range(5):
        make_candidate(repo, f"run-{n}", f"at-{n}", attempt="claimed", run="dispatching")
        register(conn, f"at-{n}", f"run-{n}")
        store.publish(receipt(f"run-{n}", f"at-{n}"))
        resolve(
            conn, f"run-{n}", "lost", "x", force=False, provider=ProcProvider(),
            clock=FakeClock(), actor=operator_actor(None),
        )  # fmt: skip
    first = swept(conn, store, page=2, max_pages=2)
    assert first["receipts"]["examined"] == 4 and first["remaining"] is True
    assert len(journal(conn)) == 1
    second = swept(conn, store, page=2, max_pages=2)
    assert second["receipts"]["rows_resolved"] == 1 and second["remaining"] is False
    assert journal(conn) == {} and not any(
        receipt_file(store, f"at-{n}").exists() for n in range(5)
    )


def test_a_shard_that_is_a_symbolic_link_is_never_followed(
    repo: Repository, conn: Any, store: FileReceiptStore, db_path: Path, tmp_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    register(conn, "at-1", "run-1")
    resolve(
        conn, "run-1", "lost", "x", force=False, provider=ProcProvider(), clock=FakeClock(),
        actor=operator_actor(None),
    )  # fmt: skip
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "at-1.json").write_bytes(b"not yours")
    (Path(store.root) / "at").symlink_to(outside)
    out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", store.root, "--json")
    assert out.returncode == 1 and "could not be cleaned" in out.stderr
    result = json.loads(out.stdout)
    assert result["receipts"]["errors"] == 1 and result["errors"][0]["attempt_id"] == "at-1"
    assert (outside / "at-1.json").read_bytes() == b"not yours"
    assert journal(conn) == {"at-1": ("pending", None)}


def test_a_missing_root_touches_nothing_and_a_root_that_is_a_file_is_a_usage_error(
    repo: Repository, conn: Any, db_path: Path, tmp_path: Path, snapshot: Any
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    register(conn, "at-1", "run-1")
    before = snapshot()
    out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", str(tmp_path / "no"), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["state"] == "root_missing"
    (tmp_path / "file").write_text("x")
    out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", str(tmp_path / "file"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a directory" in out.stderr
    out = qlfsm("sweep", "--db", str(tmp_path / "none.db"), "--receipt-root", str(tmp_path))
    assert out.returncode == 1 and not (tmp_path / "none.db").exists()
    out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", "relative")
    assert out.returncode == 2
    assert snapshot() == before


def test_a_leftover_receipt_without_a_journal_row_is_not_found(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # The documented limit (docs/decisions.md "Operator commands: sweep"): no directory is
    # listed, so a receipt of an ended Attempt whose journal row is gone stays where it is.
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    resolve(
        conn, "run-1", "lost", "x", force=False, provider=ProcProvider(), clock=FakeClock(),
        actor=operator_actor(None),
    )  # fmt: skip
    store.publish(receipt("run-1", "at-1"))
    assert swept(conn, store)["receipts"]["examined"] == 0
    assert receipt_file(store, "at-1").exists()


@pytest.mark.parametrize(
    ("sql", "index"),
    [
        (PENDING_PAGE_SQL, "ql3_local_receipt_journal_scan_idx"),
        (QUARANTINED_PAGE_SQL, "ql3_local_receipt_journal_purge_idx"),
    ],
)
def test_each_page_walks_its_journal_index(db_path: Path, sql: str, index: str) -> None:
    conn = sqlite3.connect(db_path)
    args = (-1, "", 65) if sql == PENDING_PAGE_SQL else (T0, -1, "", 65)
    plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
    conn.close()
    assert f"USING INDEX {index}" in plan and "TEMP B-TREE" not in plan


# --- under startup ------------------------------------------------------------------------------


@linux_only
def test_startup_sweeps_after_a_safe_pass_and_not_after_a_blocked_one(
    repo: Repository, conn: Any, store: FileReceiptStore, db_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    register(conn, "at-1", "run-1")
    make_candidate(repo, "run-2", "at-2", handle="ql3lp1.bad", pid=3)  # blocks: row 10
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    args = ("startup", "--db", str(db_path), "--receipt-root", store.root, "--json")
    blocked = qlfsm(*args, env=env)
    assert blocked.returncode == 3
    assert json.loads(blocked.stdout)["sweep"]["state"] == "skipped"
    assert journal(conn) == {"at-1": ("pending", None)}
    resolve(
        conn, "run-2", "failed", "bad handle", force=False, provider=ProcProvider(),
        clock=FakeClock(T0 + 1000), actor=operator_actor(None),
    )  # fmt: skip
    safe = qlfsm(*args, env=env)
    assert safe.returncode == 0, safe.stderr
    result = json.loads(safe.stdout)
    assert result["sweep"]["state"] == "done" and result["sweep"]["receipts"]["rows_resolved"] == 1
    assert journal(conn) == {}
    human = qlfsm(*args[:-1], env=env)
    assert "sweep: 0 leftover receipt(s) removed" in human.stdout


def test_a_database_without_the_purge_index_still_pages_its_quarantine(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    quarantined_terminal(repo, conn, store, 1)
    conn.execute("DROP INDEX ql3_local_receipt_journal_purge_idx")
    assert swept(conn, store)["quarantine"]["rows_removed"] == 1 and journal(conn) == {}


@linux_only
def test_the_start_up_sweep_builds_the_real_store_and_provider_for_its_journal_rows(
    repo: Repository, conn: Any, store: FileReceiptStore, tmp_path: Path
) -> None:
    # `sweep_files` (start-up's and `qlfsm sweep`'s) builds the node's ports itself, only when
    # the journal has a row: with rows it acts exactly as `sweep` given those ports would.
    clock = FakeClock(T0 + 30 * DAY_MS)
    empty = _sweep.sweep_files(conn, store.root, clock).as_dict()
    assert empty["state"] == "done" and empty["receipts"]["examined"] == 0
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    register(conn, "at-1", "run-1")
    assert run_pass(conn, store)["candidates"][0]["reason"] == "process_not_running:pid_absent"
    store.publish(receipt("run-1", "at-1"))  # a wrapper that published too late
    q = quarantined_terminal(repo, conn, store, 2)
    missing = _sweep.sweep_files(conn, str(tmp_path / "no"), clock).as_dict()
    assert missing["state"] == "root_missing" and missing["receipts"]["examined"] == 0
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReceiptRootError, match="not a directory"):
        _sweep.sweep_files(conn, str(tmp_path / "file"), clock)
    assert receipt_file(store, "at-1").exists() and len(list(q.iterdir())) == 2
    result = _sweep.sweep_files(conn, store.root, clock).as_dict()
    assert result["receipts"] == {
        "examined": 1,
        "receipts_removed": 1,
        "rows_resolved": 1,
        "kept_active": 0,
        "kept_process_alive": 0,
        "errors": 0,
    }
    assert result["quarantine"] == {
        "examined": 1,
        "copies_purged": 2,
        "rows_removed": 1,
        "kept_active": 0,
        "errors": 0,
    }
    assert not receipt_file(store, "at-1").exists() and list(q.iterdir()) == []
    assert journal(conn) == {}
