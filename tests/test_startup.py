"""`qlfsm startup`: (2.x normalization) -> legacy shadow -> primary, exit code from the primary
verdict (spec 05 "Switches", spec 06)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _shadow_support import T0_MS, LegacyDb

from reconciler.cli import _startup as _startup_cli
from storage import normalize_legacy

ORIGINS = "manual,scheduled_node,scheduled_system"


def startup(db: str, root: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", "startup", "--db", db, "--receipt-root", str(root),
         *args],
        capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin", **(env or {})},
    )  # fmt: skip


def runtime_run(db: LegacyDb, *, attempts: tuple[str, ...]) -> str:
    made = db.run(owner="runtime", status="dispatching", attempts=attempts, cron=False)
    db.conn.execute(
        "UPDATE \"RunAttempts\" SET executor_type = 'local_process' WHERE run_id = ?",
        (made.run_id,),
    )
    return made.run_id


def test_normalization_stops_running_instances_without_a_finish_time_and_idles_crontabs(
    db: LegacyDb,
) -> None:
    cron = db.cron()
    db.conn.execute("UPDATE `Crontabs` SET status = 2 WHERE id = ?", (cron,))  # disabled
    other = db.cron()
    db.instance(other, pid=1, log_path="/l", status=0)
    db.instance(other, pid=2, log_path="/m", status=1, finished_s=T0_MS // 1000)
    done = normalize_legacy(db.conn)
    assert (done.running_instances, done.crontabs) == (1, 1)
    rows = db.conn.execute(
        "SELECT status, finished_at FROM `RunningInstances` ORDER BY id"
    ).fetchall()
    assert [tuple(r) for r in rows] == [(2, None), (1, T0_MS // 1000)]
    crons = dict(db.conn.execute("SELECT id, status FROM `Crontabs`").fetchall())
    assert crons[cron] == 2 and crons[other] == 1


def test_startup_normalizes_then_shadow_marks_the_reset_run_lost_and_is_safe(
    db: LegacyDb, tmp_path: Path
) -> None:
    made = db.run(origin="scheduled_node", pid=47001, log_path="/ql/log/x.log")
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=47001, log_path="/ql/log/x.log", status=0)
    proc = startup(db.path, tmp_path / "receipts", "--origins", ORIGINS, "--legacy-normalize",
                   "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert list(out) == ["shadow", "primary", "sweep", "safe", "first_boot"]
    assert out["safe"] is True and out["primary"]["scanned"] == 0
    assert out["shadow"]["report"]["outcomes"]["markedLost"] == 1
    assert "1 running instance(s) -> stopped" in proc.stderr
    assert db.status(made) == ("lost", ["lost"])
    status = db.conn.execute("SELECT status, finished_at FROM `RunningInstances`").fetchone()
    assert tuple(status) == (2, None)


def test_the_order_is_normalization_then_shadow_then_primary(
    db: LegacyDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    calls: list[str] = []
    import reconciler._startup as app
    import storage
    from reconciler import run_shadow as real_shadow

    real_norm, real_primary = storage.normalize_legacy, app.run_primary

    def norm(conn: Any) -> Any:
        calls.append("normalize")
        return real_norm(conn)

    def shadow(*a: Any, **k: Any) -> Any:
        calls.append("shadow")
        return real_shadow(*a, **k)

    def primary(*a: Any, **k: Any) -> Any:
        calls.append("primary")
        return real_primary(*a, **k)

    real_sweep = app.startup_sweep

    def sweep(*a: Any, **k: Any) -> Any:
        calls.append(f"sweep:{k['run']}")
        return real_sweep(*a, **k)

    monkeypatch.setattr(storage, "normalize_legacy", norm)
    monkeypatch.setattr(app, "run_shadow", shadow)
    monkeypatch.setattr(app, "run_primary", primary)
    monkeypatch.setattr(app, "startup_sweep", sweep)
    code = _startup_cli.startup_command(
        ["--db", db.path, "--receipt-root", str(tmp_path / "r"), "--legacy-normalize",
         "--origins", ORIGINS]
    )  # fmt: skip
    assert code == 0 and calls == ["normalize", "shadow", "primary", "sweep:True"]
    assert "verdict: SAFE to start" in capsys.readouterr().out


def test_the_exit_code_is_the_primary_verdict_not_the_shadow_one(
    db: LegacyDb, tmp_path: Path
) -> None:
    runtime_run(db, attempts=("claimed", "claimed"))  # two active attempts: unresolved
    db.run(attempts=("running", "running"))  # legacy: ambiguous
    proc = startup(db.path, tmp_path / "r", "--origins", ORIGINS, "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 3 and out["safe"] is False
    assert out["primary"]["unresolved"] == 1
    assert out["shadow"]["report"]["assessment"] == "attention_required"


def test_a_claimed_runtime_attempt_is_recovered_by_the_primary_and_start_is_safe(
    db: LegacyDb, tmp_path: Path
) -> None:
    run_id = runtime_run(db, attempts=("claimed",))
    proc = startup(db.path, tmp_path / "r", "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["safe"] is True
    assert out["shadow"]["state"] == "disabled"
    assert out["primary"]["recovered"] == 1
    run = db.repo.get_run(run_id)
    assert run is not None and run.status == "lost"


def test_a_failing_shadow_pass_does_not_block_start_up(db: LegacyDb, tmp_path: Path) -> None:
    db.run()
    db.conn.execute("DROP TABLE `RunningInstances`")
    proc = startup(db.path, tmp_path / "r", "--origins", ORIGINS, "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and out["safe"] is True
    assert out["shadow"]["report"]["outcomes"]["failed"] == 1


def test_a_missing_database_is_fatal_and_stays_missing(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    proc = startup(str(missing), tmp_path / "r", "--origins", ORIGINS)
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr and not missing.exists()


def test_usage_errors_exit_two_before_anything_is_normalized_or_written(
    db: LegacyDb, tmp_path: Path
) -> None:
    made = db.run(origin="scheduled_node")
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=1, log_path="/l", status=0)
    for args in (("--profile", "worker"), ("--profile", "cluster-control")):
        proc = startup(db.path, tmp_path / "r", "--legacy-normalize", "--origins", ORIGINS, *args)
        assert proc.returncode == 2
    proc = startup(db.path, Path("relative/root"), "--legacy-normalize", "--origins", ORIGINS)
    assert proc.returncode == 2 and "relative" in proc.stderr
    status = db.conn.execute("SELECT status FROM `RunningInstances`").fetchone()
    assert status[0] == 0 and db.events(made) == []
    env = {"QL_DEPLOYMENT_PROFILE": "cloud"}
    proc = startup(db.path, tmp_path / "r", env=env)
    # The value is echoed (escaped: it is the environment's text), with the valid ones.
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "unknown deployment profile 'cloud'; choose one of edge, standalone" in proc.stderr


def test_the_human_output_gives_both_passes_and_the_verdict(db: LegacyDb, tmp_path: Path) -> None:
    db.run(origin="scheduled_system")
    proc = startup(db.path, tmp_path / "r", "--origins", ORIGINS)
    assert proc.returncode == 0
    assert "legacy shadow: incomplete (assessment waiting_external_callback)" in proc.stdout
    assert "primary (ADR-0068): 0 scanned" in proc.stdout
    assert proc.stdout.rstrip().endswith("verdict: SAFE to start")
