"""A hostile database under every pass: locked by another process, read-only, corrupt, not a
regular file, rows that are not UTF-8. Real SQLite files, a second real connection holding the
lock, real `qlfsm` processes; the time bounds asserted here are the ones the lock budget
documents (docs/decisions.md "lock budget"), not speed measurements.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    ForbiddenProvider,
    linux_only,
    make_candidate,
    qlfsm,
    sleepers,
)
from _shadow_support import LegacyDb, bulk_runs
from _support import read_only
from conftest import read_snapshot

from reconciler import run_shadow
from reconciler.node import FakeClock, FileReceiptStore, ProcProvider
from reconciler.primary import reconcile_connection
from reconciler.shadow import PassPorts
from storage import (
    LOCK_BUDGET_ENV,
    LOCK_BUDGET_S,
    Busy,
    DatabaseFull,
    LockBudget,
    Repository,
    connect,
    database_error,
    in_transaction,
    lock_budget,
    write_blocker,
)
from storage._connection import BUSY_TIMEOUT_S

BUDGET_S = 0.5
# What a pass may spend beyond its lock budget on a loaded 2-core machine: its own work and,
# for a command, starting Python. The bound asserted is budget + this, in total.
SLACK_S = 2.0
CLI_SLACK_S = 3.5


@contextlib.contextmanager
def write_lock(path: Path | str) -> Iterator[sqlite3.Connection]:
    """A SECOND real connection holding the write lock (BEGIN IMMEDIATE) for the block."""
    holder = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield holder
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()


def claimed_runs(repo: Repository, n: int) -> list[str]:
    """``n`` dispatching Runs with one `claimed` Attempt each: row 7 writes `lost` for each."""
    ids = [f"run-{i}" for i in range(n)]
    for i, run_id in enumerate(ids):
        make_candidate(repo, run_id, f"at-{i}", attempt="claimed", run="dispatching")
    return ids


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    got = fn()
    return got, time.monotonic() - started


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != LOCK_BUDGET_ENV}
    env.update(extra)
    return env


# --- 1. a lock held by another process: one budget for the pass, not a stall per candidate ------


def test_a_locked_database_stops_the_primary_pass_within_its_lock_budget_writing_nothing(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    ids = claimed_runs(repo, 4)
    before = read_snapshot(db_path)
    conn = connect(str(db_path))  # the default 5 s busy timeout: the budget bounds each try
    try:
        with write_lock(db_path):
            summary, elapsed = timed(
                lambda: reconcile_connection(
                    conn, store, ForbiddenProvider(), FakeClock(), budget=LockBudget(BUDGET_S)
                )
            )
    finally:
        conn.close()
    assert BUDGET_S - 0.05 <= elapsed < BUDGET_S + SLACK_S
    assert summary["safe"] is False and summary["failed"] == 4 and summary["scanned"] == 4
    first, *rest = summary["candidates"]
    assert first["run_id"] == ids[0] and first["row"] == "14"
    assert "locked by another process" in first["reason"] and "Busy" in first["reason"]
    assert [c["reason"] for c in rest] == ["database_locked:not_attempted"] * 3
    assert read_snapshot(db_path) == before


def test_a_lock_released_within_the_budget_is_waited_for_and_the_pass_completes(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    claimed_runs(repo, 3)
    conn = connect(str(db_path))
    try:
        with write_lock(db_path) as holder:
            threading.Timer(0.3, lambda: holder.execute("ROLLBACK")).start()
            summary = reconcile_connection(
                conn, store, ForbiddenProvider(), FakeClock(), budget=LockBudget(3.0)
            )
    finally:
        conn.close()
    assert summary["safe"] is True and summary["recovered"] == 3


@linux_only
def test_a_retained_candidate_is_not_verified_once_the_pass_is_locked(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    with sleepers(1) as [live]:
        make_candidate(repo, "run-0", "at-0", handle=live.handle, pid=live.pid)
        make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
        conn = connect(str(db_path))
        try:
            with write_lock(db_path):
                summary = reconcile_connection(
                    conn, store, ProcProvider(), FakeClock(), budget=LockBudget(0.2)
                )
        finally:
            conn.close()
    retained, locked = summary["candidates"]
    assert (retained["outcome"], retained["reason"]) == (
        "failed",
        "verifier:not_run:database_locked",
    )
    assert locked["outcome"] == "failed" and "locked by another process" in locked["reason"]


def test_once_the_budget_is_spent_no_write_is_even_tried(db_path: Path, repo: Repository) -> None:
    claimed_runs(repo, 1)
    conn = connect(str(db_path))
    begins: list[str] = []
    conn.set_trace_callback(lambda s: begins.append(s) if s.startswith("BEGIN") else None)
    budget = LockBudget(0.1)
    try:
        with write_lock(db_path), lock_budget(conn, budget):
            with pytest.raises(Busy):
                in_transaction(conn, lambda c: c.execute("SELECT 1"))
            tried = len(begins)
            started = time.monotonic()
            with pytest.raises(Busy):
                in_transaction(conn, lambda c: c.execute("SELECT 1"))
            elapsed = time.monotonic() - started
    finally:
        conn.close()
    assert budget.blocked and tried >= 1
    assert len(begins) == tried and elapsed < 0.05


def test_the_primary_command_exits_75_with_one_line_within_the_budget_from_the_environment(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    # D-20: a lock is transient: one cause, one line, exit 75 (EX_TEMPFAIL), not a row per
    # candidate and not the exit 3 that stops a node until a person comes.
    claimed_runs(repo, 3)
    before = read_snapshot(db_path)
    args = ("reconcile", "--db", str(db_path), "--receipt-root", str(tmp_path / "r"), "--json")
    with write_lock(db_path):
        out, elapsed = timed(lambda: qlfsm(*args, env=cli_env(**{LOCK_BUDGET_ENV: "1"})))
    assert out.returncode == 75, out.stderr
    assert 1.0 <= elapsed < 1.0 + CLI_SLACK_S
    line = one_error_line(out)
    assert out.stdout == ""
    assert "is locked by another process: waited 1.0 s" in line and "try again" in line
    assert "3 of 3 candidate(s) not decided; nothing was written" in line
    assert "not_attempted" not in line and "explain" not in line
    assert read_snapshot(db_path) == before


def test_startup_shares_one_default_budget_of_five_seconds_between_shadow_and_primary(
    db: LegacyDb, tmp_path: Path
) -> None:
    # The documented default: one busy timeout (5 s) for the WHOLE start-up, not 5 s per pass
    # and not 5 tries x 5 s per candidate (77 s for three candidates before).
    assert LOCK_BUDGET_S == BUSY_TIMEOUT_S == 5.0
    bulk_runs(db.conn, 2, status="running", attempt="running")
    repo = Repository(db.conn)
    claimed_runs(repo, 3)
    before = read_snapshot(Path(db.path))
    args = ("startup", "--db", db.path, "--receipt-root", str(tmp_path / "r"), "--json")
    with write_lock(db.path):
        out, elapsed = timed(lambda: qlfsm(*args, "--origins", "manual", env=cli_env()))
    # D-20: the shadow pass failed open on the lock, the primary pass found it still held
    # (the budget spent): exit 75, one line, nothing on stdout, nothing written.
    assert out.returncode == 75, out.stderr
    assert LOCK_BUDGET_S <= elapsed < LOCK_BUDGET_S + CLI_SLACK_S
    line = one_error_line(out)
    assert out.stdout == "" and "3 of 3 candidate(s) not decided" in line
    assert read_snapshot(Path(db.path)) == before


def test_a_locked_database_fails_the_shadow_pass_open_within_its_budget(db: LegacyDb) -> None:
    bulk_runs(db.conn, 3, status="running", attempt="running")  # row 10 writes each
    before = read_snapshot(Path(db.path))
    with write_lock(db.path):
        got, elapsed = timed(
            lambda: run_shadow(db.path, origins="manual", environ={}, lock=LockBudget(BUDGET_S))
        )
    assert got.audit == {"state": "failed", "errorType": "Busy"}
    assert BUDGET_S - 0.05 <= elapsed < BUDGET_S + SLACK_S
    assert read_snapshot(Path(db.path)) == before


def test_the_shadow_command_fails_open_with_exit_0_within_the_budget(db: LegacyDb) -> None:
    bulk_runs(db.conn, 2, status="running", attempt="running")
    args = ("shadow", "--db", db.path, "--origins", "manual", "--json")
    with write_lock(db.path):
        out, elapsed = timed(lambda: qlfsm(*args, env=cli_env(**{LOCK_BUDGET_ENV: "0.5"})))
    assert out.returncode == 0 and out.stderr == ""
    assert json.loads(out.stdout) == {"state": "failed", "errorType": "Busy"}
    assert elapsed < 0.5 + CLI_SLACK_S


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_lock_budget_is_a_usage_error_before_anything_is_read(
    db_path: Path, tmp_path: Path, value: str
) -> None:
    args = ("reconcile", "--db", str(db_path), "--receipt-root", str(tmp_path / "r"))
    out = qlfsm(*args, env=cli_env(**{LOCK_BUDGET_ENV: value}))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and LOCK_BUDGET_ENV in out.stderr
    audit = run_shadow(str(db_path), origins="manual", environ={LOCK_BUDGET_ENV: value}).audit
    assert audit == {"state": "failed", "errorType": "ValueError"}


# --- read-only: say what cannot be written --------------------------------------------------------


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("qlfsm: error: ")
    return lines[0]


def test_a_database_in_a_read_only_directory_names_the_directory_and_never_advises_init(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    claimed_runs(repo, 1)
    repo.conn.close()
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "ql.db"
    shutil.copyfile(db_path, path)  # no -wal/-shm beside it: SQLite must create them
    data = path.read_bytes()
    with read_only(folder):
        for command in (
            ["reconcile", "--receipt-root", str(tmp_path / "r")],
            ["inspect"],
            ["db", "init"],
        ):
            out = qlfsm(*command, "--db", str(path))
            line = one_error_line(out)
            assert out.returncode == 1, (command, out.stderr)
            assert f"its directory {str(folder)!r} is read-only" in line
            assert "db init" not in line
    assert sorted(os.listdir(folder)) == ["ql.db"] and path.read_bytes() == data


def test_a_read_only_database_file_stops_the_pass_naming_the_file(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    claimed_runs(repo, 3)
    repo.conn.close()
    before = read_snapshot(db_path)
    args = ("reconcile", "--db", str(db_path), "--receipt-root", str(tmp_path / "r"), "--json")
    with read_only(db_path):
        out = qlfsm(*args)
    assert out.returncode == 3, out.stderr
    first, *rest = json.loads(out.stdout)["candidates"]
    assert "DatabaseReadOnly" in first["reason"] and "the file is read-only" in first["reason"]
    assert [c["reason"] for c in rest] == ["database_read_only:not_attempted"] * 2
    assert read_snapshot(db_path) == before


def capped(conn: sqlite3.Connection) -> sqlite3.Connection:
    """``conn`` whose database may not grow by one page: SQLite's own SQLITE_FULL ("database or
    disk is full"), exactly what a full filesystem gives, without needing one."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    return conn


def statuses(path: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(path)) as other:
        return dict(other.execute('SELECT id, status FROM "Runs"').fetchall())


def test_a_full_filesystem_stops_the_primary_pass_naming_it_once_and_half_writes_nothing(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    ids = claimed_runs(repo, 40)  # row 7 writes `lost` with two events each: the file must grow
    conn = capped(connect(str(db_path)))
    try:
        summary = reconcile_connection(conn, store, ForbiddenProvider(), FakeClock())
    finally:
        conn.close()
    reasons = [c["reason"] for c in summary["candidates"]]
    full = [i for i, r in enumerate(reasons) if r.startswith("error:DatabaseFull")]
    assert len(full) == 1, reasons  # named once, by the candidate whose write met it
    first = full[0]
    assert "is full" in reasons[first]  # the reason is cut at its length limit (spec 04)
    assert reasons[:first] == ["unstarted_claim"] * first
    # No later write is even tried: each would fail after its own attempt.
    assert reasons[first + 1 :] == ["database_full:not_attempted"] * (len(ids) - first - 1)
    assert first + 1 < len(ids)
    assert summary["safe"] is False and summary["recovered"] == first
    # Read back through another connection: what committed is whole, the rest untouched.
    seen = statuses(db_path)
    assert [seen[i] for i in ids] == ["lost"] * first + ["dispatching"] * (len(ids) - first)
    with contextlib.closing(sqlite3.connect(db_path)) as other:
        assert other.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        lost_events = other.execute(
            "SELECT COUNT(*) FROM \"RunEvents\" WHERE type IN ('run.lost', 'attempt.lost')"
        ).fetchone()[0]
    assert lost_events == 2 * first


def test_a_full_filesystem_fails_the_shadow_pass_open_naming_it(db: LegacyDb) -> None:
    bulk_runs(db.conn, 40, status="running", attempt="running")  # row 10 writes each
    ports = PassPorts(open=lambda path, timeout: capped(connect(path)))
    got = run_shadow(db.path, origins="manual", environ={}, ports=ports)
    assert got.audit == {"state": "failed", "errorType": "DatabaseFull"}
    with contextlib.closing(sqlite3.connect(db.path)) as other:
        assert other.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # ADR-0448 §6: the Attempt moves first, the Run second; a Run is never ahead.
        ahead = other.execute(
            'SELECT COUNT(*) FROM "Runs" r JOIN "RunAttempts" a ON a.run_id = r.id '
            "WHERE r.status = 'lost' AND a.status <> 'lost'"
        ).fetchone()[0]
    assert ahead == 0


def test_sqlite_full_is_named_with_the_directory_and_what_to_do(tmp_path: Path) -> None:
    error = database_error(str(tmp_path / "ql.db"), capped_error(tmp_path))
    assert isinstance(error, DatabaseFull)
    assert str(error) == (
        f"database {str(tmp_path / 'ql.db')!r} cannot be written: the filesystem holding "
        f"{str(tmp_path)!r} is full; free space there and run again (nothing was "
        "half-written: each change is one transaction)"
    )
    assert write_blocker(error) == write_blocker(capped_error(tmp_path)) == "database_full"


@pytest.mark.parametrize("free_blocks", [0, 1])
def test_an_io_error_on_a_full_filesystem_is_named_full_and_otherwise_an_io_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free_blocks: int
) -> None:
    # SQLite reports a -shm it cannot grow on a full filesystem as SQLITE_IOERR_SHMSIZE; the
    # filesystem's free blocks (a fault injected at statvfs) tell the two causes apart.
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = sqlite3.SQLITE_IOERR_SHMSIZE  # type: ignore[attr-defined]
    real = os.statvfs

    def statvfs(path: str) -> Any:
        got = real(path)
        return type("Vfs", (), {"f_bavail": free_blocks, "f_frsize": got.f_frsize})()

    monkeypatch.setattr(os, "statvfs", statvfs)
    named = database_error(str(tmp_path / "ql.db"), error)
    if free_blocks == 0:
        assert isinstance(named, DatabaseFull) and "is full" in str(named)
    else:
        assert not isinstance(named, DatabaseFull)
        assert "hit an I/O error (disk I/O error); check the disk" in str(named)


def capped_error(tmp_path: Path) -> sqlite3.OperationalError:
    """A real SQLITE_FULL from SQLite."""
    with contextlib.closing(sqlite3.connect(tmp_path / "small.db", isolation_level=None)) as c:
        c.execute("CREATE TABLE IF NOT EXISTS t (x BLOB)")
        capped(c)
        with pytest.raises(sqlite3.OperationalError) as caught:
            c.execute("INSERT INTO t VALUES (zeroblob(100000))")
    assert caught.value.sqlite_errorcode == sqlite3.SQLITE_FULL
    return caught.value


# --- locked (exit 75) or corrupt (exit 1) at the first read: the real problem ------------------


def test_a_database_locked_against_readers_is_exit_75_locked_try_again(
    db_path: Path, tmp_path: Path
) -> None:
    # A rollback-journal file under an EXCLUSIVE lock cannot even be read: the first read
    # waits the busy timeout, then says so (never "not a QingLong database", never `db init`).
    plain = sqlite3.connect(str(db_path), isolation_level=None)
    plain.execute("PRAGMA journal_mode=DELETE")
    plain.close()
    commands = (
        ["reconcile", "--receipt-root", str(tmp_path / "r")],
        ["inspect"],
        ["db", "init"],
    )
    holder = sqlite3.connect(str(db_path), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:  # the three wait side by side: one busy timeout for the test, not three
        running = [
            subprocess.Popen(
                [sys.executable, "-m", "reconciler", *command, "--db", str(db_path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=cli_env(),
            )
            for command in commands
        ]
        done = [subprocess.CompletedProcess(p.args, p.wait(60), *p.communicate()) for p in running]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for command, out in zip(commands, done, strict=True):
        line = one_error_line(out)
        assert out.returncode == 75, (command, out.stderr)  # D-20: transient, try again
        assert "is locked by another process (waited 5." in line and "try again" in line
        assert "db init" not in line and "not a QingLong" not in line


def test_db_init_on_a_locked_database_waits_the_budget_and_says_locked(
    db_path: Path,
) -> None:
    with write_lock(db_path):
        out, elapsed = timed(
            lambda: qlfsm("db", "init", "--db", str(db_path), env=cli_env(**{LOCK_BUDGET_ENV: "1"}))
        )
    line = one_error_line(out)
    assert out.returncode == 75 and elapsed < 1 + CLI_SLACK_S  # D-20: transient, try again
    assert "locked by another process (waited 1.0 s)" in line and "try again" in line


def test_a_truncated_database_is_reported_corrupt_and_left_alone(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    claimed_runs(repo, 2)
    repo.conn.close()
    data = db_path.read_bytes()
    cut = tmp_path / "cut.db"
    cut.write_bytes(data[: len(data) // 2])
    for command in (
        ["reconcile", "--receipt-root", str(tmp_path / "r")],
        ["inspect"],
        ["db", "init"],
        ["startup", "--receipt-root", str(tmp_path / "r")],
    ):
        out = qlfsm(*command, "--db", str(cut))
        line = one_error_line(out)
        assert out.returncode == 1, (command, out.stderr)
        assert "is corrupt or truncated" in line and "restore it from a backup" in line
        assert "db init" not in line
    assert cut.read_bytes() == data[: len(data) // 2]


# --- 9. not a regular file: refused before it is opened ---------------------------------------


def special_files(tmp_path: Path) -> dict[str, Path]:
    made = {"directory": tmp_path / "dir.db", "FIFO (named pipe)": tmp_path / "fifo.db"}
    made["directory"].mkdir()
    os.mkfifo(made["FIFO (named pipe)"])
    device = tmp_path / "null.db"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        pass  # no CAP_MKNOD here: /dev/null itself is tried below
    else:
        made["character device"] = device
    return made


def test_every_command_refuses_a_device_fifo_or_directory_before_opening_it(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "r")
    for kind, path in special_files(tmp_path).items():
        for command in (
            ["db", "init"],
            ["inspect"],
            ["reconcile", "--receipt-root", root],
            ["startup", "--receipt-root", root],
        ):
            out = qlfsm(*command, "--db", str(path))  # a FIFO opened by SQLite would hang
            line = one_error_line(out)
            assert out.returncode == 1, (kind, command, out.stderr)
            assert f"is a {kind}, not a regular file" in line
        shadow = qlfsm("shadow", "--db", str(path), "--origins", "manual", "--json")
        assert shadow.returncode == 0
        assert json.loads(shadow.stdout) == {"state": "failed", "errorType": "NotARegularFile"}
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not [name for name in left if name.endswith(("-journal", "-wal", "-shm"))], left


def test_db_init_on_dev_null_writes_no_journal_beside_it() -> None:
    journal = Path("/dev/null-journal")
    if journal.exists():
        pytest.skip("a /dev/null-journal already exists on this machine; not ours to remove")
    out = qlfsm("db", "init", "--db", "/dev/null")
    line = one_error_line(out)
    assert out.returncode == 1 and "is a character device, not a regular file" in line
    assert not journal.exists()
    assert not Path("/dev/null-wal").exists()


# --- 11. a row that is not UTF-8 is one failed candidate ---------------------------------------


def insert_runtime_run(conn: sqlite3.Connection, id_sql: str, attempt_id: str) -> None:
    """A dispatching runtime Run whose id is the SQL expression ``id_sql`` (raw bytes), with
    one claimed Attempt, written by raw SQL as another tool could."""
    conn.execute(
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
        "execution_origin, execution_owner, status, version, event_sequence, created_at_ms) "
        f"VALUES ({id_sql}, 'default', 'task', '1', 'manual', 'manual', 'runtime', "
        "'dispatching', 3, 3, 1700000000000)"
    )
    conn.execute(
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
        f"callback_sequence, created_at_ms) VALUES (?, {id_sql}, 1, 'claimed', "
        "'local_process', 0, 1700000000000)",
        (attempt_id,),
    )


@pytest.mark.parametrize(
    ("id_sql", "shown"),
    [
        ("CAST(X'72756e2d7aff' AS TEXT)", "run-z\\xff"),  # TEXT that is not UTF-8
        ("X'72756e2d7a'", "x'72756e2d7a'"),  # a BLOB
    ],
)
def test_a_run_id_that_is_not_utf8_text_is_one_failed_candidate_beside_a_recovered_one(
    repo: Repository, db_path: Path, tmp_path: Path, id_sql: str, shown: str
) -> None:
    claimed_runs(repo, 1)
    raw = sqlite3.connect(str(db_path), isolation_level=None)
    insert_runtime_run(raw, id_sql, "at-bad")
    raw.close()
    args = ("reconcile", "--db", str(db_path), "--receipt-root", str(tmp_path / "r"), "--json")
    out = qlfsm(*args)
    assert out.returncode == 3, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["scanned"], summary["recovered"], summary["failed"]) == (2, 1, 1)
    healthy, bad = summary["candidates"]
    assert (healthy["run_id"], healthy["row"], healthy["outcome"]) == ("run-0", "7", "recovered")
    assert (bad["run_id"], bad["row"], bad["outcome"]) == (shown, "14", "failed")
    assert bad["reason"].startswith("error:BadRow: Runs.id is ")
    with contextlib.closing(connect(str(db_path))) as reader:
        run = Repository(reader).get_run("run-0")
    assert run is not None and run.status == "lost"


def test_an_attempt_field_that_is_not_utf8_fails_only_its_candidate(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    claimed_runs(repo, 2)
    raw = sqlite3.connect(str(db_path), isolation_level=None)
    raw.execute(
        "UPDATE \"RunAttempts\" SET log_artifact_id = CAST(X'6c6f67ff' AS TEXT) WHERE id = 'at-1'"
    )
    raw.close()
    summary = reconcile_connection(repo.conn, store, ForbiddenProvider(), FakeClock())
    outcomes = {c["run_id"]: (c["row"], c["outcome"]) for c in summary["candidates"]}
    assert outcomes == {"run-0": ("7", "recovered"), "run-1": ("14", "failed")}


def test_inspect_names_a_row_that_is_not_utf8_as_a_bad_row_not_a_foreign_file(
    db_path: Path,
) -> None:
    raw = sqlite3.connect(str(db_path), isolation_level=None)
    insert_runtime_run(raw, "CAST(X'72756e2dff' AS TEXT)", "at-bad")
    raw.close()
    out = qlfsm("inspect", "--db", str(db_path))
    line = one_error_line(out)
    assert out.returncode == 1
    assert "holds a row this command cannot read" in line and "not a QingLong" not in line


def legacy_bad_row(db: LegacyDb, created_at_ms: int) -> None:
    db.conn.execute(
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
        "execution_origin, execution_owner, status, version, event_sequence, created_at_ms) "
        "VALUES (CAST(X'30313939ff' AS TEXT), 'default', 'legacy-cron:1', '1', 'cron', "
        "'manual', 'legacy', 'running', 1, 1, ?)",
        (created_at_ms,),
    )


def test_a_legacy_run_id_that_is_not_utf8_is_one_failed_outcome_beside_marked_lost_ones(
    db: LegacyDb,
) -> None:
    keys = bulk_runs(db.conn, 2, status="running", attempt="running")
    legacy_bad_row(db, keys[0][0])  # same time as the first: it sorts between the two
    audit = run_shadow(db.path, origins="manual", environ={}, clock=FakeClock(2 * 10**12)).audit
    assert audit["state"] == "incomplete"
    report = audit["report"]
    assert report["coverage"]["scanned"] == 3 and report["coverage"]["stopReason"] == "complete"
    assert report["outcomes"]["failed"] == 1 and report["outcomes"]["markedLost"] == 2


def test_a_bad_legacy_row_that_ends_a_truncated_page_stalls_the_cursor_instead_of_skipping(
    db: LegacyDb,
) -> None:
    keys = bulk_runs(db.conn, 9, status="queued")  # edge: one page of 8
    legacy_bad_row(db, keys[6][0])  # created with the 7th, its bytes sort after: the 8th row
    audit = run_shadow(db.path, profile="edge", origins="manual", environ={}).audit
    coverage = audit["report"]["coverage"]
    assert coverage["scanned"] == 8 and coverage["stopReason"] == "cursor_stalled"
    assert coverage["resumeAvailable"] is False
    assert audit["report"]["outcomes"]["failed"] == 1


def test_a_run_id_that_is_not_utf8_is_not_fatal_for_the_whole_start_up(
    db: LegacyDb, tmp_path: Path
) -> None:
    repo = Repository(db.conn)
    claimed_runs(repo, 1)
    insert_runtime_run(db.conn, "CAST(X'72756e2dff' AS TEXT)", "at-bad")
    legacy_bad_row(db, 1_760_000_000_000)
    args = ("startup", "--db", db.path, "--receipt-root", str(tmp_path / "r"), "--json")
    out = qlfsm(*args, "--origins", "manual")
    assert out.returncode == 3, out.stderr
    got = json.loads(out.stdout)
    assert got["shadow"]["state"] == "incomplete"
    assert got["primary"]["recovered"] == 1 and got["primary"]["failed"] == 1


def test_the_candidate_query_still_runs_one_statement_and_reads_bad_rows_as_candidates(
    db_path: Path,
) -> None:
    from storage import primary_candidates

    raw = sqlite3.connect(str(db_path), isolation_level=None)
    insert_runtime_run(raw, "CAST(X'ff' AS TEXT)", "at-bad")
    raw.close()
    conn = connect(str(db_path))
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        page, truncated = primary_candidates(conn)
    finally:
        conn.close()
    assert len(statements) == 1 and not truncated
    [cand] = page
    assert cand.problem == "Runs.id is not valid UTF-8 text" and cand.run_id == "\\xff"


def test_the_lenient_candidate_read_leaves_the_connections_decoding_as_it_was(
    repo: Repository,
) -> None:
    from storage import primary_candidates

    claimed_runs(repo, 1)
    primary_candidates(repo.conn)
    assert repo.conn.text_factory is str
