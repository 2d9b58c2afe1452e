"""`qlfsm launch` (spec 03 "Launcher") with real processes, then the ADR-0068 pass on them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    NOT_A_DIRECTORY,
    T0,
    ForbiddenProvider,
    linux_only,
    make_run,
    other_connection,
    plant_not_a_directory,
    qlfsm,
)
from conftest import Snapshot

from reconciler.launcher import LaunchFailed, LaunchRefused, launch
from reconciler.node import (
    FakeClock,
    FileReceiptStore,
    Found,
    ProcProvider,
    decode_receipt,
    inspect_handle,
    parse_handle,
)
from reconciler.primary import reconcile_connection
from storage import Repository, journal_get, journal_register

pytestmark = linux_only
LAUNCHER = ("executor", "local-launcher")


def prepared(repo: Repository, run_id: str = "run-1", attempt_id: str = "at-1", **kw: Any) -> None:
    """spec 03: a runtime Run queued (or dispatching) with exactly one claimed Attempt."""
    v = make_run(repo, run_id, kw.pop("status", "queued"))
    repo.create_attempt(run_id=run_id, attempt_id=attempt_id, expected_version=v, at_ms=T0, **kw)


def stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while inspect_handle_pid_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} did not exit"
        time.sleep(0.01)


def inspect_handle_pid_alive(pid: int) -> bool:
    text = ProcProvider().read_stat(pid)
    return text is not None and ") Z " not in text


def launch_run_1(db_path: Path, root: Path | str, *rest: str) -> subprocess.CompletedProcess[str]:
    """`qlfsm launch` of `run-1` on ``db_path``, receipts under ``root``, then ``rest``."""
    return qlfsm(
        "launch", "--db", str(db_path), "--receipt-root", str(root), "--run-id", "run-1", *rest
    )


def test_a_launch_records_the_running_process_in_two_transactions(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    prepared(repo)
    before = max(e.sequence for e in repo.events_of("run-1"))
    launched = launch(conn, str(tmp_path / "r"), "run-1", ["sleep", "60"])
    try:
        run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
        assert run is not None and att is not None
        assert (run.status, att.status) == ("running", "running")
        assert att.pid == launched.pid and att.executor_handle == launched.handle
        assert att.started_at_ms == launched.started_at_ms == run.started_at_ms
        assert att.callback_token_hash is not None
        assert re.fullmatch(r"[0-9a-f]{64}", att.callback_token_hash)
        events = [(e.type, e.actor_type, e.actor_id) for e in repo.events_of("run-1")[before:]]
        assert events == [
            ("run.dispatching", *LAUNCHER),
            ("attempt.starting", *LAUNCHER),
            ("attempt.running", *LAUNCHER),
            ("run.running", *LAUNCHER),
        ]
        journal = journal_get(conn, "at-1")
        assert journal is not None and journal.state == "pending"
        handle = parse_handle(launched.handle)
        assert handle is not None and handle.pgid == launched.pid  # its own process group
        assert os.getsid(launched.pid) == launched.pid  # and its own session
        assert inspect_handle(launched.handle, ProcProvider()).verdict == "running"
    finally:
        stop(launched.pid)
        launched.process.wait()


def test_the_command_publishes_a_trusted_receipt_and_never_sees_the_capability(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    prepared(repo, status="dispatching")
    out = tmp_path / "env.txt"
    user_env = {**os.environ, "QL3_RECEIPT_TOKEN": "planted", "QL3_LAUNCH_SHELL": "x", "KEEP": "1"}
    launched = launch(
        conn, str(tmp_path / "r"), "run-1", ["sh", "-c", f"env > {out}; exit 0"], env=user_env
    )
    assert launched.process.wait(timeout=30) == 0
    seen = out.read_text()
    assert "KEEP=1" in seen and "QL3_" not in seen
    store = FileReceiptStore(str(tmp_path / "r"))
    found = store.read("at-1")
    assert isinstance(found, Found) and found.receipt.exit_code == 0
    types = [e.type for e in repo.events_of("run-1")]
    assert types.count("run.dispatching") == 1  # it was already dispatching: no second one
    summary = reconcile_connection(conn, store, ForbiddenProvider(), FakeClock())
    assert summary["recovered"] == 1 and summary["candidates"][0]["row"] == "5"
    assert repo.get_run("run-1").status == "succeeded"  # type: ignore[union-attr]
    assert journal_get(conn, "at-1") is None
    assert not (tmp_path / "r" / "at" / "at-1.json").exists()


def test_the_launched_command_survives_the_launcher_and_is_retained(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    prepared(repo)
    root = str(tmp_path / "r")
    out = launch_run_1(db_path, root, "--json", "--", "sleep", "60")
    assert out.returncode == 0, out.stderr
    pid = json.loads(out.stdout)["pid"]
    try:
        att = repo.get_attempt("at-1")
        assert att is not None and att.pid == pid
        assert inspect_handle(att.executor_handle, ProcProvider()).verdict == "running"
        rec = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", root, "--json")
        assert rec.returncode == 0, rec.stderr
        assert json.loads(rec.stdout)["remaining"] == 1
    finally:
        stop(pid)
    wait_gone(pid)
    rec = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", root, "--json")
    entry = json.loads(rec.stdout)["candidates"][0]
    # SIGKILL to the whole group: the wrapper never published, so the grace decides.
    assert (entry["row"], entry["outcome"]) == ("13", "recovered")
    assert repo.get_run("run-1").status == "lost"  # type: ignore[union-attr]


def test_wait_exits_with_the_commands_code_and_the_receipt_carries_it(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    prepared(repo)
    root = tmp_path / "r"
    out = launch_run_1(db_path, root, "--wait", "--", "sh", "-c", "exit 7")
    assert out.returncode == 7, out.stderr
    data = (root / "at" / "at-1.json").read_bytes()
    assert decode_receipt(data).exit_code == 7
    assert b"tok" not in out.stdout.encode() and decode_receipt(data).token not in out.stdout


@pytest.mark.parametrize("problem", ["running", "two_attempts", "no_attempt", "docker"])
def test_a_run_that_is_not_prepared_is_refused_and_left_alone(
    repo: Repository, conn: Any, tmp_path: Path, problem: str
) -> None:
    if problem == "running":
        prepared(repo)
        v = repo.get_run("run-1").version  # type: ignore[union-attr]
        from storage import Actor, RunChange

        repo.advance("run-1", v, [RunChange("dispatch")], actor=Actor("system"), at_ms=T0)
        v += 1
        repo.advance("run-1", v, [RunChange("start")], actor=Actor("system"), at_ms=T0)
    elif problem == "two_attempts":
        prepared(repo)
        v = repo.get_run("run-1").version  # type: ignore[union-attr]
        repo.create_attempt(run_id="run-1", attempt_id="at-2", expected_version=v, at_ms=T0)
    elif problem == "no_attempt":
        make_run(repo, "run-1", "queued")
    else:
        prepared(repo, executor_type="docker")
    events = len(repo.events_of("run-1"))
    with pytest.raises(LaunchRefused):
        launch(conn, str(tmp_path / "r"), "run-1", ["true"])
    assert len(repo.events_of("run-1")) == events
    assert not (tmp_path / "r").exists()


def test_the_cli_refuses_an_unprepared_run_with_exit_2(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_run(repo, "run-1", "queued")
    out = launch_run_1(db_path, tmp_path / "r", "--", "true")
    assert out.returncode == 2 and "claimed attempt" in out.stderr


def test_a_launch_whose_identity_cannot_be_captured_stops_the_group_and_fails_the_run(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    prepared(repo)
    with pytest.raises(LaunchFailed):
        launch(conn, str(tmp_path / "r"), "run-1", ["sleep", "60"], provider=ForbiddenProvider())
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    assert (run.status, att.status) == ("failed", "failed")
    assert att.error_code == "LAUNCH_CAPTURE_FAILED" and att.executor_handle is None
    assert not (tmp_path / "r" / "at" / "at-1.json").exists()  # killed: nothing published
    assert journal_get(conn, "at-1") is None


def test_the_commands_output_goes_to_the_log_file(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    prepared(repo)
    log = tmp_path / "out.log"
    out = launch_run_1(
        db_path, tmp_path / "r", "--log", str(log), "--wait",
        "--", "sh", "-c", "echo hello; echo oops >&2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert log.read_text().split() == ["hello", "oops"]


def test_a_bad_receipt_root_is_refused_before_the_database_is_touched(
    repo: Repository, db_path: Path
) -> None:
    prepared(repo)
    events = len(repo.events_of("run-1"))
    out = launch_run_1(db_path, "rel", "--", "true")
    assert out.returncode == 2 and "relative" in out.stderr
    assert len(repo.events_of("run-1")) == events


# --- a launch that cannot be prepared leaves nothing behind; one that fails after its first
# --- commit leaves nothing that blocks (D-3b) -----------------------------------------------------


def reconcile_and_startup_are_not_blocked(db_path: Path, root: Path) -> None:
    """What matters after a failed launch: the next start-up is safe (exit 0)."""
    for command in ("reconcile", "startup"):
        out = qlfsm(command, "--db", str(db_path), "--receipt-root", str(root), "--json")
        assert out.returncode == 0, f"{command}: {out.stderr}"
        verdict = json.loads(out.stdout)
        assert verdict["safe"] is True, verdict


@pytest.mark.parametrize("kind", NOT_A_DIRECTORY)
def test_a_receipt_root_that_is_not_a_directory_refuses_the_launch_before_any_write(
    repo: Repository,
    db_path: Path,
    tmp_path: Path,
    snapshot: Callable[[], Snapshot],
    kind: str,
) -> None:
    prepared(repo)
    root = tmp_path / "r"
    plant_not_a_directory(root, kind)
    marker = tmp_path / "the-command-ran"
    before = snapshot()
    out = launch_run_1(db_path, root, "--", "sh", "-c", f"touch {marker}")
    assert out.returncode == 2, out.stderr
    assert str(root) in out.stderr and "not a directory" in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr and out.stdout == ""
    assert snapshot() == before  # Run queued, Attempt claimed, no event, no journal row
    assert not marker.exists()
    good = tmp_path / "good"
    reconcile_and_startup_are_not_blocked(db_path, good)
    # Fixed, the same Run launches (it was never touched).
    again = launch_run_1(db_path, good, "--wait", "--", "true")
    assert again.returncode == 0, again.stderr
    reconcile_and_startup_are_not_blocked(db_path, good)
    assert repo.get_run("run-1").status == "succeeded"  # type: ignore[union-attr]


@contextlib.contextmanager
def unwritable_parent(tmp_path: Path, how: str) -> Iterator[Path]:
    """A receipt root whose parent cannot take a new directory, in a way that holds for root
    too (root ignores permission bits): the parent is a regular file, the parent is immutable
    (`chattr +i`; for another user plain mode 0500), or the parent is inside /proc."""
    if how == "parent_is_a_file":
        parent = tmp_path / "parent"
        parent.write_bytes(b"")
        yield parent / "r"
    elif how == "read_only_parent":
        parent = tmp_path / "parent"
        parent.mkdir()
        if os.geteuid() != 0:
            parent.chmod(0o500)
            undo = ["chmod", "700", str(parent)]
        else:
            chattr = shutil.which("chattr")
            made = chattr and subprocess.run([chattr, "+i", str(parent)], check=False)
            if not made or made.returncode != 0:
                pytest.skip("chattr +i is not available on this filesystem (root ignores 0500)")
            undo = [str(chattr), "-i", str(parent)]
        try:
            yield parent / "r"
        finally:
            subprocess.run(undo, check=True)
    else:
        yield Path(f"/proc/qlfsm-no-such-dir-{os.getpid()}/r")


@pytest.mark.parametrize("how", ["parent_is_a_file", "read_only_parent", "parent_in_proc"])
def test_a_receipt_root_that_cannot_be_created_refuses_the_launch_before_any_write(
    repo: Repository,
    db_path: Path,
    tmp_path: Path,
    snapshot: Callable[[], Snapshot],
    how: str,
) -> None:
    prepared(repo)
    marker = tmp_path / "the-command-ran"
    before = snapshot()
    with unwritable_parent(tmp_path, how) as root:
        out = launch_run_1(db_path, root, "--", "sh", "-c", f"touch {marker}")
        assert not root.exists()
    assert out.returncode == 2, out.stderr
    assert f"cannot create receipt root {str(root)!r}" in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert snapshot() == before
    assert not marker.exists()
    reconcile_and_startup_are_not_blocked(db_path, tmp_path / "good")


def test_a_stray_shard_or_a_file_at_the_receipt_path_refuses_the_launch(
    repo: Repository, db_path: Path, tmp_path: Path, snapshot: Callable[[], Snapshot]
) -> None:
    prepared(repo)
    root = tmp_path / "r"
    root.mkdir()
    (root / "at").write_bytes(b"stray")
    before = snapshot()
    out = launch_run_1(db_path, root, "--", "true")
    assert out.returncode == 2 and "receipt shard" in out.stderr, out.stderr
    (root / "at").unlink()
    (root / "at").mkdir()
    (root / "at" / "at-1.json").write_bytes(b"left over")
    out = launch_run_1(db_path, root, "--", "true")
    assert out.returncode == 2 and "already stands at the receipt path" in out.stderr
    assert snapshot() == before
    assert (root / "at" / "at-1.json").read_bytes() == b"left over"  # evidence kept


def test_a_failure_after_the_first_commit_and_before_the_spawn_marks_the_launch_failed(
    repo: Repository, conn: Any, db_path: Path, tmp_path: Path
) -> None:
    prepared(repo)
    before = max(e.sequence for e in repo.events_of("run-1"))
    marker = tmp_path / "the-command-ran"
    # The real Popen refuses an environment value holding a NUL byte: a failure that comes
    # after transaction 1 committed and before any process exists.
    broken_env = {**os.environ, "QLFSM_TEST_BROKEN": "a\0b"}
    with pytest.raises(LaunchFailed, match="marked failed"):
        launch(conn, str(tmp_path / "r"), "run-1", ["touch", str(marker)], env=broken_env)
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    assert (run.status, att.status) == ("failed", "failed")
    assert (att.error_code, run.error_code) == ("LAUNCH_SPAWN_FAILED", "LAUNCH_SPAWN_FAILED")
    assert att.executor_handle is None and att.pid is None
    events = [(e.type, e.actor_type, e.actor_id) for e in repo.events_of("run-1")[before:]]
    assert events == [
        ("run.dispatching", *LAUNCHER),
        ("attempt.starting", *LAUNCHER),
        ("attempt.failed", *LAUNCHER),
        ("run.failed", *LAUNCHER),
    ]
    assert journal_get(conn, "at-1") is None
    assert not marker.exists()
    reconcile_and_startup_are_not_blocked(db_path, tmp_path / "r")


# --- parity with QingLong's launcher -------------------------------------------------------------


def test_a_journal_row_registered_at_another_time_refuses_the_launch_before_spawning(
    repo: Repository,
    conn: Any,
    db_path: Path,
    tmp_path: Path,
    snapshot: Callable[[], Snapshot],
) -> None:
    prepared(repo)
    journal_register(conn, "at-1", "run-1", T0 - 5)  # someone registered this Attempt before
    marker = tmp_path / "the-command-ran"
    before = snapshot()
    out = launch_run_1(db_path, tmp_path / "r", "--", "sh", "-c", f"touch {marker}")
    assert out.returncode == 2, out.stderr
    assert "registration conflicts" in out.stderr and out.stderr.count("\n") == 1
    assert snapshot() == before and not marker.exists()
    assert not (tmp_path / "r").exists()


def test_a_journal_row_that_appears_during_the_launch_rolls_transaction_1_back(
    repo: Repository,
    conn: Any,
    db_path: Path,
    tmp_path: Path,
    snapshot: Callable[[], Snapshot],
) -> None:
    prepared(repo)
    other = other_connection(db_path)

    class RacingClock(FakeClock):
        """Another writer registers the Attempt right when the launcher takes its time."""

        def now_ms(self) -> int:
            other.execute(
                'INSERT OR IGNORE INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, '
                "state, registered_at_ms, updated_at_ms) VALUES ('at-1', 'run-1', 'pending', "
                "1, 1)"
            )
            return super().now_ms()

    try:
        with pytest.raises(LaunchRefused, match="registration conflicts"):
            launch(conn, str(tmp_path / "r"), "run-1", ["true"], clock=RacingClock(T0 + 50))
        after = snapshot()
    finally:
        other.close()
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    assert (run.status, att.status) == ("queued", "claimed")  # transaction 1 rolled back
    assert after["LocalCompletionReceiptJournal"] == [
        ("at-1", "run-1", "pending", None, None, 1, 1)
    ]


def test_the_registration_the_attempts_start_and_the_receipt_share_one_timestamp(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    prepared(repo)
    launched = launch(conn, str(tmp_path / "r"), "run-1", ["true"])
    assert launched.process.wait(timeout=30) == 0
    journal = journal_get(conn, "at-1")
    att, run = repo.get_attempt("at-1"), repo.get_run("run-1")
    found = FileReceiptStore(str(tmp_path / "r")).read("at-1")
    assert journal is not None and att is not None and run is not None
    assert isinstance(found, Found)
    assert (
        journal.registered_at_ms
        == att.started_at_ms
        == run.started_at_ms
        == found.receipt.started_at_ms
        == launched.started_at_ms
    )
