"""`--dry-run`: the decision every candidate would get now, from a real receipt read and a real
probe (the grace paid once), and not one byte written: the database file (and its -wal and
-journal), the receipt root and its quarantine are byte-for-byte what they were. Then the real
pass does exactly what the dry run predicted, for every row of spec 04."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    T0,
    dead_handle,
    decisions,
    insert_bare_runs,
    linux_only,
    make_candidate,
    make_run,
    other_connection,
    qlfsm,
    receipt,
    sleepers,
)
from _support import tree_digest
from test_db_faults import insert_runtime_run

from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    ProcProvider,
    capture_handle,
    inspect_handle,
)
from reconciler.primary import predict, reconcile_connection
from storage import Repository, connect


def snapshot(db_path: Path, root: Path) -> dict[str, str | None]:
    """Every byte the pass could touch (as digests): the database file and its -wal /
    -journal, and every file and directory under the receipt root (the quarantine is inside
    it)."""
    return tree_digest(db_path, root)


@pytest.fixture
def sleeper() -> Iterator[Any]:
    with sleepers() as [s]:
        yield s


def every_row(repo: Repository, db_path: Path, store: FileReceiptStore, live: Any) -> None:
    """One candidate per row of spec 04 that a database at rest can show (row 2 needs a
    concurrent writer, row 9 an unreadable /proc: their own tests below)."""
    # row 1: two active Attempts
    v = make_candidate(repo, "run-01", "at-01", attempt="starting", run="dispatching")
    repo.create_attempt(run_id="run-01", attempt_id="at-01b", expected_version=v, at_ms=T0)
    # row 3: dispatching, no Attempt at all
    make_run(repo, "run-03", "dispatching")
    # row 3b: running, no active Attempt
    make_run(repo, "run-03b", "running")
    # row 4: the latest Attempt is finished, an older one is active
    v = make_candidate(repo, "run-04", "at-04", attempt="starting", run="dispatching")
    repo.create_attempt(run_id="run-04", attempt_id="at-04b", expected_version=v, at_ms=T0)
    other = other_connection(db_path)
    other.execute("UPDATE \"RunAttempts\" SET status = 'failed' WHERE id = 'at-04b'")
    other.close()
    # row 5: a trusted receipt
    make_candidate(repo, "run-05", "at-05", handle=dead_handle()[0], pid=1)
    store.publish(receipt("run-05", "at-05", exit_code=3))
    # row 6: an invalid receipt
    make_candidate(repo, "run-06", "at-06", handle=dead_handle()[0], pid=1)
    store.publish(receipt("run-06", "at-06", token="x" * 43))
    # row 7: a claimed Attempt, no receipt
    make_candidate(repo, "run-07", "at-07", attempt="claimed", run="dispatching")
    # row 8: starting without a handle
    make_candidate(repo, "run-08", "at-08", attempt="starting", run="dispatching")
    # row 10: a handle that does not parse
    make_candidate(repo, "run-10", "at-10", handle="ql3lp1.garbage", pid=42)
    # row 11: a live process's handle, another pid stored
    make_candidate(repo, "run-11", "at-11", handle=live.handle, pid=live.pid + 1)
    # row 12: the live process of a starting Attempt (the real pass adopts it: writes)
    make_candidate(
        repo,
        "run-12",
        "at-12",
        attempt="starting",
        run="dispatching",
        handle=live.handle,
        pid=live.pid,
    )
    # row 13: a process that exited
    handle, pid = dead_handle()
    make_candidate(repo, "run-13", "at-13", handle=handle, pid=pid)
    # row 14: a Run id that is not UTF-8 text
    raw = sqlite3.connect(str(db_path), isolation_level=None)
    insert_runtime_run(raw, "CAST(X'72756e2d3134ff' AS TEXT)", "at-14")
    raw.close()


EXPECTED_ROWS = ["1", "3", "3b", "4", "5", "6", "7", "8", "10", "11", "12", "13", "14"]


@linux_only
def test_a_dry_run_writes_no_byte_and_predicts_every_row_the_real_pass_then_takes(
    repo: Repository, db_path: Path, store: FileReceiptStore, sleeper: Any
) -> None:
    every_row(repo, db_path, store, sleeper)
    root = Path(store.root)
    before = snapshot(db_path, root)
    clock = FakeClock()
    with connect(str(db_path)) as conn:
        predicted = reconcile_connection(conn, store, ProcProvider(), clock, dry_run=True)
    assert snapshot(db_path, root) == before
    assert clock.sleeps == [0.1]  # the grace, paid once, as the real pass pays it
    assert predicted["dry_run"] is True
    assert sorted(c["row"] for c in predicted["candidates"]) == sorted(EXPECTED_ROWS)
    with connect(str(db_path)) as conn:
        real = reconcile_connection(conn, store, ProcProvider(), FakeClock())
    assert "dry_run" not in real
    assert decisions(predicted) == decisions(real)
    assert {k: v for k, v in predicted.items() if k != "dry_run"} == real
    assert snapshot(db_path, root) != before  # and the real pass did write


@linux_only
def test_the_commands_dry_run_writes_no_byte_and_the_real_command_does_what_it_said(
    repo: Repository, db_path: Path, store: FileReceiptStore, sleeper: Any
) -> None:
    every_row(repo, db_path, store, sleeper)
    root = Path(store.root)
    before = snapshot(db_path, root)
    args = ("--db", str(db_path), "--receipt-root", store.root, "--json")
    dry = qlfsm("reconcile", *args, "--dry-run")
    assert snapshot(db_path, root) == before, dry.stderr
    start = qlfsm("startup", *args, "--dry-run")
    assert snapshot(db_path, root) == before, start.stderr
    predicted = json.loads(dry.stdout)
    startup = json.loads(start.stdout)
    assert predicted["dry_run"] is True and startup["dry_run"] is True
    assert startup["shadow"] == {"state": "skipped", "reason": "dry_run"}
    assert decisions(startup["primary"]) == decisions(predicted)
    real = qlfsm("reconcile", *args)
    assert (dry.returncode, start.returncode) == (real.returncode, real.returncode) == (3, 3)
    assert decisions(predicted) == decisions(json.loads(real.stdout))
    human = qlfsm("reconcile", *args[:-1], "--dry-run")
    assert "dry run, nothing written" in human.stdout


@linux_only
def test_a_dry_run_predicts_row_9_when_proc_cannot_be_read(
    repo: Repository, db_path: Path, store: FileReceiptStore, sleeper: Any, tmp_path: Path
) -> None:
    make_candidate(repo, "run-09", "at-09", handle=sleeper.handle, pid=sleeper.pid)
    broken = ProcProvider(str(tmp_path / "no-proc-here"))
    before = snapshot(db_path, Path(store.root))
    with connect(str(db_path)) as conn:
        predicted = reconcile_connection(conn, store, broken, FakeClock(), dry_run=True)
    assert snapshot(db_path, Path(store.root)) == before
    with connect(str(db_path)) as conn:
        real = reconcile_connection(conn, store, broken, FakeClock())
    assert (
        decisions(predicted)
        == decisions(real)
        == [("run-09", "at-09", "9", "failed", "provider_unavailable")]
    )


def test_a_dry_run_predicts_row_2_when_a_run_moves_after_the_page(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    # Someone else moves run-2 while run-1 is handled: the same move under both passes.
    for name in ("dry", "real"):
        path = tmp_path / f"{name}.db"
        path.write_bytes(db_path.read_bytes())
        with connect(str(path)) as setup:
            r = Repository(setup)
            make_candidate(r, "run-1", "at-1", attempt="claimed", run="dispatching")
            make_candidate(r, "run-2", "at-2", attempt="claimed", run="dispatching")
    summaries = {}
    for name in ("dry", "real"):
        path = tmp_path / f"{name}.db"
        root = tmp_path / f"receipts-{name}"
        root.mkdir()

        class Moving(FileReceiptStore):
            def read(self, attempt_id: str) -> Any:
                if attempt_id == "at-1":
                    other = other_connection(path)  # noqa: B023 - used within the loop
                    other.execute("UPDATE \"Runs\" SET status = 'running' WHERE id = 'run-2'")
                    other.close()
                return super().read(attempt_id)

        with connect(str(path)) as conn:
            summaries[name] = reconcile_connection(
                conn, Moving(str(root)), ProcProvider(), FakeClock(), dry_run=name == "dry"
            )
    assert decisions(summaries["dry"]) == decisions(summaries["real"])
    assert decisions(summaries["dry"])[1][2:] == ("2", "unresolved", "status_changed")


def test_a_dry_run_predicts_a_receipt_quarantined_by_an_earlier_pass(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-06", "at-06", handle=dead_handle()[0], pid=1)
    store.publish(receipt("run-06", "at-06", token="x" * 43))
    with connect(str(db_path)) as conn:
        first = reconcile_connection(conn, store, ProcProvider(), FakeClock())
    assert decisions(first)[0][2] == "6"
    before = snapshot(db_path, Path(store.root))
    with connect(str(db_path)) as conn:
        predicted = reconcile_connection(conn, store, ProcProvider(), FakeClock(), dry_run=True)
    assert snapshot(db_path, Path(store.root)) == before
    with connect(str(db_path)) as conn:
        real = reconcile_connection(conn, store, ProcProvider(), FakeClock())
    assert (
        decisions(predicted)
        == decisions(real)
        == [("run-06", "at-06", "6", "unresolved", "receipt_quarantined_earlier")]
    )


def test_a_dry_run_of_zero_candidates_says_so_and_is_safe(db_path: Path, tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    done = qlfsm(
        "reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json", "--dry-run"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dry_run"] is True
    plain = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert "dry_run" not in json.loads(plain.stdout)


# --- one candidate predicted alone (``qlfsm explain --receipt-root``) ------------------------


def _fake_candidates(repo: Repository) -> tuple[FakeProcessTable, list[str]]:
    """run-1 whose process runs, run-2 whose process is gone (row 13 needs the grace)."""
    procs = FakeProcessTable()
    handles = []
    for n, alive in ((1, True), (2, False)):
        pid = procs.spawn()
        handle = capture_handle(pid, procs, platform="linux")
        if not alive:
            procs.reap(pid)
        make_candidate(repo, f"run-{n}", f"at-{n}", handle=handle, pid=pid)
        handles.append(handle)
    return procs, handles


def test_one_candidate_is_predicted_alone_probing_only_it_and_paying_no_grace_it_does_not_need(
    repo: Repository, conn: Any, store: FileReceiptStore, db_path: Path
) -> None:
    procs, handles = _fake_candidates(repo)
    clock = FakeClock(T0)
    probed: list[str] = []

    def probe(handle: str, provider: Any, *, platform: str) -> Any:
        probed.append(handle)
        return inspect_handle(handle, provider, platform=platform)

    before = snapshot(db_path, store.root)
    entry, truncated = predict(conn, store, procs, clock, "run-1", platform="linux", probe=probe)
    assert (entry, truncated) == (
        {
            "run_id": "run-1",
            "attempt_id": "at-1",
            "row": "12",
            "outcome": "remaining",
            "reason": "process_running",
        },
        False,
    )
    assert probed == [handles[0]] * 2  # phase 1 and the final verifier; run-2 never
    assert clock.sleeps == []
    # run-2 needs the grace: paid for it, once; the prediction is the whole pass's entry.
    entry, _ = predict(conn, store, procs, clock, "run-2", platform="linux", probe=probe)
    assert entry is not None and (entry["row"], entry["outcome"]) == ("13", "recovered")
    assert len(clock.sleeps) == 1
    whole = reconcile_connection(conn, store, procs, FakeClock(T0), platform="linux", dry_run=True)
    assert [c for c in whole["candidates"] if c["run_id"] == "run-2"] == [entry]
    assert snapshot(db_path, store.root) == before  # nothing written


def test_a_run_that_is_not_a_candidate_or_beyond_a_truncated_page_is_predicted_as_none(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    procs, _ = _fake_candidates(repo)
    assert predict(conn, store, procs, FakeClock(T0), "run-9", platform="linux") == (None, False)
    insert_bare_runs(conn, 257)
    assert predict(conn, store, procs, FakeClock(T0), "run-1", platform="linux") == (None, True)
