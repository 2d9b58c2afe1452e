"""`qlfsm reconcile` and `primary_pass`: exit codes, JSON, configuration errors (spec 06)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    dead_handle,
    insert_bare_runs,
    linux_only,
    make_candidate,
    qlfsm,
    sleepers,
)

from reconciler import FatalError, UsageError
from reconciler import _reconcile as _primary_cli
from reconciler._reconcile import check_receipt_root, primary_pass
from reconciler.cli._reconcile import exit_code
from reconciler.node import ReceiptRootError, validate_receipt_root
from storage import PRIMARY_CANDIDATES_SQL, Repository


def test_the_fast_path_runs_the_repositorys_candidate_statement(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements = trace_fast_path(monkeypatch)
    primary_pass(str(db_path), str(tmp_path / "r"), "edge")
    assert statements == [PRIMARY_CANDIDATES_SQL.replace("?", "257")]


def trace_fast_path(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    statements: list[str] = []
    real_open = _primary_cli.open_database

    def traced_open(db: str) -> sqlite3.Connection:
        conn = real_open(db)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(_primary_cli, "open_database", traced_open)
    return statements


@pytest.mark.parametrize(
    "root",
    ["", "relative/dir", "/", "//", "/a/../", "/ok/dir", "/ok//dir/", "/x\0y", "/" + "a" * 5000],
)
def test_the_fast_root_check_agrees_with_the_receipt_store(root: str) -> None:
    try:
        expected: str | None = validate_receipt_root(root)
    except ReceiptRootError:
        expected = None
    try:
        got: str | None = check_receipt_root(root)
    except UsageError:
        got = None
    assert got == expected


def test_zero_candidates_exit_0_with_one_json_object_and_one_statement(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements = trace_fast_path(monkeypatch)
    summary = primary_pass(str(db_path), str(tmp_path / "missing-root"), "edge")
    code = exit_code(summary)
    assert code == 0 and summary["safe"] is True and len(statements) == 1
    assert not (tmp_path / "missing-root").exists()
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", "/nonexistent/r", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["safe"] is True
    assert out.stdout.count("\n") == 1


@linux_only
def test_an_unresolved_candidate_blocks_with_exit_3(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.bad", pid=3)
    root = tmp_path / "r"
    root.mkdir()  # the launcher made it before the spawn
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert out.returncode == 3, out.stderr
    summary = json.loads(out.stdout)
    assert summary["unresolved"] == 1 and summary["candidates"][0]["row"] == "10"


@linux_only
def test_the_cli_recovers_a_dead_process_and_keeps_a_live_one(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    (tmp_path / "r").mkdir()  # the launcher made it before the spawns
    with sleepers() as [s]:
        make_candidate(repo, "run-2", "at-2", handle=s.handle, pid=s.pid)
        out = qlfsm(
            "reconcile",
            "--db",
            str(db_path),
            "--receipt-root",
            str(tmp_path / "r"),
            "--profile",
            "edge",
        )
    assert out.returncode == 0, out.stderr
    assert "SAFE to start" in out.stdout
    assert "process_not_running:pid_absent" in out.stdout and "process_running" in out.stdout


def test_a_truncated_page_blocks_with_exit_3_and_never_creates_the_root(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    insert_bare_runs(repo.conn, 257)
    summary = primary_pass(str(db_path), str(tmp_path / "r"), "standalone")
    code = exit_code(summary)
    assert code == 3 and summary["truncated"] is True and summary["safe"] is False
    assert not (tmp_path / "r").exists()
    # Observed, not decided: QingLong reports the 256 too; the four counts stay 0.
    assert summary["scanned"] == 256
    assert [summary[k] for k in ("recovered", "remaining", "unresolved", "failed")] == [0] * 4
    root = str(tmp_path / "r")
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", root, "--json")
    assert out.returncode == 3 and json.loads(out.stdout)["scanned"] == 256
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", root)
    assert out.stdout.startswith("scanned 256: recovered 0") and "truncated at 256" in out.stdout


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--receipt-root", "relative"], 2, "relative"),
        (["--receipt-root", "/"], 2, "'/'"),
        (["--receipt-root", "/r", "--profile", "worker"], 2, "cluster"),
        (["--receipt-root", "/r", "--profile", "cluster-control"], 2, "cluster"),
        (["--receipt-root", "/r", "--profile", "bogus"], 2, "unknown profile"),
        (["--receipt-root", "/r", "--bogus"], 2, "unrecognized"),
    ],
)
def test_configuration_errors_exit_2_with_one_line(
    db_path: Path, args: list[str], code: int, says: str
) -> None:
    out = qlfsm("reconcile", "--db", str(db_path), *args)
    assert out.returncode == code
    assert says in out.stderr and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stdout == ""


def test_a_cluster_profile_from_the_environment_is_refused(db_path: Path) -> None:
    env = {**os.environ, "QL_DEPLOYMENT_PROFILE": "worker"}
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", "/r", env=env)
    assert out.returncode == 2 and "cluster" in out.stderr


def test_an_empty_profile_variable_means_standalone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QL_DEPLOYMENT_PROFILE", "")
    assert _primary_cli.default_profile() == "standalone"
    monkeypatch.delenv("QL_DEPLOYMENT_PROFILE")
    assert _primary_cli.default_profile() == "standalone"
    monkeypatch.setenv("QL_DEPLOYMENT_PROFILE", "edge")
    assert _primary_cli.default_profile() == "edge"


def test_a_missing_database_is_fatal_and_never_created(tmp_path: Path) -> None:
    db = tmp_path / "absent.db"
    out = qlfsm("reconcile", "--db", str(db), "--receipt-root", "/r")
    assert out.returncode == 1 and "does not exist" in out.stderr
    assert not db.exists()
    with pytest.raises(FatalError):
        primary_pass(str(db), "/r", "edge")


@pytest.mark.parametrize("content", [b"not a database at all" * 100, b""])
def test_a_file_that_is_not_a_qinglong_database_is_fatal(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "other.db"
    db.write_bytes(content)
    out = qlfsm("reconcile", "--db", str(db), "--receipt-root", "/r")
    assert out.returncode == 1 and "not a QingLong 3.0 database" in out.stderr


def test_the_human_output_names_the_verdict(db_path: Path) -> None:
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", "/r")
    assert out.returncode == 0 and out.stdout.strip().endswith("SAFE to start")


def test_the_json_summary_of_a_pass_has_no_token(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    root = str(tmp_path / "r")
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", root, "--json")
    summary: dict[str, Any] = json.loads(out.stdout)
    assert out.returncode == 0 and summary["recovered"] == 1
    assert "tok_" not in out.stdout


def _reconcile_json_then(
    db_path: Path, root: Path, then: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`qlfsm reconcile --json` in a fresh interpreter (its exit code in ``rc``), then the
    lines ``then``, which report what they find on stderr."""
    code = (
        "import sys\n"
        "from reconciler.cli._main import main\n"
        f"rc = main(['reconcile', '--db', {str(db_path)!r}, '--receipt-root', {str(root)!r}, "
        "'--json'])\n" + then
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )


def test_the_zero_candidate_command_prints_the_empty_summary_as_one_json_line(
    db_path: Path, tmp_path: Path
) -> None:
    out = _reconcile_json_then(db_path, tmp_path / "r", "sys.stderr.write(repr(rc))\n")
    assert out.stderr == repr(0)
    assert out.stdout == (
        '{"safe": true, "scanned": 0, "recovered": 0, "remaining": 0, "unresolved": 0, '
        '"failed": 0, "truncated": false, "candidates": []}\n'
    )


def test_a_reconcile_with_candidates_never_imports_the_orderings_coverage_recorder(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    # The recorder (tests/_coverage_record.py, docs/orderings.md) is importable here (tests/ on
    # the path), yet a pass that decides candidates, so builds every machine, never loads it
    # nor registers a listener: recording costs nothing when off.
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    out = _reconcile_json_then(
        db_path,
        tmp_path / "r",
        "import fsm._observe\n"
        "loaded = sorted(m for m in ('_coverage_record', '_coverage_plugin', 'fsm.testing')"
        " if m in sys.modules)\n"
        "sys.stderr.write(repr((rc, loaded, len(fsm._observe.LISTENERS), 'fsm' in sys.modules)))\n",
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )
    assert out.stderr == repr((0, [], 0, True))


def test_the_zero_candidate_verdict_for_a_person_is_the_counts_and_safe_to_start(
    db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    code = (
        "import sys\n"
        "from reconciler.cli._main import main\n"
        f"rc = main(['reconcile', '--db', {str(db_path)!r}, '--receipt-root', {str(root)!r}])\n"
        "sys.stderr.write(repr(rc))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stderr == repr(0)
    assert out.stdout == (
        "scanned 0: recovered 0, remaining 0, unresolved 0, failed 0\nverdict: SAFE to start\n"
    )
