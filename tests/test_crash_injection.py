"""SIGKILL a real `python -m reconciler reconcile` at many points of a batch.

The batch: dead processes (real `sleep`s, killed and reaped: their handles prove
`not_running`), some of which published a real receipt file, and one live `sleep` that must be
retained and never lost. The kill points are made observable by a `sitecustomize` module on the
subprocess's PYTHONPATH, active only with QLFSM_TEST_GATES=1: it prints a marker on stderr
before and after every COMMIT and before every receipt delete, then waits for one line on
stdin. The test answers "go" or SIGKILLs the process while it waits, so a kill lands exactly
between BEGIN IMMEDIATE and COMMIT, just after a COMMIT (before the receipt is deleted), or
after the delete (before the journal is resolved). A second sweep kills after wall-clock
delays, without the hook, to cover points between the markers.

After every kill the database and the receipt root are checked: every Run is either
untouched or wholly advanced (both rows, all its events), version == event_sequence == event
count, no receipt is gone without its committed terminal Run, the live process is not lost.
Then one clean pass converges everything and a further pass writes nothing.

The same hook kills `python -m reconciler shadow` (ADR-0448) at every marker of a batch of
rows 10 and 9, each on a fresh copy: a kill between the Attempt commit and the Run commit must
leave exactly that torn pair, and the next pass must report it `repaired` (ADR-0448 §6).

Finally the whole `python -m reconciler startup --legacy-normalize` (2.x normalization, shadow,
primary) is killed at every marker of a mixed batch, each on a fresh copy: the next start-up
must exit 0 and leave every Run where every other kill point's next start-up left it, and a
further start-up must write nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _primary_support import dead_handle, linux_only, make_candidate, receipt, sleepers
from _shadow_support import LegacyDb

from reconciler.node import FileReceiptStore, receipt_path
from storage import Repository, connect

pytestmark = pytest.mark.orderings

DEAD = 16
WITH_RECEIPT = 6  # of the dead ones, the first few published their receipt before dying

HOOK = textwrap.dedent(
    '''
    """Test-only kill points for tests/test_crash_injection.py (inactive without the env)."""
    import os
    import sys

    _cov = None
    if os.environ.get("QLFSM_COVERAGE_FILE"):
        # The orderings coverage (docs/orderings.md): record, and write at every kill point.
        import atexit
        import importlib.util

        _spec = importlib.util.spec_from_file_location("_coverage_record", RECORDER)
        _mod = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_mod)
        _cov = _mod.child_recorder(os.environ["QLFSM_COVERAGE_FILE"])
        atexit.register(_cov.flush)

    if os.environ.get("QLFSM_TEST_GATES") == "1":
        import storage._connection as _c
        import reconciler.node._receipt_store as _rs

        def _gate(name):
            if _cov is not None:
                _cov.flush()
            sys.stderr.write("GATE " + name + "\\n")
            sys.stderr.flush()
            sys.stdin.readline()

        _execute = _c.QlConnection.execute

        def execute(self, sql, *args):
            if isinstance(sql, str) and sql.strip().upper() == "COMMIT":
                _gate("before-commit")
                result = _execute(self, sql, *args)
                _gate("after-commit")
                return result
            return _execute(self, sql, *args)

        _c.QlConnection.execute = execute
        _delete = _rs.FileReceiptStore.delete

        def delete(self, attempt_id):
            _delete(self, attempt_id)
            _gate("after-delete")

        _rs.FileReceiptStore.delete = delete
    '''
).replace("RECORDER", repr(str(Path(__file__).with_name("_coverage_record.py"))))


class Batch:
    def __init__(self, db: Path, root: Path, hook_dir: Path) -> None:
        self.db, self.root, self.hook_dir = db, root, hook_dir
        self.dead: list[str] = []
        self.with_receipt: list[str] = []
        self.live: str = ""
        self.initial: dict[str, tuple[str, str, int]] = {}

    def env(self, gates: bool) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.hook_dir), *filter(None, [env.get("PYTHONPATH")])]
        )
        env["QLFSM_TEST_GATES"] = "1" if gates else "0"
        env.pop("QL_DEPLOYMENT_PROFILE", None)
        return env

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "reconciler",
            "reconcile",
            "--db",
            str(self.db),
            "--receipt-root",
            str(self.root),
            "--profile",
            "edge",
            "--json",
        ]

    def rows(self) -> dict[str, tuple[str, str, int, int, list[int]]]:
        # A fresh connection per check: what a restarted node would see.
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            out = {}
            for rid, status, version, seq in conn.execute(
                'SELECT id, status, version, event_sequence FROM "Runs"'
            ):
                att = conn.execute(
                    'SELECT status FROM "RunAttempts" WHERE run_id = ?', (rid,)
                ).fetchone()[0]
                events = [
                    r[0]
                    for r in conn.execute(
                        'SELECT sequence FROM "RunEvents" WHERE run_id = ? ORDER BY sequence',
                        (rid,),
                    )
                ]
                out[rid] = (status, att, version, seq, events)
            return out
        finally:
            conn.close()

    def check(self, when: str) -> None:
        for rid, (status, att, version, seq, events) in self.rows().items():
            assert version == seq == len(events), f"{when}: {rid} version/events differ"
            assert events == list(range(1, len(events) + 1)), f"{when}: {rid} gaps in {events}"
            start_status, start_att, start_version = self.initial[rid]
            if (status, att) == (start_status, start_att):
                # Untouched: not one event more (no partial advance).
                assert version == start_version, f"{when}: {rid} moved without a state change"
                if rid in self.with_receipt:
                    assert Path(receipt_path(str(self.root), "a" + rid[1:])).exists(), (
                        f"{when}: the receipt of {rid} is gone but its Run was never committed"
                    )
                continue
            # Wholly advanced: both rows and both events, one transaction (spec 04 "Writes").
            assert version == start_version + 2, f"{when}: {rid} partially advanced"
            if rid in self.with_receipt:
                assert (status, att) == ("succeeded", "succeeded"), f"{when}: {rid} {status}"
            else:
                assert rid != self.live, f"{when}: the live process's Run became {status}"
                assert (status, att) == ("lost", "lost"), f"{when}: {rid} {status}/{att}"


@pytest.fixture
def batch(db_path: Path, tmp_path: Path) -> Iterator[Batch]:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    root = tmp_path / "receipts"
    b = Batch(db_path, root, hook_dir)
    store = FileReceiptStore(str(root))
    conn = connect(str(db_path))
    try:
        repo = Repository(conn)
        for n in range(DEAD):
            rid, aid = f"r{n:02d}", f"a{n:02d}"
            handle, pid = dead_handle()
            make_candidate(repo, rid, aid, handle=handle, pid=pid)
            b.dead.append(rid)
            if n < WITH_RECEIPT:
                store.publish(receipt(rid, aid))
                b.with_receipt.append(rid)
        with sleepers() as [live]:
            make_candidate(repo, "r99", "a99", handle=live.handle, pid=live.pid)
            b.live = "r99"
            b.initial = {rid: (s, a, v) for rid, (s, a, v, _, _) in b.rows().items()}
            yield b
    finally:
        conn.close()


def _next_gate(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> str | None:
    """The next marker on the child's stderr, or None when it exited."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError("the reconciler neither reached a gate nor exited")
        line = proc.stderr.readline()
        if not line:
            return None
        if line.startswith(b"GATE "):
            return line[5:].strip().decode()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def _clean_pass(batch: Batch) -> tuple[int, str]:
    done = subprocess.run(
        batch.command(), env=batch.env(False), capture_output=True, timeout=60, check=False
    )
    return done.returncode, done.stdout.decode()


def _converged(batch: Batch) -> dict[str, tuple[str, str, int, int, list[int]]]:
    """A clean pass exits 0 and ends every dead Run (succeeded iff it has a receipt)."""
    code, out = _clean_pass(batch)
    assert code == 0, out
    rows = batch.rows()
    for rid in batch.dead:
        want = "succeeded" if rid in batch.with_receipt else "lost"
        assert rows[rid][:2] == (want, want), (rid, rows[rid])
    return rows


@linux_only
@pytest.mark.slow
def test_a_reconciler_killed_at_every_commit_point_leaves_no_partial_state_and_converges(
    batch: Batch,
) -> None:
    kills: list[str] = []
    # Kill after passing 0, 1, 2, 3 gates, over and over: each run makes a little progress,
    # so over the sweep every gate of the batch is a kill point at least once.
    for run in range(60):
        proc = subprocess.Popen(
            batch.command(),
            env=batch.env(True),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        passed = 0
        killed_at = None
        while True:
            gate = _next_gate(proc)
            if gate is None:
                break
            if passed == run % 4:
                killed_at = gate
                break
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            passed += 1
        _kill(proc)
        if killed_at is None:
            break  # the pass finished before the kill point: the batch is done
        kills.append(killed_at)
        batch.check(f"kill {len(kills)} at {killed_at}")
    print(f"{len(kills)} kills: " + ", ".join(f"{k}={kills.count(k)}" for k in sorted(set(kills))))
    assert len(kills) >= 15, kills
    assert {"before-commit", "after-commit", "after-delete"} <= set(kills), kills
    rows = _converged(batch)
    # A kill between a receipt's commit and its delete leaves the file of a terminal Attempt:
    # no later pass sees that Run again, so it stays (harmless, docs/decisions.md D-3a). What
    # must hold is the converse: no receipt is ever gone while its Run is uncommitted (check).
    assert rows[batch.live][:2] == ("running", "running")
    before = batch.rows()
    code, _ = _clean_pass(batch)
    assert code == 0 and batch.rows() == before, "a pass after convergence wrote"


@linux_only
@pytest.mark.slow
def test_a_reconciler_killed_after_random_delays_leaves_no_partial_state_and_converges(
    batch: Batch,
) -> None:
    rng = random.Random(6)  # fixed: CI must not be flaky; the gated sweep covers every point
    for n in range(8):
        proc = subprocess.Popen(
            batch.command(),
            env=batch.env(False),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.05, 0.6))
        _kill(proc)
        batch.check(f"timed kill {n}")
    rows = _converged(batch)
    assert rows[batch.live][:2] == ("running", "running")


# --- the legacy shadow pass: a kill between its two commits is healed by the next pass -------


def _hook_dir(tmp_path: Path) -> Path:
    """A folder whose `sitecustomize.py` installs the gate hook in every child it runs."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    return hook_dir


def _shadow(db: Path, hook_dir: Path, gates: bool) -> subprocess.Popen[bytes]:
    b = Batch(db, db.parent, hook_dir)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "shadow",
            "--db",
            str(db),
            "--origins",
            "manual",
            "--profile",
            "standalone",
            "--json",
        ],
        env=b.env(gates),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _legacy_rows(db: Path) -> dict[str, tuple[str, str, int]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            rid: (status, att, version)
            for rid, status, version, att in conn.execute(
                'SELECT r.id, r.status, r.version, a.status FROM "Runs" r '
                'JOIN "RunAttempts" a ON a.run_id = r.id'
            )
        }
    finally:
        conn.close()


@linux_only
@pytest.mark.slow
def test_a_shadow_pass_killed_at_every_commit_point_is_healed_by_the_next_pass(
    tmp_path: Path,
) -> None:
    hook_dir = _hook_dir(tmp_path)
    pristine = tmp_path / "pristine.db"
    fixture = LegacyDb(pristine)
    # Rows 10 (markedLost) and 9 (abandoned): each two committed transactions.
    for _ in range(2):
        fixture.run(status="running", attempts=("running",), cron=False)
    fixture.run(status="queued", attempts=("claimed",), cron=False)
    fixture.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    fixture.close()
    start = _legacy_rows(pristine)
    final = {"running": ("lost", "lost"), "queued": ("cancelled", "cancelled")}
    torn_total = 0
    for point in range(12):  # 3 Runs x 2 commits x (before, after): every marker once
        db = tmp_path / f"kill-{point}.db"
        shutil.copyfile(pristine, db)
        proc = _shadow(db, hook_dir, gates=True)
        assert proc.stdin is not None
        for passed in range(point + 1):
            # Release `point` markers, then SIGKILL while the child waits at the next one.
            if _next_gate(proc) is None or passed == point:
                break
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        _kill(proc)
        torn = set()
        for rid, (status, att, version) in _legacy_rows(db).items():
            s0, a0, v0 = start[rid]
            want = final[s0]
            if (status, att) == (s0, a0):
                assert version == v0, f"kill {point}: {rid} moved without a state change"
            elif (status, att) == (s0, want[1]):
                torn.add(rid)  # the Attempt committed, the Run did not: ADR-0448 §6
                assert version == v0 + 1
            else:
                assert (status, att) == want and version == v0 + 2, (point, rid, status, att)
        torn_total += len(torn)
        healed = _shadow(db, hook_dir, gates=False)
        out, _err = healed.communicate(timeout=60)
        assert healed.returncode == 0
        outcomes = json.loads(out)["report"]["outcomes"]
        assert outcomes["repaired"] == len(torn), (point, outcomes, torn)
        assert outcomes["failed"] == 0
        for rid, (status, att, _v) in _legacy_rows(db).items():
            assert (status, att) == final[start[rid][0]], (point, rid)
        again = _shadow(db, hook_dir, gates=False)
        out, _err = again.communicate(timeout=60)
        assert json.loads(out)["report"]["coverage"]["scanned"] == 0
    assert torn_total >= 3, "no kill landed between the two commits"


# --- the whole start-up: normalization -> shadow -> primary, killed at every marker ----------


def _snapshot(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(
            'SELECT r.id, r.status, r.version, a.status FROM "Runs" r '
            'LEFT JOIN "RunAttempts" a ON a.run_id = r.id ORDER BY r.id'
        ).fetchall()
    finally:
        conn.close()


@linux_only
@pytest.mark.slow
def test_a_startup_killed_at_every_commit_point_converges_on_the_next_start(
    tmp_path: Path,
) -> None:
    hook_dir = _hook_dir(tmp_path)
    pristine = tmp_path / "pristine.db"
    fixture = LegacyDb(pristine)
    fixture.run(status="running", attempts=("running",), cron=False)  # row 10
    fixture.run(status="queued", attempts=("claimed",), cron=False)  # row 9
    receipts = tmp_path / "receipts"
    store = FileReceiptStore(str(receipts))
    for n in range(2):  # runtime Runs whose processes are dead; the first published
        handle, pid = dead_handle()
        make_candidate(fixture.repo, f"r{n:02d}", f"a{n:02d}", handle=handle, pid=pid)
        if n == 0:
            store.publish(receipt("r00", "a00"))
    fixture.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    fixture.close()
    # Wherever the first start-up dies, the next one must end every Run in the same place.
    final: dict[str, tuple[str, str]] = {}
    points = 0
    for point in range(40):
        db = tmp_path / f"kill-{point}.db"
        root = tmp_path / f"receipts-{point}"
        shutil.copyfile(pristine, db)
        shutil.copytree(receipts, root)
        b = Batch(db, root, hook_dir)
        cmd = [
            sys.executable,
            "-m",
            "reconciler",
            "startup",
            "--db",
            str(db),
            "--receipt-root",
            str(root),
            "--origins",
            "manual",
            "--profile",
            "edge",
            "--legacy-normalize",
            "--json",
        ]
        proc = subprocess.Popen(
            cmd,
            env=b.env(True),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        finished = False
        for passed in range(point + 1):
            if _next_gate(proc) is None:
                finished = True
                break
            if passed == point:
                break
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        _kill(proc)
        if finished:
            break  # every marker has been a kill point
        points += 1
        # The receipt of r00 may be gone only once r00 is committed terminal.
        rows = {r[0]: r for r in _snapshot(db)}
        if not Path(receipt_path(str(root), "a00")).exists():
            assert rows["r00"][1:4:2] == ("succeeded", "succeeded"), (point, rows["r00"])
        for rid, status, _v, att in rows.values():
            if rid.startswith("r"):
                # Runtime: never a torn pair (one transaction per advance).
                assert (status in ("lost", "succeeded")) == (att in ("lost", "succeeded")), (
                    point,
                    rid,
                    status,
                    att,
                )
        clean = subprocess.run(cmd, env=b.env(False), capture_output=True, timeout=60, check=False)
        assert clean.returncode == 0, (point, clean.stdout, clean.stderr)
        after = _snapshot(db)
        for rid, status, _v, att in after:
            final.setdefault(rid, (status, att))
            assert final[rid] == (status, att), f"kill {point}: {rid} ended {status}/{att}"
            assert status in ("lost", "succeeded", "cancelled"), (point, rid, status)
        again = subprocess.run(cmd, env=b.env(False), capture_output=True, timeout=60, check=False)
        assert again.returncode == 0 and _snapshot(db) == after, f"kill {point}: not converged"
    print(f"startup killed at {points} markers, each healed by the next start")
    assert points >= 15, points
