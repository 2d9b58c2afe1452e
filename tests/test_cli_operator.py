"""What operators expect of every command: one verdict wording, a blocked start-up that says what
blocks it, `--version`, `inspect` that pages and says when it truncated, the origins in `--help`
(spec 06)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _primary_support import insert_bare_runs, linux_only, make_candidate, make_run, qlfsm
from test_startup_report import pasted

from fsm.qinglong import RUN_STATES
from reconciler import ALLOWED_ORIGINS, REFUSED_ORIGINS
from reconciler.cli import _db
from reconciler.cli._main import FALLBACK_VERSION, version
from storage import Repository


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}


# --- one verdict wording, and what blocks start-up ----------------------------------------------


@linux_only
def test_reconcile_and_startup_say_the_same_verdict_and_list_every_blocking_run(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_candidate(repo, "run-a", "at-a", handle="ql3lp1.bad", pid=3)  # row 10, unresolved
    make_candidate(repo, "run-b", "at-b", attempt="claimed", run="dispatching")  # row 7, recovered
    make_candidate(repo, "run-c", "at-c", handle="ql3lp1.bad", pid=5)
    root = tmp_path / "r"
    root.mkdir()
    outs = [
        qlfsm(cmd, "--db", str(db_path), "--receipt-root", str(root), env=clean_env())
        for cmd in ("reconcile", "startup")
    ]
    # Each run on a line of its own (reconcile: spec 04's words and the attempt; startup: what
    # happened to it in plain words), then the explain command of each blocking run, with the
    # receipt root (docs/decisions.md D-22).
    words = {"reconcile": r"at-\w\s+10\s+unresolved", "startup": r"10\s+blocked"}
    for cmd, out in zip(("reconcile", "startup"), outs, strict=True):
        assert out.returncode == 3, out.stderr
        lines = out.stdout.rstrip().splitlines()
        assert lines[-1] == "verdict: start-up BLOCKED"
        for run in ("run-a", "run-c"):
            assert any(re.match(rf"^{run}\s+{words[cmd]}\s+invalid_handle$", ln) for ln in lines)
        start = lines.index("blocked by 2 run(s):")
        assert pasted(out.stdout) == [
            ["qlfsm", "explain", "--db", str(db_path), "--run", run, "--receipt-root", str(root)]
            for run in ("run-a", "run-c")
        ]
        assert "run-b" not in "\n".join(lines[start:])  # recovered: it blocks nothing
    assert "NOT safe" not in outs[1].stdout and "SAFE to admit" not in outs[1].stdout


def test_the_safe_verdict_is_worded_the_same_everywhere(db_path: Path, tmp_path: Path) -> None:
    for cmd in ("reconcile", "startup"):
        out = qlfsm(cmd, "--db", str(db_path), "--receipt-root", str(tmp_path), env=clean_env())
        assert out.returncode == 0 and out.stdout.rstrip().endswith("verdict: SAFE to start")


def test_a_truncated_page_says_so_and_how_to_list_the_runs(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    insert_bare_runs(repo.conn, 257)
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(tmp_path))
    assert out.returncode == 3
    assert "more than 256 candidate runs" in out.stdout
    # The command is wrapped at 100 columns (docs/decisions.md D-22); joined, it is the same.
    joined = re.sub(r"\\\n\s*", "", out.stdout)  # the continuations (and a word's pieces)
    assert f"qlfsm inspect --db {db_path} --status running" in re.sub(" +", " ", joined)
    assert max(len(line) for line in out.stdout.splitlines()) <= 100


# --- --version ----------------------------------------------------------------------------------


def test_version_comes_from_the_package_metadata() -> None:
    out = qlfsm("--version")
    assert out.returncode == 0 and out.stdout == f"qlfsm {version()}\n"
    from importlib import metadata

    assert version() == metadata.version("qlfsm")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", FALLBACK_VERSION)


def test_the_fallback_version_is_the_one_pyproject_declares() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["version"] == FALLBACK_VERSION


def test_without_package_metadata_the_fallback_is_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib import metadata

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert version() == FALLBACK_VERSION


# --- inspect: truncation, status, keyset paging -------------------------------------------------


def inspect(db: Path, *args: str) -> dict[str, Any]:
    out = qlfsm("inspect", "--db", str(db), "--json", *args)
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def ids(data: dict[str, Any]) -> list[str]:
    return [r["run"]["id"] for r in data["runs"]]


def test_inspect_pages_with_a_keyset_and_says_when_it_truncated(
    repo: Repository, db_path: Path
) -> None:
    for n in range(5):
        make_run(repo, f"run-{n}", "queued" if n % 2 else "dispatching")
    first = inspect(db_path, "--limit", "2")
    assert ids(first) == ["run-0", "run-1"] and first["truncated"] is True
    assert first["next_after"] == "run-1"
    second = inspect(db_path, "--limit", "2", "--after", "run-1")
    third = inspect(db_path, "--limit", "2", "--after", second["next_after"])
    assert ids(second) == ["run-2", "run-3"] and ids(third) == ["run-4"]
    assert third["truncated"] is False and third["next_after"] is None
    human = qlfsm("inspect", "--db", str(db_path), "--limit", "2")
    assert "(truncated: showing 2 run(s); more follow: " in human.stdout
    assert f"qlfsm inspect --db {db_path} --limit 2 --after run-1)" in human.stdout
    last = qlfsm("inspect", "--db", str(db_path), "--limit", "2", "--after", "run-3")
    assert "truncated" not in last.stdout


def test_inspect_filters_by_status_and_pages_within_it(repo: Repository, db_path: Path) -> None:
    for n in range(5):
        make_run(repo, f"run-{n}", "queued" if n % 2 else "dispatching")
    assert ids(inspect(db_path, "--status", "queued")) == ["run-1", "run-3"]
    page = inspect(db_path, "--status", "dispatching", "--limit", "1", "--after", "run-0")
    assert ids(page) == ["run-2"] and page["next_after"] == "run-2"
    human = qlfsm("inspect", "--db", str(db_path), "--status", "dispatching", "--limit", "1")
    assert "--status dispatching --after run-0" in human.stdout
    assert qlfsm("inspect", "--db", str(db_path), "--status", "lost").stdout == (
        "no runs in status lost\n"
    )


def test_inspect_refuses_an_unknown_status_or_after(repo: Repository, db_path: Path) -> None:
    make_run(repo, "run-0", "queued")
    out = qlfsm("inspect", "--db", str(db_path), "--status", "done")
    assert out.returncode == 2 and "invalid choice" in out.stderr
    out = qlfsm("inspect", "--db", str(db_path), "--after", "nope")
    assert out.returncode == 2 and "--after 'nope' is not a run" in out.stderr
    out = qlfsm("inspect", "--db", str(db_path), "--run", "run-0", "--status", "queued")
    assert out.returncode == 2


def test_the_status_choices_are_the_run_states() -> None:
    assert _db.RUN_STATUSES == RUN_STATES


# --- the origins in --help ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["shadow", "startup"])
def test_help_lists_the_valid_origins(command: str) -> None:
    out = qlfsm(command, "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert ", ".join(ALLOWED_ORIGINS) in text
    for refused in REFUSED_ORIGINS:
        assert refused in text and "refused" in text


# --- a signal that Python re-raises as another error ---------------------------------------------

BOOM = """
import os, sys, types
from reconciler.cli import _main

READY, WAIT = int(sys.argv[1]), int(sys.argv[2])

def boom(argv):
    class Descriptor:
        def __set_name__(self, owner, name):
            # Readiness, not time: say where we are, then block until the test's signal ends
            # the wait (a blocking read, however loaded the machine is).
            os.write(READY, b"inside __set_name__\\n")
            os.read(WAIT, 1)

    class Imported:  # as a dataclass's fields are, while its module is imported
        field = Descriptor()

    return 0

module = types.ModuleType("boom_command")
module.boom = boom
sys.modules["boom_command"] = module
_main.COMMANDS["boom"] = ("boom_command", "boom", "a signal inside __set_name__")
sys.argv = ["qlfsm", "boom"]
raise SystemExit(_main.main())
"""


@pytest.mark.parametrize("name", ["INT", "TERM"])
def test_a_signal_python_rethrows_as_another_error_still_ends_the_command_by_the_signal(
    name: str,
) -> None:
    # Python 3.11 turns an exception raised in `__set_name__` into RuntimeError: a signal that
    # lands while a dataclass is being imported must still end the command as that signal.
    # The signal is sent once the child says it is inside `__set_name__` (a line on a pipe).
    ready_r, ready_w = os.pipe()
    wait_r, wait_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", BOOM, str(ready_w), str(wait_r)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=(ready_w, wait_r),
    )  # fmt: skip
    os.close(ready_w)
    os.close(wait_r)
    try:
        with os.fdopen(ready_r, "rb") as ready:
            assert ready.readline() == b"inside __set_name__\n", child.communicate()
        child.send_signal(getattr(signal, f"SIG{name}"))
        out, err = child.communicate(timeout=60)
    finally:
        os.close(wait_w)
        if child.poll() is None:
            child.kill()
            child.wait()
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    assert proc.returncode == -getattr(signal, f"SIG{name}")
    assert proc.stderr.startswith(f"qlfsm: interrupted (SIG{name})"), proc.stderr
    assert proc.stderr.count("\n") == 1 and "RuntimeError" not in proc.stderr
