"""Privacy (spec 05 "Fail-open and privacy"): no Run, Attempt or Cron id, pid, log path (raw or
opaque) or command text of the fixtures appears in any output of `shadow` or `startup`, human
or `--json`, stdout or stderr, whatever the outcome."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _shadow_support import T0_MS, LegacyDb

ORIGINS = "manual,scheduled_node,scheduled_system,boot"
FINISHED_S = T0_MS // 1000 + 60


def every_row(db: LegacyDb) -> None:
    """One fixture per outcome, each with its own pid, log path and command."""
    pid = iter(range(58_301, 58_400))

    def legacy(instance: int | None, finished: bool, **kw: Any) -> None:
        p = next(pid)
        log = f"/ql/data/log/secret_job_{p}/2026-01-01-00-00-{p}.log"
        command = f"task /ql/scripts/private_{p}.py --user alice{p}"
        made = db.run(pid=p, log_path=log, command=command, **kw)
        if instance is not None and made.cron_id is not None:
            db.instance(made.cron_id, pid=p, log_path=log, status=instance,
                        finished_s=FINISHED_S if finished else None, exit_code=0)  # fmt: skip

    legacy(1, True)  # completed
    legacy(3, True)  # completed (failed)
    legacy(2, True)  # cancelled
    legacy(0, False, origin="scheduled_node")  # reset by normalization -> lost
    legacy(2, False, origin="scheduled_system")  # pending
    legacy(None, False, status="queued", attempts=("claimed",))  # abandoned
    legacy(None, False, attempts=("lost",))  # repaired
    legacy(None, False, attempts=("running", "running"))  # ambiguous
    legacy(None, False, origin="boot", status="queued", attempts=("running",))  # row 11


def leaks(db: LegacyDb, text: str) -> list[str]:
    secrets = db.secrets() + [str(m.cron_id) for m in db.made if m.cron_id is not None]
    return [s for s in secrets if s in text]


def cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode in (0, 3), proc.stderr
    return proc.stdout + "\n" + proc.stderr


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_no_output_of_shadow_or_startup_names_a_run_attempt_cron_pid_path_or_command(
    tmp_path: Path, json_flag: list[str]
) -> None:
    db = LegacyDb(tmp_path / "ql.db")
    every_row(db)
    outputs = [
        cli("shadow", "--db", db.path, "--origins", ORIGINS, "--profile", "edge",
            "--resume-cursor", str(tmp_path / "cursor"), *json_flag),
        cli("shadow", "--db", db.path, "--origins", ORIGINS, *json_flag),
        cli("startup", "--db", db.path, "--receipt-root", str(tmp_path / "r"), "--origins",
            ORIGINS, "--legacy-normalize", *json_flag),
        cli("startup", "--db", db.path, "--receipt-root", str(tmp_path / "r"), "--origins",
            ORIGINS, *json_flag),
    ]  # fmt: skip
    assert "markedLost" in outputs[2] or "marked" in outputs[2].lower() or json_flag == []
    db.conn.execute("DROP TABLE `RunningInstances`")  # now every evidence read fails
    db.run(pid=58_999, log_path="/ql/data/log/after/x.log")
    outputs.append(cli("shadow", "--db", db.path, "--origins", ORIGINS, *json_flag))
    outputs.append(
        cli("startup", "--db", db.path, "--receipt-root", str(tmp_path / "r"), "--origins",
            ORIGINS, *json_flag)
    )  # fmt: skip
    for text in outputs:
        assert leaks(db, text) == []
    db.close()


def test_the_fixtures_really_contain_what_the_scan_looks_for(tmp_path: Path) -> None:
    db = LegacyDb(tmp_path / "ql.db")
    every_row(db)
    dump = "\n".join(
        str(tuple(r))
        for t in ("Runs", "RunAttempts", "RunningInstances", "Crontabs")
        for r in db.conn.execute(f'SELECT * FROM "{t}"')
    )
    assert len(leaks(db, dump)) >= 4 * len(db.made)
    db.close()
