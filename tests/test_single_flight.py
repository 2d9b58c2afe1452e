"""One start-up at a time per database, and a lock is a retry, not a block (docs/decisions.md
D-20). A real node: 12 Runs launched by the real launcher, their process groups SIGKILLed
(no receipt), a real receipt root, a real SQLite file read back through a second connection,
real `qlfsm` processes. The concurrency waits on readiness signals (a line on a pipe, a lock
the test holds), never on a sleep.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _primary_support import T0, linux_only, make_run
from conftest import read_snapshot

from reconciler._flight import startup_lock_path
from reconciler.launcher import launch
from reconciler.node import FakeClock, FileReceiptStore, ProcProvider, inspect_handle
from reconciler.primary import reconcile_connection
from storage import LOCK_BUDGET_ENV, Repository, connect

pytestmark = linux_only

N_RUNS = 12
RUN_IDS = [f"run-{i:02d}" for i in range(N_RUNS)]
# Long enough that no waiter gives up while a loaded machine runs the first start-up.
PATIENT_S = "120"
READY_S = 60.0


# --- a node whose 12 processes were SIGKILLed -------------------------------------------------


@pytest.fixture(scope="module")
def dead_node_template(tmp_path_factory: pytest.TempPathFactory, template_db: Path) -> Path:
    """Once per module: 12 launched Runs whose process groups were SIGKILLed and reaped."""
    home = tmp_path_factory.mktemp("dead-node")
    db = home / "ql.db"
    shutil.copyfile(template_db, db)
    root = home / "receipts"
    root.mkdir(mode=0o700)
    conn = connect(str(db))
    try:
        repo = Repository(conn)
        for i, run_id in enumerate(RUN_IDS):
            v = make_run(repo, run_id, "queued")
            repo.create_attempt(
                run_id=run_id, attempt_id=f"at-{i:02d}", expected_version=v, at_ms=T0
            )
            launched = launch(conn, str(root), run_id, ["sleep", "600"])
            os.killpg(launched.pid, signal.SIGKILL)
            launched.process.wait(30)
            assert inspect_handle(launched.handle, ProcProvider()).verdict == "not_running"
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return home


@pytest.fixture
def node(dead_node_template: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A fresh copy of the dead node: (database, receipt root)."""
    home = tmp_path / "node"
    shutil.copytree(dead_node_template, home)
    return home / "ql.db", home / "receipts"


def events_per_run(db: Path, kind: str) -> dict[str, int]:
    """How many events of ``kind`` each Run has, read through a second, fresh connection."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            'SELECT run_id, COUNT(*) FROM "RunEvents" WHERE type = ? GROUP BY run_id', (kind,)
        ).fetchall()
    return {str(r): int(n) for r, n in rows}


def statuses(db: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute('SELECT id, status FROM "Runs"').fetchall()
    return {str(r): str(s) for r, s in rows}


def env(budget: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in (LOCK_BUDGET_ENV, "QL3_SHADOW_ORIGINS")}
    out[LOCK_BUDGET_ENV] = budget
    return out


def command(name: str, db: Path, root: Path, *extra: str) -> list[str]:
    args = [sys.executable, "-m", "reconciler", name, "--db", str(db)]
    if name in ("startup", "reconcile", "sweep"):
        args += ["--receipt-root", str(root)]
    return [*args, *extra]


def spawn(args: list[str], budget: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(budget)
    )


def first_line(proc: subprocess.Popen[str], timeout: float = READY_S) -> str:
    """The first stderr line of ``proc`` (the readiness signal), within ``timeout``."""
    assert proc.stderr is not None
    ready, _, _ = select.select([proc.stderr], [], [], timeout)
    assert ready, f"no line on stderr within {timeout} s"
    return proc.stderr.readline()


def finish(proc: subprocess.Popen[str], head: str = "") -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, head + err


@contextlib.contextmanager
def holding_start_up_lock(db: Path, pid: int | None = None) -> Iterator[int]:
    """The single-flight lock of ``db`` held by this test process (as a start-up would hold
    it, its pid written inside) until the block ends."""
    fd = os.open(startup_lock_path(str(db)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{pid or os.getpid()}\n".encode())
        yield fd
    finally:
        os.close(fd)


def primary_of(name: str, stdout: str) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(stdout)
    return got["primary"] if name == "startup" else got


# --- 1. concurrent start-ups: every one exits 0, every Run decided exactly once ----------------


@pytest.mark.parametrize("name", ["startup", "reconcile"])
@pytest.mark.parametrize("n", [2, 3])
def test_concurrent_start_ups_over_12_dead_runs_all_exit_0_and_decide_each_run_once(
    node: tuple[Path, Path], name: str, n: int
) -> None:
    db, root = node
    # The barrier: this test holds the start-up lock until every process is waiting on it
    # (each says so on stderr), then lets them all go at once.
    with holding_start_up_lock(db):
        procs = [spawn(command(name, db, root, "--json"), PATIENT_S) for _ in range(n)]
        heads = [first_line(p) for p in procs]
        assert all(f"waiting for the start-up of pid {os.getpid()}" in h for h in heads), heads
    done = [finish(p, h) for p, h in zip(procs, heads, strict=True)]
    assert [code for code, _, _ in done] == [0] * n, [err for _, _, err in done]
    summaries = [primary_of(name, out) for _, out, _ in done]
    assert all(s["safe"] and s["unresolved"] == 0 and s["failed"] == 0 for s in summaries)
    # Exactly one pass found the 12 and decided them; the others found nothing left.
    assert sorted(s["scanned"] for s in summaries) == [0] * (n - 1) + [N_RUNS]
    assert events_per_run(db, "run.lost") == dict.fromkeys(RUN_IDS, 1)
    assert events_per_run(db, "attempt.lost") == dict.fromkeys(RUN_IDS, 1)
    # Each waiter said whose start-up it waited for once, nothing else on stderr.
    for _, _, err in done:
        assert err.count("waiting for the start-up") == 1 and err.count("\n") == 1, err


@pytest.mark.parametrize("n", [2, 3])
def test_start_ups_started_together_without_a_barrier_all_exit_0_deciding_each_run_once(
    node: tuple[Path, Path], n: int
) -> None:
    # The issue's own race: several start-ups at the same moment, no one holding anything.
    db, root = node
    procs = [spawn(command("startup", db, root, "--json"), PATIENT_S) for _ in range(n)]
    done = [finish(p) for p in procs]
    assert [code for code, _, _ in done] == [0] * n, [err for _, _, err in done]
    summaries = [primary_of("startup", out) for _, out, _ in done]
    assert sum(s["recovered"] for s in summaries) == N_RUNS
    assert all(s["safe"] and s["unresolved"] == 0 and s["failed"] == 0 for s in summaries)
    assert events_per_run(db, "run.lost") == dict.fromkeys(RUN_IDS, 1)


# --- 2. waiting for the single-flight lock ----------------------------------------------------


def test_a_start_up_waits_for_the_one_holding_the_lock_saying_its_pid_once_and_then_runs(
    node: tuple[Path, Path],
) -> None:
    db, root = node
    with holding_start_up_lock(db, pid=424242):
        proc = spawn(command("startup", db, root, "--json"), PATIENT_S)
        head = first_line(proc)
        assert "qlfsm: waiting for the start-up of pid 424242" in head
        assert proc.poll() is None  # still waiting: it has not gone ahead
        assert events_per_run(db, "run.lost") == {}
    code, out, err = finish(proc, head)
    assert code == 0, err
    assert primary_of("startup", out)["recovered"] == N_RUNS
    assert err == head  # the one line, said once
    assert events_per_run(db, "run.lost") == dict.fromkeys(RUN_IDS, 1)


@pytest.mark.parametrize("name", ["startup", "reconcile"])
def test_a_start_up_lock_held_past_the_budget_exits_75_naming_the_pid_and_writes_nothing(
    node: tuple[Path, Path], name: str
) -> None:
    db, root = node
    before = read_snapshot(db)
    with holding_start_up_lock(db, pid=424242):
        started = time.monotonic()
        proc = spawn(command(name, db, root, "--json"), "0.5")
        code, out, err = finish(proc)
        elapsed = time.monotonic() - started
    assert code == 75, err
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    errors = [line for line in lines if line.startswith("qlfsm: error: ")]
    assert len(errors) == 1 and len(lines) <= 2, err
    assert "the start-up of pid 424242 still holds" in errors[0] and "try again" in errors[0]
    assert elapsed < 0.5 + 3.5
    assert read_snapshot(db) == before


def test_a_zero_budget_fails_at_once_with_one_line(node: tuple[Path, Path]) -> None:
    db, root = node
    with holding_start_up_lock(db, pid=424242):
        code, out, err = finish(spawn(command("reconcile", db, root), "0"))
    assert code == 75 and out == "" and err.count("\n") == 1, err
    assert err.startswith("qlfsm: error: the start-up of pid 424242 still holds")


def test_a_shadow_pass_held_past_the_budget_fails_open_with_exit_0_and_says_busy(
    node: tuple[Path, Path],
) -> None:
    db, root = node
    with holding_start_up_lock(db, pid=424242):
        code, out, err = finish(
            spawn(command("shadow", db, root, "--origins", "manual", "--json"), "0.3")
        )
    assert code == 0, err
    assert json.loads(out) == {"state": "failed", "errorType": "Busy"}
    assert err.count("waiting for the start-up of pid 424242") == 1


def test_dry_runs_take_no_start_up_lock_and_write_nothing(node: tuple[Path, Path]) -> None:
    db, root = node
    with holding_start_up_lock(db, pid=424242):
        for name in ("reconcile", "startup"):
            code, out, err = finish(spawn(command(name, db, root, "--dry-run", "--json"), "0"))
            assert code == 0, err
            assert "waiting" not in err
            assert primary_of(name, out)["recovered"] == N_RUNS  # what the pass would do
    assert events_per_run(db, "run.lost") == {}


# --- 3. a Run another pass decided meanwhile is never a blocker --------------------------------


def second_pass(db: Path, root: Path) -> dict[str, Any]:
    """Another start-up's whole pass, on its own connection, to completion."""
    with contextlib.closing(connect(str(db))) as conn:
        return reconcile_connection(conn, FileReceiptStore(str(root)), ProcProvider(), FakeClock())


def test_runs_another_pass_made_lost_during_the_grace_count_as_decided_elsewhere(
    node: tuple[Path, Path],
) -> None:
    # Without the single-flight lock (the Python API takes none): pass B decides all 12
    # while pass A is between its probes and its re-check (row 13 `changed_before_lost`).
    db, root = node
    others: list[dict[str, Any]] = []

    def probe_then_let_the_other_pass_run(*args: Any, **kw: Any) -> Any:
        if not others:
            others.append(second_pass(db, root))
        return inspect_handle(*args, **kw)

    with contextlib.closing(connect(str(db))) as conn:
        summary = reconcile_connection(
            conn,
            FileReceiptStore(str(root)),
            ProcProvider(),
            FakeClock(),
            probe=probe_then_let_the_other_pass_run,
        )
    assert others[0]["recovered"] == N_RUNS and others[0]["safe"]
    assert summary["safe"] is True and summary["unresolved"] == 0
    # The first was probed before B ran (row 13, re-checked after the grace); the other 11
    # were first read after it (row 2, `status_changed`): all decided elsewhere.
    first, *rest = [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]]
    assert first == ("13", "recovered", "decided_elsewhere:lost")
    assert rest == [("2", "recovered", "decided_elsewhere:lost")] * (N_RUNS - 1)
    assert events_per_run(db, "run.lost") == dict.fromkeys(RUN_IDS, 1)


class RacingClock(FakeClock):
    """A clock whose first wall-time reading (taken right before the first commit) lets
    another writer decide every Run first."""

    def __init__(self, race: Any) -> None:
        super().__init__()
        self.race = race

    def now_ms(self) -> int:
        race, self.race = self.race, None
        if race is not None:
            race()
        return super().now_ms()


def test_a_compare_and_set_conflict_and_a_status_changed_since_the_page_are_decided_elsewhere(
    db_path: Path, tmp_path: Path
) -> None:
    # Row 7 (claimed, no receipt) writes `lost` without a probe: the other writer commits
    # between A's page and A's first commit. The first candidate's commit meets a Conflict
    # (row 14); the others are read after it and show `status_changed` (row 2).
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    with contextlib.closing(connect(str(db_path))) as conn:
        repo = Repository(conn)
        for i in range(3):
            v = make_run(repo, f"run-{i}", "dispatching")
            repo.create_attempt(
                run_id=f"run-{i}", attempt_id=f"at-{i}", expected_version=v, at_ms=T0
            )
    others: list[dict[str, Any]] = []
    with contextlib.closing(connect(str(db_path))) as conn:
        summary = reconcile_connection(
            conn,
            FileReceiptStore(str(root)),
            ProcProvider(),
            RacingClock(lambda: others.append(second_pass(db_path, root))),
        )
    assert others[0]["recovered"] == 3
    assert summary["safe"] is True
    got = [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]]
    assert got == [
        ("14", "recovered", "decided_elsewhere:lost"),
        ("2", "recovered", "decided_elsewhere:lost"),
        ("2", "recovered", "decided_elsewhere:lost"),
    ]
    assert events_per_run(db_path, "run.lost") == {f"run-{i}": 1 for i in range(3)}


def test_a_run_that_changed_but_is_still_a_candidate_still_blocks(
    db_path: Path, tmp_path: Path
) -> None:
    # Moved, but still `running` (not decided): the re-read keeps the block (row 2).
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    with contextlib.closing(connect(str(db_path))) as conn:
        repo = Repository(conn)
        v = make_run(repo, "run-0", "dispatching")
        repo.create_attempt(run_id="run-0", attempt_id="at-0", expected_version=v, at_ms=T0)

    def start_it() -> None:
        from storage import Actor, RunChange

        with contextlib.closing(connect(str(db_path))) as other:
            other_repo = Repository(other)
            run = other_repo.get_run("run-0")
            assert run is not None
            other_repo.advance(
                "run-0", run.version, [RunChange("start")], actor=Actor("system"), at_ms=T0
            )

    store = FileReceiptStore(str(root))

    class StartsOnCheck(FileReceiptStore):
        def check_root(self) -> bool:  # between the page and the first read of the Run
            start_it()
            return store.check_root()

    with contextlib.closing(connect(str(db_path))) as conn:
        summary = reconcile_connection(conn, StartsOnCheck(str(root)), ProcProvider(), FakeClock())
    [only] = summary["candidates"]
    assert (only["row"], only["outcome"], only["reason"]) == ("2", "unresolved", "status_changed")
    assert summary["safe"] is False
    assert statuses(db_path)["run-0"] == "running"


# --- 4. another process holding the write lock past the budget: exit 75, one line --------------

# A second real process that takes the write lock, says so, and holds it until its stdin ends.
LOCKER = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('BEGIN IMMEDIATE')\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextlib.contextmanager
def writer_holding(db: Path) -> Iterator[None]:
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None
        ready, _, _ = select.select([locker.stdout], [], [], READY_S)
        assert ready and locker.stdout.readline() == "locked\n"
        yield
    finally:
        assert locker.stdin is not None
        locker.stdin.close()
        locker.wait(30)
        if locker.stdout is not None:
            locker.stdout.close()


LOCKED_COMMANDS = {
    "startup": ["startup", "--receipt-root", "{root}", "--json"],
    "reconcile": ["reconcile", "--receipt-root", "{root}", "--json"],
    "db init": ["db", "init"],
    "resolve": ["resolve", "--run", "run-01", "--to", "lost", "--reason", "dead after reboot"],
    "sweep": ["sweep", "--receipt-root", "{root}", "--json"],
    "drain": ["drain", "--receipt-root", "{root}", "--json"],
}


@pytest.mark.parametrize("name", list(LOCKED_COMMANDS))
def test_a_write_lock_held_past_the_budget_is_exit_75_and_one_line_for_every_command(
    node: tuple[Path, Path], name: str
) -> None:
    db, root = node
    # One Attempt ended (an operator's decision) with its `pending` journal row: the sweep
    # has a row to delete, so it too meets the lock.
    done = subprocess.run(
        command("resolve", db, root, "--run", "run-00", "--to", "lost", "--reason", "gone"),
        capture_output=True,
        text=True,
        env=env("5"),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    before = read_snapshot(db)
    args = [a.replace("{root}", str(root)) for a in LOCKED_COMMANDS[name]]
    with writer_holding(db):
        out = subprocess.run(
            [sys.executable, "-m", "reconciler", *args, "--db", str(db)],
            capture_output=True,
            text=True,
            env=env("0.5"),
            timeout=120,
            check=False,
        )
    assert out.returncode == 75, (out.returncode, out.stdout, out.stderr)
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qlfsm: error: "), out.stderr
    assert "locked by another process" in lines[0] and "try again" in lines[0]
    assert "not_attempted" not in lines[0] and "explain" not in lines[0]
    assert read_snapshot(db) == before
