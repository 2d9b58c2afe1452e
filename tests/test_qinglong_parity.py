"""Where qlfsm writes what QingLong 3.0's own recovery writes (docs/decisions.md D-18), on real
SQLite files (read back through a second connection), real receipt files, real `/proc` and
real child processes: the executor type checked before any receipt (spec 04 row 4b), the
Attempt named on every Run event that has one, and every event payload key by key as
QingLong's coordinator, completion processor, start-up reconciler and shadow writer build it.
For the differences where qlfsm follows the ADR and QingLong does not, the documented qlfsm
behaviour."""

from __future__ import annotations

import json
import sqlite3
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
    linux_only,
    make_candidate,
    make_run,
    only,
    other_connection,
    qlfsm,
    receipt,
    recovery_events,
    run_pass,
    sleepers,
    status,
)
from _shadow_support import LegacyDb, Made
from test_shadow_writes import abandon, cancel, complete, mark_lost, repair
from test_shadow_writes import run as shadow_pass

from reconciler.node import FakeClock, FileReceiptStore, ProcProvider, ReadResult
from reconciler.primary import reconcile_connection
from storage import Repository, journal_get, journal_register

# QingLong's payload keys (its public TypeScript source, docs/decisions.md D-18); qlfsm adds
# its own `decision` key to every primary event (D-12) and nothing else.
DECISION = "decision"
QL_ATTEMPT_LOST = {"attempt_id", "from_status", "to_status", "error_code", "version"}
QL_RUN_LOST = {"from_status", "to_status", "error_code", "version"}
QL_ATTEMPT_BY_RECEIPT = {
    "attempt_id",
    "from_status",
    "to_status",
    "callback_sequence",
    "exit_code",
    "version",
}
QL_RUN_BY_RECEIPT = {"from_status", "to_status", "version"}
QL_RUNNING = {"from_status", "to_status", "evidence", "version"}


class CountingStore(FileReceiptStore):
    """The real file store, counting the receipt reads (row 4b must make none)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def read(self, attempt_id: str) -> ReadResult:
        self.reads.append(attempt_id)
        return super().read(attempt_id)


@pytest.fixture
def counting(store: FileReceiptStore) -> CountingStore:
    return CountingStore(store.root)


def event_rows(db_path: Path, run_id: str) -> list[sqlite3.Row]:
    """The Run's events as committed, read through a second connection."""
    conn = other_connection(db_path)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(
            'SELECT * FROM "RunEvents" WHERE run_id = ? ORDER BY sequence', (run_id,)
        ).fetchall()
    finally:
        conn.close()


def after(
    db_path: Path, run_id: str, sequence: int
) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(type, RunEvents.attempt_id, payload) of the events past ``sequence``."""
    return [
        (r["type"], r["attempt_id"], json.loads(r["payload"]))
        for r in event_rows(db_path, run_id)
        if r["sequence"] > sequence
    ]


def keys(payload: dict[str, Any]) -> set[str]:
    return set(payload) - {DECISION}


# --- spec 04 row 4b: the executor type, before any receipt --------------------------------------


@pytest.mark.parametrize("attempt", ["starting", "running"])
def test_a_trusted_receipt_of_a_remote_worker_attempt_is_never_read_and_it_stays_unresolved(
    repo: Repository, conn: Any, db_path: Path, counting: CountingStore, attempt: str
) -> None:
    # QingLong's receipt processor answers `stale` for an executor that is not a local process
    # (it never reads the file) and its coordinator leaves the candidate remaining: unresolved.
    handle, pid = dead_handle()
    make_candidate(
        repo,
        "run-1",
        "at-1",
        attempt=attempt,
        handle=handle,
        pid=pid,
        executor_type="remote_worker",
    )
    journal_register(conn, "at-1", "run-1", T0)
    counting.publish(receipt("run-1", "at-1"))  # the right token, at the right path
    path = Path(counting.root) / "at" / "at-1.json"
    published = path.read_bytes()
    before = last_sequence(repo, "run-1")
    summary = reconcile_connection(conn, counting, ForbiddenProvider(), FakeClock())
    assert only(summary) == {
        "run_id": "run-1",
        "attempt_id": "at-1",
        "row": "4b",
        "outcome": "unresolved",
        "reason": "executor_not_local_process",
    }
    assert summary["safe"] is False
    assert counting.reads == []
    assert path.read_bytes() == published  # receipt untouched, not quarantined
    journal = journal_get(conn, "at-1")
    assert journal is not None and journal.state == "pending"  # journal untouched
    assert recovery_events(repo, "run-1", before) == []
    assert status(repo, "run-1", "at-1")[1] == attempt


def test_a_claimed_remote_worker_attempt_is_lost_on_the_claim_alone_its_receipt_never_read(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, counting: CountingStore
) -> None:
    # QingLong's coordinator: `stale` from the receipt processor, then `claimed` -> the
    # unstarted claim is lost (RECOVERY_UNSTARTED_CLAIM), whatever the executor.
    make_candidate(
        repo, "run-1", "at-1", attempt="claimed", run="dispatching", executor_type="remote_worker"
    )
    counting.publish(receipt("run-1", "at-1"))
    path = Path(counting.root) / "at" / "at-1.json"
    published = path.read_bytes()
    before = last_sequence(repo, "run-1")
    entry = only(reconcile_connection(conn, counting, ForbiddenProvider(), FakeClock()))
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "4b",
        "recovered",
        "unstarted_claim",
    )
    assert counting.reads == []
    assert path.read_bytes() == published
    assert journal_get(conn, "at-1") is None
    assert status(reader, "run-1", "at-1") == ("lost", "lost")
    events = after(db_path, "run-1", before)
    assert [(t, a) for t, a, _ in events] == [("attempt.lost", "at-1"), ("run.lost", "at-1")]
    (_, _, att), (_, _, run) = events
    assert keys(att) == QL_ATTEMPT_LOST and keys(run) == QL_RUN_LOST
    assert att["error_code"] == run["error_code"] == "RECOVERY_UNSTARTED_CLAIM"
    rows = event_rows(db_path, "run-1")[-2:]
    assert [r["dedupe_key"] for r in rows] == [
        "local-recovery:attempt:at-1:0:unstarted_claim",
        f"local-recovery:run:run-1:at-1:{before}:unstarted_claim",
    ]
    assert [(r["actor_type"], r["actor_id"]) for r in rows] == [RECONCILER, RECONCILER]


def test_explain_and_the_dry_run_follow_row_4b(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    make_candidate(
        repo, "run-c", "at-c", attempt="claimed", run="dispatching", executor_type="remote_worker"
    )
    handle, pid = dead_handle()
    make_candidate(repo, "run-r", "at-r", handle=handle, pid=pid, executor_type="remote_worker")
    store.publish(receipt("run-r", "at-r"))
    root = ["--db", str(db_path), "--receipt-root", store.root, "--json"]
    dry = qlfsm("reconcile", *root, "--dry-run")
    assert dry.returncode == 3, dry.stderr  # unresolved blocks (spec 06)
    predicted = json.loads(dry.stdout)["candidates"]
    assert [(c["run_id"], c["row"], c["outcome"]) for c in predicted] == [
        ("run-c", "4b", "recovered"),
        ("run-r", "4b", "unresolved"),
    ]
    assert status(repo, "run-c", "at-c") == ("dispatching", "claimed")  # nothing written
    done = qlfsm("reconcile", *root)
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["candidates"] == predicted
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-c", "--json")
    assert out.returncode == 0, out.stderr
    steps = [s for s in json.loads(out.stdout)["steps"] if s["machine"]][-2:]
    assert [(s["machine"], s["from"], s["to"], s["trigger"], s["row"]) for s in steps] == [
        ("attempt", "claimed", "lost", "lose_nonlocal_claim", "4b"),
        ("run", "dispatching", "lost", "lose_nonlocal_claim", "4b"),
    ]
    assert steps[0]["row_facts"].startswith("the active Attempt's executor type is not")


# --- RunEvents.attempt_id on every Run event that has an Attempt ---------------------------------


def test_row_7_names_the_attempt_on_its_run_event_and_row_3_names_none(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-7", "at-7", attempt="claimed", run="dispatching")
    make_run(repo, "run-3")
    seven, three = last_sequence(repo, "run-7"), last_sequence(repo, "run-3")
    run_pass(conn, store, ForbiddenProvider())
    assert [(t, a) for t, a, _ in after(db_path, "run-7", seven)] == [
        ("attempt.lost", "at-7"),
        ("run.lost", "at-7"),
    ]
    [(kind, attempt_id, payload)] = after(db_path, "run-3", three)
    assert (kind, attempt_id, keys(payload)) == ("run.lost", None, QL_RUN_LOST)


@pytest.mark.parametrize(("exit_code", "terminal"), [(0, "succeeded"), (3, "failed")])
def test_a_receipt_completion_writes_qinglongs_payloads_and_names_the_attempt_on_the_run_event(
    repo: Repository,
    conn: Any,
    db_path: Path,
    store: FileReceiptStore,
    exit_code: int,
    terminal: str,
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    store.publish(receipt("run-1", "at-1", exit_code))
    before = last_sequence(repo, "run-1")
    run_pass(conn, store, ForbiddenProvider())
    (a_type, a_id, att), (r_type, r_id, run) = after(db_path, "run-1", before)
    assert (a_type, a_id, r_type, r_id) == (
        f"attempt.{terminal}",
        "at-1",
        f"run.{terminal}",
        "at-1",
    )
    # QingLong's completion processor: no error code in either payload (the columns have it).
    assert keys(att) == QL_ATTEMPT_BY_RECEIPT
    assert keys(run) == QL_RUN_BY_RECEIPT
    assert (att["exit_code"], att["callback_sequence"]) == (exit_code, 1)
    assert recovery_events(repo, "run-1", before) == [
        (f"attempt.{terminal}", *RECEIPT),
        (f"run.{terminal}", *RECEIPT),
    ]


def test_a_cancelled_receipt_completion_keeps_the_error_code_out_of_the_attempt_event(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    writer = other_connection(db_path)
    writer.execute(
        'UPDATE "Runs" SET cancel_requested_at_ms = ?, cancel_reason = ? WHERE id = ?',
        (T0, "timeout", "run-1"),
    )
    writer.close()
    store.publish(receipt("run-1", "at-1", 143))
    before = last_sequence(repo, "run-1")
    run_pass(conn, store, ForbiddenProvider())
    (a_type, _, att), (_, _, run) = after(db_path, "run-1", before)
    assert a_type == "attempt.timed_out"
    assert keys(att) == QL_ATTEMPT_BY_RECEIPT and keys(run) == QL_RUN_BY_RECEIPT
    got = repo.get_attempt("at-1")
    assert got is not None and got.error_code == "EXECUTION_TIMED_OUT"  # the column keeps it


def test_a_receipt_for_a_dispatching_run_names_the_attempt_on_every_run_event(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="starting", run="dispatching")
    store.publish(receipt("run-1", "at-1"))
    before = last_sequence(repo, "run-1")
    run_pass(conn, store, ForbiddenProvider())
    events = after(db_path, "run-1", before)
    assert [t for t, _, _ in events] == [
        "attempt.running",
        "run.running",
        "attempt.succeeded",
        "run.succeeded",
    ]
    assert {a for _, a, _ in events} == {"at-1"}


@linux_only
def test_adoption_names_the_attempt_on_its_run_running_event(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(
            repo, "run-1", "at-1", attempt="starting", run="dispatching", handle=s.handle, pid=s.pid
        )
        before = last_sequence(repo, "run-1")
        summary = run_pass(conn, store, ProcProvider())
    assert only(summary)["row"] == "12"
    (a_type, a_id, att), (r_type, r_id, run) = after(db_path, "run-1", before)
    assert (a_type, a_id, r_type, r_id) == ("attempt.running", "at-1", "run.running", "at-1")
    assert keys(att) == {"attempt_id", *QL_RUNNING} and keys(run) == QL_RUNNING


def test_a_process_proven_gone_names_the_attempt_on_its_run_lost_event(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    before = last_sequence(repo, "run-1")
    entry = only(run_pass(conn, store, ProcProvider()))
    assert (entry["row"], entry["outcome"]) == ("13", "recovered")
    (a_type, a_id, att), (r_type, r_id, run) = after(db_path, "run-1", before)
    assert (a_type, a_id, r_type, r_id) == ("attempt.lost", "at-1", "run.lost", "at-1")
    assert keys(att) == QL_ATTEMPT_LOST and keys(run) == QL_RUN_LOST


# --- the shadow pass: QingLong's start-up reconciler (G) and shadow writer (H) -------------------

# (write, [(event type, RunEvents.attempt_id is set, payload keys, error code)]) as QingLong
# writes them: G through RunCommandService (an Attempt event names its Attempt, a Run event
# none), H through its writer (no Attempt id on any event; qlfsm names it on Attempt events,
# D-6), both with the domain transition's payload.
G_ATTEMPT = {"attempt_id", "attempt", "from_status", "to_status", "version", "error_code"}
G_RUN = {"from_status", "to_status", "version", "error_code"}
SHADOW_EXPECTED: dict[str, list[tuple[str, bool, set[str], str | None]]] = {
    # The repaired Attempt carries no error code here: nor does the Run event.
    "repair": [("run.failed", False, G_RUN - {"error_code"}, None)],
    # spec 01 (**): a `dispatching` Run takes its timed-out Attempt's status and error code.
    "repair_timed_out": [("run.timed_out", False, G_RUN, "EXECUTION_TIMED_OUT")],
    "abandon": [
        ("attempt.cancelled", True, G_ATTEMPT, "LEGACY_RECONCILE_ACCEPTANCE_ABANDONED"),
        ("run.cancelled", False, G_RUN, "LEGACY_RECONCILE_ACCEPTANCE_ABANDONED"),
    ],
    "mark_lost": [
        ("attempt.lost", True, G_ATTEMPT, "LEGACY_RECONCILE_OWNER_LOST"),
        ("run.lost", False, G_RUN, "LEGACY_RECONCILE_OWNER_LOST"),
    ],
    "cancel": [
        (
            "attempt.cancelled",
            True,
            {*G_ATTEMPT, "legacy_cancel_reason", "shadow"},
            "LEGACY_EXECUTION_CANCELLED",
        ),
        (
            "run.cancelled",
            False,
            {*G_RUN, "legacy_cancel_reason", "shadow"},
            "LEGACY_EXECUTION_CANCELLED",
        ),
    ],
    "complete": [
        ("attempt.failed", True, {*G_ATTEMPT, "exit_code", "shadow"}, "LEGACY_EXIT_NON_ZERO"),
        ("run.failed", False, {*G_RUN, "legacy_exit_code", "shadow"}, "LEGACY_EXIT_NON_ZERO"),
    ],
}


def repair_timed_out(db: LegacyDb) -> Made:  # row 2 along the RUN_TRANSITIONS amendment
    made = db.run(status="dispatching", attempts=("timed_out",))
    db.conn.execute(
        'UPDATE "RunAttempts" SET error_code = ? WHERE id = ?',
        ("EXECUTION_TIMED_OUT", made.attempt_ids[0]),
    )
    return made


SHADOW_WRITES = {
    "repair": repair,
    "repair_timed_out": repair_timed_out,
    "abandon": abandon,
    "mark_lost": mark_lost,
    "cancel": cancel,
    "complete": complete,
}


@pytest.mark.parametrize("kind", sorted(SHADOW_EXPECTED))
def test_every_shadow_event_carries_exactly_qinglongs_payload_keys(db: LegacyDb, kind: str) -> None:
    made: Made = SHADOW_WRITES[kind](db)
    before = len(db.event_rows(made))
    shadow_pass(db)
    rows = event_rows(db.path, made.run_id)[before:]
    got = [(r["type"], r["attempt_id"] is not None, set(json.loads(r["payload"]))) for r in rows]
    assert got == [(t, a, k) for t, a, k, _ in SHADOW_EXPECTED[kind]]
    for row, (_, _, _, code) in zip(rows, SHADOW_EXPECTED[kind], strict=True):
        payload = json.loads(row["payload"])
        assert payload.get("error_code") == code
        if row["type"].startswith("attempt."):
            assert payload["attempt"] == 1  # the Attempt's number
            assert row["attempt_id"] == payload["attempt_id"] == made.attempt_ids[-1]


def test_a_shadow_completion_chained_from_queued_numbers_every_attempt_event(
    db: LegacyDb,
) -> None:
    made = complete(db, status="queued", attempts=("claimed",))
    shadow_pass(db)
    rows = event_rows(db.path, made.run_id)
    chain = [(r["type"], json.loads(r["payload"])) for r in rows]
    assert [t for t, _ in chain] == [
        "run.dispatching",
        "attempt.starting",
        "attempt.running",
        "run.running",
        "attempt.failed",
        "run.failed",
    ]
    for kind, payload in chain:
        if kind.startswith("attempt."):
            assert payload["attempt"] == 1
        else:
            assert "attempt" not in payload
        # QingLong's domain transition names an error code only where the edge sets one.
        assert ("error_code" in payload) == kind.endswith(".failed")


# --- where qlfsm follows the ADR and QingLong does not (documented, D-18) -----------------------


def test_a_claimed_attempt_under_a_cancel_request_is_lost_by_row_7_not_left_blocking(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # QingLong's markAggregateLost refuses any Run with cancel_requested_at_ms, so the candidate
    # blocks every boot; ADR-0068 §2 step 5 makes `claimed` lost with no condition on a cancel
    # request (and §4 leaves cancellation policy out of recovery): qlfsm takes row 7.
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    writer = other_connection(db_path)
    writer.execute(
        'UPDATE "Runs" SET cancel_requested_at_ms = ?, cancel_reason = ? WHERE id = ?',
        (T0, "user", "run-1"),
    )
    writer.close()
    summary = run_pass(conn, store, ForbiddenProvider())
    entry = only(summary)
    assert (entry["row"], entry["outcome"], entry["reason"]) == (
        "7",
        "recovered",
        "unstarted_claim",
    )
    assert summary["safe"] is True
    assert status(reader, "run-1", "at-1") == ("lost", "lost")
    again = run_pass(conn, store, ForbiddenProvider())
    assert (again["scanned"], again["safe"]) == (0, True)  # the next boot is not blocked


def test_an_invalid_receipt_without_a_journal_row_is_quarantined_with_a_new_row(
    repo: Repository, reader: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # QingLong's markQuarantined needs an existing journal row: without one it fails with a
    # journal conflict on every boot and leaves the file in place. ADR-0068 §3: an invalid
    # receipt is quarantined and the candidate stays unresolved, so qlfsm writes the row.
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    assert journal_get(conn, "at-1") is None
    store.publish(receipt("run-1", "at-1", token="x" * 43))
    path = Path(store.root) / "at" / "at-1.json"
    entry = only(run_pass(conn, store, ForbiddenProvider()))
    assert (entry["row"], entry["outcome"]) == ("6", "unresolved")
    assert entry["reason"] == "invalid_receipt:token_mismatch"
    assert not path.exists()
    assert (Path(store.root) / ".quarantine" / "at" / "at-1.json").exists()
    journal = journal_get(reader.conn, "at-1")
    assert journal is not None and journal.state == "quarantined"
    assert journal.run_id == "run-1"
    # The next boot: the invalid fact stands (row 6, quarantined earlier), nothing new written.
    again = only(run_pass(conn, store, ForbiddenProvider()))
    assert (again["row"], again["outcome"], again["reason"]) == (
        "6",
        "unresolved",
        "receipt_quarantined_earlier",
    )
