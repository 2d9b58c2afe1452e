"""What `startup` (and `reconcile`) print about each run, in lines of at most 100 columns
(docs/decisions.md D-22), on real SQLite files, real receipts and real dead processes."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import unicodedata
from pathlib import Path

import pytest
from _primary_support import dead_handle, linux_only, make_candidate, qlfsm, receipt
from test_db_faults import insert_runtime_run

from reconciler._escape import clean
from reconciler.cli._report import command_lines, fit_table, shorten, wrap
from reconciler.node import FileReceiptStore
from storage import Repository, connect

WIDTH = 100
LONG = "run-" + "0123456789abcdef" * 6  # a run id no table column can hold (100 characters)
WIDE = "运行" * 30  # 60 characters, 120 terminal columns


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    return {**base, "NO_COLOR": "1"}


def cols(line: str) -> int:
    """Terminal columns, counted independently of the code under test's helper."""
    return sum(
        0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        for ch in line
    )


def widest(text: str) -> int:
    return max(cols(line) for line in text.splitlines())


def pasted(stdout: str) -> list[list[str]]:
    """Every `qlfsm explain` the output suggests, pasted into bash as printed (continuation
    lines and all): the argument vector bash gives it."""
    lines = stdout.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("  qlfsm explain"):
            continue
        end = i
        while lines[end].endswith("\\"):
            end += 1
        text = "\n".join(lines[i : end + 1]).strip()
        script = "printf '%s\\0' " + text.removeprefix("qlfsm explain")
        out = subprocess.run(
            ["bash", "-c", script], capture_output=True, check=True,
            env={**os.environ, "LC_ALL": "C.UTF-8"},
        )  # fmt: skip
        found.append(["qlfsm", "explain", *out.stdout.decode("utf-8", "surrogateescape")
                      .split("\0")[:-1]])  # fmt: skip
    return found


@pytest.fixture
def twelve(repo: Repository, db_path: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Twelve runs whose processes are gone: nine with no receipt (row 13, lost), one that
    left a trusted receipt (row 5, completed), one with a handle that is not one (row 10) and
    one whose handle names another pid than RunAttempts.pid (row 11)."""
    root = tmp_path / "receipts"
    root.mkdir()
    for i in range(9):
        handle, pid = dead_handle()
        make_candidate(repo, f"run-{i:02d}", f"at-{i:02d}", handle=handle, pid=pid)
    handle, pid = dead_handle()
    make_candidate(repo, "run-09", "at-09", handle=handle, pid=pid)
    FileReceiptStore(str(root)).publish(receipt("run-09", "at-09"))
    make_candidate(repo, "run-10", "at-10", handle="ql3lp1.bad", pid=3)
    handle, pid = dead_handle()
    make_candidate(repo, "run-11", "at-11", handle=handle, pid=pid + 1)
    return db_path, root


EXPECTED = {
    **{f"run-{i:02d}": ("13", "lost", "process_not_running:") for i in range(9)},
    "run-09": ("5", "completed", "receipt_succeeded"),
    "run-10": ("10", "blocked", "invalid_handle"),
    "run-11": ("11", "blocked", "handle_pid_mismatch"),
}


def per_run_lines(stdout: str) -> dict[str, list[str]]:
    return {
        run: [ln for ln in stdout.splitlines() if ln.split(" ", 1)[0] == run] for run in EXPECTED
    }


@linux_only
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "real"])
def test_startup_over_twelve_dead_runs_prints_a_line_per_run_and_splits_recovered(
    twelve: tuple[Path, Path], dry_run: bool
) -> None:
    db, root = twelve
    args = ["startup", "--db", str(db), "--receipt-root", str(root)]
    out = qlfsm(*args, *(["--dry-run"] if dry_run else []), env=env())
    assert out.returncode == 3, out.stderr
    assert widest(out.stdout) <= WIDTH, out.stdout
    lines = per_run_lines(out.stdout)
    for run, (row, words, reason) in EXPECTED.items():
        assert len(lines[run]) == 1, (run, out.stdout)
        assert lines[run][0].split()[:3] == [run, row, words], lines[run]
        assert lines[run][0].split()[3].startswith(reason), lines[run]
    assert "primary (ADR-0068): 12 scanned: 1 completed, 9 lost, 0 kept running, 2 blocked, " \
        "0 failed" in out.stdout  # fmt: skip
    # The explain command of each blocking run, with the receipt root, pasteable as printed.
    assert pasted(out.stdout) == [
        ["qlfsm", "explain", "--db", str(db), "--run", run, "--receipt-root", str(root)]
        for run in ("run-10", "run-11")
    ]
    with contextlib.closing(sqlite3.connect(db)) as reader:
        statuses = dict(reader.execute('SELECT id, status FROM "Runs"').fetchall())
    if dry_run:
        assert set(statuses.values()) == {"running"}
    else:
        assert sorted(statuses.values()).count("lost") == 9 and statuses["run-09"] == "succeeded"


@linux_only
def test_the_explain_hint_answers_first_with_what_start_up_would_decide(
    twelve: tuple[Path, Path],
) -> None:
    db, root = twelve
    out = qlfsm("startup", "--db", str(db), "--receipt-root", str(root), "--dry-run", env=env())
    argv = pasted(out.stdout)[0]
    explained = qlfsm(*argv[1:], env=env())
    assert explained.returncode == 0, explained.stderr
    assert "start-up now (ADR-0068, nothing written): row 10 -> unresolved" in explained.stdout
    assert "--receipt-root" not in explained.stdout.split("start-up now", 1)[0]


@linux_only
def test_reconcile_over_the_same_runs_keeps_its_words_and_fits_100_columns(
    twelve: tuple[Path, Path],
) -> None:
    db, root = twelve
    out = qlfsm("reconcile", "--db", str(db), "--receipt-root", str(root), env=env())
    assert out.returncode == 3 and widest(out.stdout) <= WIDTH, out.stdout
    spec_words = {"lost": "recovered", "completed": "recovered", "blocked": "unresolved"}
    for run, (row, words, _) in EXPECTED.items():
        [line] = per_run_lines(out.stdout)[run]
        assert line.split()[:4] == [run, f"at-{run[-2:]}", row, spec_words[words]], line


@linux_only
def test_no_line_is_over_100_columns_with_long_run_ids_long_paths_and_wide_text(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / ("receipts-" + "r" * 70)
    root.mkdir()
    make_candidate(repo, LONG, "at-long", handle="ql3lp1.bad", pid=3)  # row 10
    handle, pid = dead_handle()
    make_candidate(repo, WIDE, "at-wide", handle=handle, pid=pid + 1)  # row 11
    raw = sqlite3.connect(str(db_path), isolation_level=None)
    insert_runtime_run(raw, "CAST(X'72756e2d7aff' AS TEXT)", "at-bad")  # row 14
    raw.close()
    runs = {
        "startup": ["startup", "--db", str(db_path), "--receipt-root", str(root)],
        "startup --dry-run": ["startup", "--db", str(db_path), "--receipt-root", str(root),
                              "--dry-run"],
        "reconcile --dry-run": ["reconcile", "--db", str(db_path), "--receipt-root", str(root),
                                "--dry-run"],
    }  # fmt: skip
    for what, argv in runs.items():
        out = qlfsm(*argv, env=env())
        assert out.returncode == 3, (what, out.stderr)
        assert widest(out.stdout) <= WIDTH, (what, out.stdout)
        flat = "".join(out.stdout.splitlines())
        assert LONG in flat and WIDE in flat, (what, out.stdout)  # whole, across its lines
        assert "error:BadRow" in out.stdout
        commands = pasted(out.stdout)
        # The summary names the id that is not UTF-8 by its escaped text (spec 04, D-14).
        for run in (LONG, WIDE, "run-z\\xff"):
            assert ["qlfsm", "explain", "--db", str(db_path), "--run", run, "--receipt-root",
                    str(root)] in commands, (what, run, commands)  # fmt: skip
    full = json.loads(qlfsm("reconcile", *runs["startup"][1:], "--json", env=env()).stdout)
    assert {c["run_id"] for c in full["candidates"]} == {LONG, WIDE, "run-z\\xff"}


# --- the pieces ---------------------------------------------------------------------------------


def test_a_shortened_reason_is_cut_after_escaping_and_never_inside_an_escape() -> None:
    text = "a" * 10 + "\x1b[31m" + "b" * 50
    assert shorten(text, 17) == "a" * 10 + "\\x1b" + "..."
    assert shorten(text, 16) == "a" * 10 + "..."  # never "\\x1" or "\\x"
    assert shorten("运行" * 10, 9) == "运行运...", shorten("运行" * 10, 9)
    assert shorten("fits", 4) == "fits" and shorten(None, 4) == "-"


def test_a_long_reason_is_wrapped_under_its_column_and_a_row_without_room_takes_the_long_form() -> (
    None
):
    advice = "attempt_lock_held:pid_absent:its wrapper lives in another PID namespace; run " \
        "qlfsm where QingLong runs (docker exec), not the host"  # fmt: skip
    rows = [["run-1", "13", "lost", advice], ["run-2", "14", "failed", "y" * 400],
            [LONG, "10", "blocked", "invalid_handle"]]  # fmt: skip
    lines = fit_table(["run", "row", "outcome", "reason"], rows)
    assert max(cols(ln) for ln in lines) <= WIDTH
    assert lines[2].startswith("run-1  13   lost     attempt_lock_held:")
    column = lines[2].index("attempt_lock_held")
    assert lines[3].startswith(" " * column) and lines[3][column] != " "
    assert " ".join(ln.strip() for ln in lines[2:4]).endswith(advice.split()[-1])
    assert advice.replace(" ", "") in "".join(ln[column:] for ln in lines[2:4]).replace(" ", "")
    assert lines[4].startswith("run-2  14   failed   yyy")  # 400 columns: four lines, then ...
    assert all(ln.startswith(" " * column) for ln in lines[5:8]) and lines[7].endswith("...")
    assert lines[8:] == [LONG, "    row 10, blocked: invalid_handle"]


def test_a_command_too_long_for_a_line_is_cut_into_words_the_shell_joins_back() -> None:
    value = "/srv/" + "d" * 150 + "/it's here/ql.db"
    lines = command_lines([("qlfsm explain", None), ("--db", value), ("--run", "r-1")])
    assert max(cols(ln) for ln in lines) <= WIDTH and len(lines) > 2
    out = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + "\n".join(lines).strip().removeprefix("qlfsm explain")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split("\0")[:-1] == ["--db", value, "--run", "r-1"]


def test_prose_wraps_after_a_clause_and_keeps_a_short_line_as_it_is() -> None:
    assert wrap("short; line") == "short; line"
    line = "legacy shadow: disabled (" + "x" * 60 + "); the database was not opened"
    assert wrap(line).splitlines() == [line.split("; ")[0] + ";", "  the database was not opened"]


def test_what_the_report_cleans_is_the_escaping_rule() -> None:
    rows = [["run\r\nverdict: SAFE to start", "13", "lost", "reason\x1b]0;x\x07"]]
    lines = fit_table(["run", "row", "outcome", "reason"], rows)
    assert clean("run\r\nverdict: SAFE to start") in lines[2] and "\x1b" not in "".join(lines)


def test_the_zero_candidate_report_is_unchanged(db_path: Path, tmp_path: Path) -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['qlfsm', 'reconcile', '--db', sys.argv[1], '--receipt-root', sys.argv[2]]\n"
        "try:\n    runpy.run_module('reconciler', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
    )
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code, str(db_path), str(tmp_path)],
        capture_output=True, text=True, check=False, env=env(),
    )  # fmt: skip
    assert out.stdout.splitlines() == [
        "scanned 0: recovered 0, remaining 0, unresolved 0, failed 0",
        "verdict: SAFE to start",
    ], out.stdout + out.stderr


def test_startup_with_every_reviewed_origin_fits_100_columns(db_path: Path, tmp_path: Path) -> None:
    origins = "manual,scheduled_node,scheduled_system,boot,subscription,system,script,once,typo"
    out = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(tmp_path), "--origins",
                origins, env=env())  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert widest(out.stdout) <= WIDTH, out.stdout
    assert "outcome     manual  scheduled_node  scheduled_system  boot  subscription" in out.stdout
    disabled = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(tmp_path), env=env())
    assert widest(disabled.stdout) <= WIDTH, disabled.stdout
    with contextlib.closing(connect(str(db_path))) as conn:
        assert Repository(conn).get_run("x") is None
