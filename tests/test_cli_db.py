"""`qlfsm db init` and `qlfsm inspect` as a user runs them: real processes, real files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _support import attempt_in

from storage import Repository, connect

QLFSM = str(Path(sys.executable).with_name("qlfsm"))
ENTRYPOINTS = {"console-script": [QLFSM], "python-m": [sys.executable, "-m", "reconciler"]}


def run(entry: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENTRYPOINTS[entry], *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("qlfsm: error: ")
    return lines[0]


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(str(path))
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


@pytest.mark.parametrize("entry", sorted(ENTRYPOINTS))
def test_db_init_creates_the_schema_and_is_idempotent(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "node.db"
    first = run(entry, "db", "init", "--db", str(path))
    assert first.returncode == 0, first.stderr
    assert "0001-run-core" in first.stdout and first.stderr == ""
    assert {"Runs", "RunAttempts", "RunEvents", "LocalCompletionReceiptJournal"} <= tables(path)
    again = run(entry, "db", "init", "--db", str(path), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"db": str(path), "created": False, "applied": []}
    assert again.stdout.count("\n") == 1


@pytest.fixture
def populated(db_path: Path) -> Path:
    conn = connect(str(db_path))
    try:
        repo = Repository(conn)
        attempt_in(repo, "run-a", "att-a", "running")
        repo.create_run(run_id="run-b", at_ms=1_700_000_000_500, execution_owner="legacy")
    finally:
        conn.close()
    return db_path


def test_inspect_prints_a_readable_table_of_runs(populated: Path) -> None:
    proc = run("console-script", "inspect", "--db", str(populated))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["run", "owner", "origin", "status", "version", "error"]
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].split() == ["run-a", "runtime", "manual", "dispatching", "6"]
    assert lines[3].split() == ["run-b", "legacy", "manual", "created", "1"]


def test_inspect_of_one_run_shows_its_attempts_and_events(populated: Path) -> None:
    proc = run("console-script", "inspect", "--db", str(populated), "--run", "run-a")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\nattempts\n" in out and "\nevents\n" in out
    assert "att-a" in out and "attempt.running" in out and "run.created" in out


def test_inspect_json_prints_exactly_one_json_object(populated: Path) -> None:
    proc = run("python-m", "inspect", "--db", str(populated), "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("\n") and proc.stdout.count("\n") == 1
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    runs = {r["run"]["id"]: r for r in doc["runs"]}
    assert set(runs) == {"run-a", "run-b"}
    assert [a["status"] for a in runs["run-a"]["attempts"]] == ["running"]
    assert [e["sequence"] for e in runs["run-a"]["events"]] == [1, 2, 3, 4, 5, 6]
    one = json.loads(
        run("python-m", "inspect", "--db", str(populated), "--run", "run-b", "--json").stdout
    )
    assert [r["run"]["id"] for r in one["runs"]] == ["run-b"]


@pytest.mark.parametrize(
    "args",
    [
        ["db"],
        ["db", "init"],
        ["db", "frob", "--db", "x.db"],
        ["db", "init", "--db", "no/such/dir/x.db"],
        ["inspect"],
        ["inspect", "--db", "DB", "--bogus"],
        ["inspect", "--db", "DB", "--limit", "many"],
        ["inspect", "--db", "DB", "--limit", "0"],
        ["inspect", "--db", "DB", "--run", "no-such-run"],
        ["frobnicate"],
    ],
    ids=lambda a: " ".join(a),
)
@pytest.mark.parametrize("entry", sorted(ENTRYPOINTS))
def test_a_usage_error_is_one_line_on_stderr_and_exit_2(
    db_path: Path, tmp_path: Path, args: list[str], entry: str
) -> None:
    args = [str(db_path) if a == "DB" else a for a in args]
    proc = run(entry, *args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    one_error_line(proc)
    assert proc.stdout == ""
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"]])
def test_a_missing_database_is_exit_1_in_one_line_and_is_not_created(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "missing.db"
    proc = run("console-script", *command, "--db", str(path))
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert "does not exist" in line and "qlfsm db init" in line
    assert proc.stdout == ""
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_a_qinglong_database_is_exit_1_and_left_alone(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n" * 100)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(str(other))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    for path, command in [
        (junk, ["inspect"]),
        (junk, ["db", "init"]),
        (other, ["inspect", "--json"]),
    ]:
        proc = run("console-script", *command, "--db", str(path))
        assert proc.returncode == 1, proc.stderr
        assert "not a QingLong 3.0 database" in one_error_line(proc)
    assert junk.read_text() == "not a database\n" * 100
    assert tables(other) == {"notes"}


@pytest.mark.parametrize(
    "args",
    [["explain"], ["resolve", "--to", "failed", "--reason", "operator says so"]],
    ids=lambda a: a[0],
)
def test_explain_and_resolve_name_an_unknown_run_and_where_to_list_runs_in_the_same_words(
    db_path: Path, tmp_path: Path, args: list[str]
) -> None:
    db = str(tmp_path / "it's.db")
    Path(db).write_bytes(db_path.read_bytes())
    proc = run("python-m", args[0], "--db", db, "--run", "no-such-run", *args[1:])
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == (
        f"qlfsm: error: run 'no-such-run' is not in {db}; list runs with "
        f"`qlfsm inspect --db '{tmp_path}/it'\"'\"'s.db'`"
    )
