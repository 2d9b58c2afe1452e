"""`qlfsm startup --first-boot` (docs/decisions.md D-21), through the real CLI on real files: the
node's first start creates its database in a directory that exists, reports `first boot`, and
refuses a missing directory; without the flag a missing file stays exit 1; with it an existing
file is a normal start-up; racing first boots create the database once."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from _primary_support import dead_handle, linux_only, make_candidate, qlfsm
from _support import init_db
from test_cli_schemas import env, validate

from storage import Repository, check_schema, connect


def startup(db: Path, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return qlfsm("startup", "--db", str(db), "--receipt-root", str(root), *extra, env=env())


def assert_a_qinglong_database(db: Path) -> None:
    """Read back through a second connection: the whole `db init` schema is there."""
    conn = connect(str(db))
    try:
        check_schema(conn, path=str(db))
    finally:
        conn.close()


def test_a_first_boot_creates_the_database_in_an_existing_directory_and_says_so(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ql.db"
    out = startup(db, tmp_path / "receipts", "--first-boot")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"first boot: created database {db} (the `qlfsm db init` schema)"
    assert lines[-1] == "verdict: SAFE to start"
    assert_a_qinglong_database(db)
    # Only the database is left: no private build file, no -wal beside the final name; and
    # the start-up's single-flight lock file (D-20), which stays by design.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ql.db", "ql.db.qlfsm-startup.lock"]
    # The same file `db init` would have made: it has nothing left to apply.
    again = qlfsm("db", "init", "--db", str(db))
    assert again.stdout == f"{db}: schema up to date, nothing to do\n", again


def test_the_json_of_a_first_boot_says_first_boot_and_matches_the_schema(tmp_path: Path) -> None:
    db = tmp_path / "ql.db"
    first = validate("startup", startup(db, tmp_path / "r", "--first-boot", "--json").stdout)
    assert first["first_boot"] is True and first["safe"] is True
    second = validate("startup", startup(db, tmp_path / "r", "--first-boot", "--json").stdout)
    assert second["first_boot"] is False and second["safe"] is True
    plain = validate("startup", startup(db, tmp_path / "r", "--json").stdout)
    assert plain["first_boot"] is False


def test_a_first_boot_into_a_missing_directory_is_refused_in_one_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "qinglnog" / "ql.db"  # the typo'd data directory
    out = startup(db, tmp_path / "receipts", "--first-boot")
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"qlfsm: error: database '{db}' does not exist and neither ")
    assert f"its directory '{db.parent}'" in out.stderr and "--db (a typo?)" in out.stderr
    assert not db.parent.exists()
    assert list(tmp_path.iterdir()) == []


def test_without_the_flag_a_missing_database_stays_exit_1_and_names_the_flag(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ql.db"
    out = startup(db, tmp_path / "receipts")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert f"database '{db}' does not exist; create it with `qlfsm db init --db {db}`" in (
        out.stderr
    )
    assert "on the node's first start add --first-boot" in out.stderr
    assert list(tmp_path.iterdir()) == []


@linux_only
def test_the_flag_on_an_existing_database_is_a_normal_start_up(tmp_path: Path) -> None:
    db = init_db(tmp_path / "ql.db")
    handle, pid = dead_handle()
    conn = connect(str(db))
    try:
        make_candidate(Repository(conn), "run-1", "at-1", handle=handle, pid=pid)
    finally:
        conn.close()
    root = tmp_path / "receipts"
    root.mkdir()
    out = validate("startup", startup(db, root, "--first-boot", "--json").stdout)
    assert out["first_boot"] is False and out["safe"] is True
    [decided] = out["primary"]["candidates"]
    assert (decided["run_id"], decided["outcome"]) == ("run-1", "recovered")
    human = startup(db, root, "--first-boot")
    assert human.returncode == 0 and "first boot" not in human.stdout


def test_the_flag_never_initializes_an_existing_file_that_is_not_qinglongs(
    tmp_path: Path,
) -> None:
    db = tmp_path / "other.db"
    other = sqlite3.connect(db)
    other.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    other.commit()
    other.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    out = startup(db, tmp_path / "receipts", "--first-boot", "--legacy-normalize")
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert "is not a QingLong 3.0 database" in out.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_a_dry_run_first_boot_predicts_safe_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "ql.db"
    out = startup(db, tmp_path / "receipts", "--first-boot", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"first boot: database {db} does not exist; startup --first-boot")
    assert "the primary pass would say: verdict: SAFE to start" in out.stdout
    dry = startup(db, tmp_path / "receipts", "--first-boot", "--dry-run", "--json")
    data = json.loads(dry.stdout)
    assert data["first_boot"] is True and data["safe"] is True and data["dry_run"] is True
    assert list(tmp_path.iterdir()) == []
    missing_dir = startup(tmp_path / "nope" / "ql.db", tmp_path / "r", "--first-boot", "--dry-run")
    assert missing_dir.returncode == 1 and "neither does its directory" in missing_dir.stderr


def test_racing_first_boots_create_the_database_once_and_all_start(tmp_path: Path) -> None:
    for attempt in range(3):
        data = tmp_path / f"volume-{attempt}"
        data.mkdir()
        db = data / "ql.db"
        argv = [sys.executable, "-m", "reconciler", "startup", "--first-boot", "--db", str(db),
                "--receipt-root", str(data / "receipts"), "--json"]  # fmt: skip
        pipe = subprocess.PIPE
        procs = [
            subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True, env=env()) for _ in range(4)
        ]
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in outs]
        reports = [validate("startup", out) for out, _ in outs]
        assert sorted(r["first_boot"] for r in reports) == [False, False, False, True]
        assert all(r["safe"] for r in reports)
        assert_a_qinglong_database(db)
        # The database and the single-flight lock file (D-20) the four start-ups took in turn.
        assert sorted(p.name for p in data.iterdir()) == ["ql.db", "ql.db.qlfsm-startup.lock"]
