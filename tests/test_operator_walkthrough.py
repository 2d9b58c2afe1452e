"""The operator's loop on a blocked start-up — `startup` → `explain` → `resolve` → `startup` —
on spec 04 rows 10, 11 and 12 with real processes and /proc, `resolve --dry-run`, and
`launch --create` (docs/decisions.md D-23). Real SQLite files read back through another
connection or process, real receipts, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _primary_support import linux_only, make_candidate, other_connection, qlfsm
from _support import tree_digest
from test_cli_schemas import validate

from reconciler.node import ProcProvider, capture_handle
from storage import Repository


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    env["USER"] = "alice"
    return env


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return qlfsm(*args, env=_env())


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "120"], start_new_session=True)


@linux_only
def test_the_blocked_walk_through_on_rows_10_11_12_shows_the_evidence_and_names_the_probed_pid(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    job, other = _sleeper(), _sleeper()
    try:
        job_handle = capture_handle(job.pid, ProcProvider())
        other_handle = capture_handle(other.pid, ProcProvider())
        # row 10: a handle that does not parse; row 11: the job's real handle, but
        # RunAttempts.pid names ANOTHER live process (the trap: `kill <RunAttempts.pid>` would
        # hit the wrong job); row 12: a live job, kept running.
        make_candidate(repo, "run-10", "at-10", handle="ql3lp1.garbage", pid=job.pid)
        make_candidate(repo, "run-11", "at-11", handle=job_handle, pid=other.pid)
        make_candidate(repo, "run-12", "at-12", handle=other_handle, pid=other.pid)
        db, rr = str(db_path), str(root)

        first = cli("startup", "--db", db, "--receipt-root", rr)
        assert first.returncode == 3, first.stderr
        assert "run-10" in first.stdout and "run-11" in first.stdout

        explained = cli("explain", "--db", db, "--run", "run-11", "--receipt-root", rr)
        assert explained.returncode == 0, explained.stderr
        text = explained.stdout
        assert "row 11 -> unresolved (handle_pid_mismatch)" in text
        assert f"handle pid {job.pid}, process group {job.pid}" in text
        assert "boot id: this boot's (same)" in text
        assert "(the handle's group and ticks)" in text and "ALIVE" in text
        assert f"RunAttempts.pid {other.pid}: differs from the handle's pid" in text
        assert f"do not signal pid {other.pid}" in text
        assert f"kill -TERM -- -{job.pid}" in text
        assert f"kill -TERM -- -{other.pid}" not in text
        assert "--run run-11 --to lost|failed|cancelled" in text
        for secret in ("sleep", "/proc/self", "environ", "cwd"):
            assert secret not in text  # no command line, environment or cwd
        data = validate(
            "explain",
            cli("explain", "--db", db, "--run", "run-11", "--receipt-root", rr, "--json").stdout,
        )
        [view] = data["processes"]
        assert view["handle"]["pid"] == view["handle"]["pgid"] == job.pid
        assert view["recorded_pid"] == other.pid and view["pid_matches"] is False
        assert view["alive"] is True and view["now"]["pgid"] == job.pid
        assert data["decide"] == {
            "blocks": True,
            "targets": ["lost", "failed", "cancelled"],
            "command": f"qlfsm resolve --db {db} --run run-11 --to lost|failed|cancelled "
            "--reason '…'",
            "stop": f"kill -TERM -- -{job.pid}",
        }

        row10 = cli("explain", "--db", db, "--run", "run-10", "--receipt-root", rr).stdout
        assert "row 10 -> unresolved (invalid_handle)" in row10
        assert "its handle is invalid" in row10 and f"do not signal pid {job.pid}" in row10
        assert "kill -TERM" not in row10

        row12 = cli("explain", "--db", db, "--run", "run-12", "--receipt-root", rr).stdout
        assert "row 12 -> remaining" in row12 and "nothing to decide" in row12
        assert f"kill -TERM -- -{other.pid}" in row12

        refused = cli("resolve", "--db", db, "--run", "run-11", "--to", "lost", "--reason", "x")
        assert refused.returncode == 2
        assert refused.stderr.startswith("qlfsm: error: resolve refused: ")
        assert refused.stderr.count("qlfsm") == 3  # the prefix and two suggested commands
        assert f"pid {job.pid}, process group {job.pid}" in refused.stderr
        assert f"kill -TERM -- -{job.pid}" in refused.stderr
        assert str(other.pid) not in refused.stderr  # RunAttempts.pid is never the one named

        forced = cli(
            "resolve", "--db", db, "--run", "run-11", "--to", "failed", "--reason", "x", "--force"
        )
        assert forced.returncode == 0, forced.stderr
        assert (
            f"its process (pid {job.pid}, process group {job.pid}) is still running: qlfsm "
            f"did not stop it; stop it with `kill -TERM -- -{job.pid}`"
        ) in forced.stdout
        assert job.poll() is None and other.poll() is None  # qlfsm signalled nothing

        done = cli("resolve", "--db", db, "--run", "run-10", "--to", "lost", "--reason", "bad")
        assert done.returncode == 0, done.stderr
        again = cli("startup", "--db", db, "--receipt-root", rr)
        assert again.returncode == 0, again.stdout + again.stderr
        check = other_connection(db_path)
        statuses = dict(check.execute("SELECT id, status FROM Runs").fetchall())
        check.close()
        assert statuses == {"run-10": "lost", "run-11": "failed", "run-12": "running"}
    finally:
        for p in (job, other):
            p.kill()
            p.wait()


@linux_only
def test_resolve_dry_run_prints_what_it_would_write_and_leaves_every_byte_as_it_was(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    job = _sleeper()
    try:
        handle = capture_handle(job.pid, ProcProvider())
        version = make_candidate(repo, "run-1", "at-1", handle=handle, pid=job.pid)
    finally:
        job.kill()
        job.wait()
    before = tree_digest(db_path, empty_log_is_none=True)
    args = ("resolve", "--db", str(db_path), "--run", "run-1", "--to", "lost", "--reason", "gone")
    out = cli(*args, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("would resolve: run run-1 running -> lost")
    assert "dry run: nothing was written" in out.stdout
    assert "attempt at-1: running -> lost, event attempt.lost" in out.stdout
    assert "run run-1: running -> lost, event run.lost" in out.stdout
    data = validate("resolve", cli(*args, "--dry-run", "--json").stdout)
    assert data["dry_run"] is True and data["events"] == []
    assert [w["event"] for w in data["writes"]] == ["attempt.lost", "run.lost"]
    assert data["version"] == version + 2
    assert tree_digest(db_path, empty_log_is_none=True) == before
    assert [e.sequence for e in repo.events_of("run-1")][-1] == version
    # The real decision then writes exactly what the dry run said.
    real = validate("resolve", cli(*args, "--json").stdout)
    assert real["writes"] == data["writes"] and real["version"] == data["version"]
    assert [e.type for e in repo.events_of("run-1")][-2:] == ["attempt.lost", "run.lost"]


@linux_only
def test_launch_create_makes_the_run_as_the_scheduler_does_and_a_later_reconcile_completes_it(
    db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "receipts"
    marker = tmp_path / "ran"
    db, rr = str(db_path), str(root)
    missing = cli("launch", "--db", db, "--receipt-root", rr, "--run-id", "new-1", "--", "true")
    assert missing.returncode == 2 and "add --create" in missing.stderr
    out = cli(
        "launch", "--db", db, "--receipt-root", rr, "--run-id", "new-1", "--create",
        "--attempt-id", "att-1", "--wait", "--", sys.executable, "-c",
        f"open({str(marker)!r}, 'w').write('yes')",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("launched run new-1 attempt att-1 pid ")
    assert marker.read_text() == "yes"  # the process ran
    assert (root / "at" / "att-1.json").is_file()  # its receipt landed (spec 03 layout)
    check = other_connection(db_path)
    events = check.execute(
        "SELECT sequence, type, actor_type, actor_id, dedupe_key, payload, attempt_id "
        "FROM RunEvents WHERE run_id = 'new-1' ORDER BY sequence"
    ).fetchall()
    attempt = check.execute(
        "SELECT attempt, executor_type, callback_sequence FROM RunAttempts WHERE id = 'att-1'"
    ).fetchone()
    check.close()
    # QingLong's PrimaryRunCreator: run.created and run.queued, by the user who asked; the
    # claimed Attempt 1 has no event of its own; then the launcher's four edges.
    assert events[0][:5] == (
        1,
        "run.created",
        "user",
        "operator:alice",
        "primary-run-created:new-1",
    )
    assert json.loads(events[0][5]) == {
        "status": "created", "version": 1, "execution_owner": "runtime"
    }  # fmt: skip
    assert events[1][:5] == (2, "run.queued", "user", "operator:alice", "primary-run-queued:new-1")
    assert [e[1] for e in events[2:]] == [
        "run.dispatching", "attempt.starting", "attempt.running", "run.running"
    ]  # fmt: skip
    assert attempt == (1, "local_process", 0)
    rec = cli("reconcile", "--db", db, "--receipt-root", rr, "--json")
    assert rec.returncode == 0, rec.stdout + rec.stderr
    [cand] = json.loads(rec.stdout)["candidates"]
    assert (cand["run_id"], cand["row"], cand["outcome"]) == ("new-1", "5", "recovered")
    before = tree_digest(db_path, root)
    again = cli("launch", "--db", db, "--receipt-root", rr, "--run-id", "new-1", "--create",
                "--", "true")  # fmt: skip
    assert again.returncode == 2 and "new-1 already exists" in again.stderr
    assert "nothing was written" in again.stderr
    assert tree_digest(db_path, root) == before


def test_launch_create_refuses_an_existing_run_id_writing_nothing(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    root = tmp_path / "receipts"
    before = tree_digest(db_path, root)
    out = cli("launch", "--db", str(db_path), "--receipt-root", str(root), "--run-id", "run-1",
              "--create", "--", "true")  # fmt: skip
    assert out.returncode == 2
    assert out.stderr == (
        "qlfsm: error: --create: run run-1 already exists; choose a new run id; nothing was "
        "written\n"
    )
    assert tree_digest(db_path, root) == before and not root.exists()
