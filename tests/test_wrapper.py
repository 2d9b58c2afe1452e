"""The receipt-publishing wrapper, run as a real subprocess (spec 03 "Launcher")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.node import FileReceiptStore, Found, decode_receipt, receipt_path, temp_path

RUN = "019f70d0-0000-7000-8000-000000000001"
ATTEMPT = "019f70d0-0000-7000-8000-000000000002"
TOKEN = "T" * 43
REPO = Path(__file__).resolve().parents[1]


def launch_env(root: Path, started_at_ms: int = 1_000) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QL3_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(
        QL3_RECEIPT_RUN_ID=RUN,
        QL3_RECEIPT_ATTEMPT_ID=ATTEMPT,
        QL3_RECEIPT_CALLBACK_SEQUENCE="1",
        QL3_RECEIPT_CALLBACK_TOKEN=TOKEN,
        QL3_RECEIPT_STARTED_AT_MS=str(started_at_ms),
        QL3_RECEIPT_TARGET=receipt_path(str(root), ATTEMPT),
        QL3_RECEIPT_TEMPORARY=temp_path(str(root), ATTEMPT),
    )
    return env


def wrapper(*command: str) -> list[str]:
    return [sys.executable, "-m", "reconciler.node._wrapper", *command]


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run(
    root: Path, *command: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        wrapper(*command),
        env=env or launch_env(root),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_it_publishes_a_valid_receipt_with_the_commands_exit_code(tmp_path: Path) -> None:
    before = int(time.time() * 1000)
    done = run(tmp_path, *python("raise SystemExit(7)"))
    assert done.returncode == 7
    assert done.stderr == ""
    result = FileReceiptStore(str(tmp_path)).read(ATTEMPT)
    assert isinstance(result, Found)
    receipt = result.receipt
    assert (receipt.run_id, receipt.attempt_id, receipt.callback_sequence, receipt.token) == (
        RUN,
        ATTEMPT,
        1,
        TOKEN,
    )
    assert (receipt.started_at_ms, receipt.exit_code) == (1_000, 7)
    assert before <= receipt.finished_at_ms <= int(time.time() * 1000)
    shard = Path(receipt_path(str(tmp_path), ATTEMPT)).parent
    assert os.listdir(shard) == [f"{ATTEMPT}.json"]
    assert (shard.stat().st_mode & 0o777, (shard / f"{ATTEMPT}.json").stat().st_mode & 0o777) == (
        0o700,
        0o600,
    )


def test_a_successful_command_exits_zero_with_a_zero_receipt(tmp_path: Path) -> None:
    assert run(tmp_path, "true").returncode == 0
    data = Path(receipt_path(str(tmp_path), ATTEMPT)).read_bytes()
    assert decode_receipt(data).exit_code == 0


def test_a_start_time_in_the_future_is_never_after_the_finish_time(tmp_path: Path) -> None:
    future = int(time.time() * 1000) + 3_600_000
    assert run(tmp_path, "true", env=launch_env(tmp_path, future)).returncode == 0
    receipt = decode_receipt(Path(receipt_path(str(tmp_path), ATTEMPT)).read_bytes())
    assert receipt.finished_at_ms == receipt.started_at_ms == future


def test_a_pre_existing_receipt_is_kept_and_the_exit_status_still_preserved(
    tmp_path: Path,
) -> None:
    target = Path(receipt_path(str(tmp_path), ATTEMPT))
    target.parent.mkdir(mode=0o700)
    target.write_bytes(b"first")
    done = run(tmp_path, *python("raise SystemExit(3)"))
    assert done.returncode == 3
    assert target.read_bytes() == b"first"
    assert done.stderr.count("\n") == 1 and "already exists" in done.stderr
    assert TOKEN not in done.stderr
    assert os.listdir(target.parent) == [target.name]


def test_an_unwritable_receipt_location_never_changes_the_exit_status(tmp_path: Path) -> None:
    (tmp_path / "01").write_text("a file where the shard directory should be")
    done = run(tmp_path, *python("raise SystemExit(4)"))
    assert done.returncode == 4
    assert done.stderr.count("\n") == 1 and "receipt not published" in done.stderr


def test_receipt_variables_are_not_visible_to_the_command(tmp_path: Path) -> None:
    env = launch_env(tmp_path)
    env["QL3_LAUNCH_SHELL"] = "/bin/sh"
    env["KEEP_ME"] = "yes"
    code = "import json, os; print(json.dumps(sorted(os.environ)))"
    done = run(tmp_path, *python(code), env=env)
    names = json.loads(done.stdout)
    assert "KEEP_ME" in names
    assert not [n for n in names if n.startswith(("QL3_RECEIPT_", "QL3_LAUNCH_"))]
    assert TOKEN not in done.stdout


def test_a_signal_death_is_reported_as_128_plus_the_signal(tmp_path: Path) -> None:
    done = run(tmp_path, *python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"))
    assert done.returncode == 128 + signal.SIGTERM
    receipt = decode_receipt(Path(receipt_path(str(tmp_path), ATTEMPT)).read_bytes())
    assert receipt.exit_code == 128 + signal.SIGTERM


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_wrapper_is_forwarded_to_the_command(
    tmp_path: Path, signum: signal.Signals
) -> None:
    ready = tmp_path / "ready"
    code = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal({int(signum)}, lambda n, f: sys.exit(40 + n))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen(wrapper(*python(code)), env=launch_env(tmp_path))
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.01)
        child.send_signal(signum)
        assert child.wait(timeout=20) == 40 + signum
    finally:
        child.kill()
        child.wait()
    receipt = decode_receipt(Path(receipt_path(str(tmp_path), ATTEMPT)).read_bytes())
    assert receipt.exit_code == 40 + signum


def test_a_missing_command_exits_127_and_still_publishes(tmp_path: Path) -> None:
    done = run(tmp_path, str(tmp_path / "no-such-command"))
    assert done.returncode == 127
    assert decode_receipt(Path(receipt_path(str(tmp_path), ATTEMPT)).read_bytes()).exit_code == 127


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("QL3_RECEIPT_RUN_ID", ""),
        ("QL3_RECEIPT_CALLBACK_SEQUENCE", "1x"),
        ("QL3_RECEIPT_STARTED_AT_MS", "-5"),
        ("QL3_RECEIPT_TARGET", None),
    ],
)
def test_a_malformed_launch_exits_125_without_running_anything(
    tmp_path: Path, name: str, value: str | None
) -> None:
    env = launch_env(tmp_path)
    if value is None:
        del env[name]
    else:
        env[name] = value
    marker = tmp_path / "ran"
    done = run(tmp_path, "touch", str(marker), env=env)
    assert done.returncode == 125
    assert not marker.exists()
    assert not Path(receipt_path(str(tmp_path), ATTEMPT)).exists()


def test_no_command_exits_125(tmp_path: Path) -> None:
    assert run(tmp_path).returncode == 125
