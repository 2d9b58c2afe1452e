"""Behaviours an independent mutation run found the fast suite let through (issue 28, Deliver
0), pinned before the code is moved: the ADR-0068 verifier's fingerprint and active-Attempt
checks, row 3's re-read and its time, the Attempt lock after a completion (D-17), `explain`
reading events that predate the `decision` key, and the times and errors of the ADR-0448
writes.

Through the public names of ``reconciler.primary``, ``reconciler.ops``, ``reconciler.shadow``
and ``storage``, on real SQLite files and a real receipt root; the clock, the process table
and the probe are the fakes that implement the same ports. docs/mutation.md names the change
each test was seen failing on.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _primary_support import SYSTEM, T0, TOKEN_HASH, make_candidate, make_run, receipt
from _shadow_support import T0_MS, LegacyDb, Made

from reconciler.node import (
    Evidence,
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    capture_handle,
    inspect_handle,
)
from reconciler.ops import explain
from reconciler.primary import reconcile_connection
from reconciler.shadow import Budget, PassHooks, PassPorts, run_pass
from storage import AttemptChange, Repository, RunChange, connect


def decisions(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (c["run_id"], c["attempt_id"], c["row"], c["outcome"], c["reason"])
        for c in summary["candidates"]
    ]


class SecondProbeRaces:
    """The real probe; just before the verifier's probe (the second one) returns, another
    writer runs ``race`` (ADR-0068 §5: the verifier re-reads the rows after its probe)."""

    def __init__(self, race: Callable[[], object]) -> None:
        self.race = race
        self.calls = 0

    def __call__(self, handle: str, provider: Any, *, platform: str) -> Evidence:
        self.calls += 1
        evidence = inspect_handle(handle, provider, platform=platform)
        if self.calls == 2:
            self.race()
        return evidence


def other_writer(db_path: Path, sql: str, *args: object) -> Callable[[], None]:
    def write() -> None:
        with contextlib.closing(connect(str(db_path))) as other:
            other.execute(sql, args)

    return write


def retried_candidate(repo: Repository, table: FakeProcessTable) -> None:
    """`run-1` running its second Attempt `at-1` (alive), its first, `at-0`, failed and retried
    along the lifecycle's own edges."""
    v = make_run(repo, "run-1", "dispatching")
    v = repo.create_attempt(run_id="run-1", attempt_id="at-0", expected_version=v, at_ms=T0).version
    for trigger in ("start", "run", "fail"):
        v = repo.advance(
            "run-1", v, [AttemptChange("at-0", trigger)], actor=SYSTEM, at_ms=T0
        ).version
    for trigger in ("schedule_retry", "queue", "dispatch"):
        v = repo.advance("run-1", v, [RunChange(trigger)], actor=SYSTEM, at_ms=T0).version
    v = repo.create_attempt(run_id="run-1", attempt_id="at-1", expected_version=v, at_ms=T0).version
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    sets = {"callback_token_hash": TOKEN_HASH}
    v = repo.advance(
        "run-1", v, [AttemptChange("at-1", "start", set=sets)], actor=SYSTEM, at_ms=T0
    ).version
    running = {"started_at_ms": T0, "executor_handle": handle, "pid": pid}
    v = repo.advance(
        "run-1", v, [AttemptChange("at-1", "run", set=running)], actor=SYSTEM, at_ms=T0
    ).version
    repo.advance("run-1", v, [RunChange("start")], actor=SYSTEM, at_ms=T0)


# --- ADR-0068 §5: the verifier ----------------------------------------------------------------


def test_the_verifier_keeps_a_retained_run_whose_earlier_retried_attempt_ended(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # The fingerprint is the LATEST Attempt's (spec 04 "Final verifier"): the failed first
    # Attempt of a retried Run is not the one the pass retained.
    table = FakeProcessTable()
    retried_candidate(repo, table)
    summary = reconcile_connection(conn, store, table, FakeClock(T0), platform="linux")
    assert decisions(summary) == [("run-1", "at-1", "12", "remaining", "process_running")]
    assert summary["safe"] is True


def test_the_verifier_revokes_a_retained_run_that_gained_a_second_active_attempt(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # spec 01: one active Attempt per Run. Another writer made the earlier Attempt active again
    # behind the latest, which is unchanged, as is the Run's version: not proven a second time.
    table = FakeProcessTable()
    retried_candidate(repo, table)
    probe = SecondProbeRaces(
        other_writer(db_path, "UPDATE \"RunAttempts\" SET status = 'running' WHERE id = 'at-0'")
    )
    summary = reconcile_connection(conn, store, table, FakeClock(T0), platform="linux", probe=probe)
    assert probe.calls == 2
    assert decisions(summary) == [
        ("run-1", "at-1", "12", "unresolved", "verifier:fingerprint_changed")
    ]
    assert summary["safe"] is False


# --- spec 04 row 3: the re-read inside the write, and the time ------------------------------


class RacingClock(FakeClock):
    """A clock whose first wall-time reading (right before the pass's first write) lets
    another writer go first."""

    def __init__(self, race: Callable[[], object], start_ms: int = T0) -> None:
        super().__init__(start_ms)
        self.race: Callable[[], object] | None = race

    def now_ms(self) -> int:
        race, self.race = self.race, None
        if race is not None:
            race()
        return super().now_ms()


APPEARS = (
    'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, created_at_ms) '
    "VALUES ('at-late', 'run-1', 1, 'claimed', 'local_process', ?)"
)


def test_a_row_3_write_whose_re_read_finds_an_attempt_is_the_named_conflict(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # ADR-0068 §4: row 3 was decided on a Run without an Attempt; inside the write one
    # appeared under the same Run version. The core takes another way on the re-read: the
    # write is refused as the named Conflict (row 14), nothing written, the Run still blocks.
    make_run(repo, "run-1", "dispatching")
    clock = RacingClock(other_writer(db_path, APPEARS, T0))
    summary = reconcile_connection(conn, store, FakeProcessTable(), clock)
    assert decisions(summary) == [
        (
            "run-1",
            None,
            "14",
            "failed",
            "error:Conflict: conflict: run run-1 is no longer what row 3 was decided on; "
            "re-read and decide again",
        )
    ]
    assert summary["safe"] is False
    run = Repository(conn).get_run("run-1")
    assert run is not None and run.status == "dispatching"


def lost_event_times(repo: Repository, run_id: str) -> list[int]:
    return [e.created_at_ms for e in repo.events_of(run_id) if e.type == "run.lost"]


def test_row_3_is_stamped_at_the_runs_own_start_when_the_clock_is_behind_it(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # spec 01 (QingLong's atOrAfter): no event earlier than a time the Run already carries. A
    # Run started once (then retried back to `dispatching`) keeps its `started_at_ms`.
    make_run(repo, "run-1", "dispatching")
    started = T0 + 5_000
    conn.execute("UPDATE \"Runs\" SET started_at_ms = ? WHERE id = 'run-1'", (started,))
    summary = reconcile_connection(conn, store, FakeProcessTable(), FakeClock(T0))
    assert decisions(summary) == [("run-1", None, "3", "recovered", "attempt_missing_before_start")]
    assert lost_event_times(repo, "run-1") == [started]


def test_row_3_at_the_epoch_is_stamped_at_the_epoch(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    v = repo.create_run(run_id="run-1", at_ms=0).version
    for trigger in ("queue", "dispatch"):
        v = repo.advance("run-1", v, [RunChange(trigger)], actor=SYSTEM, at_ms=0).version
    summary = reconcile_connection(conn, store, FakeProcessTable(), FakeClock(0))
    assert [c["row"] for c in summary["candidates"]] == ["3"]
    assert lost_event_times(repo, "run-1") == [0]


# --- D-17: the Attempt lock after a completion ----------------------------------------------


def unheld_lock(store: FileReceiptStore, attempt_id: str) -> Path:
    """The Attempt lock file as the wrapper leaves it when it dies before removing it
    (D-17: `<root>/<attemptId[0:2]>/<attemptId>.lock`), held by nobody."""
    path = Path(store.root, attempt_id[:2], f"{attempt_id}.lock")
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_bytes(b"")
    os.chmod(path, 0o600)
    assert store.lock_state(attempt_id) == "free"
    return path


def dead_candidate(repo: Repository, table: FakeProcessTable) -> None:
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    table.reap(pid)
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)


def test_a_row_5_completion_removes_the_attempts_unheld_lock_file(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    table = FakeProcessTable()
    dead_candidate(repo, table)
    lock = unheld_lock(store, "at-1")
    store.publish(receipt("run-1", "at-1"))
    summary = reconcile_connection(conn, store, table, FakeClock(T0), platform="linux")
    assert [(c["row"], c["outcome"]) for c in summary["candidates"]] == [("5", "recovered")]
    assert not lock.exists()
    assert store.lock_state("at-1") == "absent"


class PublishesDuringTheGrace(FakeClock):
    """The wrapper's receipt lands while the pass sleeps the grace (spec 04 row 13's second
    read)."""

    def __init__(self, store: FileReceiptStore) -> None:
        super().__init__(T0)
        self.store = store

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.store.publish(receipt("run-1", "at-1"))


def test_a_row_13_completion_removes_the_attempts_unheld_lock_file(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    table = FakeProcessTable()
    dead_candidate(repo, table)
    lock = unheld_lock(store, "at-1")
    summary = reconcile_connection(
        conn, store, table, PublishesDuringTheGrace(store), platform="linux"
    )
    assert [(c["row"], c["outcome"]) for c in summary["candidates"]] == [("13", "recovered")]
    assert Repository(conn).get_run("run-1").status == "succeeded"  # type: ignore[union-attr]
    assert not lock.exists()


# --- `explain`: events written before the `decision` key --------------------------------------


def without_decisions(conn: Any, run_id: str) -> None:
    """The Run's events as a pass that predates the `decision` key wrote them."""
    conn.execute(
        "UPDATE \"RunEvents\" SET payload = json_remove(payload, '$.decision') WHERE run_id = ?",
        (run_id,),
    )


def rows_of(conn: Any, run_id: str) -> list[tuple[str, str | None, bool]]:
    return [(s.type, s.row, s.row_recorded) for s in explain(conn, run_id).steps]


def test_explain_reads_an_unstarted_claim_without_its_decision_key_as_row_7(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    summary = reconcile_connection(conn, store, FakeProcessTable(), FakeClock(T0))
    assert [c["row"] for c in summary["candidates"]] == ["7"]
    without_decisions(conn, "run-1")
    written = [s for s in rows_of(conn, "run-1") if s[0] in ("attempt.lost", "run.lost")]
    assert written == [("attempt.lost", "7", False), ("run.lost", "7", False)]


def test_explain_reads_a_durable_process_identity_event_without_its_decision_key_as_row_12(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    make_candidate(
        repo, "run-1", "at-1", attempt="starting", run="dispatching", handle=handle, pid=pid
    )
    summary = reconcile_connection(conn, store, table, FakeClock(T0), platform="linux")
    assert [(c["row"], c["outcome"]) for c in summary["candidates"]] == [("12", "remaining")]
    without_decisions(conn, "run-1")
    payloads = [json.loads(p) for (p,) in conn.execute(
        "SELECT payload FROM \"RunEvents\" WHERE run_id = 'run-1' AND type LIKE '%.running' "
        "AND actor_type = 'reconciler'"
    )]  # fmt: skip
    assert [p.get("evidence") for p in payloads] == ["durable_process_identity"] * 2
    assert all("decision" not in p for p in payloads)
    adopted = [s for s in rows_of(conn, "run-1") if s[0] in ("attempt.running", "run.running")]
    assert adopted[-2:] == [("attempt.running", "12", False), ("run.running", "12", False)]


# --- ADR-0448 (spec 05): the legacy shadow's writes -----------------------------------------

LOG = "/ql/data/log/job_b/2026-01-01-00-00-00.log"
EARLY = FakeClock(T0_MS - 3_600_000)  # before anything the aggregates carry
EARLY_S = T0_MS // 1000 - 100  # an instance that finished before the aggregates' times


def legacy_pass(db: LegacyDb) -> None:
    run_pass(
        db.path,
        origins=("manual", "scheduled_node", "scheduled_system"),
        budget=Budget(page_size=50, max_pages=2),
        clock=EARLY,
        ports=PassPorts(hooks=PassHooks()),
    )


def test_a_legacy_repair_to_a_timed_out_attempt_copies_its_error_to_the_run(
    db: LegacyDb,
) -> None:
    # ADR-0448 row 2 (QingLong's repairTerminalAttempt): the latest Attempt's error travels
    # with every error-bearing terminal, `timed_out` among them.
    made = db.run(status="running", attempts=("timed_out",))
    db.conn.execute(
        'UPDATE "RunAttempts" SET error_code = ?, error_summary = ? WHERE id = ?',
        ("EXECUTION_TIMED_OUT", "Execution exceeded its configured timeout", made.attempt_ids[-1]),
    )
    legacy_pass(db)
    run = db.repo.get_run(made.run_id)
    assert run is not None and run.status == "timed_out"
    assert (run.error_code, run.error_summary) == (
        "EXECUTION_TIMED_OUT",
        "Execution exceeded its configured timeout",
    )


def cancelled_instance(db: LegacyDb) -> Made:  # row 6
    made = db.run(pid=43006, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=43006, log_path=LOG, status=2, finished_s=EARLY_S)
    return made


def failed_instance(db: LegacyDb) -> Made:  # row 7
    made = db.run(pid=43007, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=43007, log_path=LOG, status=3, finished_s=EARLY_S, exit_code=4)
    return made


@pytest.mark.parametrize(
    ("write", "status"), [(cancelled_instance, "cancelled"), (failed_instance, "failed")]
)
def test_a_legacy_cancel_or_complete_is_stamped_no_earlier_than_the_runs_own_start(
    db: LegacyDb, write: Callable[[LegacyDb], Made], status: str
) -> None:
    # ADR-0448 rows 6/7 (QingLong's atOrAfter): the clock and the instance's finish are both
    # behind the Run's start, which is later than every time its Attempt carries.
    made = write(db)
    run = db.repo.get_run(made.run_id)
    assert run is not None
    started = run.created_at_ms + 900
    db.conn.execute('UPDATE "Runs" SET started_at_ms = ? WHERE id = ?', (started, made.run_id))
    legacy_pass(db)
    after = db.repo.get_run(made.run_id)
    assert after is not None and after.status == status
    assert after.finished_at_ms == started
    assert {r["created_at_ms"] for r in db.event_rows(made)} == {started}


# --- the error each ADR-0068 write sets (module-level data mutmut never changes) -------------


def _row_3(repo: Repository, table: FakeProcessTable, store: FileReceiptStore) -> None:
    make_run(repo, "run-1", "dispatching")


def _row_7(repo: Repository, table: FakeProcessTable, store: FileReceiptStore) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")


def _row_13(repo: Repository, table: FakeProcessTable, store: FileReceiptStore) -> None:
    dead_candidate(repo, table)


def _row_5(exit_code: int, cancel_reason: str | None = None) -> Callable[..., None]:
    def make(repo: Repository, table: FakeProcessTable, store: FileReceiptStore) -> None:
        dead_candidate(repo, table)
        if cancel_reason is not None:
            repo.conn.execute(
                'UPDATE "Runs" SET cancel_requested_at_ms = ?, cancel_reason = ? '
                "WHERE id = 'run-1'",
                (T0, cancel_reason),
            )
        store.publish(receipt("run-1", "at-1", exit_code=exit_code))

    return make


@pytest.mark.parametrize(
    ("make", "row", "status", "code", "summary"),
    [
        (
            _row_3, "3", "lost", "RECOVERY_ATTEMPT_MISSING_BEFORE_START",
            "Dispatching Run has no durable Attempt",
        ),
        (
            _row_7, "7", "lost", "RECOVERY_UNSTARTED_CLAIM",
            "Claimed Attempt never crossed the start barrier",
        ),
        (
            _row_13, "13", "lost", "RECOVERY_PROCESS_NOT_RUNNING",
            "Durable process identity proves the execution is not running",
        ),
        (_row_5(3), "5", "failed", "EXECUTION_FAILED", "Execution completed without success"),
        (
            _row_5(0, "user"), "5", "cancelled", "EXECUTION_CANCELLED",
            "Execution was cancelled",
        ),
        (
            _row_5(0, "timeout"), "5", "timed_out", "EXECUTION_TIMED_OUT",
            "Execution exceeded its configured timeout",
        ),
        (_row_5(0), "5", "succeeded", None, None),
    ],
)  # fmt: skip
def test_each_adr_0068_write_sets_its_error_code_and_summary_on_the_run_and_its_attempt(
    repo: Repository,
    conn: Any,
    store: FileReceiptStore,
    make: Callable[..., None],
    row: str,
    status: str,
    code: str | None,
    summary: str | None,
) -> None:
    # spec 04 "Terminal mapping" and rows 3/7/13, as QingLong's recovery writes them (D-18).
    table = FakeProcessTable()
    make(repo, table, store)
    summary_ = reconcile_connection(conn, store, table, FakeClock(T0), platform="linux")
    assert [c["row"] for c in summary_["candidates"]] == [row]
    reader = Repository(conn)
    run = reader.get_run("run-1")
    assert run is not None
    assert (run.status, run.error_code, run.error_summary) == (status, code, summary)
    for attempt in reader.attempts_of("run-1"):
        assert (attempt.status, attempt.error_code, attempt.error_summary) == (
            status,
            code,
            summary,
        )
