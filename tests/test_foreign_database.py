"""A file that is not QingLong's is never written: every writing command checks the schema
before its first write, `db init` refuses another application's tables (unless --force), and a
dry run on a crashed writer's hot journal names the crash and its fix (docs/decisions.md D-15).
Real SQLite files, the real CLI; bytes compared from another process."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _primary_support import linux_only, qlfsm
from _support import init_db, tree_digest

from storage._ddl import LEGACY_TABLES


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("qlfsm: error: ")
    return lines[0]


def legacy_only(path: Path) -> Path:
    """The 2.x tables `--legacy-normalize` rewrites, with a running instance and a running
    crontab in them, and no QingLong 3.0 schema: a rollback-journal file, as 2.x keeps it."""
    conn = sqlite3.connect(str(path))
    for statement in LEGACY_TABLES:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO `Crontabs` (name, command, schedule, status, createdAt, updatedAt) "
        "VALUES ('job', 'task a.js', '* * * * *', 0, 'x', 'x')"
    )
    conn.execute(
        "INSERT INTO `RunningInstances` (cron_id, pid, started_at, status, createdAt, "
        "updatedAt) VALUES (1, 4242, 1, 0, 'x', 'x')"
    )
    conn.commit()
    conn.close()
    return path


def users_only(path: Path) -> Path:
    conn = sqlite3.connect(str(path))
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    return path


WRITING_COMMANDS = {
    "startup --legacy-normalize": ["startup", "--legacy-normalize", "--receipt-root", "{r}"],
    "startup": ["startup", "--receipt-root", "{r}"],
    "reconcile": ["reconcile", "--receipt-root", "{r}"],
    "sweep": ["sweep", "--receipt-root", "{r}"],
    "resolve": ["resolve", "--run", "run-1", "--to", "lost", "--reason", "gone"],
    "launch": ["launch", "--receipt-root", "{r}", "--run-id", "run-1"],
    "db init": ["db", "init"],
    "drain": ["drain", "--receipt-root", "{r}"],
}


# `db init` on a 2.x node's database is the upgrade it exists for (spec 02): tested below.
REFUSALS = [
    pytest.param(command, make, id=f"{command}-{kind}")
    for command in WRITING_COMMANDS
    for make, kind in ((legacy_only, "legacy-tables"), (users_only, "users"))
    if (command, kind) != ("db init", "legacy-tables")
]


@pytest.mark.parametrize(("command", "make"), REFUSALS)
def test_a_writing_command_on_a_file_that_is_not_qinglongs_refuses_it_byte_for_byte_unwritten(
    tmp_path: Path, command: str, make: object
) -> None:
    db = tmp_path / "other.db"
    assert callable(make)
    make(db)
    before = tree_digest(db)
    args = [a.replace("{r}", str(tmp_path / "r")) for a in WRITING_COMMANDS[command]]
    tail = ["--", "true"] if command == "launch" else []
    out = qlfsm(*args, "--db", str(db), *tail)
    assert out.returncode == 1, out.stderr
    line = one_error_line(out)
    assert f"{str(db)!r} is not a QingLong 3.0 database" in line
    assert "db init" not in line  # an empty new database would forget the real one's runs
    assert tree_digest(db) == before  # not one byte: no normalization, no WAL switch, no table


@pytest.mark.parametrize("make", [legacy_only, users_only], ids=["legacy-tables", "users"])
def test_shadow_on_a_file_that_is_not_qinglongs_fails_open_unwritten(
    tmp_path: Path, make: object
) -> None:
    db = tmp_path / "other.db"
    assert callable(make)
    make(db)
    before = tree_digest(db)
    out = qlfsm("shadow", "--db", str(db), "--origins", "manual", "--json")
    assert out.returncode == 0 and out.stderr == ""
    assert '"state": "failed"' in out.stdout
    assert tree_digest(db) == before


def qinglong_without_the_journal_table(path: Path) -> Path:
    """A QingLong-looking file that lacks a table qlfsm needs, holding a legacy Run that the
    shadow pass would repair (row 2) and a prepared runtime Run, in rollback-journal mode."""
    init_db(path)
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute('DROP TABLE "LocalCompletionReceiptJournal"')
    runs = (
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
        "execution_origin, execution_owner, status, version, event_sequence, created_at_ms, "
        "started_at_ms) VALUES (?, 'default', 't', '1', 'manual', 'manual', ?, ?, 3, 3, 1, 1)"
    )
    attempts = (
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
        "callback_sequence, created_at_ms, finished_at_ms) VALUES (?, ?, 1, ?, ?, 0, 1, ?)"
    )
    conn.execute(runs, ("legacy-1", "legacy", "running"))
    conn.execute(attempts, ("la-1", "legacy-1", "lost", "legacy_local", 2))
    conn.execute(runs, ("run-1", "runtime", "queued"))
    conn.execute(attempts, ("at-1", "run-1", "claimed", "local_process", None))
    conn.close()
    return path


def test_a_qinglong_file_lacking_a_table_is_refused_before_the_first_write_by_every_writer(
    tmp_path: Path,
) -> None:
    db = qinglong_without_the_journal_table(tmp_path / "partial.db")
    before = tree_digest(db)
    shadow = qlfsm("shadow", "--db", str(db), "--origins", "manual", "--json")
    assert shadow.returncode == 0 and shadow.stderr == ""
    assert '"errorType": "NotAQingLongDatabase"' in shadow.stdout  # fails open, unwritten
    assert tree_digest(db) == before
    root = str(tmp_path / "r")
    for args in (
        ["startup", "--legacy-normalize", "--origins", "manual", "--receipt-root", root],
        ["launch", "--receipt-root", root, "--run-id", "run-1", "--db", str(db), "--", "true"],
    ):
        out = qlfsm(*args, *(["--db", str(db)] if args[0] == "startup" else []))
        assert out.returncode == 1, out.stderr
        line = one_error_line(out)
        assert "table LocalCompletionReceiptJournal is missing" in line
        assert tree_digest(db) == before, args


def test_db_init_force_adds_the_qinglong_tables_beside_another_applications(
    tmp_path: Path,
) -> None:
    db = users_only(tmp_path / "app.db")
    refused = qlfsm("db", "init", "--db", str(db))
    line = one_error_line(refused)
    assert "it holds 1 other table(s), 'users', and none of QingLong's" in line
    assert "nothing was written" in line and "add --force" in line
    forced = qlfsm("db", "init", "--db", str(db), "--force")
    assert forced.returncode == 0, forced.stderr
    conn = sqlite3.connect(str(db))
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]
    finally:
        conn.close()
    assert {"users", "Runs", "RunEvents", "LocalCompletionReceiptJournal"} <= names
    again = qlfsm("db", "init", "--db", str(db))  # QingLong's now: no --force needed
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_db_init_on_an_empty_file_still_creates_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    out = qlfsm("db", "init", "--db", str(db))
    assert out.returncode == 0, out.stderr


_CRASHING_WRITER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")  # the cache spills: the file changes mid-transaction
conn.execute("BEGIN IMMEDIATE")
conn.execute("CREATE TABLE filler (x BLOB)")
for _ in range(200):
    conn.execute("INSERT INTO filler VALUES (randomblob(4000))")
print("ready", flush=True)
time.sleep(60)
"""


def crash_a_writer_mid_transaction(db: Path) -> None:
    """A real writer SIGKILLed holding an uncommitted, spilled transaction in rollback-journal
    mode: it leaves a hot `<db>-journal` and a database file with half its pages."""
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    child = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_WRITER, str(db)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"  # a readiness line, not a sleep
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert os.path.getsize(f"{db}-journal") > 0


@linux_only
@pytest.mark.parametrize("command", ["reconcile", "startup"])
def test_a_dry_run_on_a_hot_journal_names_the_crashed_writer_and_the_writable_open_that_fixes_it(
    db_path: Path, tmp_path: Path, command: str
) -> None:
    crash_a_writer_mid_transaction(db_path)
    before = tree_digest(db_path)
    out = qlfsm(command, "--db", str(db_path), "--receipt-root", str(tmp_path / "r"), "--dry-run")
    assert out.returncode == 1, out.stderr
    line = one_error_line(out)
    assert f"a writer crashed mid-transaction and left {str(db_path) + '-journal'!r}" in line
    assert "hot rollback journal" in line and f"`qlfsm inspect --db {db_path}`" in line
    assert "never delete the -journal file" in line
    assert "make that writable" not in line  # nothing here is read-only
    assert tree_digest(db_path) == before  # the dry run rolled nothing back itself
    # The fix it names works: one writable open rolls the crash back, then the dry run runs.
    assert qlfsm("inspect", "--db", str(db_path)).returncode == 0
    assert not os.path.exists(f"{db_path}-journal")
    again = qlfsm(command, "--db", str(db_path), "--receipt-root", str(tmp_path / "r"), "--dry-run")
    assert again.returncode == 0, again.stderr


def test_db_init_upgrades_a_qinglong_2x_database_in_place_keeping_its_rows(tmp_path: Path) -> None:
    db = legacy_only(tmp_path / "ql2.db")
    out = qlfsm("db", "init", "--db", str(db))
    assert out.returncode == 0, out.stderr
    conn = sqlite3.connect(str(db))
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"Runs", "RunAttempts", "RunEvents", "Crontabs", "RunningInstances"} <= tables
        assert conn.execute("SELECT name, status FROM Crontabs").fetchall() == [("job", 0)]
        assert conn.execute("SELECT pid FROM RunningInstances").fetchall() == [(4242,)]
    finally:
        conn.close()
