"""An INSERT that SQLite drops without an error (a trigger's `RAISE(IGNORE)`) never lets a Run
change commit without its event (spec 01): the whole transaction rolls back, the candidate
fails (ADR-0068 row 14; ADR-0448 row 12, fail-open), `resolve` and `launch` say so in one line
and write nothing. Real SQLite files, the real CLI, real processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from _primary_support import T0, dead_handle, linux_only, make_candidate, make_run, qlfsm
from _shadow_support import LegacyDb
from _support import drop_statements_on
from conftest import read_snapshot

from storage import Actor, Repository, RowNotInserted, RunChange


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("qlfsm: error: ")
    return lines[0]


def says_the_insert_was_dropped(text: str, table: str = "RunEvents") -> None:
    assert f"an INSERT into {table} (" in text and "changed no row" in text, text
    assert "RAISE(IGNORE)" in text and "rolled back, nothing written" in text, text
    assert "drop that trigger" in text, text


@pytest.mark.parametrize("table", ["Runs", "RunAttempts", "RunEvents"])
def test_a_dropped_insert_raises_and_rolls_the_repository_change_back(
    repo: Repository, db_path: Path, table: str
) -> None:
    v = make_run(repo, "run-0", "dispatching")
    drop_statements_on(db_path, table)
    before = read_snapshot(db_path)
    with pytest.raises(RowNotInserted) as raised:
        if table == "Runs":
            repo.create_run(run_id="run-1", at_ms=T0)
        elif table == "RunAttempts":
            repo.create_attempt(run_id="run-0", attempt_id="at-0", expected_version=v, at_ms=T0)
        else:
            repo.advance("run-0", v, [RunChange("start")], actor=Actor("system"), at_ms=T0)
    says_the_insert_was_dropped(str(raised.value), table)
    assert not repo.conn.in_transaction
    assert read_snapshot(db_path) == before


@linux_only
@pytest.mark.parametrize("command", ["reconcile", "startup"])
def test_a_dropped_event_insert_fails_the_candidate_with_row_14_and_writes_nothing(
    repo: Repository, db_path: Path, tmp_path: Path, command: str
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)  # row 13 would mark it lost
    root = tmp_path / "r"
    root.mkdir()
    drop_statements_on(db_path, "RunEvents")
    before = read_snapshot(db_path)
    out = qlfsm(command, "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert out.returncode == 3, out.stderr  # blocked: never "safe" with a Run moved eventless
    assert out.stderr == ""
    summary = json.loads(out.stdout)
    primary = summary["primary"] if command == "startup" else summary
    assert summary["safe"] is False
    [cand] = primary["candidates"]
    assert (cand["row"], cand["outcome"]) == ("14", "failed")
    assert cand["reason"].startswith("error:RowNotInserted: ")
    says_the_insert_was_dropped(cand["reason"])
    assert read_snapshot(db_path) == before  # Run at its old version and sequence, no event


@linux_only
def test_resolve_with_a_dropped_event_insert_says_so_in_one_line_and_writes_nothing(
    repo: Repository, db_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    drop_statements_on(db_path, "RunEvents")
    before = read_snapshot(db_path)
    out = qlfsm(
        "resolve", "--db", str(db_path), "--run", "run-1", "--to", "lost", "--reason", "gone"
    )
    assert out.returncode == 1, out.stderr
    assert out.stdout == ""
    says_the_insert_was_dropped(one_error_line(out.stderr))
    assert read_snapshot(db_path) == before


@linux_only
def test_launch_with_a_dropped_event_insert_says_so_in_one_line_and_spawns_nothing(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    v = make_run(repo, "run-1", "queued")
    repo.create_attempt(run_id="run-1", attempt_id="at-1", expected_version=v, at_ms=T0)
    drop_statements_on(db_path, "RunEvents")
    before = read_snapshot(db_path)
    marker = tmp_path / "ran"
    out = qlfsm(
        "launch", "--db", str(db_path), "--receipt-root", str(tmp_path / "r"),
        "--run-id", "run-1", "--", "touch", str(marker),
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    says_the_insert_was_dropped(one_error_line(out.stderr))
    assert read_snapshot(db_path) == before  # no `starting`, no journal row
    time.sleep(0.2)  # a spawned command would have touched its file by now
    assert not marker.exists()


def test_shadow_with_a_dropped_event_insert_fails_that_candidate_open_and_writes_nothing(
    db: LegacyDb,
) -> None:
    made = db.run(status="running", attempts=("lost",))  # row 2 would repair the Run to lost
    drop_statements_on(db.path, "RunEvents")
    before = read_snapshot(Path(db.path))
    out = qlfsm("shadow", "--db", db.path, "--origins", "manual", "--json")
    assert out.returncode == 0, out.stderr  # fails open (ADR-0448 §9)
    assert out.stderr == ""
    audit = json.loads(out.stdout)
    assert audit["state"] == "incomplete"
    assert audit["report"]["outcomes"]["failed"] == 1
    assert audit["report"]["outcomes"]["repaired"] == 0
    assert made.run_id not in out.stdout  # spec 05: nothing of the error leaves the pass
    assert read_snapshot(Path(db.path)) == before


def test_a_dropped_quarantine_intent_raises_before_any_file_could_move(
    repo: Repository, db_path: Path
) -> None:
    from storage import journal_get, journal_quarantine

    make_candidate(repo, "run-1", "at-1")
    drop_statements_on(db_path, "LocalCompletionReceiptJournal")
    with pytest.raises(RowNotInserted) as raised:
        journal_quarantine(repo.conn, "at-1", "run-1", "quarantine/at-1.json", T0, T0 + 1)
    says_the_insert_was_dropped(str(raised.value), "LocalCompletionReceiptJournal")
    assert journal_get(repo.conn, "at-1") is None
