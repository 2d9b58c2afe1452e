"""A hostile environment never purges evidence early or gets a receipt root trusted that others
can write (docs/decisions.md D-16): a clock far behind or ahead, a root or shard writable by
another user, a directory at a receipt path, a journal row whose Attempt id is no path. Real
SQLite files (read back through a second connection), real receipt files, real processes and
the real CLI; the clock is injected (FakeClock) or moved with `faketime` where it exists."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    T0,
    dead_handle,
    linux_only,
    make_candidate,
    make_run,
    only,
    qlfsm,
    receipt,
    status,
)
from conftest import Snapshot

from reconciler import _reconcile
from reconciler.cli._reconcile import exit_code
from reconciler.node import (
    FakeClock,
    FileReceiptStore,
    ProcProvider,
    ReceiptRootError,
    check_root_dir,
    prepare_receipt_dirs,
    quarantine_ref,
)
from reconciler.node._receipt_store import publish_bytes_at
from reconciler.ops import operator_actor, resolve, sweep
from reconciler.primary import QUARANTINE_KEEP_MS, reconcile_connection
from storage import Repository, journal_get, journal_register, transaction

pytestmark = linux_only

YEARS_30_MS = 30 * 365 * 24 * 3600 * 1000
BAD_TOKEN = "z" * 43  # a receipt whose token does not match: invalid, quarantined (row 6)


def receipt_file(root: str | Path, attempt_id: str) -> Path:
    return Path(root) / attempt_id[:2] / f"{attempt_id}.json"


def journal_rows(db_path: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(db_path)) as second:
        return second.execute(
            "SELECT attempt_id, state, quarantine_ref, purge_after_ms "
            'FROM "LocalCompletionReceiptJournal" ORDER BY attempt_id'
        ).fetchall()


def one_line(text: str) -> str:
    assert text.count("\n") == 1 and "Traceback" not in text, text
    return text


# --- item: the purge time never lands before the retention after the real moment ------------


def invalid_candidate(repo: Repository, store: FileReceiptStore) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)  # every time recorded at T0
    store.publish(receipt("run-1", "at-1", token=BAD_TOKEN))


def test_a_quarantine_made_while_the_clock_is_30_years_behind_keeps_its_copy_the_full_retention(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    invalid_candidate(repo, store)
    behind = FakeClock(T0 - YEARS_30_MS)
    summary = reconcile_connection(conn, store, ProcProvider(), behind)
    entry = only(summary)
    assert (entry["row"], entry["outcome"]) == ("6", "unresolved")
    [row] = journal_rows(db_path)
    assert row == ("at-1", "quarantined", quarantine_ref("at-1"), T0 + QUARANTINE_KEEP_MS)
    [warning] = summary["warnings"]
    assert "\n" not in warning and "behind the newest time the database recorded" in warning
    assert "run-1" in warning and "NTP" in warning
    # The clock is right again: the operator decides, and a sweep follows a minute later.
    resolve(
        conn, "run-1", "failed", "bad receipt", force=False, provider=ProcProvider(),
        clock=FakeClock(T0 + 1000), actor=operator_actor(None),
    )  # fmt: skip
    copy = Path(store.root) / quarantine_ref("at-1")
    soon = sweep(conn, store, ProcProvider(), FakeClock(T0 + 60_000)).as_dict()
    assert soon["quarantine"]["copies_purged"] == 0 and copy.exists()
    assert journal_rows(db_path)[0][1] == "quarantined"
    due = sweep(conn, store, ProcProvider(), FakeClock(T0 + QUARANTINE_KEEP_MS)).as_dict()
    assert due["quarantine"]["copies_purged"] == 1 and not copy.exists()


def test_a_clock_a_little_behind_the_database_floors_the_purge_time_without_a_warning(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    invalid_candidate(repo, store)
    summary = reconcile_connection(conn, store, ProcProvider(), FakeClock(T0 - 5_000))
    assert "warnings" not in summary
    assert journal_rows(db_path)[0][3] == T0 + QUARANTINE_KEEP_MS


def test_the_kernels_clock_floors_the_purge_time_when_the_process_clock_is_behind(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    invalid_candidate(repo, store)
    kernel = T0 + 3 * 24 * 3600 * 1000  # the database's times are older than the kernel's
    clock = FakeClock(T0 - YEARS_30_MS, witness_ms=kernel)
    summary = reconcile_connection(conn, store, ProcProvider(), clock)
    assert journal_rows(db_path)[0][3] == kernel + QUARANTINE_KEEP_MS
    [warning] = summary["warnings"]
    assert "behind the kernel's clock" in warning


def test_a_sweep_whose_clock_runs_far_ahead_of_the_kernels_purges_nothing_early(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    invalid_candidate(repo, store)
    reconcile_connection(conn, store, ProcProvider(), FakeClock(T0))
    resolve(
        conn, "run-1", "failed", "bad receipt", force=False, provider=ProcProvider(),
        clock=FakeClock(T0 + 1000), actor=operator_actor(None),
    )  # fmt: skip
    ahead = FakeClock(T0 + YEARS_30_MS, witness_ms=T0 + 60_000)
    result = sweep(conn, store, ProcProvider(), ahead).as_dict()
    assert result["quarantine"]["copies_purged"] == 0
    assert (Path(store.root) / quarantine_ref("at-1")).exists()
    [warning] = result["warnings"]
    assert "ahead of the kernel's clock" in warning and "nothing is purged early" in warning


faketime = pytest.mark.skipif(
    shutil.which("faketime") is None,
    reason="faketime is not installed (apt-get install faketime; .ci/run installs it)",
)


def faked(offset: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["faketime", "-f", offset, sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@faketime
def test_faketime_30_years_behind_then_resolve_then_sweep_keeps_the_quarantined_copy(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    invalid_candidate(repo, store)
    db, root = str(db_path), store.root
    real_before = int(time.time() * 1000)  # this process's clock is not faked
    out = faked("-30y", "reconcile", "--db", db, "--receipt-root", root, "--json")
    assert out.returncode == 3, out.stderr
    assert only(json.loads(out.stdout))["row"] == "6"
    warning = one_line(out.stderr)
    assert warning.startswith("qlfsm: warning: the clock runs ") and "behind" in warning
    [row] = journal_rows(db_path)
    # Counted from the real moment (the kernel's clock; /proc/stat's btime is whole seconds).
    assert row[3] >= real_before - 2000 + QUARANTINE_KEEP_MS
    resolved = qlfsm(
        "resolve", "--db", db, "--run", "run-1", "--to", "failed", "--reason", "bad receipt"
    )
    assert resolved.returncode == 0, resolved.stderr
    swept = qlfsm("sweep", "--db", db, "--receipt-root", root, "--json")
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout)["quarantine"]["copies_purged"] == 0
    assert (Path(root) / quarantine_ref("at-1")).exists()
    assert journal_rows(db_path)[0][1] == "quarantined"


@faketime
def test_faketime_30_years_ahead_sweep_purges_nothing_and_says_why(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    invalid_candidate(repo, store)
    reconcile_connection(conn, store, ProcProvider(), FakeClock(T0))
    resolve(
        conn, "run-1", "failed", "bad receipt", force=False, provider=ProcProvider(),
        clock=FakeClock(T0 + 1000), actor=operator_actor(None),
    )  # fmt: skip
    # T0 + 7 days is long past by the real clock: move the purge time into the real future.
    with contextlib.closing(sqlite3.connect(db_path)) as second, second:
        second.execute(
            'UPDATE "LocalCompletionReceiptJournal" SET purge_after_ms = '
            "CAST(strftime('%s', 'now') AS INTEGER) * 1000 + 3600000"
        )
    out = faked("+30y", "sweep", "--db", str(db_path), "--receipt-root", store.root, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["quarantine"]["copies_purged"] == 0
    assert "ahead of the kernel's clock" in one_line(out.stderr)
    assert (Path(store.root) / quarantine_ref("at-1")).exists()


# --- item: a receipt root or shard another user may write is refused -------------------------


def blocked_candidate(repo: Repository) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)  # would be made lost


COMMANDS: dict[str, Callable[[Path, str], list[str]]] = {
    "reconcile": lambda db, root: ["reconcile", "--db", str(db), "--receipt-root", root],
    "reconcile_dry_run": lambda db, root: [
        "reconcile",
        "--db",
        str(db),
        "--receipt-root",
        root,
        "--dry-run",
    ],
    "startup": lambda db, root: ["startup", "--db", str(db), "--receipt-root", root],
    "sweep": lambda db, root: ["sweep", "--db", str(db), "--receipt-root", root],
    "drain": lambda db, root: ["drain", "--db", str(db), "--receipt-root", root],
    "explain": lambda db, root: [
        "explain",
        "--db",
        str(db),
        "--run",
        "run-1",
        "--receipt-root",
        root,
    ],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o703])
def test_a_world_writable_root_is_refused_naming_the_chmod_that_fixes_it(
    repo: Repository,
    db_path: Path,
    store: FileReceiptStore,
    snapshot: Callable[[], Snapshot],
    command: str,
    mode: int,
) -> None:
    blocked_candidate(repo)
    os.chmod(store.root, mode)
    before = snapshot()
    out = qlfsm(*COMMANDS[command](db_path, store.root))
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    line = one_line(out.stderr)
    assert f"receipt root {store.root!r} (mode {mode:04o}, owner uid {os.geteuid()})" in line
    assert f"`chmod 0700 {store.root}`" in line and "writable by" in line
    assert snapshot() == before and journal_rows(db_path) == []
    assert os.listdir(store.root) == []
    assert status(repo, "run-1", "at-1") == ("running", "running")


def test_a_loose_root_is_refused_even_with_zero_candidates_and_a_trusted_one_costs_one_statement(
    db_path: Path, store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.chmod(store.root, 0o777)
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", store.root, "--json")
    assert out.returncode == 2 and "chmod 0700" in one_line(out.stderr)
    os.chmod(store.root, 0o700)
    statements: list[str] = []
    real_open = _reconcile.open_database

    def traced(db: str, **kw: Any) -> sqlite3.Connection:
        conn = real_open(db, **kw)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(_reconcile, "open_database", traced)
    summary = _reconcile.primary_pass(str(db_path), store.root, "edge")
    code = exit_code(summary)
    assert code == 0 and summary["safe"] is True and len(statements) == 1


@pytest.mark.parametrize("command", ["reconcile", "startup", "sweep"])
def test_a_shard_writable_by_others_is_refused_before_anything_is_written(
    repo: Repository,
    conn: Any,
    db_path: Path,
    store: FileReceiptStore,
    snapshot: Callable[[], Snapshot],
    command: str,
) -> None:
    blocked_candidate(repo)
    with transaction(conn):
        journal_register(conn, "at-1", "run-1", T0)
    shard = Path(store.root) / "at"
    shard.mkdir(mode=0o700)
    os.chmod(shard, 0o777)
    planted = receipt_file(store.root, "at-1")
    planted.write_bytes(b"{planted by someone else")
    before = snapshot()
    out = qlfsm(*COMMANDS[command](db_path, store.root))
    assert out.returncode == 2, out.stderr
    line = one_line(out.stderr)
    assert f"receipt shard {str(shard)!r} (mode 0777" in line and f"`chmod 0700 {shard}`" in line
    assert snapshot() == before
    assert journal_rows(db_path) == [("at-1", "pending", None, None)]
    assert planted.read_bytes() == b"{planted by someone else"
    assert not (Path(store.root) / ".quarantine").exists()


@contextmanager
def owned_by_nobody(path: str) -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root (chown to uid 65534)")
    os.chown(path, 65534, 65534)
    try:
        yield
    finally:
        os.chown(path, 0, 0)


@pytest.mark.parametrize("command", ["reconcile", "sweep"])
def test_a_root_owned_by_another_user_is_refused_naming_the_chown_that_fixes_it(
    repo: Repository,
    db_path: Path,
    store: FileReceiptStore,
    snapshot: Callable[[], Snapshot],
    command: str,
) -> None:
    blocked_candidate(repo)
    before = snapshot()
    with owned_by_nobody(store.root):
        out = qlfsm(*COMMANDS[command](db_path, store.root))
    assert out.returncode == 2, out.stderr
    line = one_line(out.stderr)
    assert "owner uid 65534" in line and "not by the user running qlfsm (uid 0)" in line
    assert f"`chown 0 {store.root}`" in line
    assert snapshot() == before


def test_a_root_owned_by_root_is_trusted_by_any_user_and_another_users_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs directories owned by root and by uid 65534")
    by_root, by_nobody = tmp_path / "by-root", tmp_path / "by-nobody"
    by_root.mkdir(mode=0o755)
    by_nobody.mkdir(mode=0o700)
    os.chown(by_nobody, 65534, 65534)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # qlfsm run by uid 1000
    assert check_root_dir(str(by_root)) is True
    with pytest.raises(ReceiptRootError, match=r"chown 1000 .*by-nobody"):
        check_root_dir(str(by_nobody))


def test_a_launch_into_a_loose_root_is_refused_and_runs_nothing(
    repo: Repository, db_path: Path, tmp_path: Path, snapshot: Callable[[], Snapshot]
) -> None:
    v = make_run(repo, "run-1", "queued")
    repo.create_attempt(run_id="run-1", attempt_id="at-1", expected_version=v, at_ms=T0)
    root = tmp_path / "receipts"
    root.mkdir()
    os.chmod(root, 0o777)
    marker = tmp_path / "the-command-ran"
    before = snapshot()
    out = qlfsm(
        "launch", "--db", str(db_path), "--receipt-root", str(root), "--run-id", "run-1",
        "--", "sh", "-c", f"touch {marker}",
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "chmod 0700" in one_line(out.stderr) and str(root) in out.stderr
    assert snapshot() == before and not marker.exists() and os.listdir(root) == []


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o777])
def test_the_launcher_and_the_wrapper_create_their_directories_0700_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    root = tmp_path / "deep" / "receipts"
    old = os.umask(umask)
    try:
        prepare_receipt_dirs(str(root), "at-1")
        # The wrapper's own publication creates a shard that is missing (an operator's cleanup).
        target = receipt_file(root, "bt-1")
        publish_bytes_at(str(target), str(target.parent / ".bt-1.tmp"), b"{}")
        store = FileReceiptStore(str(root))
        store.publish(receipt("run-1", "ct-1"))
    finally:
        os.umask(old)
    for path in (root, root / "at", root / "bt", root / "ct"):
        assert oct(path.stat().st_mode & 0o777) == oct(0o700), path
    assert check_root_dir(str(root)) is True


def test_a_real_launch_under_umask_000_leaves_a_root_and_shard_a_pass_trusts(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    v = make_run(repo, "run-1", "queued")
    repo.create_attempt(run_id="run-1", attempt_id="at-1", expected_version=v, at_ms=T0)
    root = tmp_path / "receipts"
    out = subprocess.run(
        [sys.executable, "-m", "reconciler", "launch", "--db", str(db_path), "--receipt-root",
         str(root), "--run-id", "run-1", "--wait", "--", "true"],
        capture_output=True, text=True, timeout=60, check=False, umask=0o000,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (root.stat().st_mode & 0o777, (root / "at").stat().st_mode & 0o777) == (0o700, 0o700)
    swept = qlfsm("sweep", "--db", str(db_path), "--receipt-root", str(root))
    assert swept.returncode == 0, swept.stderr


# --- item: a directory at a receipt path is one outcome everywhere ----------------------------


def test_a_directory_at_the_receipt_path_is_row_6_everywhere_with_nothing_written(
    repo: Repository, db_path: Path, store: FileReceiptStore, snapshot: Callable[[], Snapshot]
) -> None:
    blocked_candidate(repo)
    directory = receipt_file(store.root, "at-1")
    directory.mkdir(parents=True)
    (directory / "inside").write_bytes(b"keep me")
    reason = f"invalid_receipt:directory:{directory}"
    db, root = str(db_path), store.root
    before = snapshot()
    dry = qlfsm("reconcile", "--db", db, "--receipt-root", root, "--dry-run", "--json")
    real = qlfsm("reconcile", "--db", db, "--receipt-root", root, "--json")
    human = qlfsm("reconcile", "--db", db, "--receipt-root", root)
    explained = qlfsm("explain", "--db", db, "--run", "run-1", "--receipt-root", root, "--json")
    explained_human = qlfsm("explain", "--db", db, "--run", "run-1", "--receipt-root", root)
    for out in (dry, real, human):
        assert out.returncode == 3, out.stderr
    for out in (dry, real):
        entry = only(json.loads(out.stdout))
        assert (entry["row"], entry["outcome"], entry["reason"]) == ("6", "unresolved", reason)
    now = json.loads(explained.stdout)["now"]
    assert (now["row"], now["outcome"], now["reason"]) == ("6", "unresolved", reason)
    fix = f"remove the directory at {directory}: a receipt is a file"
    # Once, wrapped between words at 100 columns like every line of the report (D-22).
    assert " ".join(human.stdout.split()).count(f"{fix} (look inside it first)") == 1
    assert max(len(line) for line in human.stdout.splitlines()) <= 100, human.stdout
    assert fix in explained_human.stdout
    assert snapshot() == before and journal_rows(db_path) == []
    assert (directory / "inside").read_bytes() == b"keep me"
    assert not (Path(root) / ".quarantine").exists()
    # Removed, the next pass decides on the evidence as usual.
    shutil.rmtree(directory)
    fixed = qlfsm("reconcile", "--db", db, "--receipt-root", root, "--json")
    assert fixed.returncode == 0 and only(json.loads(fixed.stdout))["row"] == "13"


def test_a_sweep_meeting_a_directory_at_a_receipt_path_names_it_and_keeps_its_row(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    blocked_candidate(repo)
    with transaction(conn):
        journal_register(conn, "at-1", "run-1", T0)
    assert (
        only(reconcile_connection(conn, store, ProcProvider(), FakeClock()))["row"] == "13"
    )  # lost
    directory = receipt_file(store.root, "at-1")
    directory.mkdir(parents=True)
    out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", store.root)
    assert out.returncode == 1, out.stderr
    assert "IsADirectoryError" not in out.stdout + out.stderr
    [not_cleaned] = [line for line in out.stdout.splitlines() if "not cleaned" in line]
    assert f"remove the directory at {str(directory)!r}" in not_cleaned
    assert directory.is_dir() and journal_rows(db_path) == [("at-1", "pending", None, None)]


# --- item: a journal row whose Attempt id is no path is named once and skipped ---------------


def test_a_journal_row_whose_attempt_id_is_no_path_is_named_once_skipped_and_exit_0(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    make_run(repo, "run-1", "dispatching")
    hostile = "../\x1b[31mescape"
    # Written by someone else, with foreign keys off.
    with contextlib.closing(sqlite3.connect(db_path)) as other, other:
        other.execute("PRAGMA foreign_keys = OFF")
        other.execute(
            'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
            "registered_at_ms, updated_at_ms) VALUES (?, 'run-1', 'pending', ?, ?)",
            (hostile, T0, T0),
        )
        other.execute(
            'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
            "quarantine_ref, purge_after_ms, registered_at_ms, updated_at_ms) "
            "VALUES (?, 'run-1', 'quarantined', '.quarantine/x/y.json', ?, ?, ?)",
            ("/etc/passwd", T0, T0, T0),
        )
    outside = Path(store.root).parent / "escape"
    for _ in range(2):  # every pass: the same, never an exit 1
        out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", store.root)
        assert out.returncode == 0, out.stderr
        lines = out.stderr.splitlines()
        assert len(lines) == 2 and all(line.startswith("qlfsm: warning: ") for line in lines)
        assert "\x1b" not in out.stderr and "\\x1b[31mescape" in lines[0]
        assert "'/etc/passwd'" in lines[1] and "skipped, nothing touched" in lines[1]
        assert "could not be cleaned" not in out.stdout
    data = json.loads(qlfsm("sweep", "--db", str(db_path), "--receipt-root", store.root,
                            "--json").stdout)  # fmt: skip
    assert len(data["warnings"]) == 2 and data["errors"] == []
    assert len(journal_rows(db_path)) == 2 and not outside.exists()
    assert Path("/etc/passwd").exists()
    with contextlib.closing(sqlite3.connect(db_path)) as second:
        assert journal_get(second, "/etc/passwd") is not None


def test_a_loose_root_whose_name_holds_a_line_break_names_a_fix_bash_reads_back_as_that_path(
    tmp_path: Path,
) -> None:
    # One shell-word rule (reconciler._escape, D-14): a path a terminal would act on is quoted
    # as bash's $'...', so the one-line error keeps a fix that can be pasted as it is.
    root = tmp_path / "receipts\nverdict: safe"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(ReceiptRootError) as caught:
        check_root_dir(str(root))
    message = str(caught.value)
    assert "\n" not in message
    fix = message.split("`chmod 0700 ", 1)[1].split("`", 1)[0]
    assert fix.startswith("$'")
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    out = subprocess.run([bash, "-c", f"printf '%s' {fix}"], capture_output=True, check=True)
    assert out.stdout == os.fsencode(str(root))
