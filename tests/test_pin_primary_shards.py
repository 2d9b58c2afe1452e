"""The ADR-0068 pass checks the receipt shards of its page's Attempts before anything is
written (docs/decisions.md D-16), even when one Attempt row of the page cannot be read: the
shards of every other candidate are still checked, Run by Run, and the unreadable row is that
candidate's failure alone (spec 04 row 14). Real SQLite files and a real receipt root."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _primary_support import T0, make_candidate

from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    ReceiptRootError,
    capture_handle,
)
from reconciler.primary import reconcile_connection
from storage import Repository


def dead(repo: Repository, table: FakeProcessTable, run_id: str, attempt_id: str) -> None:
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    table.reap(pid)
    make_candidate(repo, run_id, attempt_id, handle=handle, pid=pid)


def unreadable_attempt_of(db_path: Path, run_id: str) -> None:
    """Another tool wrote a second Attempt of ``run_id`` whose id is text but not UTF-8."""
    with contextlib.closing(sqlite3.connect(db_path)) as other, other:
        other.execute(
            'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
            "created_at_ms) VALUES (CAST(X'61742dff' AS TEXT), ?, 2, 'failed', "
            "'local_process', ?)",
            (run_id, T0),
        )


def statuses(db_path: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as second:
        return second.execute('SELECT id, status FROM "Runs" ORDER BY id').fetchall()


def test_a_shard_writable_by_others_is_refused_though_another_candidates_attempt_is_unreadable(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    table = FakeProcessTable()
    dead(repo, table, "run-1", "bt-1")
    dead(repo, table, "run-2", "at-2")
    unreadable_attempt_of(db_path, "run-1")
    shard = Path(store.root) / "at"
    shard.mkdir(mode=0o700)
    os.chmod(shard, 0o777)
    before = statuses(db_path)

    with pytest.raises(ReceiptRootError) as refused:
        reconcile_connection(conn, store, table, FakeClock(T0), platform="linux")

    assert f"receipt shard {str(shard)!r} (mode 0777" in str(refused.value)
    assert statuses(db_path) == before  # nothing written


def test_with_the_shards_in_order_the_unreadable_attempt_fails_its_candidate_alone(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    table = FakeProcessTable()
    dead(repo, table, "run-1", "bt-1")
    dead(repo, table, "run-2", "at-2")
    unreadable_attempt_of(db_path, "run-1")

    summary = reconcile_connection(conn, store, table, FakeClock(T0), platform="linux")

    [first, second] = summary["candidates"]
    assert (first["run_id"], first["row"], first["outcome"]) == ("run-1", "14", "failed")
    assert first["reason"].startswith(
        "error:OperationalError: Could not decode to UTF-8 column 'id'"
    )
    assert (second["run_id"], second["row"], second["outcome"]) == ("run-2", "13", "recovered")
