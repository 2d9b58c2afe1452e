"""`qlfsm drain` (docs/decisions.md D-26): more than a page of candidates, decided page by
page, each page with the whole ADR-0068 pass, under the single-flight lock; on real SQLite
files, real receipts and real (dead and live) processes."""

from __future__ import annotations

import json
import re
import signal
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
    receipt,
    sleepers,
)
from test_cli_schemas import validate
from test_single_flight import env, events_per_run, holding_start_up_lock

from reconciler._drain import drain
from reconciler._reconcile import primary_pass
from reconciler.node import FakeClock, FileReceiptStore, ProcProvider
from reconciler.primary import GRACE_MS
from storage import PRIMARY_PAGE, Repository, candidate_window

N = 300  # more than a page: start-up alone decides none of them


def dead(repo: Repository, ids: list[str], handle: str, pid: int) -> None:
    """A `running` runtime Run per id with one `running` Attempt `at-<id>` whose process (a
    real one) has exited and been reaped: no process, no receipt (spec 04 row 13: lost)."""
    for run_id in ids:
        make_candidate(repo, run_id, f"at-{run_id}", handle=handle, pid=pid)


def statuses(db: Path) -> dict[str, str]:
    """Every Run's status, read through a second, fresh connection."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return dict(conn.execute('SELECT id, status FROM "Runs"').fetchall())
    finally:
        conn.close()


def root_of(tmp_path: Path) -> Path:
    root = tmp_path / "receipts"
    root.mkdir(exist_ok=True)
    return root


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


@linux_only
def test_one_drain_decides_300_dead_candidates_lost_with_exactly_one_grace_per_page(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    dead(repo, ids("run-", N), handle, pid)
    root = root_of(tmp_path)
    clock = FakeClock()
    pages: list[dict[str, Any]] = []
    summary = drain(
        str(db_path), str(root), "standalone", clock=clock, provider=ProcProvider(),
        on_page=pages.append,
    )  # fmt: skip
    # Two pages (256 + 44), each paying ONE grace (spec 04 "The grace").
    assert clock.sleeps == [GRACE_MS["standalone"] / 1000] * 2
    assert [(p["page"], p["scanned"], p["recovered"]) for p in pages] == [
        (1, 256, 256),
        (2, 44, 44),
    ]
    # Each page's verifier ran on its own window and found nothing to revoke or add.
    assert all(p["safe"] and not p["truncated"] for p in pages)
    assert summary["safe"] is True and summary["left"] == 0 and summary["truncated"] is False
    assert summary["recovered"] == N and summary["scanned"] == N
    assert {(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]} == {
        ("13", "recovered", "process_not_running:pid_absent")
    }
    assert set(statuses(db_path).values()) == {"lost"}
    assert events_per_run(db_path, "run.lost") == dict.fromkeys(ids("run-", N), 1)
    # And now start-up's own pass has nothing left: safe, zero candidates.
    after = primary_pass(str(db_path), str(root), "standalone")
    assert after["safe"] is True and after["scanned"] == 0


@linux_only
def test_the_drain_command_decides_300_dead_candidates_and_a_following_startup_is_safe(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    dead(repo, ids("run-", N), handle, pid)
    root = root_of(tmp_path)
    base = ("--db", str(db_path), "--receipt-root", str(root))
    blocked = qlfsm("startup", *base, env=env("5"))
    assert blocked.returncode == 3 and set(statuses(db_path).values()) == {"running"}
    out = qlfsm("drain", *base, env=env("5"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:3] == [
        "page 1: scanned 256: recovered 256, remaining 0, unresolved 0, failed 0",
        "page 2: scanned 44: recovered 44, remaining 0, unresolved 0, failed 0",
        "drained 2 page(s): scanned 300: recovered 300, remaining 0, unresolved 0, failed 0",
    ]
    assert lines[-1] == "verdict: SAFE to start" and out.stderr == ""
    assert set(statuses(db_path).values()) == {"lost"}
    after = qlfsm("startup", *base, "--json", env=env("5"))
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["primary"]["scanned"] == 0


@linux_only
def test_live_processes_stay_running_receipts_are_applied_and_the_dead_are_lost_across_pages(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    root = root_of(tmp_path)
    store = FileReceiptStore(str(root))
    dead(repo, ids("run-", N), handle, pid)
    with sleepers(3) as live:
        # One live process on each side of the page boundary (run-255 | run-256) and at the end.
        placed = {"run-100": live[0], "run-270": live[1], "run-299": live[2]}
        for run_id, sleeper in placed.items():
            make_candidate(repo, f"{run_id}-live", f"at-{run_id}-live",
                           handle=sleeper.handle, pid=sleeper.pid)  # fmt: skip
        published = ["run-010", "run-280"]  # exited with a receipt: its own outcome applies
        store.publish(receipt("run-010", "at-run-010", exit_code=0))
        store.publish(receipt("run-280", "at-run-280", exit_code=7))
        out = qlfsm("drain", "--db", str(db_path), "--receipt-root", str(root), "--json",
                    env=env("5"))  # fmt: skip
        assert out.returncode == 0, out.stderr
        summary = validate("drain", out.stdout)  # reconciler/cli/schemas/drain.json
        assert [p["scanned"] for p in summary["pages"]] == [256, 47]
        outcome = {c["run_id"]: (c["row"], c["outcome"]) for c in summary["candidates"]}
        for run_id in placed:
            assert outcome[f"{run_id}-live"] == ("12", "remaining")
        now = statuses(db_path)
        assert [now[f"{r}-live"] for r in placed] == ["running"] * 3
        assert (now["run-010"], now["run-280"]) == ("succeeded", "failed")
        assert [outcome[r][1] for r in published] == ["recovered"] * 2
        lost = [r for r in ids("run-", N) if r not in published]
        assert {now[r] for r in lost} == {"lost"}
        assert summary["recovered"] == N and summary["remaining"] == 3 and summary["left"] == 3
        # The three retained are a page start-up reads whole: it proves them itself.
        after = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(root), "--json",
                      env=env("5"))  # fmt: skip
        assert after.returncode == 0, after.stderr
        assert json.loads(after.stdout)["primary"]["remaining"] == 3


@linux_only
def test_a_page_full_of_blockers_is_passed_once_and_the_candidates_after_it_are_decided(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    blockers = ids("run-a", 260)  # more than a page: spec 04 row 10, a handle that is no handle
    for run_id in blockers:
        make_candidate(repo, run_id, f"at-{run_id}", handle="ql3lp1.bad", pid=3)
    dead(repo, ids("run-b", 40), handle, pid)
    root = root_of(tmp_path)
    base = ("--db", str(db_path), "--receipt-root", str(root))
    out = qlfsm("drain", *base, env=env("5"))
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines()[:3] == [
        "page 1: scanned 256: recovered 0, remaining 0, unresolved 256, failed 0",
        "page 2: scanned 44: recovered 40, remaining 0, unresolved 4, failed 0",
        "drained 2 page(s): scanned 300: recovered 40, remaining 0, unresolved 260, failed 0",
    ]
    assert "blocked by 260 run(s):" in out.stdout
    joined = re.sub(r"\\\n\s*", "", out.stdout)
    for run_id in (blockers[0], blockers[-1]):
        assert f"qlfsm explain --db {db_path} --run {run_id} --receipt-root {root}" in joined
    assert out.stdout.rstrip().endswith("verdict: start-up BLOCKED")
    now = statuses(db_path)
    assert {now[r] for r in ids("run-b", 40)} == {"lost"}
    assert {now[r] for r in blockers} == {"running"}
    # Again: the blockers are walked once more, nothing new is decided, and it ends.
    again = qlfsm("drain", *base, "--json", env=env("5"))
    assert again.returncode == 3
    summary = validate("drain", again.stdout)
    assert [p["scanned"] for p in summary["pages"]] == [256, 4]
    assert summary["recovered"] == 0 and summary["unresolved"] == 260
    assert summary["truncated"] is True and summary["left"] == PRIMARY_PAGE + 1


def test_a_dry_run_walks_every_page_and_writes_nothing(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    insert_bare_runs(repo.conn, 600)
    before = statuses(db_path)
    out = qlfsm("drain", "--db", str(db_path), "--receipt-root", str(root_of(tmp_path)),
                "--json", "--dry-run", env=env("5"))  # fmt: skip
    summary = json.loads(out.stdout)
    # A Run with no Attempt is spec 04's row 2 (no active Attempt): it blocks. Three windows,
    # each read once, though a dry run decides (writes) none of them.
    assert out.returncode == 3 and summary["dry_run"] is True
    assert [p["scanned"] for p in summary["pages"]] == [256, 256, 88]
    assert statuses(db_path) == before


@linux_only
def test_the_drain_waits_for_the_single_flight_lock_and_refuses_past_the_budget(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    dead(repo, ids("run-", 3), handle, pid)
    root = root_of(tmp_path)
    args = [sys.executable, "-m", "reconciler", "drain", "--db", str(db_path),
            "--receipt-root", str(root)]  # fmt: skip
    with holding_start_up_lock(db_path, pid=424242):
        out = subprocess.run(args, capture_output=True, text=True, env=env("0.5"), timeout=60)
    assert out.returncode == 75 and out.stdout == ""
    errors = [line for line in out.stderr.splitlines() if line.startswith("qlfsm: error: ")]
    assert len(errors) == 1 and "the start-up of pid 424242 still holds" in errors[0]
    assert set(statuses(db_path).values()) == {"running"}  # nothing written
    # Held for a moment only: it waits (saying whom for) and then drains.
    with holding_start_up_lock(db_path, pid=424242):
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env("30"))  # fmt: skip
        assert proc.stderr is not None
        head = proc.stderr.readline()
        assert "qlfsm: waiting for the start-up of pid 424242" in head
        assert set(statuses(db_path).values()) == {"running"}
    out2, err2 = proc.communicate(timeout=60)
    assert proc.returncode == 0, err2
    assert out2.rstrip().endswith("verdict: SAFE to start")
    assert set(statuses(db_path).values()) == {"lost"}


@linux_only
def test_an_interrupt_between_pages_keeps_the_committed_pages_and_says_so_in_one_line(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    dead(repo, ids("run-", N), handle, pid)
    root = root_of(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "drain", "--db", str(db_path), "--receipt-root",
         str(root), "--profile", "standalone"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env("5"),
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first.startswith("page 1: scanned 256: recovered 256")
    proc.send_signal(signal.SIGINT)  # page 2 is in its probes or its grace (100 ms)
    out, err = proc.communicate(timeout=60)
    # The console script ends by the signal itself after its line (shell status 130).
    assert proc.returncode == -signal.SIGINT, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "interrupted (SIGINT)" in err
    assert "the 1 page(s) drained stay committed (256 run(s) decided)" in err
    assert "run qlfsm drain again for the rest" in err
    now = statuses(db_path)
    assert {now[r] for r in ids("run-", 256)} == {"lost"}
    assert {now[r] for r in ids("run-", N)[256:]} == {"running"}


def test_an_interrupt_in_process_between_pages_leaves_the_first_page_committed(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    for run_id in ids("run-", N):
        # Claimed, never started: lost at once, no probe and no grace (spec 04).
        make_candidate(repo, run_id, f"at-{run_id}", attempt="claimed", run="dispatching")

    def stop(summary: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        drain(str(db_path), str(root_of(tmp_path)), "standalone", clock=FakeClock(), on_page=stop)
    now = statuses(db_path)
    assert {now[r] for r in ids("run-", 256)} == {"lost"}
    assert {now[r] for r in ids("run-", N)[256:]} == {"dispatching"}


def test_a_truncated_start_up_names_the_drain_command_with_the_count(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    insert_bare_runs(repo.conn, 257)
    root = root_of(tmp_path)
    for command in ("startup", "reconcile"):
        out = qlfsm(command, "--db", str(db_path), "--receipt-root", str(root), env=env("5"))
        assert out.returncode == 3
        joined = re.sub(" +", " ", re.sub(r"\\\n\s*", "", out.stdout))
        assert "more than 256 candidate runs" in joined
        assert f"qlfsm drain --db {db_path} --receipt-root {root}" in joined
        # What it prints about the truncated page keeps to 100 columns (D-22).
        said = out.stdout[out.stdout.index("blocked: more than 256") :]
        assert max(len(line) for line in said.splitlines()) <= 100


def test_a_window_starts_after_its_bound_and_ends_at_its_limit(
    repo: Repository, db_path: Path
) -> None:
    insert_bare_runs(repo.conn, 10)
    conn = repo.conn
    page, more, last = candidate_window(conn, limit=4)
    assert [c.run_id for c in page] == ids("run-", 4) and more is True
    page, more, last2 = candidate_window(conn, last, limit=4)
    assert [c.run_id for c in page] == ids("run-", 8)[4:] and more is True
    page, more, _ = candidate_window(conn, last, last2, limit=4)
    assert [c.run_id for c in page] == ids("run-", 8)[4:] and more is False
    page, more, end = candidate_window(conn, last2, limit=4)
    assert [c.run_id for c in page] == ["run-008", "run-009"] and more is False
    assert candidate_window(conn, end) == ([], False, None)


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh", "after-ANALYZE"])
def test_every_window_statement_is_an_index_range_in_id_order_never_a_scan_or_a_sort(
    db_path: Path, analyzed: bool
) -> None:
    from test_query_plans import plan, populate, scans_runs

    from storage import _candidates as w
    from storage import connect

    conn = connect(str(db_path))
    try:
        populate(conn)
        if analyzed:
            conn.execute("ANALYZE")
        statements = [
            (w._SELECT + w._ORDER, (257,)),
            (w._SELECT + w._AFTER + w._ORDER, (3, 257)),
            (w._SELECT + w._AFTER + w._UPTO + w._ORDER, (3, 9, 257)),
            (w._LAST, ()),
        ]
        for sql, params in statements:
            details = plan(conn, sql, params)
            assert not scans_runs(details), details
            assert not [d for d in details if d.startswith("SCAN") or "TEMP B-TREE" in d], details
            assert details[0].startswith("SEARCH r USING INDEX"), details
    finally:
        conn.close()
