"""`qlfsm demo` end to end: real processes through `qlfsm launch`, a dying server, `startup`
(spec 06)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", "demo", *args],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_demo_explains_every_run_by_label_and_every_outcome_is_the_expected_one(
    tmp_path: Path,
) -> None:
    base = tmp_path / "demo"
    proc = demo("--dir", str(base))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    table = out[out.index("run ") :]
    for label, status in [
        ("backup (sleep 30)", "running"),
        ("export (exit 0)", "succeeded"),
        ("rotate (SIGKILLed)", "lost"),
        ("warmup (claimed only)", "lost"),
        ("legacy sign-in", "succeeded"),
        ("legacy stopped", "cancelled"),
        ("legacy cron job", "lost"),
        ("legacy system crond", "running"),
        ("legacy accepted", "cancelled"),
    ]:
        line = next(ln for ln in table.splitlines() if ln.startswith(label))
        assert f" {status} " in line and " ok " in line, line
    assert "UNEXPECTED" not in out
    # Runs are shown by label, never by id, until the demo explains the lost one by its id.
    story, _, explained = out.partition("5. why was 'rotate (SIGKILLed)' marked lost?")
    assert UUID.search(story) is None and explained
    assert "SAFE to start" in story and "diagrams" in explained
    # `recovered` split into what it means: the receipt's job completed, two jobs lost.
    assert "primary: 1 completed, 2 lost, 1 kept running, 0 blocked, 0 failed -> SAFE to start" \
        in story.splitlines()  # fmt: skip
    assert "ADR-0068 row 13" in out and "ADR-0448 row 10" in out


def test_the_demo_leaves_no_process_behind(tmp_path: Path) -> None:
    base = tmp_path / "demo"
    assert demo("--dir", str(base)).returncode == 0
    conn = sqlite3.connect(base / "ql.db")
    pids = [
        int(r[0])
        for r in conn.execute(
            "SELECT pid FROM RunAttempts WHERE executor_type = 'local_process' AND pid IS NOT NULL"
        )
    ]
    conn.close()
    assert len(pids) == 3
    deadline = time.monotonic() + 5
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(p) for p in pids)


def test_the_demo_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    proc = demo("--dir", str(tmp_path))
    assert proc.returncode == 2 and "not empty" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("where", ["file", "below_a_file", "missing_in_proc"])
def test_a_dir_that_cannot_be_the_demos_directory_is_a_usage_error_naming_why(
    tmp_path: Path, where: str
) -> None:
    a_file = tmp_path / "ql.db"
    a_file.write_text("mine")
    requested, why = {
        "file": (a_file, "Not a directory"),
        "below_a_file": (a_file / "demo", "Not a directory"),
        "missing_in_proc": (Path("/proc/qlfsm-demo-nowhere"), "No such file or directory"),
    }[where]
    proc = demo("--dir", str(requested))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (
        f"qlfsm: error: --dir {str(requested)!r} cannot be the demo's directory ({why}); give a "
        "new or empty directory this user may write to\n"
    )
    assert a_file.read_text() == "mine"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the demo as another user")
def test_a_dir_this_user_may_not_write_to_is_a_usage_error() -> None:
    # Root may write anywhere: the demo runs as nobody, on a directory nobody may only read
    # (outside pytest's own temporary tree, which only root may enter).
    with tempfile.TemporaryDirectory(prefix="qlfsm-demo-test-") as top:
        os.chmod(top, 0o755)
        readable_only(Path(top))


def readable_only(top: Path) -> None:
    empty = top / "empty"
    empty.mkdir(mode=0o555)
    below = empty / "demo"
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    cmd += [sys.executable, "-m", "reconciler", "demo", "--dir"]
    for requested, says in (
        (empty, "is not writable by this user"),
        (below, "cannot be the demo's directory (Permission denied)"),
    ):
        proc = subprocess.run(
            [*cmd, str(requested)], capture_output=True, text=True, check=False, timeout=60,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"qlfsm: error: --dir {str(requested)!r} {says}"), proc
        assert proc.stderr.endswith("give a new or empty directory this user may write to\n")
    assert list(empty.iterdir()) == []


def test_no_usable_temporary_directory_is_a_usage_error_that_says_to_give_dir() -> None:
    code = (
        "import sys, tempfile; tempfile.tempdir = '/proc/qlfsm-no-tmp'; "
        "from reconciler.cli import main; sys.exit(main(['demo']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "qlfsm: error: no temporary directory for the demo (No such file or directory); give "
        "--dir DIR, a new or empty directory this user may write to (or set TMPDIR)\n"
    )


def test_a_waited_launch_that_fails_before_starting_its_job_is_named_not_a_key_error(
    tmp_path: Path,
) -> None:
    from reconciler.cli._demo import launch

    with pytest.raises(RuntimeError, match=r"^`qlfsm launch` exited [1-9]\d*: .+"):
        launch(str(tmp_path / "missing.db"), str(tmp_path / "r"), "run-1", tmp_path / "l.log",
               "true", wait=True)  # fmt: skip
