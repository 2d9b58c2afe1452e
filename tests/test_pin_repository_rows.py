"""The rows two Repository writes leave, column by column, read back through a second
connection: `create_primary_run` (a runtime Run as QingLong's scheduler creates one, D-23) and
`append_event` (an event that moves no state, spec 01), with the exact words of their refusals."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from _support import SYSTEM, T0, run_in

from storage import Actor, AttemptChange, Conflict, InvalidField, NotFound, Repository, RunChange

RUN = "019f70c0-0000-7000-8000-0000000000a1"
ATT = "019f70c0-0000-7000-8000-0000000000a2"
SCHEDULER = Actor("scheduler", "node-1")
EXECUTOR = Actor("executor", "local")


def rows(db_path: Path, table: str) -> list[dict[str, object]]:
    """Every row of ``table`` as column -> value, read through a second, fresh connection."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        cur = conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid')
        return [dict(zip(r.keys(), tuple(r), strict=True)) for r in cur]
    finally:
        conn.close()


def events(db_path: Path) -> list[dict[str, object]]:
    """The RunEvents rows in sequence order, the payload parsed."""
    out = sorted(rows(db_path, "RunEvents"), key=lambda e: (str(e["run_id"]), e["sequence"]))
    for e in out:
        e["payload"] = json.loads(str(e["payload"]))
    return out


def only(found: list[dict[str, object]]) -> dict[str, object]:
    assert len(found) == 1, found
    return found[0]


# --- create_primary_run ----------------------------------------------------------------------


def test_a_primary_run_with_the_defaults_is_written_queued_at_version_2_with_a_claimed_attempt(
    repo: Repository, db_path: Path
) -> None:
    done = repo.create_primary_run(run_id=RUN, attempt_id=ATT, at_ms=T0, actor=SCHEDULER)
    run = only(rows(db_path, "Runs"))
    assert {k: v for k, v in run.items() if v is not None} == {
        "id": RUN,
        "project_id": "default",
        "task_id": "task",
        "task_revision": "1",
        "trigger_type": "manual",
        "execution_origin": "manual",
        "execution_owner": "runtime",
        "status": "queued",
        "version": 2,
        "event_sequence": 2,
        "priority": 0,
        "created_at_ms": T0,
    }
    attempt = only(rows(db_path, "RunAttempts"))
    assert {k: v for k, v in attempt.items() if v is not None} == {
        "id": ATT,
        "run_id": RUN,
        "attempt": 1,
        "status": "claimed",
        "executor_type": "local_process",
        "callback_sequence": 0,
        "created_at_ms": T0,
    }
    created, queued = events(db_path)
    common = {
        "run_id": RUN,
        "actor_type": "scheduler",
        "actor_id": "node-1",
        "attempt_id": None,
        "created_at_ms": T0,
    }
    assert {k: created[k] for k in (*common, "sequence", "type", "dedupe_key", "payload")} == {
        **common,
        "sequence": 1,
        "type": "run.created",
        "dedupe_key": f"primary-run-created:{RUN}",
        "payload": {"status": "created", "version": 1, "execution_owner": "runtime"},
    }
    assert {k: queued[k] for k in (*common, "sequence", "type", "dedupe_key", "payload")} == {
        **common,
        "sequence": 2,
        "type": "run.queued",
        "dedupe_key": f"primary-run-queued:{RUN}",
        "payload": {"from_status": "created", "to_status": "queued", "version": 2},
    }
    # What the call returns: the queue edge's advance, its one step and its one event.
    assert (done.run_id, done.version, done.events) == (RUN, 2, (queued["id"],))
    assert [(s.machine, s.trigger, s.source, s.dest) for s in done.steps] == [
        ("run", "queue", "created", "queued")
    ]


def test_a_primary_run_takes_the_task_and_the_executor_it_is_given(
    repo: Repository, db_path: Path
) -> None:
    repo.create_primary_run(
        run_id=RUN,
        attempt_id=ATT,
        at_ms=T0 + 7,
        actor=SYSTEM,
        executor_type="container",
        project_id="p-9",
        task_id="t-9",
        task_revision="r-9",
        task_name="nightly",
        trigger_type="cron",
        execution_origin="scheduled_node",
    )
    run = only(rows(db_path, "Runs"))
    assert {k: run[k] for k in ("project_id", "task_id", "task_revision", "task_name")} == {
        "project_id": "p-9",
        "task_id": "t-9",
        "task_revision": "r-9",
        "task_name": "nightly",
    }
    assert (run["trigger_type"], run["execution_origin"], run["created_at_ms"]) == (
        "cron",
        "scheduled_node",
        T0 + 7,
    )
    attempt = only(rows(db_path, "RunAttempts"))
    assert (attempt["executor_type"], attempt["created_at_ms"]) == ("container", T0 + 7)
    assert [(e["actor_type"], e["created_at_ms"]) for e in events(db_path)] == [
        ("system", T0 + 7),
        ("system", T0 + 7),
    ]


def test_a_primary_run_whose_id_exists_is_refused_with_its_words_and_nothing_is_written(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    repo.create_run(run_id=RUN, at_ms=T0)
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.create_primary_run(run_id=RUN, attempt_id=ATT, at_ms=T0, actor=SCHEDULER)
    assert str(raised.value) == f"run {RUN} already exists; choose a new run id"
    assert snapshot() == before


# --- append_event ----------------------------------------------------------------------------


def test_append_event_refuses_a_state_event_naming_the_events_it_writes(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "queued")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.append_event(RUN, version, "run.succeeded", actor=SYSTEM, at_ms=T0)
    assert str(raised.value) == (
        "event 'run.succeeded' cannot be appended on its own: state events are written by "
        "advance(); use one of "
        "['attempt.late_callback_ignored', 'run.cancel_requested', 'run.reconciled']"
    )
    assert snapshot() == before


def test_an_attempt_event_appended_without_its_attempt_is_refused_with_its_words(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "queued")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.append_event(RUN, version, "attempt.late_callback_ignored", actor=EXECUTOR, at_ms=T0)
    assert str(raised.value) == (
        "event 'attempt.late_callback_ignored' names its attempt: pass attempt_id"
    )
    assert snapshot() == before


def test_an_appended_run_event_holds_its_version_payload_and_key_and_no_attempt(
    repo: Repository, reader: Repository, db_path: Path
) -> None:
    version = run_in(repo, RUN, "queued")
    done = repo.append_event(
        RUN,
        version,
        "run.reconciled",
        actor=Actor("reconciler", "primary"),
        at_ms=T0 + 3,
        payload={"note": "checked"},
        dedupe_key="reconciled:once",
    )
    last = events(db_path)[-1]
    assert {k: v for k, v in last.items() if k != "id"} == {
        "run_id": RUN,
        "sequence": version + 1,
        "type": "run.reconciled",
        "dedupe_key": "reconciled:once",
        "actor_type": "reconciler",
        "actor_id": "primary",
        "attempt_id": None,
        "payload": {"note": "checked", "version": version + 1},
        "created_at_ms": T0 + 3,
        "step_run_id": None,
    }
    assert (done.run_id, done.version, done.steps, done.events) == (
        RUN,
        version + 1,
        (),
        (last["id"],),
    )
    run = reader.get_run(RUN)
    assert run is not None
    assert (run.status, run.version, run.event_sequence) == ("queued", version + 1, version + 1)


def test_an_appended_attempt_event_names_its_attempt_in_its_row_and_its_payload(
    repo: Repository, db_path: Path
) -> None:
    version = run_in(repo, RUN, "dispatching")
    version = repo.create_attempt(
        run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0
    ).version
    done = repo.append_event(
        RUN,
        version,
        "attempt.late_callback_ignored",
        actor=EXECUTOR,
        at_ms=T0 + 1,
        attempt_id=ATT,
        payload={"callback_sequence": 4},
    )
    last = events(db_path)[-1]
    assert (last["attempt_id"], last["dedupe_key"], last["payload"]) == (
        ATT,
        f"attempt.late_callback_ignored:{version + 1}",
        {"attempt_id": ATT, "callback_sequence": 4, "version": version + 1},
    )
    assert done.events == (last["id"],)


def test_an_event_earlier_than_the_runs_start_is_refused_with_its_words(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "dispatching")
    version = repo.advance(
        RUN, version, [RunChange("start", set={"started_at_ms": T0 + 10})], actor=SYSTEM,
        at_ms=T0 + 10,
    ).version  # fmt: skip
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.append_event(RUN, version, "run.reconciled", actor=SYSTEM, at_ms=T0 + 5)
    assert str(raised.value) == f"at_ms {T0 + 5} is earlier than the run's created/started time"
    assert snapshot() == before


def test_an_event_earlier_than_its_attempts_start_is_refused_with_its_words(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "dispatching")
    version = repo.create_attempt(
        run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0
    ).version
    version = repo.advance(
        RUN, version, [AttemptChange(ATT, "start", set={"started_at_ms": T0 + 10})],
        actor=SYSTEM, at_ms=T0 + 10,
    ).version  # fmt: skip
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.append_event(
            RUN, version, "attempt.late_callback_ignored", actor=EXECUTOR, at_ms=T0 + 5,
            attempt_id=ATT,
        )  # fmt: skip
    assert str(raised.value) == (
        f"at_ms {T0 + 5} is earlier than the attempt's created/started time"
    )
    assert snapshot() == before


# --- create_run and create_attempt (their mutants run late: pinned ahead) ---------------------


def test_a_run_with_the_defaults_is_written_created_at_version_1_by_the_user(
    repo: Repository, db_path: Path
) -> None:
    done = repo.create_run(run_id=RUN, at_ms=T0)
    run = only(rows(db_path, "Runs"))
    assert {k: v for k, v in run.items() if v is not None} == {
        "id": RUN,
        "project_id": "default",
        "task_id": "task",
        "task_revision": "1",
        "trigger_type": "manual",
        "execution_origin": "manual",
        "execution_owner": "runtime",
        "status": "created",
        "version": 1,
        "event_sequence": 1,
        "priority": 0,
        "created_at_ms": T0,
    }
    created = only(events(db_path))
    assert {k: v for k, v in created.items() if k != "id"} == {
        "run_id": RUN,
        "sequence": 1,
        "type": "run.created",
        "dedupe_key": f"run.created:{RUN}",
        "actor_type": "user",
        "actor_id": None,
        "attempt_id": None,
        "payload": {"from_status": None, "to_status": "created", "version": 1},
        "created_at_ms": T0,
        "step_run_id": None,
    }
    assert (done.run_id, done.version, done.steps, done.events) == (RUN, 1, (), (created["id"],))


def test_a_run_takes_the_task_owner_and_actor_it_is_given(repo: Repository, db_path: Path) -> None:
    repo.create_run(
        run_id=RUN,
        at_ms=T0 + 2,
        execution_owner="legacy",
        execution_origin="scheduled_node",
        project_id="p-9",
        task_id="t-9",
        task_revision="r-9",
        task_name="nightly",
        trigger_type="cron",
        legacy_cron_id=42,
        actor=Actor("api_app", "app-1"),
    )
    run = only(rows(db_path, "Runs"))
    fields = ("project_id", "task_id", "task_revision", "task_name", "trigger_type")
    assert [run[k] for k in fields] == ["p-9", "t-9", "r-9", "nightly", "cron"]
    assert [run[k] for k in ("execution_origin", "execution_owner", "legacy_cron_id")] == [
        "scheduled_node",
        "legacy",
        42,
    ]
    created = only(events(db_path))
    assert (created["actor_type"], created["actor_id"], created["created_at_ms"]) == (
        "api_app",
        "app-1",
        T0 + 2,
    )


def test_attempts_are_claimed_numbered_in_turn_by_the_scheduler_each_with_its_event(
    repo: Repository, db_path: Path
) -> None:
    version = run_in(repo, RUN, "dispatching")
    first = repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0 + 1)
    other = "019f70c0-0000-7000-8000-0000000000a3"
    second = repo.create_attempt(
        run_id=RUN, attempt_id=other, expected_version=version + 1, at_ms=T0 + 2
    )
    attempts = rows(db_path, "RunAttempts")
    assert [{k: v for k, v in a.items() if v is not None} for a in attempts] == [
        {
            "id": ident,
            "run_id": RUN,
            "attempt": number,
            "status": "claimed",
            "executor_type": "local_process",
            "callback_sequence": 0,
            "created_at_ms": T0 + number,
        }
        for number, ident in ((1, ATT), (2, other))
    ]
    claimed = events(db_path)[-2:]
    assert [{k: v for k, v in e.items() if k != "id"} for e in claimed] == [
        {
            "run_id": RUN,
            "sequence": version + number,
            "type": "attempt.claimed",
            "dedupe_key": f"attempt.claimed:{ident}",
            "actor_type": "scheduler",
            "actor_id": None,
            "attempt_id": ident,
            "payload": {
                "attempt_id": ident,
                "from_status": None,
                "to_status": "claimed",
                "version": version + number,
            },
            "created_at_ms": T0 + number,
            "step_run_id": None,
        }
        for number, ident in ((1, ATT), (2, other))
    ]
    assert [(d.run_id, d.version, d.steps, d.events) for d in (first, second)] == [
        (RUN, version + 1, (), (claimed[0]["id"],)),
        (RUN, version + 2, (), (claimed[1]["id"],)),
    ]


def test_an_attempt_takes_the_number_executor_and_evidence_it_is_given(
    repo: Repository, db_path: Path
) -> None:
    version = run_in(repo, RUN, "dispatching")
    repo.create_attempt(
        run_id=RUN,
        attempt_id=ATT,
        expected_version=version,
        at_ms=T0,
        executor_type="container",
        attempt=7,
        pid=4321,
        log_artifact_id="log-1",
        actor=Actor("executor", "x"),
    )
    attempt = only(rows(db_path, "RunAttempts"))
    assert [attempt[k] for k in ("attempt", "executor_type", "pid", "log_artifact_id")] == [
        7,
        "container",
        4321,
        "log-1",
    ]
    assert (events(db_path)[-1]["actor_type"], events(db_path)[-1]["actor_id"]) == ("executor", "x")


def test_an_attempt_of_a_terminal_run_is_refused_with_its_words(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "cancelled")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0)
    assert str(raised.value) == f"run {RUN} is terminal (cancelled); no new attempt"
    assert snapshot() == before


def test_an_attempt_earlier_than_its_run_is_refused_with_its_words(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "dispatching", at_ms=T0 + 10)
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0 + 9)
    assert str(raised.value) == f"at_ms {T0 + 9} is earlier than the run's created/started time"
    assert snapshot() == before


def test_an_attempt_earlier_than_its_runs_start_is_refused_with_its_words(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "dispatching")
    version = repo.advance(
        RUN, version, [RunChange("start", set={"started_at_ms": T0 + 10})], actor=SYSTEM,
        at_ms=T0 + 10,
    ).version  # fmt: skip
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0 + 5)
    assert str(raised.value) == f"at_ms {T0 + 5} is earlier than the run's created/started time"
    assert snapshot() == before


def test_each_write_names_the_run_it_could_not_find_or_found_moved(repo: Repository) -> None:
    writes: list[Callable[[int], object]] = [
        lambda v: repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=v, at_ms=T0),
        lambda v: repo.append_event(RUN, v, "run.reconciled", actor=SYSTEM, at_ms=T0),
        lambda v: repo.advance(RUN, v, [RunChange("queue")], actor=SYSTEM, at_ms=T0),
    ]
    for write in writes:
        with pytest.raises(NotFound) as missing:
            write(1)
        assert str(missing.value) == f"run {RUN!r} not found"
    version = run_in(repo, RUN, "created")
    for write in writes:
        with pytest.raises(Conflict) as moved:
            write(version + 1)
        assert str(moved.value) == (
            f"conflict: run {RUN} is no longer at version {version + 1} (now {version}); "
            "re-read and decide again"
        )


def test_the_attempt_ids_of_a_page_are_read_for_every_run_named(repo: Repository) -> None:
    other, other_att = RUN[:-2] + "b1", ATT[:-2] + "b2"
    version = run_in(repo, RUN, "dispatching")
    repo.create_attempt(run_id=RUN, attempt_id=ATT, expected_version=version, at_ms=T0)
    version = run_in(repo, other, "dispatching")
    repo.create_attempt(run_id=other, attempt_id=other_att, expected_version=version, at_ms=T0)
    assert sorted(repo.attempt_ids_of([RUN, other])) == sorted([ATT, other_att])
    assert repo.attempt_ids_of([other]) == [other_att]
    assert repo.attempt_ids_of([]) == []


def test_a_run_or_attempt_that_is_not_there_reads_as_none(repo: Repository) -> None:
    assert (repo.get_run(RUN), repo.get_attempt(ATT)) == (None, None)


def test_an_attempt_edge_for_an_attempt_the_run_does_not_hold_names_it(repo: Repository) -> None:
    version = run_in(repo, RUN, "dispatching")
    with pytest.raises(NotFound) as raised:
        repo.advance(RUN, version, [AttemptChange(ATT, "start")], actor=SYSTEM, at_ms=T0)
    assert (str(raised.value), raised.value.what) == (f"attempt {ATT!r} not found", "attempt")
