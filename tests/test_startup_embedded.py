"""The application layer embedded in a Python service: ``reconciler.startup`` called in-process on
a real SQLite file with real launched jobs and real receipts, ``reconciler.reconcile`` on the
caller's own connection, and the command line calling ``reconciler.startup`` itself."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _primary_support import T0, linux_only, make_run
from test_cli_schemas import validate

import reconciler
import reconciler.launcher
from reconciler import _startup
from reconciler.cli import main
from storage import Repository, connect

pytestmark = linux_only


@pytest.fixture(autouse=True)
def _no_deployment_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("QL_DEPLOYMENT_PROFILE", "QL3_SHADOW_ORIGINS", "QLFSM_LOCK_BUDGET_S"):
        monkeypatch.delenv(name, raising=False)


def prepared(repo: Repository, run_id: str, attempt_id: str, run: str = "queued") -> None:
    """spec 03: a runtime Run queued (ready for the launcher) or dispatching, with one claimed
    Attempt."""
    v = make_run(repo, run_id, run)
    repo.create_attempt(run_id=run_id, attempt_id=attempt_id, expected_version=v, at_ms=T0)


def service_node(db_path: Path, root: Path) -> None:
    """What the server left behind when it died: a job that ended and published its receipt,
    and a job whose whole process group was SIGKILLed before it could publish one."""
    root.mkdir(mode=0o700)
    conn = connect(str(db_path))
    try:
        repo = Repository(conn)
        prepared(repo, "run-done", "at-done")
        prepared(repo, "run-killed", "at-killed")
        done = reconciler.launcher.launch(conn, str(root), "run-done", ["sh", "-c", "exit 0"])
        assert done.process.wait(timeout=30) == 0  # the wrapper published the receipt
        killed = reconciler.launcher.launch(conn, str(root), "run-killed", ["sleep", "30"])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(killed.pid, signal.SIGKILL)
        killed.process.wait(timeout=30)  # reaped: its pid is gone from /proc
    finally:
        conn.close()


def status(db_path: Path, run_id: str) -> str:
    conn = sqlite3.connect(db_path)
    try:
        (value,) = conn.execute("SELECT status FROM Runs WHERE id = ?", (run_id,)).fetchone()
        return str(value)
    finally:
        conn.close()


def test_a_service_embeds_startup_on_a_real_database_with_real_receipts_and_gets_a_typed_report(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "receipts"
    service_node(db_path, root)
    lines: list[str] = []
    report = reconciler.startup(str(db_path), str(root), profile="standalone", notify=lines.append)
    assert isinstance(report, reconciler.StartupReport)
    assert report.safe is True and report.first_boot is False and report.dry_run is False
    decided = {c.run_id: (c.row, c.outcome, c.reason) for c in report.primary.candidates}
    assert decided == {
        "run-done": ("5", "recovered", "receipt_succeeded"),
        "run-killed": ("13", "recovered", "process_not_running:pid_absent"),
    }
    assert (report.primary.scanned, report.primary.recovered) == (2, 2)
    assert report.shadow is not None and report.shadow.state == "disabled"
    assert status(db_path, "run-done") == "succeeded" and status(db_path, "run-killed") == "lost"
    assert set(report.durations) == {"shadow", "primary", "sweep", "total"}
    # The report is what `qlfsm startup --json` prints, and nothing went to stdout or stderr.
    as_json = json.dumps(report.as_dict())
    assert validate("startup", as_json + "\n") == report.as_dict()
    assert list(report.as_dict()) == ["shadow", "primary", "sweep", "safe", "first_boot"]
    assert report.as_dict()["primary"] == report.primary.as_dict()
    assert capsys.readouterr() == ("", "") and lines == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.safe = False  # type: ignore[misc]


def test_reconcile_runs_on_the_callers_connection_and_leaves_it_open(
    db_path: Path, tmp_path: Path
) -> None:
    conn = connect(str(db_path))
    try:
        repo = Repository(conn)
        prepared(repo, "run-1", "at-1", "dispatching")  # claimed, never started: row 7, lost
        report = reconciler.reconcile(conn, str(tmp_path / "r"), profile="standalone")
        assert [(c.run_id, c.row, c.outcome) for c in report.candidates] == [
            ("run-1", "7", "recovered")
        ]
        assert report.safe is True and report.as_dict()["recovered"] == 1
        again = reconciler.reconcile(conn, str(tmp_path / "r"), profile="standalone")
        assert again.scanned == 0 and again.candidates == ()
        run = repo.get_run("run-1")
        assert run is not None and run.status == "lost"
    finally:
        conn.close()


def test_a_dry_run_on_the_callers_connection_writes_nothing_and_gives_it_back_writable(
    db_path: Path, tmp_path: Path
) -> None:
    conn = connect(str(db_path))
    try:
        repo = Repository(conn)
        prepared(repo, "run-1", "at-1", "dispatching")
        report = reconciler.reconcile(conn, str(tmp_path / "r"), dry_run=True)
        assert report.dry_run is True and report.recovered == 1
        run = repo.get_run("run-1")
        assert run is not None and run.status == "dispatching"
        assert conn.execute("PRAGMA query_only").fetchone()[0] == 0
    finally:
        conn.close()


def test_the_command_line_startup_calls_the_application_layer(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from reconciler.cli import _startup as startup_cli

    calls: list[tuple[Any, ...]] = []
    real = _startup.run_startup

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    # The command checks its inputs once (the application layer's check_startup), then runs.
    monkeypatch.setattr(startup_cli, "run_startup", recorded)
    root = tmp_path / "r"
    code = main(["startup", "--db", str(db_path), "--receipt-root", str(root), "--json"])
    out = capsys.readouterr().out
    checked = _startup.StartupInputs(str(root), _startup.check_startup(str(root), None).profile)
    assert code == 0 and calls == [(str(db_path), checked)]
    assert validate("startup", out)["safe"] is True


def test_a_startup_checks_its_receipt_root_and_profile_once(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 28: the inputs are checked once, in the application layer, and the primary pass
    # and the sweep after it take the checked root (docs/decisions.md D-33).
    from reconciler import _reconcile

    checked: list[str] = []
    real_root, real_profile = _reconcile.check_receipt_root, _reconcile.check_profile

    def root(path: str) -> str:
        checked.append("root")
        return real_root(path)

    def profile(name: str) -> str:
        checked.append("profile")
        return real_profile(name)

    monkeypatch.setattr(_reconcile, "check_receipt_root", root)
    monkeypatch.setattr(_reconcile, "check_profile", profile)
    report = reconciler.startup(str(db_path), str(tmp_path / "r"), notify=lambda _: None)
    assert report.safe and report.sweep["state"] != "skipped"
    assert checked == ["root", "profile"]
