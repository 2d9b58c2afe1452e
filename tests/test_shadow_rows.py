"""Every row of spec 05's per-candidate table, and the ADR-0448 verification items, on real
SQLite files made by `db init`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _shadow_support import T0_MS, AfterRead, LegacyDb

from reconciler import run_shadow
from reconciler.node import FakeClock
from reconciler.shadow import PassHooks, PassPorts
from reconciler.shadow import _pass as _shadow_pass
from storage import LegacyCandidate, Repository, connect

FINISHED_S = T0_MS // 1000 + 90
LOG = "/ql/data/log/job_a/2026-01-01-00-00-00.log"


def shadow(
    db: LegacyDb,
    origins: str = "manual,scheduled_node,scheduled_system",
    ports: PassPorts | None = None,
) -> Any:
    return run_shadow(
        db.path, origins=origins, environ={}, clock=FakeClock(T0_MS + 10_000), ports=ports
    )


def outcomes(result: Any) -> dict[str, int]:
    return {k: v for k, v in result.audit["report"]["outcomes"].items() if v}


def payload(row: Any) -> dict[str, Any]:
    return dict(json.loads(row["payload"]))


# --- row 1: skipped -------------------------------------------------------------------------


def stale(made: Any, origin: str = "manual") -> LegacyCandidate:
    return LegacyCandidate(made.run_id, "running", 4, origin, None, T0_MS, 1, None)


def decide(db: LegacyDb, cand: LegacyCandidate, enabled: frozenset[str]) -> str:
    conn = connect(db.path)
    try:
        return _shadow_pass.decide(conn, Repository(conn), cand, enabled, FakeClock(T0_MS))
    finally:
        conn.close()


def test_row_1_a_run_gone_since_the_page_was_read_is_skipped(db: LegacyDb) -> None:
    made = db.run()
    db.conn.execute('DELETE FROM "Runs" WHERE id = ?', (made.run_id,))
    assert decide(db, stale(made), frozenset({"manual"})) == "skipped"


def test_row_1_a_runtime_owned_run_is_skipped(db: LegacyDb) -> None:
    made = db.run(owner="runtime")
    assert decide(db, stale(made), frozenset({"manual"})) == "skipped"
    assert db.status(made) == ("running", ["running"])


def test_row_1_a_run_whose_origin_is_not_enabled_is_skipped(db: LegacyDb) -> None:
    made = db.run(origin="boot")
    assert decide(db, stale(made), frozenset({"manual"})) == "skipped"


def test_row_1_a_run_already_terminal_or_lost_is_skipped(db: LegacyDb) -> None:
    done = db.run(status="succeeded", attempts=("succeeded",))
    lost = db.run(status="lost", attempts=("lost",))
    assert decide(db, stale(done), frozenset({"manual"})) == "skipped"
    assert decide(db, stale(lost), frozenset({"manual"})) == "skipped"
    assert db.events(done) == [] and db.events(lost) == []


def test_a_skipped_run_is_counted_in_the_report_and_asks_for_attention(db: LegacyDb) -> None:
    made = db.run()

    class RunLeftTheIndex(PassHooks):
        def before_decide(self, conn: Any, cand: LegacyCandidate) -> None:
            db.conn.execute(
                "UPDATE \"Runs\" SET execution_owner = 'runtime' WHERE id = ?", (made.run_id,)
            )

    result = shadow(db, ports=PassPorts(hooks=RunLeftTheIndex()))
    assert outcomes(result) == {"skipped": 1}
    assert result.audit["report"]["assessment"] == "attention_required"
    assert db.events(made) == []


# --- row 2 / 2b: no active Attempt ------------------------------------------------------------


def test_row_2_a_terminal_latest_attempt_repairs_the_run_without_a_new_attempt(
    db: LegacyDb,
) -> None:
    made = db.run(status="running", attempts=("lost",))
    result = shadow(db)
    assert outcomes(result) == {"repaired": 1}
    assert db.status(made) == ("lost", ["lost"])
    (event,) = db.event_rows(made)
    assert event["type"] == "run.lost" and event["actor_type"] == "reconciler"
    assert event["actor_id"] is None
    assert event["dedupe_key"] == f"legacy-startup-repair:{made.attempt_ids[0]}:lost"
    run = db.repo.get_run(made.run_id)
    assert run is not None and run.error_code == "LEGACY_RECONCILE_OWNER_LOST"
    assert run.finished_at_ms is None  # lost is not terminal (spec 01)


def test_row_2_a_queued_run_whose_attempt_was_cancelled_is_repaired_to_cancelled(
    db: LegacyDb,
) -> None:
    made = db.run(status="queued", attempts=("failed", "cancelled"))
    assert outcomes(shadow(db)) == {"repaired": 1}
    assert db.status(made) == ("cancelled", ["failed", "cancelled"])
    run = db.repo.get_run(made.run_id)
    assert run is not None and run.finished_at_ms is not None


def test_row_2_a_dispatching_run_whose_only_attempt_timed_out_is_repaired_to_timed_out(
    db: LegacyDb,
) -> None:
    # spec 01 (**): QingLong's RUN_TRANSITIONS allows dispatching -> timed_out, so row 2's
    # "Run -> that status is legal" holds and QingLong's reconciler repairs the Run.
    made = db.run(status="dispatching", attempts=("timed_out",))
    db.conn.execute(
        'UPDATE "RunAttempts" SET error_code = ?, error_summary = ?, finished_at_ms = ? '
        "WHERE id = ?",
        ("EXECUTION_TIMED_OUT", "deadline passed", T0_MS + 5_000, made.attempt_ids[0]),
    )
    result = shadow(db)
    assert outcomes(result) == {"repaired": 1}
    assert result.audit["report"]["assessment"] == "converged"
    assert db.status(made) == ("timed_out", ["timed_out"])
    (event,) = db.event_rows(made)
    assert (event["type"], event["actor_type"], event["actor_id"], event["attempt_id"]) == (
        "run.timed_out",
        "reconciler",
        None,
        None,
    )
    assert event["dedupe_key"] == f"legacy-startup-repair:{made.attempt_ids[0]}:timed_out"
    run = db.repo.get_run(made.run_id)
    assert run is not None
    assert payload(event) == {
        "from_status": "dispatching",
        "to_status": "timed_out",
        "version": run.version,
        "error_code": "EXECUTION_TIMED_OUT",
    }
    assert (run.error_code, run.error_summary) == ("EXECUTION_TIMED_OUT", "deadline passed")
    assert run.finished_at_ms is not None  # timed_out is terminal (spec 01)


def test_row_2b_no_attempt_at_all_is_ambiguous_and_writes_nothing(db: LegacyDb) -> None:
    made = db.run(status="dispatching", attempts=())
    assert outcomes(shadow(db)) == {"ambiguous": 1}
    assert db.events(made) == []


def test_row_2b_a_terminal_attempt_whose_status_the_run_cannot_take_is_ambiguous(
    db: LegacyDb,
) -> None:
    made = db.run(status="queued", attempts=("lost",))  # queued -> lost is not legal
    assert outcomes(shadow(db)) == {"ambiguous": 1}
    assert db.status(made) == ("queued", ["lost"])


# --- rows 3, 4, 5: ambiguous evidence -----------------------------------------------------------


def test_row_3_more_than_one_active_attempt_is_ambiguous(db: LegacyDb) -> None:
    made = db.run(attempts=("running", "running"))
    assert outcomes(shadow(db)) == {"ambiguous": 1}
    assert db.events(made) == []


def test_row_4_more_than_eight_instances_of_the_cron_is_ambiguous(db: LegacyDb) -> None:
    made = db.run(pid=41001, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41001, log_path=LOG, status=1, finished_s=FINISHED_S)
    for n in range(8):
        db.instance(made.cron_id, pid=42000 + n, log_path=f"/x/{n}.log", status=1)
    assert outcomes(shadow(db)) == {"ambiguous": 1}
    assert db.status(made) == ("running", ["running"])


def test_row_4_exactly_eight_instances_is_still_evidence(db: LegacyDb) -> None:
    made = db.run(pid=41002, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41002, log_path=LOG, status=1, finished_s=FINISHED_S)
    for n in range(7):
        db.instance(made.cron_id, pid=43000 + n, log_path=f"/y/{n}.log", status=1)
    assert outcomes(shadow(db)) == {"completed": 1}


def test_row_5_duplicate_identity_is_ambiguous(db: LegacyDb) -> None:
    made = db.run(pid=41003, log_path=None)
    assert made.cron_id is not None
    for _ in range(2):
        db.instance(made.cron_id, pid=41003, log_path=None, status=1, finished_s=FINISHED_S)
    assert outcomes(shadow(db)) == {"ambiguous": 1}
    assert db.events(made) == []


def test_row_5_a_log_match_and_a_pid_match_on_different_rows_is_ambiguous(db: LegacyDb) -> None:
    made = db.run(pid=41004, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41004, log_path="/other.log", status=1, finished_s=FINISHED_S)
    db.instance(made.cron_id, pid=9, log_path=LOG, status=1, finished_s=FINISHED_S)
    assert outcomes(shadow(db)) == {"ambiguous": 1}


# --- row 6: explicit stop ---------------------------------------------------------------------


def test_row_6_an_explicit_stop_with_a_finish_time_cancels_attempt_and_run(db: LegacyDb) -> None:
    made = db.run(pid=41005, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41005, log_path=LOG, status=2, finished_s=FINISHED_S)
    assert outcomes(shadow(db)) == {"cancelled": 1}
    assert db.status(made) == ("cancelled", ["cancelled"])
    rows = db.event_rows(made)
    assert [r["type"] for r in rows] == ["attempt.cancelled", "run.cancelled"]
    for r in rows:
        assert r["actor_type"] == "compatibility" and r["actor_id"] is None
        assert r["dedupe_key"] == f"shadow:{r['sequence']}:{r['type']}"
        assert payload(r)["legacy_cancel_reason"] == "reconcile"
        assert payload(r)["shadow"] is True
    run = db.repo.get_run(made.run_id)
    assert run is not None and run.error_code == "LEGACY_EXECUTION_CANCELLED"
    assert run.finished_at_ms is not None and run.finished_at_ms >= FINISHED_S * 1000


# --- row 7: unique finished evidence ------------------------------------------------------------


def test_row_7_a_unique_finished_instance_completes_through_legal_edges(db: LegacyDb) -> None:
    made = db.run(status="queued", attempts=("claimed",), pid=None, log_path=None)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41006, log_path=LOG, status=1, finished_s=FINISHED_S)
    assert outcomes(shadow(db)) == {"completed": 1}
    assert db.status(made) == ("succeeded", ["succeeded"])
    assert db.events(made) == [
        "run.dispatching",
        "attempt.starting",
        "attempt.running",
        "run.running",
        "attempt.succeeded",
        "run.succeeded",
    ]
    rows = db.event_rows(made)
    assert [r["sequence"] for r in rows] == list(
        range(rows[0]["sequence"], rows[0]["sequence"] + 6)
    )
    assert payload(rows[-1])["legacy_exit_code"] == 0
    attempt = db.repo.get_attempt(made.attempt_ids[0])
    assert attempt is not None and attempt.exit_code == 0 and attempt.started_at_ms is not None


def test_row_7_an_error_instance_fails_the_run_and_keeps_the_exit_code(db: LegacyDb) -> None:
    made = db.run(pid=41007, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41007, log_path=LOG, status=3, finished_s=FINISHED_S, exit_code=2)
    assert outcomes(shadow(db)) == {"completed": 1}
    assert db.events(made) == ["attempt.failed", "run.failed"]
    attempt = db.repo.get_attempt(made.attempt_ids[0])
    assert attempt is not None and attempt.exit_code == 2
    assert attempt.error_code == "LEGACY_EXIT_NON_ZERO"


def test_row_7_an_error_instance_with_exit_code_zero_is_recorded_as_exit_one(db: LegacyDb) -> None:
    made = db.run(pid=41008, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41008, log_path=LOG, status=3, finished_s=FINISHED_S, exit_code=0)
    shadow(db)
    attempt = db.repo.get_attempt(made.attempt_ids[0])
    assert attempt is not None and attempt.status == "failed" and attempt.exit_code == 1


# --- row 8: system crond ------------------------------------------------------------------------


def test_row_8_system_crond_without_terminal_evidence_stays_pending(db: LegacyDb) -> None:
    made = db.run(origin="scheduled_system", pid=41009, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41009, log_path=LOG, status=2)  # reset by initData
    result = shadow(db)
    assert outcomes(result) == {"pending": 1}
    assert result.audit["report"]["assessment"] == "waiting_external_callback"
    assert result.audit["state"] == "incomplete"
    assert db.events(made) == []


def test_row_8_system_crond_with_terminal_evidence_is_still_completed(db: LegacyDb) -> None:
    made = db.run(origin="scheduled_system", pid=41010, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41010, log_path=LOG, status=1, finished_s=FINISHED_S)
    assert outcomes(shadow(db)) == {"completed": 1}


# --- rows 9, 10: no evidence, Node worker owned ---------------------------------------------------


def test_row_9_a_claim_never_spawned_is_abandoned_in_two_transactions(db: LegacyDb) -> None:
    made = db.run(status="queued", attempts=("claimed",))
    assert outcomes(shadow(db)) == {"abandoned": 1}
    assert db.status(made) == ("cancelled", ["cancelled"])
    rows = db.event_rows(made)
    aid = made.attempt_ids[0]
    assert [(r["type"], r["dedupe_key"], r["actor_type"]) for r in rows] == [
        ("attempt.cancelled", f"legacy-startup-abandoned-attempt:{aid}", "reconciler"),
        ("run.cancelled", f"legacy-startup-abandoned-run:{aid}", "reconciler"),
    ]
    run = db.repo.get_run(made.run_id)
    assert run is not None and run.error_code == "LEGACY_RECONCILE_ACCEPTANCE_ABANDONED"
    assert run.cancel_reason is None  # a direct edge, not a cancellation request


def test_row_10_a_start_up_reset_instance_is_no_terminal_evidence_so_the_run_is_lost(
    db: LegacyDb,
) -> None:
    made = db.run(origin="scheduled_node", pid=41011, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41011, log_path=LOG, status=2)  # stopped, no finished_at
    assert outcomes(shadow(db)) == {"markedLost": 1}
    assert db.status(made) == ("lost", ["lost"])
    rows = db.event_rows(made)
    aid = made.attempt_ids[0]
    assert [(r["type"], r["dedupe_key"]) for r in rows] == [
        ("attempt.lost", f"legacy-startup-lost-attempt:{aid}"),
        ("run.lost", f"legacy-startup-lost-run:{aid}"),
    ]
    assert payload(rows[1])["error_code"] == "LEGACY_RECONCILE_OWNER_LOST"
    run = db.repo.get_run(made.run_id)
    assert run is not None and run.finished_at_ms is None


def test_row_10_a_still_running_instance_is_no_terminal_evidence_either(db: LegacyDb) -> None:
    made = db.run(status="dispatching", attempts=("starting",), pid=41012, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41012, log_path=LOG, status=0)
    assert outcomes(shadow(db)) == {"markedLost": 1}
    assert db.status(made) == ("lost", ["lost"])


# --- row 11, row 12 ----------------------------------------------------------------------------


def test_row_11_a_queued_run_with_a_running_attempt_is_ambiguous(db: LegacyDb) -> None:
    made = db.run(status="queued", attempts=("running",))
    assert outcomes(shadow(db)) == {"ambiguous": 1}
    assert db.events(made) == []


def test_row_12_an_exception_is_failed_and_writes_nothing(db: LegacyDb) -> None:
    made = db.run(pid=41013, log_path=LOG)

    def broken() -> None:
        # Raised in the pass's window between reading the candidate and writing it (the
        # after_read port), with the run's id in its words.
        raise RuntimeError(f"boom {made.run_id}")

    result = shadow(db, ports=PassPorts(hooks=AfterRead(broken)))
    assert outcomes(result) == {"failed": 1}
    assert result.audit["report"]["assessment"] == "attention_required"
    assert made.run_id not in json.dumps(result.audit)
    assert db.events(made) == []


def test_a_write_that_loses_its_compare_and_set_is_failed_and_rolled_back(db: LegacyDb) -> None:
    made = db.run(status="queued", attempts=("claimed",))

    def someone_else_moved_it() -> None:
        db.conn.execute('UPDATE "Runs" SET version = version + 1 WHERE id = ?', (made.run_id,))

    assert outcomes(shadow(db, ports=PassPorts(hooks=AfterRead(someone_else_moved_it)))) == {
        "failed": 1
    }
    assert db.status(made) == ("queued", ["claimed"])
    assert db.events(made) == []


# --- ADR-0448 §6: response-loss repair ----------------------------------------------------------


class SimulatedCrash(BaseException):
    """The process dies: not an Exception, so nothing on the way catches it."""


class CrashBetweenCommits(PassHooks):
    def between_commits(self) -> None:
        raise SimulatedCrash()


def test_a_crash_between_the_attempt_and_run_commits_is_repaired_on_the_next_start(
    db: LegacyDb,
) -> None:
    made = db.run(origin="scheduled_node")

    with pytest.raises(SimulatedCrash):
        shadow(db, ports=PassPorts(hooks=CrashBetweenCommits()))
    assert db.status(made) == ("running", ["lost"])  # the Attempt committed, the Run did not
    result = shadow(db)
    assert outcomes(result) == {"repaired": 1}
    assert db.status(made) == ("lost", ["lost"])
    aid = made.attempt_ids[0]
    assert [r["dedupe_key"] for r in db.event_rows(made)] == [
        f"legacy-startup-lost-attempt:{aid}",
        f"legacy-startup-repair:{aid}:lost",
    ]
    assert len(db.repo.attempts_of(made.run_id)) == 1  # no second Attempt, no replay
    assert outcomes(shadow(db)) == {}  # converged: nothing left to scan


def test_a_crash_after_abandoning_the_attempt_is_repaired_to_cancelled(
    db: LegacyDb,
) -> None:
    made = db.run(status="queued", attempts=("claimed",))
    with pytest.raises(SimulatedCrash):
        shadow(db, ports=PassPorts(hooks=CrashBetweenCommits()))
    assert outcomes(shadow(db)) == {"repaired": 1}
    assert db.status(made) == ("cancelled", ["cancelled"])
