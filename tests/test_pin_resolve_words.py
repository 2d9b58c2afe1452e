"""`resolve` in process (``reconciler.ops``): every refusal's exact words, the record the
command prints (``Resolved.as_dict``, the `--json` object), what one decision writes (edges,
events, errors, times) and the compare-and-set on every field the decision read, on real SQLite
files with the node's in-memory process table (spec 03 "Inspection" through its port).

The command's own tests (tests/test_resolve.py) run `qlfsm resolve` in a subprocess, which a
mutation run cannot see; these call the operation itself (issue 28, docs/mutation.md)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _primary_support import SYSTEM, T0, make_candidate, make_run, other_connection

from reconciler.node import FakeClock, FakeProcessTable, capture_handle
from reconciler.ops import (
    InvalidReason,
    ResolveRefused,
    check_reason,
    operator_actor,
    resolve,
)
from reconciler.ops._resolve import _show, stop_hint
from storage import (
    AttemptChange,
    Conflict,
    CounterExhausted,
    Repository,
    RunChange,
    journal_quarantine,
)

MAX_COUNTER = 2**53 - 1
TOKEN_HASH = "ab" * 32
LATER = T0 + 5_000
WEEK_MS = 7 * 86_400_000


@dataclass
class Proc:
    """An Attempt to make `running` with a handle of the fake table's process ``pid``."""

    attempt_id: str
    pid: int
    pgid: int
    alive: bool = True


def running_run(repo: Repository, table: FakeProcessTable, procs: Sequence[Proc]) -> int:
    """`run-1` running with one `running` Attempt per ``procs``, each with the durable handle
    of its process in ``table`` (reaped again when not ``alive``); returns the Run version."""
    v = make_run(repo, "run-1", "dispatching")
    for p in procs:
        v = repo.create_attempt(
            run_id="run-1", attempt_id=p.attempt_id, expected_version=v, at_ms=T0
        ).version
    for p in procs:
        table.spawn(p.pid, p.pgid)
        handle = capture_handle(p.pid, table, handle_id=f"h-{p.attempt_id}")
        if not p.alive:
            table.reap(p.pid)
        start = AttemptChange(p.attempt_id, "start", set={"callback_token_hash": TOKEN_HASH})
        v = repo.advance("run-1", v, [start], actor=SYSTEM, at_ms=T0).version
        sets = {"started_at_ms": T0, "executor_handle": handle, "pid": p.pid}
        run = AttemptChange(p.attempt_id, "run", set=sets)
        v = repo.advance("run-1", v, [run], actor=SYSTEM, at_ms=T0).version
    return repo.advance("run-1", v, [RunChange("start")], actor=SYSTEM, at_ms=T0).version


def claimed_run(repo: Repository, attempts: Sequence[str], run: str = "dispatching") -> int:
    """`run-1` in ``run`` with one `claimed` Attempt (no handle) per id; its version."""
    v = make_run(repo, "run-1", run)
    for aid in attempts:
        v = repo.create_attempt(
            run_id="run-1", attempt_id=aid, expected_version=v, at_ms=T0
        ).version
    return v


def decide(
    repo: Repository,
    target: str,
    reason: str = "checked on the host",
    *,
    force: bool = False,
    table: Any = None,
    clock: FakeClock | None = None,
    dry_run: bool = False,
    login: str | None = "alice",
) -> Any:
    return resolve(
        repo.conn,
        "run-1",
        target,
        reason,
        force=force,
        provider=table if table is not None else FakeProcessTable(),
        clock=clock if clock is not None else FakeClock(LATER),
        actor=operator_actor(login),
        dry_run=dry_run,
    )


def refusal(repo: Repository, target: str, **kw: Any) -> ResolveRefused:
    with pytest.raises(ResolveRefused) as refused:
        decide(repo, target, **kw)
    return refused.value


def rows(db_path: Path) -> list[tuple[Any, ...]]:
    """Every row of the Run tables and the journal, through a second connection."""
    conn = sqlite3.connect(db_path)
    try:
        return [
            (table, *row)
            for table in ("Runs", "RunAttempts", "RunEvents", "LocalCompletionReceiptJournal")
            for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall()
        ]
    finally:
        conn.close()


# --- the reason and the actor -----------------------------------------------------------------


def test_an_empty_reason_is_refused_with_what_to_write() -> None:
    for text in ("", "  \t "):
        with pytest.raises(InvalidReason) as bad:
            check_reason(text)
        assert str(bad.value) == (
            "--reason is empty: say why, in a few words (it is kept in the events)"
        )


def test_a_reason_of_501_characters_is_refused_and_one_of_500_is_kept() -> None:
    assert check_reason("x" * 500) == "x" * 500
    assert check_reason(" " + "y" * 500 + " ") == "y" * 500
    with pytest.raises(InvalidReason) as bad:
        check_reason("x" * 501)
    assert str(bad.value) == (
        "--reason is 501 characters; keep it to 500 (the events and the error summary store it)"
    )


@pytest.mark.parametrize(
    ("char", "code"),
    [
        ("\x1b", "001B"),  # Cc: control
        ("\u202e", "202E"),  # Cf: format (a bidirectional override)
        ("\ud800", "D800"),  # Cs: surrogate
        ("\ue000", "E000"),  # Co: private use
        ("\u0378", "0378"),  # Cn: unassigned
    ],
)
def test_a_reason_holding_a_character_a_terminal_shows_otherwise_names_its_code_point(
    char: str, code: str
) -> None:
    with pytest.raises(InvalidReason) as bad:
        check_reason(f"job {char} gone")
    assert str(bad.value) == (
        f"--reason holds the control character U+{code}; use plain text on one line"
    )


def test_a_reason_of_letters_marks_and_symbols_of_every_script_is_kept() -> None:
    text = "进程已退出 — café ñ ✓ (x≥1)"
    assert check_reason(text) == text


@pytest.mark.parametrize(
    ("login", "actor_id"),
    [
        ("alice", "operator:alice"),
        (" bob ", "operator:bob"),
        ("a", "operator:a"),
        ("x" * 64, "operator:" + "x" * 64),
        ("o.k_name-1", "operator:o.k_name-1"),
        ("x" * 65, "operator"),
        ("", "operator"),
        ("   ", "operator"),
        (None, "operator"),
        ("a b", "operator"),
        ("a;b", "operator"),
        ("zoë", "operator"),
        ("١٢٣", "operator"),
    ],
)
def test_the_actor_is_the_user_operator_with_a_plain_login_only(
    login: str | None, actor_id: str
) -> None:
    actor = operator_actor(login)
    assert (actor.type, actor.id) == ("user", actor_id)


# --- refusals: the exact words, the choices, nothing written ----------------------------------


def test_a_terminal_run_is_refused_with_no_choice(repo: Repository, db_path: Path) -> None:
    make_run(repo, "run-1", "queued")
    decide(repo, "cancelled")
    before = rows(db_path)
    refused = refusal(repo, "failed")
    assert str(refused) == (
        "run run-1 is cancelled, a terminal state: nothing is left to decide "
        "(ADR-0001 has no edge out of it)"
    )
    assert refused.choices == ()
    assert rows(db_path) == before


@pytest.mark.parametrize("target", ["bogus", "succeeded", "queued"])
def test_a_target_that_is_no_operator_decision_is_refused_naming_the_choices(
    repo: Repository, db_path: Path, target: str
) -> None:
    claimed_run(repo, ["at-1"])
    before = rows(db_path)
    refused = refusal(repo, target)
    assert str(refused) == (
        f"--to {target!r} is not an operator's decision; choose lost, cancelled"
    )
    assert refused.choices == ("lost", "cancelled")
    assert rows(db_path) == before


def test_an_attempt_edge_the_tables_forbid_names_the_attempt_that_cannot_move(
    repo: Repository, db_path: Path
) -> None:
    # The first active Attempt (running) may fail; the second (claimed) may not.
    v = claimed_run(repo, ["at-1", "at-2"])
    start = AttemptChange("at-1", "start", set={"callback_token_hash": TOKEN_HASH})
    v = repo.advance("run-1", v, [start], actor=SYSTEM, at_ms=T0).version
    repo.advance("run-1", v, [AttemptChange("at-1", "run")], actor=SYSTEM, at_ms=T0)
    before = rows(db_path)
    refused = refusal(repo, "failed")
    assert str(refused) == (
        "run run-1 is dispatching with Attempt at-1 running, Attempt at-2 claimed: "
        "attempt claimed -> failed is not an ADR-0001 edge; legal choices: lost, cancelled"
    )
    assert refused.choices == ("lost", "cancelled")
    assert rows(db_path) == before


def test_a_run_edge_the_tables_forbid_names_the_run(repo: Repository, db_path: Path) -> None:
    make_run(repo, "run-1", "queued")
    before = rows(db_path)
    refused = refusal(repo, "lost")
    assert str(refused) == (
        "run run-1 is queued: run queued -> lost is not an ADR-0001 edge; legal choices: cancelled"
    )
    assert refused.choices == ("cancelled",)
    assert rows(db_path) == before


def test_a_run_already_in_the_target_says_so(repo: Repository, db_path: Path) -> None:
    claimed_run(repo, ["at-1"])
    decide(repo, "lost")
    before = rows(db_path)
    refused = refusal(repo, "lost")
    assert str(refused) == (
        "run run-1 is lost: it is lost already; legal choices: failed, cancelled"
    )
    assert refused.choices == ("failed", "cancelled")
    assert rows(db_path) == before


def test_a_process_proven_running_is_refused_naming_each_pid_group_and_how_to_stop_them(
    repo: Repository, db_path: Path
) -> None:
    table = FakeProcessTable()
    procs = [Proc("at-1", 4100, 4000), Proc("at-2", 4200, 4200), Proc("at-3", 4300, 4300, False)]
    running_run(repo, table, procs)
    before = rows(db_path)
    refused = refusal(repo, "failed", table=table)
    assert str(refused) == (
        "run run-1 is running with Attempt at-1 running, Attempt at-2 running, "
        "Attempt at-3 running: its process identity proves it is still running "
        "(attempt at-1: pid 4100, process group 4000, as its handle names them; "
        "attempt at-2: pid 4200, process group 4200, as its handle names them); "
        "stop it (kill -TERM -- -4000; kill -TERM -- -4200) and run `qlfsm startup`, or pass "
        "--force to decide anyway (recorded in the event; qlfsm does not stop the process)"
    )
    assert refused.choices == ("lost", "failed", "cancelled")
    assert rows(db_path) == before


def test_two_live_jobs_of_one_process_group_are_stopped_by_one_command(
    repo: Repository,
) -> None:
    table = FakeProcessTable()
    running_run(repo, table, [Proc("at-1", 4100, 4000), Proc("at-2", 4101, 4000)])
    assert "; stop it (kill -TERM -- -4000) and run" in str(refusal(repo, "lost", table=table))


def test_the_words_for_no_choice_and_no_known_group_are_kept_for_a_table_change() -> None:
    # Neither is reachable through `resolve` today: every stored non-terminal Run and active
    # Attempt can reach `cancelled`, and a running verdict needs a handle naming its group.
    assert _show(()) == "none (no operator decision applies here)"
    assert _show(("lost", "failed")) == "lost, failed"
    assert stop_hint([None]) == "stop it by other means"
    assert stop_hint([None, 7, 7, 9]) == "kill -TERM -- -7; kill -TERM -- -9"


# --- what a decision writes and returns -------------------------------------------------------


def forced_three(repo: Repository, table: FakeProcessTable) -> int:
    """Two live jobs in two groups and a dead one (with a quarantined receipt row)."""
    procs = [Proc("at-1", 4100, 4000), Proc("at-2", 4200, 4200), Proc("at-3", 4300, 4300, False)]
    v = running_run(repo, table, procs)
    journal_quarantine(
        repo.conn, "at-3", "run-1", ".quarantine/at/at-3.json", T0 + 1_000, T0 + 1_000 + WEEK_MS
    )
    return v


def expected_record(v: int, *, dry_run: bool, events: list[str]) -> dict[str, Any]:
    def write(aggregate: str, ident: str) -> dict[str, Any]:
        return {
            "aggregate": aggregate,
            "id": ident,
            "from": "running",
            "to": "failed",
            "event": f"{aggregate}.failed",
            "dedupe_key": f"operator-resolve:{aggregate}:{ident}:{v}",
        }

    def attempt(ident: str, process: str, why: str) -> dict[str, Any]:
        return {"id": ident, "from": "running", "to": "failed", "process": process,
                "probe_reason": why}  # fmt: skip

    return {
        "dry_run": dry_run,
        "writes": [
            write("attempt", "at-1"),
            write("attempt", "at-2"),
            write("attempt", "at-3"),
            write("run", "run-1"),
        ],
        "still_running": [
            {"attempt_id": "at-1", "pid": 4100, "pgid": 4000},
            {"attempt_id": "at-2", "pid": 4200, "pgid": 4200},
        ],
        "stop": "kill -TERM -- -4000; kill -TERM -- -4200",
        "run_id": "run-1",
        "to": "failed",
        "run": {"from": "running", "to": "failed"},
        "attempts": [
            attempt("at-1", "running", "identity_matches"),
            attempt("at-2", "running", "identity_matches"),
            attempt("at-3", "not_running", "pid_absent"),
        ],
        "force": True,
        "reason": "host checked by hand",
        "actor": {"type": "user", "id": "operator:alice"},
        "version": v + 4,
        "events": events,
        "journal": [
            {
                "attempt_id": "at-3",
                "state": "quarantined",
                "quarantine_ref": ".quarantine/at/at-3.json",
                "purge_after_ms": T0 + 1_000 + WEEK_MS,
            }
        ],
    }


def test_a_forced_decision_returns_every_member_of_the_record_the_command_prints(
    repo: Repository, db_path: Path
) -> None:
    table = FakeProcessTable()
    v = forced_three(repo, table)
    done = resolve(
        repo.conn, "run-1", "failed", "  host checked by hand ", force=True, provider=table,
        clock=FakeClock(LATER), actor=operator_actor("alice"),
    )  # fmt: skip
    new = [e for e in repo.events_of("run-1") if e.sequence > v]
    assert done.as_dict() == expected_record(v, dry_run=False, events=[e.id for e in new])
    assert [(e.type, e.attempt_id, e.dedupe_key) for e in new] == [
        ("attempt.failed", "at-1", f"operator-resolve:attempt:at-1:{v}"),
        ("attempt.failed", "at-2", f"operator-resolve:attempt:at-2:{v}"),
        ("attempt.failed", "at-3", f"operator-resolve:attempt:at-3:{v}"),
        ("run.failed", None, f"operator-resolve:run:run-1:{v}"),
    ]
    assert table.processes.keys() == {4100, 4200}  # qlfsm does not stop the processes


def test_a_dry_run_returns_the_same_record_with_no_event_and_writes_nothing(
    repo: Repository, db_path: Path
) -> None:
    table = FakeProcessTable()
    v = forced_three(repo, table)
    before = rows(db_path)
    done = decide(repo, "failed", " host checked by hand", force=True, table=table, dry_run=True)
    assert done.as_dict() == expected_record(v, dry_run=True, events=[])
    assert rows(db_path) == before


def test_each_event_carries_its_own_probe_and_the_run_the_strongest_one(
    repo: Repository,
) -> None:
    table = FakeProcessTable()
    v = forced_three(repo, table)
    decide(repo, "failed", "host checked by hand", force=True, table=table)
    new = [e for e in repo.events_of("run-1") if e.sequence > v]

    def resolution(process: str, why: str) -> dict[str, Any]:
        return {"to": "failed", "reason": "host checked by hand", "force": True,
                "process": process, "probe_reason": why}  # fmt: skip

    assert [e.payload for e in new] == [
        {"attempt_id": "at-1", "error_code": "OPERATOR_RESOLVED", "from_status": "running",
         "resolution": resolution("running", "identity_matches"), "to_status": "failed",
         "version": v + 1},
        {"attempt_id": "at-2", "error_code": "OPERATOR_RESOLVED", "from_status": "running",
         "resolution": resolution("running", "identity_matches"), "to_status": "failed",
         "version": v + 2},
        {"attempt_id": "at-3", "error_code": "OPERATOR_RESOLVED", "from_status": "running",
         "resolution": resolution("not_running", "pid_absent"), "to_status": "failed",
         "version": v + 3},
        {"error_code": "OPERATOR_RESOLVED", "from_status": "running",
         "resolution": resolution("running", "identity_matches"), "to_status": "failed",
         "version": v + 4},
    ]  # fmt: skip
    assert [(e.actor_type, e.actor_id, e.created_at_ms) for e in new] == [
        ("user", "operator:alice", LATER)
    ] * 4
    run = repo.get_run("run-1")
    assert run is not None
    assert (run.status, run.error_code, run.error_summary, run.finished_at_ms) == (
        "failed", "OPERATOR_RESOLVED", "Resolved by an operator: host checked by hand", LATER
    )  # fmt: skip
    for aid in ("at-1", "at-2", "at-3"):
        att = repo.get_attempt(aid)
        assert att is not None
        assert (att.status, att.error_code, att.error_summary, att.finished_at_ms) == (
            "failed", "OPERATOR_RESOLVED", "Resolved by an operator: host checked by hand", LATER
        )  # fmt: skip


def run_resolution(repo: Repository, v: int) -> Any:
    new = [e for e in repo.events_of("run-1") if e.sequence > v]
    assert new[-1].type.startswith("run.")
    return new[-1].payload["resolution"]


def test_an_unknown_process_outweighs_a_dead_one_in_the_runs_event(
    repo: Repository, db_path: Path
) -> None:
    table = FakeProcessTable()
    v = running_run(repo, table, [Proc("at-1", 4100, 4100, False), Proc("at-2", 4200, 4200)])
    # A handle qlfsm cannot parse: the probe cannot say (spec 03 `invalid_handle`).
    other = other_connection(db_path)
    other.execute("UPDATE RunAttempts SET executor_handle = 'ql3lp1.???' WHERE id = 'at-2'")
    other.close()
    done = decide(repo, "lost", table=table)
    assert [(a["process"], a["probe_reason"]) for a in done.as_dict()["attempts"]] == [
        ("not_running", "pid_absent"),
        ("unknown", "invalid_handle"),
    ]
    assert done.as_dict()["still_running"] == [] and done.as_dict()["stop"] is None
    assert run_resolution(repo, v) == {
        "to": "lost", "reason": "checked on the host", "force": False, "process": "unknown",
        "probe_reason": "invalid_handle",
    }  # fmt: skip
    # `lost` is not terminal: the Run gets no finished time (its Attempts do).
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    assert (run.status, run.finished_at_ms, att.status, att.finished_at_ms) == (
        "lost", None, "lost", LATER
    )  # fmt: skip


def test_the_runs_event_names_the_first_reason_of_its_strongest_verdict(
    repo: Repository,
) -> None:
    table = FakeProcessTable()
    v = running_run(repo, table, [Proc("at-1", 4100, 4100, False), Proc("at-2", 4200, 4200)])
    table.reuse(4200)  # another process now holds the pid: its start differs
    done = decide(repo, "cancelled", table=table)
    assert [(a["process"], a["probe_reason"]) for a in done.as_dict()["attempts"]] == [
        ("not_running", "pid_absent"),
        ("not_running", "start_ticks_differ"),
    ]
    assert run_resolution(repo, v) == {
        "to": "cancelled", "reason": "checked on the host", "force": False,
        "process": "not_running", "probe_reason": "pid_absent",
    }  # fmt: skip


def test_an_attempt_without_a_handle_is_not_probed(repo: Repository) -> None:
    v = claimed_run(repo, ["at-1"])
    done = decide(repo, "lost", table=FakeProcessTable())
    assert done.as_dict()["attempts"] == [
        {"id": "at-1", "from": "claimed", "to": "lost", "process": None, "probe_reason": None}
    ]
    assert run_resolution(repo, v) == {
        "to": "lost", "reason": "checked on the host", "force": False, "process": None,
        "probe_reason": None,
    }  # fmt: skip


def test_a_run_without_attempts_is_decided_with_no_process_evidence(
    repo: Repository, db_path: Path
) -> None:
    v = make_run(repo, "run-1", "queued")
    done = decide(repo, "cancelled", login=None)
    record = done.as_dict()
    assert record["writes"] == [
        {"aggregate": "run", "id": "run-1", "from": "queued", "to": "cancelled",
         "event": "run.cancelled", "dedupe_key": f"operator-resolve:run:run-1:{v}"},
    ]  # fmt: skip
    assert (record["attempts"], record["still_running"], record["stop"]) == ([], [], None)
    assert (record["actor"], record["version"], record["journal"]) == (
        {"type": "user", "id": "operator"}, v + 1, []
    )  # fmt: skip
    assert run_resolution(repo, v) == {
        "to": "cancelled", "reason": "checked on the host", "force": False, "process": None,
        "probe_reason": None,
    }  # fmt: skip
    assert repo.events_of("run-1")[-1].payload["error_code"] == "OPERATOR_RESOLVED"


# --- the time of the decision -----------------------------------------------------------------


def test_a_clock_behind_the_rows_times_decides_at_the_newest_of_them(repo: Repository) -> None:
    v = make_run(repo, "run-1", "dispatching")
    v = repo.create_attempt(
        run_id="run-1", attempt_id="at-1", expected_version=v, at_ms=T0 + 40
    ).version
    start = AttemptChange("at-1", "start", set={"callback_token_hash": TOKEN_HASH})
    v = repo.advance("run-1", v, [start], actor=SYSTEM, at_ms=T0 + 40).version
    run = AttemptChange("at-1", "run", set={"started_at_ms": T0 + 70})
    v = repo.advance("run-1", v, [run], actor=SYSTEM, at_ms=T0 + 70).version
    decide(repo, "failed", clock=FakeClock(T0 - 60_000))
    events = [e for e in repo.events_of("run-1") if e.sequence > v]
    assert [e.created_at_ms for e in events] == [T0 + 70, T0 + 70]
    done = repo.get_run("run-1")
    assert done is not None and done.finished_at_ms == T0 + 70


def test_a_decision_at_the_epoch_is_recorded_at_the_epoch(repo: Repository) -> None:
    # Rows created at 0 and never started, a clock at 0: the decision's time is 0 (a missing
    # start time counts as 0, never as a later time).
    v = repo.create_run(run_id="run-1", at_ms=0).version
    for trigger in ("queue", "dispatch"):
        v = repo.advance("run-1", v, [RunChange(trigger)], actor=SYSTEM, at_ms=0).version
    v = repo.create_attempt(run_id="run-1", attempt_id="at-1", expected_version=v, at_ms=0).version
    decide(repo, "cancelled", clock=FakeClock(0))
    events = [e for e in repo.events_of("run-1") if e.sequence > v]
    assert [e.created_at_ms for e in events] == [0, 0]
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    assert (run.finished_at_ms, att.finished_at_ms) == (0, 0)


# --- compare-and-set on what the decision read ------------------------------------------------


@dataclass
class MovesWhileProbing:
    """The node's process table, and someone else's write made while the probe reads it."""

    table: FakeProcessTable
    move: Callable[[], object]
    moved: list[bool] = field(default_factory=list)

    def boot_id(self) -> str:
        if not self.moved:
            self.move()
            self.moved.append(True)
        return self.table.boot_id()

    def read_stat(self, pid: int) -> str | None:
        return self.table.read_stat(pid)


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "UPDATE Runs SET execution_owner = 'legacy'",
            "conflict: run run-1 is no longer execution_owner='runtime' (now 'legacy'); "
            "re-read and decide again",
        ),
        (
            "UPDATE RunAttempts SET callback_sequence = 1",
            "conflict: attempt at-1 is no longer callback_sequence=0 (now 1); "
            "re-read and decide again",
        ),
        (
            "UPDATE RunAttempts SET pid = 4999",
            "conflict: attempt at-1 is no longer pid=4100 (now 4999); re-read and decide again",
        ),
    ],
)
def test_a_field_the_decision_read_that_changes_before_the_commit_is_a_conflict(
    repo: Repository, db_path: Path, sql: str, message: str
) -> None:
    table = FakeProcessTable()
    running_run(repo, table, [Proc("at-1", 4100, 4100, False)])
    other = other_connection(db_path)
    provider = MovesWhileProbing(table, lambda: other.execute(sql))
    with pytest.raises(Conflict) as conflict:
        decide(repo, "failed", table=provider)
    other.close()
    assert str(conflict.value) == message
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    assert (run.status, att.status, repo.events_of("run-1")[-1].type) == (
        "running", "running", "run.running"
    )  # fmt: skip


def test_a_handle_replaced_before_the_commit_is_a_conflict(repo: Repository, db_path: Path) -> None:
    table = FakeProcessTable()
    running_run(repo, table, [Proc("at-1", 4100, 4100, False)])
    other = other_connection(db_path)
    provider = MovesWhileProbing(
        table, lambda: other.execute("UPDATE RunAttempts SET executor_handle = 'ql3lp1.x'")
    )
    with pytest.raises(Conflict) as conflict:
        decide(repo, "failed", table=provider)
    other.close()
    assert str(conflict.value).startswith("conflict: attempt at-1 is no longer executor_handle=")
    assert str(conflict.value).endswith(" (now 'ql3lp1.x'); re-read and decide again")


# --- the counter bound (D-29): a dry run refuses what the write would refuse -------------------


@pytest.mark.parametrize(
    ("column", "sql"),
    [
        ("version", f"UPDATE Runs SET version = {MAX_COUNTER - 1}"),
        ("event_sequence", f"UPDATE Runs SET event_sequence = {MAX_COUNTER - 1}"),
    ],
)
def test_a_counter_one_edge_from_its_bound_refuses_the_two_edges_dry_or_not(
    repo: Repository, db_path: Path, column: str, sql: str
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    other = other_connection(db_path)
    other.execute(sql)
    other.close()
    before = rows(db_path)
    message = (
        f"run run-1 has {column} {MAX_COUNTER}, the largest QingLong 3.0 can read (2^53 - 1): "
        "no further edge can be recorded on it, nothing was written; leave it as it is "
        "(QingLong refuses to advance it too) and repair the row by hand if it must move"
    )
    for dry_run in (True, False):
        with pytest.raises(CounterExhausted) as refused:
            decide(repo, "lost", dry_run=dry_run)
        assert str(refused.value) == message, dry_run
    assert rows(db_path) == before


def test_a_dry_run_names_the_version_the_write_would_reach(repo: Repository) -> None:
    v = claimed_run(repo, ["at-1", "at-2"])
    assert decide(repo, "cancelled", dry_run=True).as_dict()["version"] == v + 3
    assert decide(repo, "cancelled").as_dict()["version"] == v + 3
