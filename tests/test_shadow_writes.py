"""The writes of the ADR-0448 pass (spec 05 rows 2, 6, 7, 9, 10), on real SQLite files made by
`db init`: each compare-and-set re-checks every field the decision used, the time a write is
stamped with is the latest time the aggregate already carries (QingLong's atOrAfter), and the
error fields and edges each row writes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from _shadow_support import T0_MS, AfterRead, LegacyDb, Made

from fsm import (
    IllegalTransition,
    MachineDefinitionError,
)
from fsm.qinglong import (
    LEGACY_ROWS,
    LEGACY_TABLE,
    LegacyCore,
    LegacyEngine,
    LegacyFacts,
)
from reconciler.node import FakeClock
from reconciler.shadow import WRITES as WRITE_EFFECTS
from reconciler.shadow import Budget, PassHooks, PassOutcome, PassPorts, PassWriter, run_pass
from reconciler.shadow import _pass as _shadow_pass
from reconciler.shadow._writes import Guard, _rows_of_writes, edge
from storage import (
    AttemptChange,
    Conflict,
    Expect,
    LegacyCandidate,
    Repository,
    connect,
)

ORIGINS = ("manual", "scheduled_node", "scheduled_system")
LOG = "/ql/data/log/job_b/2026-01-01-00-00-00.log"
EARLY = FakeClock(T0_MS - 3_600_000)  # before anything the aggregates carry
LATE_S = T0_MS // 1000 + 90  # an instance finished after everything the aggregates carry
EARLY_S = T0_MS // 1000 - 100  # ... and before


def run(
    db: LegacyDb,
    clock: FakeClock = EARLY,
    hooks: PassHooks | None = None,
    write: PassWriter | None = None,
) -> PassOutcome:
    ports = PassPorts(hooks=hooks or PassHooks())
    return run_pass(
        db.path,
        origins=ORIGINS,
        budget=Budget(page_size=50, max_pages=2),
        clock=clock,
        ports=ports if write is None else dataclasses.replace(ports, write=write),
    )


def counts(outcome: PassOutcome) -> dict[str, int]:
    return {k: v for by in outcome.counts.by_origin.values() for k, v in by.items() if v}


def set_attempt(db: LegacyDb, made: Made, **fields: object) -> None:
    for name, value in fields.items():
        db.conn.execute(
            f'UPDATE "RunAttempts" SET {name} = ? WHERE id = ?', (value, made.attempt_ids[-1])
        )


def set_run(db: LegacyDb, made: Made, **fields: object) -> None:
    for name, value in fields.items():
        db.conn.execute(f'UPDATE "Runs" SET {name} = ? WHERE id = ?', (value, made.run_id))


def created(db: LegacyDb, made: Made) -> int:
    run = db.repo.get_run(made.run_id)
    assert run is not None
    return run.created_at_ms


# --- one candidate per write kind ----------------------------------------------------------------


def repair(db: LegacyDb) -> Made:  # row 2
    return db.run(status="running", attempts=("failed",))


def cancel(db: LegacyDb, finished_s: int = LATE_S) -> Made:  # row 6
    made = db.run(pid=43006, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=43006, log_path=LOG, status=2, finished_s=finished_s)
    return made


def complete(db: LegacyDb, finished_s: int = LATE_S, **run: Any) -> Made:  # row 7, failed
    made = db.run(pid=43007, log_path=LOG, **run)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=43007, log_path=LOG, status=3, finished_s=finished_s, exit_code=4)
    return made


def abandon(db: LegacyDb) -> Made:  # row 9
    return db.run(status="queued", attempts=("claimed",))


def mark_lost(db: LegacyDb) -> Made:  # row 10: no instance row at all
    return db.run(pid=43010)


WRITES: dict[str, Callable[[LegacyDb], Made]] = {
    "repair": repair,
    "cancel": cancel,
    "complete": complete,
    "abandon": abandon,
    "mark_lost": mark_lost,
}
DONE = {
    "repair": ("failed", ["failed"]),
    "cancel": ("cancelled", ["cancelled"]),
    "complete": ("failed", ["failed"]),
    "abandon": ("cancelled", ["cancelled"]),
    "mark_lost": ("lost", ["lost"]),
}


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_each_write_kind_commits_its_row_when_nothing_moved(db: LegacyDb, kind: str) -> None:
    made = WRITES[kind](db)
    run(db)
    assert db.status(made) == DONE[kind]


# --- the compare-and-set: every field the decision used, re-checked in the transaction ----------

# (write kind, table, column, value) changed after the pass read the candidate, WITHOUT the Run's
# version moving: only the fields the write re-checks can see it.
MOVED: list[tuple[str, str, str, object]] = [
    *(
        (kind, "RunAttempts", column, value)
        for kind in ("cancel", "complete", "abandon", "mark_lost")
        for column, value in (
            ("status", "starting"),
            ("callback_sequence", 9),
            ("pid", 43999),
            ("log_artifact_id", "another-log"),
        )
    ),
    *(
        (kind, "Runs", column, value)
        for kind in ("cancel", "complete", "abandon", "mark_lost")
        for column, value in (("status", "dispatching"), ("execution_owner", "runtime"))
    ),
    ("repair", "RunAttempts", "status", "succeeded"),
]


@pytest.mark.parametrize(
    ("kind", "table", "column", "value"), MOVED, ids=[f"{k}-{c}" for k, _, c, _ in MOVED]
)
def test_a_field_the_decision_used_that_moved_before_the_write_refuses_it(
    db: LegacyDb, kind: str, table: str, column: str, value: object
) -> None:
    made = WRITES[kind](db)

    def someone_else_wrote() -> None:
        if table == "Runs":
            set_run(db, made, **{column: value})
        else:
            set_attempt(db, made, **{column: value})

    assert counts(run(db, hooks=AfterRead(someone_else_wrote))) == {"failed": 1}
    assert db.events(made) == []
    row = db.conn.execute(
        f'SELECT {column} FROM "{table}" WHERE {"id" if table == "Runs" else "run_id"} = ?',
        (made.run_id,),
    ).fetchone()
    assert row[0] == value  # what the other writer wrote stays


class MovesTheRunBetweenCommits(PassHooks):
    def __init__(self, db: LegacyDb, made: Made) -> None:
        self.db, self.made = db, made

    def between_commits(self) -> None:
        set_run(self.db, self.made, status="dispatching")  # no version bump


@pytest.mark.parametrize("kind", ["abandon", "mark_lost"])
def test_the_run_commit_of_a_two_step_write_rechecks_the_run_status_it_decided_on(
    db: LegacyDb, kind: str
) -> None:
    made = WRITES[kind](db)
    outcome = run(db, hooks=MovesTheRunBetweenCommits(db, made))
    assert counts(outcome) == {"failed": 1}
    # The Attempt committed; the Run's edge did not (row 2 heals it on the next start).
    assert db.status(made) == ("dispatching", [DONE[kind][1][0]])
    assert [e.split(".")[0] for e in db.events(made)] == ["attempt"]


# --- the decided row's guard, taken again on the facts re-read inside each write transaction ---


def another_origin(db: LegacyDb, made: Made) -> None:
    set_run(db, made, execution_origin="boot")  # not enabled: row 1 now, no version bump


def finished_instance(db: LegacyDb, made: Made) -> None:
    # Terminal evidence appears for the one active Attempt (row 6 or 7 now, not 9 or 10).
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=made.pid, log_path=None, status=2, finished_s=LATE_S)


# (write kind, what another writer changes that no compare-and-set field sees)
REDECIDED: list[tuple[str, Callable[[LegacyDb, Made], None]]] = [
    *((kind, another_origin) for kind in sorted(WRITES)),
    ("abandon", finished_instance),
    ("mark_lost", finished_instance),
]


@pytest.mark.parametrize(
    ("kind", "change"), REDECIDED, ids=[f"{k}-{c.__name__}" for k, c in REDECIDED]
)
def test_a_write_whose_row_no_longer_matches_on_the_facts_re_read_in_it_writes_nothing(
    db: LegacyDb,
    kind: str,
    change: Callable[[LegacyDb, Made], None],
) -> None:
    made = WRITES[kind](db)
    before = db.status(made)
    hooks = AfterRead(lambda: change(db, made))
    assert counts(run(db, hooks=hooks)) == {"failed": 1}
    assert hooks.seen == ["failed"]  # the refusal is the candidate's outcome, never ignored
    assert db.status(made) == before
    assert db.events(made) == []


class MovesTheOriginBetweenCommits(PassHooks):
    def __init__(self, db: LegacyDb, made: Made) -> None:
        self.db, self.made = db, made

    def between_commits(self) -> None:
        another_origin(self.db, self.made)


@pytest.mark.parametrize("kind", ["abandon", "mark_lost"])
def test_the_run_commit_of_a_two_step_write_is_refused_when_row_2_no_longer_matches(
    db: LegacyDb, kind: str
) -> None:
    made = WRITES[kind](db)
    start = db.status(made)[0]
    outcome = run(db, hooks=MovesTheOriginBetweenCommits(db, made))
    assert counts(outcome) == {"failed": 1}
    assert db.status(made) == (start, [DONE[kind][1][0]])
    assert [e.split(".")[0] for e in db.events(made)] == ["attempt"]


def test_a_refused_guard_raises_a_conflict_naming_the_row_and_leaves_the_run_as_it_was(
    db: LegacyDb,
) -> None:
    made = mark_lost(db)
    stored = run_row(db, made)
    attempt = attempt_row(db, made)
    guard = Guard(
        row="10",
        reread=lambda c: LegacyFacts(run_present=False),  # the Run is gone in the transaction
    )

    # The guard gives each change the facts it re-reads as its evidence.
    lost = AttemptChange(attempt.id, edge("attempt", "10", attempt.status, "lost"))
    with pytest.raises(Conflict) as refused:
        guard.commit(
            db.repo,
            made.run_id,
            stored.version,
            [lost],
            actor=WRITE_EFFECTS["mark_lost"].actor,
            at_ms=T0_MS,
            expect=Expect(),
        )
    assert str(refused.value) == (
        f"conflict: run {made.run_id} is no longer what ADR-0448 row 10 was decided on; "
        "re-read and decide again"
    )
    assert (refused.value.what, refused.value.ident) == ("run", made.run_id)
    assert run_row(db, made).version == stored.version
    assert attempt_row(db, made).status == attempt.status
    assert db.events(made) == []


ROW_OF = {"repair": "2", "cancel": "6", "complete": "7", "abandon": "9", "mark_lost": "10"}


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_a_write_refused_on_its_re_read_raises_a_conflict_naming_the_run_and_the_decided_row(
    db: LegacyDb, kind: str
) -> None:
    # What the pass drops (row 12 keeps nothing of an exception: spec 05 privacy), read where
    # the write raises it.
    made = WRITES[kind](db)
    real_write = PassPorts().write
    raised: list[Exception] = []

    def write(*args: Any) -> None:
        try:
            real_write(*args)
        except Exception as exc:
            raised.append(exc)
            raise

    changed = AfterRead(lambda: another_origin(db, made))
    assert counts(run(db, hooks=changed, write=write)) == {"failed": 1}
    assert [str(e) for e in raised] == [
        f"conflict: run {made.run_id} is no longer what ADR-0448 row {ROW_OF[kind]} was decided "
        "on; re-read and decide again"
    ]


class CountingEngine(LegacyEngine):
    """ADR-0448's engine, counting the candidate cores it starts (one per read of the facts)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0

    def start(self) -> LegacyCore:
        self.started += 1
        return super().start()


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_the_pass_reads_every_candidates_facts_with_the_engine_its_ports_give(
    db: LegacyDb, kind: str
) -> None:
    # Before the decision and again inside each write transaction (the guard's re-read).
    made = WRITES[kind](db)
    engine = CountingEngine()
    real_write = PassPorts().write
    rereads: list[object] = []

    def write(repo: Any, decision: Any, ctx: Any, clock: Any, hooks: Any, reread: Any) -> None:
        def counted(c: Any) -> Any:
            rereads.append(c)
            return reread(c)

        real_write(repo, decision, ctx, clock, hooks, counted)

    outcome = run_pass(
        db.path, origins=ORIGINS, budget=Budget(page_size=50, max_pages=2), clock=EARLY,
        ports=PassPorts(engine=engine, write=write),
    )  # fmt: skip
    assert sum(counts(outcome).values()) == 1 and "failed" not in counts(outcome)
    assert db.status(made) == DONE[kind]
    assert rereads  # every write re-reads in its transaction
    assert engine.started == 1 + len(rereads)


# --- the time of a write: the latest the aggregate already carries -----------------------------


def event_times(db: LegacyDb, made: Made) -> set[int]:
    return {r["created_at_ms"] for r in db.event_rows(made)}


def run_row(db: LegacyDb, made: Made) -> Any:
    got = db.repo.get_run(made.run_id)
    assert got is not None
    return got


def attempt_row(db: LegacyDb, made: Made) -> Any:
    got = db.repo.get_attempt(made.attempt_ids[-1])
    assert got is not None
    return got


def test_a_repair_is_stamped_with_the_latest_attempts_finish(db: LegacyDb) -> None:
    made = repair(db)
    finished = attempt_row(db, made).finished_at_ms
    assert finished > created(db, made)
    run(db)
    assert run_row(db, made).finished_at_ms == finished
    assert event_times(db, made) == {finished}


@pytest.mark.parametrize("write", [cancel, complete])
def test_a_cancel_or_complete_is_stamped_with_the_instance_finish_when_that_is_latest(
    db: LegacyDb, write: Callable[..., Made]
) -> None:
    made = write(db)
    run(db)
    assert run_row(db, made).finished_at_ms == LATE_S * 1000
    assert event_times(db, made) == {LATE_S * 1000}


@pytest.mark.parametrize("write", [cancel, complete])
@pytest.mark.parametrize("field", ["created_at_ms", "started_at_ms"])
def test_a_cancel_or_complete_is_stamped_with_the_attempts_time_when_that_is_latest(
    db: LegacyDb, write: Callable[..., Made], field: str
) -> None:
    made = write(db, finished_s=EARLY_S)
    latest = created(db, made) + 700
    set_attempt(db, made, **{field: latest})
    run(db)
    assert run_row(db, made).finished_at_ms == latest
    assert event_times(db, made) == {latest}


@pytest.mark.parametrize("write", [abandon, mark_lost])
@pytest.mark.parametrize("field", ["created_at_ms", "started_at_ms"])
def test_a_two_step_write_is_stamped_with_the_attempts_time_when_that_is_latest(
    db: LegacyDb, write: Callable[[LegacyDb], Made], field: str
) -> None:
    made = write(db)
    latest = created(db, made) + 800
    set_attempt(db, made, **{field: latest})
    run(db)
    assert event_times(db, made) == {latest}
    # A cancelled Run is terminal and finishes then; a lost one gets no finish time.
    expected = latest if write is abandon else None
    assert run_row(db, made).finished_at_ms == expected


def test_at_the_epoch_a_write_is_stamped_at_the_epoch_not_later(db: LegacyDb) -> None:
    made = db.run(status="queued", attempts=("claimed",), created_at_ms=0)
    run(db, clock=FakeClock(0))
    assert db.status(made) == ("cancelled", ["cancelled"])
    assert run_row(db, made).finished_at_ms == 0
    assert event_times(db, made) == {0}


# --- what each row writes ---------------------------------------------------------------------


def payloads(db: LegacyDb, made: Made) -> list[dict[str, Any]]:
    return [dict(json.loads(r["payload"])) for r in db.event_rows(made)]


def test_a_repair_carries_the_attempts_error_to_the_run_and_its_event(db: LegacyDb) -> None:
    made = repair(db)
    set_attempt(db, made, error_code="LEGACY_EXIT_NON_ZERO", error_summary="exit 3")
    run(db)
    got = run_row(db, made)
    assert (got.error_code, got.error_summary) == ("LEGACY_EXIT_NON_ZERO", "exit 3")
    assert [p.get("error_code") for p in payloads(db, made)] == ["LEGACY_EXIT_NON_ZERO"]


def test_a_repair_without_an_error_summary_writes_the_code_alone(db: LegacyDb) -> None:
    made = repair(db)
    set_attempt(db, made, error_code="LEGACY_EXIT_NON_ZERO")
    run(db)
    got = run_row(db, made)
    assert (got.error_code, got.error_summary) == ("LEGACY_EXIT_NON_ZERO", None)


def test_a_repair_to_success_writes_no_error_and_an_empty_payload(db: LegacyDb) -> None:
    made = db.run(status="running", attempts=("succeeded",))
    set_attempt(db, made, error_code="STALE_CODE", error_summary="never copied")
    run(db)
    got = run_row(db, made)
    assert got.status == "succeeded"
    assert (got.error_code, got.error_summary) == (None, None)
    (payload,) = payloads(db, made)
    assert "error_code" not in payload


@pytest.mark.parametrize(
    ("write", "code", "summary"),
    [
        (cancel, "LEGACY_EXECUTION_CANCELLED", "Legacy execution was cancelled"),
        (complete, "LEGACY_EXIT_NON_ZERO", "Legacy process exited without success"),
        (
            abandon,
            "LEGACY_RECONCILE_ACCEPTANCE_ABANDONED",
            "Legacy owner restarted before spawn was observed",
        ),
        (
            mark_lost,
            "LEGACY_RECONCILE_OWNER_LOST",
            "Legacy worker restarted without terminal evidence",
        ),
    ],
)
def test_the_attempt_and_the_run_both_carry_the_rows_error(
    db: LegacyDb, write: Callable[[LegacyDb], Made], code: str, summary: str
) -> None:
    made = write(db)
    run(db)
    for got in (run_row(db, made), attempt_row(db, made)):
        assert (got.error_code, got.error_summary) == (code, summary)


def test_a_created_run_is_completed_through_queued_stamped_then(db: LegacyDb) -> None:
    # Not a page candidate (queued, dispatching, running), but decide() re-reads the Run and
    # trusts no page: QingLong's writer chains a `created` Run through `queued` as well.
    made = complete(db, status="created", attempts=("claimed",))
    cand = LegacyCandidate(made.run_id, "queued", 4, "manual", made.cron_id, T0_MS, 1, None)
    conn = connect(db.path)
    try:
        state = _shadow_pass.decide(conn, Repository(conn), cand, frozenset(ORIGINS), EARLY)
    finally:
        conn.close()
    assert state == "completed"
    assert db.status(made) == ("failed", ["failed"])
    assert db.events(made) == [
        "run.queued",
        "run.dispatching",
        "attempt.starting",
        "attempt.running",
        "run.running",
        "attempt.failed",
        "run.failed",
    ]
    got = run_row(db, made)
    assert got.queued_at_ms == LATE_S * 1000 == got.started_at_ms
    assert attempt_row(db, made).started_at_ms == LATE_S * 1000


def test_a_completion_keeps_the_start_times_already_recorded_and_fills_the_missing_ones(
    db: LegacyDb,
) -> None:
    made = complete(db, status="dispatching", attempts=("starting",))
    attempt_started = attempt_row(db, made).started_at_ms
    assert attempt_started is not None and run_row(db, made).started_at_ms is None
    run(db)
    assert attempt_row(db, made).started_at_ms == attempt_started
    assert run_row(db, made).started_at_ms == LATE_S * 1000
    kept = complete(db, status="dispatching", attempts=("starting",))
    set_run(db, kept, started_at_ms=created(db, kept) + 2)
    run(db)
    assert run_row(db, kept).started_at_ms == created(db, kept) + 2


# --- which row makes each write (the second commit of rows 9/10 is row 2's repair) ------------


def test_each_write_is_made_by_one_row_of_spec_05_under_that_rows_trigger() -> None:
    assert dict(_rows_of_writes(LEGACY_TABLE)) == {
        "repair": ("2", "repair"),
        "cancel": ("6", "cancel"),
        "complete": ("7", "complete"),
        "abandon": ("9", "abandon"),
        "mark_lost": ("10", "mark_lost"),
    }


def _row_9_with(*cases: Any) -> Any:
    return LEGACY_TABLE._replace(rows=(LEGACY_ROWS["9"]._replace(cases=cases),))


def test_a_write_is_found_past_a_case_of_its_row_that_writes_nothing_and_twice_in_one_row() -> None:
    [case] = LEGACY_ROWS["9"].cases
    table = _row_9_with(
        case._replace(state="read_run", write=None, trigger="fail"),
        case,
        case._replace(state="read_attempts"),  # the same write in another state: still row 9's
    )
    assert dict(_rows_of_writes(table)) == {"abandon": ("9", "abandon")}


def test_a_write_whose_case_names_no_trigger_is_found_with_the_empty_trigger() -> None:
    [case] = LEGACY_ROWS["9"].cases
    assert dict(_rows_of_writes(_row_9_with(case._replace(trigger=None)))) == {"abandon": ("9", "")}


def test_a_write_made_by_two_rows_is_refused_naming_both() -> None:
    rows = tuple(
        r._replace(cases=(r.cases[0]._replace(write="abandon"),)) if r.row == "10" else r
        for r in LEGACY_TABLE.rows
    )
    with pytest.raises(MachineDefinitionError, match="write 'abandon' made by rows 9 and 10"):
        _rows_of_writes(LEGACY_TABLE._replace(rows=rows))


def test_a_guard_as_another_write_is_that_writes_row_on_the_same_re_read() -> None:
    def reread(c: Any) -> LegacyFacts:
        return LegacyFacts(run_present=False)

    guard = Guard(row="10", reread=reread)
    assert guard.as_write("repair") == Guard(row="2", reread=reread)


def test_an_edge_its_row_lacks_is_an_illegal_transition_naming_machine_state_and_row() -> None:
    assert edge("run", "2", "running", "lost") == "lose_by_repair"
    with pytest.raises(IllegalTransition) as refused:
        edge("run", "2", "running", "queued")  # row 2 repairs to a terminal status only
    assert (refused.value.machine, refused.value.state, refused.value.event) == (
        "run",
        "running",
        "-> queued (ADR-0448 row 2)",
    )
    assert str(refused.value) == (
        "run: event '-> queued (ADR-0448 row 2)' is not allowed from state 'running'"
    )
