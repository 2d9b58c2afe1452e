"""The counters QingLong reads stay within 2^53 - 1 (issue 27 item 7, docs/decisions.md D-29).

QingLong 3.0 reads `Runs.version`, `Runs.event_sequence` and `RunAttempts.callback_sequence` as
JavaScript numbers and rejects a row whose value is not a safe integer ("invalid version"). A
write that would move one past 2^53 - 1 is refused with the named storage error
CounterExhausted, in the one transaction of the write, rolled back: nothing is written. On real
SQLite files, read back through a second connection; real exited processes; the real CLI.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    SYSTEM,
    T0,
    dead_handle,
    linux_only,
    make_candidate,
    only,
    other_connection,
    qlfsm,
    run_pass,
)
from _shadow_support import LegacyDb
from conftest import read_snapshot
from test_shadow_rows import outcomes, shadow

from reconciler.node import FileReceiptStore, ProcProvider
from storage import (
    MAX_COUNTER,
    AttemptChange,
    CounterExhausted,
    Repository,
    RunChange,
    StorageError,
)

BOUND = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER, typed here, not taken from storage


def set_counters(db_path: Path, run_id: str, **columns: int) -> None:
    """Another writer (QingLong, a restored backup) left the Run's counters at these values."""
    conn = other_connection(db_path)
    try:
        for name, value in columns.items():
            conn.execute(f'UPDATE "Runs" SET {name} = ? WHERE id = ?', (value, run_id))
    finally:
        conn.close()


def run_rows(db_path: Path, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the Run, its Attempts, events and journal, through a second connection."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return {
            "Runs": conn.execute('SELECT * FROM "Runs" WHERE id = ?', (run_id,)).fetchall(),
            "RunAttempts": conn.execute(
                'SELECT * FROM "RunAttempts" WHERE run_id = ? ORDER BY id', (run_id,)
            ).fetchall(),
            "RunEvents": conn.execute(
                'SELECT * FROM "RunEvents" WHERE run_id = ? ORDER BY sequence', (run_id,)
            ).fetchall(),
            "LocalCompletionReceiptJournal": conn.execute(
                'SELECT * FROM "LocalCompletionReceiptJournal" ORDER BY 1'
            ).fetchall(),
        }
    finally:
        conn.close()


def test_the_bound_is_javascripts_largest_safe_integer() -> None:
    assert MAX_COUNTER == BOUND == 9_007_199_254_740_991
    assert issubclass(CounterExhausted, StorageError)


# --- the primary pass (spec 04 row 14) ---------------------------------------------------------


@linux_only
@pytest.mark.parametrize(
    ("counters", "named"),
    [
        ({"version": BOUND}, f"has version {BOUND}"),
        ({"event_sequence": BOUND}, f"has event_sequence {BOUND}"),
    ],
    ids=["version", "event_sequence"],
)
def test_a_dead_candidate_whose_run_counter_is_at_the_bound_fails_row_14_and_writes_nothing(
    repo: Repository,
    conn: Any,
    db_path: Path,
    store: FileReceiptStore,
    counters: dict[str, int],
    named: str,
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    set_counters(db_path, "run-1", **counters)
    before = read_snapshot(db_path)
    entry = only(run_pass(conn, store, ProcProvider()))
    assert (entry["row"], entry["outcome"]) == ("14", "failed")
    assert entry["reason"].startswith(f"error:CounterExhausted: run run-1 {named}, the largest")
    assert read_snapshot(db_path) == before  # byte for byte: no edge, no event, no journal row


@linux_only
def test_an_attempt_edge_that_fits_is_rolled_back_with_the_run_edge_that_does_not(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # Row 13 writes attempt.lost (version 2^53 - 1, which QingLong can read) and then run.lost
    # (2^53, which it cannot), in ONE transaction: the Attempt's edge goes with the Run's.
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    set_counters(db_path, "run-1", version=BOUND - 1, event_sequence=BOUND - 1)
    before = run_rows(db_path, "run-1")
    entry = only(run_pass(conn, store, ProcProvider()))
    assert (entry["row"], entry["outcome"]) == ("14", "failed")
    assert "CounterExhausted" in entry["reason"] and f"version {BOUND}" in entry["reason"]
    after = run_rows(db_path, "run-1")
    assert after == before
    assert [r[3] for r in after["RunAttempts"]] == [1]  # attempt number: still the one
    assert after["RunAttempts"][0][4] == "running"  # status: the Attempt did not move


# --- the Repository: every write path, and an Attempt's callback sequence ----------------------


def test_every_repository_write_refuses_a_run_at_the_bound_and_writes_nothing(
    repo: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    set_counters(db_path, "run-1", version=BOUND)
    before = run_rows(db_path, "run-1")
    writes: list[Callable[[], object]] = [
        lambda: repo.advance("run-1", BOUND, [RunChange("start")], actor=SYSTEM, at_ms=T0),
        lambda: repo.advance(
            "run-1", BOUND, [AttemptChange("at-1", "start")], actor=SYSTEM, at_ms=T0
        ),
        lambda: repo.append_event("run-1", BOUND, "run.cancel_requested", actor=SYSTEM, at_ms=T0),
        lambda: repo.create_attempt(
            run_id="run-1", attempt_id="at-2", expected_version=BOUND, at_ms=T0
        ),
    ]
    for write in writes:
        with pytest.raises(CounterExhausted) as caught:
            write()
        assert (caught.value.what, caught.value.ident, caught.value.counter) == (
            "run",
            "run-1",
            "version",
        )
        assert "nothing was written" in str(caught.value)
        assert run_rows(db_path, "run-1") == before


def test_an_attempt_whose_callback_sequence_is_at_the_bound_is_not_advanced_past_it(
    repo: Repository, db_path: Path
) -> None:
    v = make_candidate(repo, "run-1", "at-1")
    conn = other_connection(db_path)
    try:
        conn.execute('UPDATE "RunAttempts" SET callback_sequence = ? WHERE id = ?', (BOUND, "at-1"))
    finally:
        conn.close()
    before = run_rows(db_path, "run-1")
    done = AttemptChange("at-1", "succeed", set={"callback_sequence": BOUND + 1, "exit_code": 0})
    with pytest.raises(CounterExhausted, match=f"attempt at-1 has callback_sequence {BOUND}"):
        repo.advance("run-1", v, [done], actor=SYSTEM, at_ms=T0)
    assert run_rows(db_path, "run-1") == before
    # One below the bound still advances, to the bound itself (QingLong reads it).
    conn = other_connection(db_path)
    try:
        conn.execute(
            'UPDATE "RunAttempts" SET callback_sequence = ? WHERE id = ?', (BOUND - 1, "at-1")
        )
    finally:
        conn.close()
    last = AttemptChange("at-1", "succeed", set={"callback_sequence": BOUND, "exit_code": 0})
    repo.advance("run-1", v, [last], actor=SYSTEM, at_ms=T0)
    att = repo.get_attempt("at-1")
    assert att is not None and (att.status, att.callback_sequence) == ("succeeded", BOUND)


def test_a_run_one_below_the_bound_takes_its_last_edge_to_exactly_the_bound(
    repo: Repository, reader: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    set_counters(db_path, "run-1", version=BOUND - 1, event_sequence=BOUND - 1)
    done = repo.advance("run-1", BOUND - 1, [RunChange("start")], actor=SYSTEM, at_ms=T0)
    assert done.version == BOUND
    run = reader.get_run("run-1")
    assert run is not None and (run.status, run.version, run.event_sequence) == (
        "running",
        BOUND,
        BOUND,
    )
    with pytest.raises(CounterExhausted):
        repo.advance("run-1", BOUND, [RunChange("mark_lost")], actor=SYSTEM, at_ms=T0)


# --- the shadow pass (spec 05 row 12) ------------------------------------------------------------


@pytest.mark.parametrize("counter", ["version", "event_sequence"])
def test_a_legacy_candidate_at_the_bound_fails_row_12_and_writes_nothing(
    db: LegacyDb, counter: str
) -> None:
    marked_lost = db.run(status="running", attempts=("running",))  # row 10
    repaired = db.run(status="running", attempts=("failed",))  # row 2
    for made in (marked_lost, repaired):
        db.conn.execute(f'UPDATE "Runs" SET {counter} = ? WHERE id = ?', (BOUND, made.run_id))
    before = read_snapshot(Path(db.path))
    result = shadow(db)
    assert outcomes(result) == {"failed": 2}
    assert result.audit["report"]["assessment"] == "attention_required"
    assert read_snapshot(Path(db.path)) == before


# --- the CLI ---------------------------------------------------------------------------------


@linux_only
def test_qlfsm_resolve_on_a_run_at_the_bound_refuses_in_one_line_and_writes_nothing(
    repo: Repository, db_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    set_counters(db_path, "run-1", version=BOUND)
    before = read_snapshot(db_path)
    env = {**os.environ, "USER": "alice"}
    for extra in ((), ("--dry-run",)):
        out = qlfsm(
            "resolve", "--db", str(db_path), "--run", "run-1", "--to", "lost",
            "--reason", "checked by hand", *extra, env=env,
        )  # fmt: skip
        assert out.returncode == 1, out.stderr
        assert out.stdout == ""
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
        assert out.stderr.startswith(
            f"qlfsm: error: run run-1 has version {BOUND}, the largest QingLong 3.0 can read"
        )
        assert "nothing was written" in out.stderr
        assert read_snapshot(db_path) == before


@linux_only
def test_qlfsm_reconcile_reports_the_candidate_failed_with_the_named_error_and_no_traceback(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    set_counters(db_path, "run-1", event_sequence=BOUND)
    before = read_snapshot(db_path)
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", store.root, "--json")
    assert "Traceback" not in out.stderr
    summary = json.loads(out.stdout)
    [entry] = summary["candidates"]
    assert (entry["row"], entry["outcome"]) == ("14", "failed")
    assert entry["reason"].startswith("error:CounterExhausted: run run-1 has event_sequence")
    assert out.returncode != 0 and summary["safe"] is False
    text = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", store.root)
    assert "Traceback" not in text.stderr
    assert "CounterExhausted" in text.stdout
    assert read_snapshot(db_path) == before


def test_an_event_on_a_run_whose_event_sequence_is_at_the_bound_names_that_counter(
    repo: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    set_counters(db_path, "run-1", version=BOUND - 1, event_sequence=BOUND)
    before = run_rows(db_path, "run-1")
    with pytest.raises(CounterExhausted) as caught:
        repo.append_event("run-1", BOUND - 1, "run.cancel_requested", actor=SYSTEM, at_ms=T0)
    assert (caught.value.what, caught.value.ident, caught.value.counter) == (
        "run",
        "run-1",
        "event_sequence",
    )
    assert run_rows(db_path, "run-1") == before
