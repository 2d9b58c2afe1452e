"""The Attempt lock (docs/decisions.md D-17): a job alive in another PID namespace is never lost,
and one whose namespace ended still is. Real PID namespaces (`unshare --pid --fork
--mount-proc`), the real launcher and wrapper, real lock files, the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _primary_support import dead_handle, linux_only, make_candidate, qlfsm
from test_launcher import prepared

from reconciler.launcher import launch
from reconciler.node import (
    FileReceiptStore,
    Missing,
    hold_lock,
    lock_path,
    parse_quarantine_ref,
    quarantine_ref,
)
from reconciler.node._attempt_lock import LOCK_SUFFIX, lock_name, probe_lock
from reconciler.node._receipt import receipt_name, temp_name
from storage import Repository, journal_get, journal_register

pytestmark = linux_only
SIDECAR = ("unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "reconciler")
ADVICE = "run qlfsm where QingLong runs (docker exec), not the host"


def _unshare_works() -> str | None:
    """Why a PID namespace cannot be made here, or None."""
    if shutil.which("unshare") is None:
        return "needs unshare(1) from util-linux (apt-get install util-linux)"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return (
            "cannot make a PID namespace here (needs root or CAP_SYS_ADMIN): "
            + (probe.stderr.decode(errors="replace").strip()[:200])
        )
    return None


_NO_NAMESPACE = _unshare_works() if sys.platform.startswith("linux") else "needs Linux"
needs_namespaces = pytest.mark.skipif(_NO_NAMESPACE is not None, reason=_NO_NAMESPACE or "")


def wait_until(what: str, check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Namespace:
    """A PID namespace whose init (a shell, PID 1 inside) runs `qlfsm launch` and then stays;
    its host PID is the one to kill to end the namespace (the kernel kills all in it)."""

    def __init__(self, db: Path, root: Path, run_id: str) -> None:
        launcher = (
            f'"{sys.executable}" -m reconciler launch --db "{db}" --receipt-root "{root}" '
            f"--run-id {run_id} -- sleep 600"
        )
        self.proc = subprocess.Popen(
            # The init stays (`exec sleep`): the namespace lives until it is killed.
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                "sh",
                "-c",
                launcher + " && exec sleep 600",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.init = self._init_pid()

    def _init_pid(self) -> int:
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        found: list[str] = []

        def forked() -> bool:
            found[:] = children.read_text().split()
            return bool(found)

        wait_until("unshare's forked init", forked)
        return int(found[0])

    def end(self) -> None:
        """Kill its init: the kernel kills every process of the namespace."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.init, signal.SIGKILL)
        self.proc.communicate(timeout=30)


@contextlib.contextmanager
def launched_in_namespace(db: Path, root: Path, repo: Repository) -> Iterator[Namespace]:
    ns = Namespace(db, root, "run-1")
    try:
        wait_until("the launch inside the namespace", lambda: _status(repo) == "running")
        yield ns
    finally:
        ns.end()


def _status(repo: Repository) -> str | None:
    att = repo.get_attempt("at-1")
    return att.status if att is not None else None


def reconcile_json(db: Path, root: Path, *rest: str) -> tuple[int, dict[str, Any]]:
    out = qlfsm("reconcile", "--db", str(db), "--receipt-root", str(root), "--json", *rest)
    assert out.stderr == "" or "warning" in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout)


def statuses(db: Path) -> tuple[str, str]:
    """The Run's and the Attempt's status, read back through a second connection."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as c:
        run = c.execute('SELECT status FROM "Runs" WHERE id = ?', ("run-1",)).fetchone()
        att = c.execute('SELECT status FROM "RunAttempts" WHERE id = ?', ("at-1",)).fetchone()
    return run[0], att[0]


# --- (ii) a reconciler in another namespace than a live job --------------------------------------


@needs_namespaces
def test_a_job_alive_in_another_pid_namespace_is_never_lost_and_the_reason_says_where_to_run(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    prepared(repo)
    with launched_in_namespace(db_path, root, repo):
        att = repo.get_attempt("at-1")
        assert att is not None and att.pid is not None
        assert probe_lock(str(root), "at-1") == "held"
        # From the host, the handle's PID is absent or someone else's:
        code, summary = reconcile_json(db_path, root)
        dry_code, dry = reconcile_json(db_path, root, "--dry-run")
        [cand] = summary["candidates"]
        assert (cand["row"], cand["outcome"]) == ("10", "unresolved")
        assert cand["reason"].startswith("attempt_lock_held:")
        assert "another PID namespace" in cand["reason"] and ADVICE in cand["reason"]
        assert (code, summary["safe"]) == (3, False)
        assert statuses(db_path) == ("running", "running")  # never lost
        # The dry run and `explain` predict exactly that.
        assert dry_code == 3 and dry["candidates"] == summary["candidates"]
        explained = qlfsm(
            "explain",
            "--db",
            str(db_path),
            "--receipt-root",
            str(root),
            "--run",
            "run-1",
            "--json",
        )
        now = json.loads(explained.stdout)["now"]
        assert (now["row"], now["outcome"], now["reason"]) == ("10", "unresolved", cand["reason"])
        human = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(root))
        assert human.returncode == 3 and "docker exec" in human.stdout
        # The long row-10 reason is wrapped under its column, whole (docs/decisions.md D-22).
        assert max(len(line) for line in human.stdout.splitlines()) <= 100, human.stdout
        assert " ".join(human.stdout.split()).count(" ".join(cand["reason"].split())) == 1
        assert statuses(db_path) == ("running", "running")


# --- (i) the namespace ended: a container restart ----------------------------------------------


@needs_namespaces
def test_once_the_jobs_namespace_ended_a_start_up_in_a_new_namespace_marks_it_lost_and_is_safe(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    prepared(repo)
    with launched_in_namespace(db_path, root, repo) as ns:
        ns.end()  # the container died: the kernel killed its every process
    wait_until("the wrapper's death", lambda: probe_lock(str(root), "at-1") == "free")
    # The restarted container: same boot id, a new PID namespace.
    out = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-m",
            "reconciler",
            "startup",
            "--db",
            str(db_path),
            "--receipt-root",
            str(root),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    summary = json.loads(out.stdout)["primary"]
    [cand] = summary["candidates"]
    assert (cand["row"], cand["outcome"]) == ("13", "recovered"), cand
    assert cand["reason"].startswith("process_not_running:")
    assert out.returncode == 0 and summary["safe"] is True
    assert statuses(db_path) == ("lost", "lost")
    # The sweep after the safe start-up removed the ended Attempt's free lock file.
    assert not Path(lock_path(str(root), "at-1")).exists()


def sidecar_reconcile(db: Path, root: Path) -> tuple[int, dict[str, Any]]:
    """`qlfsm reconcile` in a fresh PID namespace of its own, as a sidecar container runs it:
    the job's PID does not exist there."""
    out = subprocess.run(
        [*SIDECAR, "reconcile", "--db", str(db), "--receipt-root", str(root), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return out.returncode, json.loads(out.stdout)


@needs_namespaces
def test_a_sidecar_never_marks_a_live_job_lost_and_marks_it_lost_once_its_namespace_ended(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    prepared(repo)
    with launched_in_namespace(db_path, root, repo) as ns:
        code, summary = sidecar_reconcile(db_path, root)
        [cand] = summary["candidates"]
        assert (code, cand["row"], cand["outcome"]) == (3, "10", "unresolved")
        assert (
            cand["reason"].startswith("attempt_lock_held:pid_absent:") and ADVICE in cand["reason"]
        )
        assert statuses(db_path) == ("running", "running")
        ns.end()
    wait_until("the wrapper's death", lambda: probe_lock(str(root), "at-1") == "free")
    code, summary = sidecar_reconcile(db_path, root)
    [cand] = summary["candidates"]
    assert (code, cand["row"], cand["outcome"]) == (0, "13", "recovered")
    assert cand["reason"] == "process_not_running:pid_absent"
    assert summary["safe"] is True and statuses(db_path) == ("lost", "lost")


# --- a held lock beside an absent PID, in the same namespace ------------------------------------


@contextlib.contextmanager
def lock_holder(root: Path, attempt_id: str) -> Iterator[subprocess.Popen[str]]:
    """Another real process holding the Attempt's lock, as a wrapper would."""
    code = (
        "import sys, time\n"
        "from reconciler.node._attempt_lock import hold_lock\n"
        f"hold_lock({str(root)!r}, {attempt_id!r})\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.communicate()


def test_a_held_lock_beside_an_absent_pid_is_never_lost_and_a_free_one_is(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    root = Path(store.root)
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    journal_register(conn, "at-1", "run-1", 1)
    (root / "at").mkdir(mode=0o700)
    with lock_holder(root, "at-1"):
        code, summary = reconcile_json(db_path, root)
        [cand] = summary["candidates"]
        assert (code, cand["row"], cand["outcome"]) == (3, "10", "unresolved")
        assert cand["reason"].startswith("attempt_lock_held:pid_absent:")
        assert statuses(db_path) == ("running", "running")
    # The holder died: a free lock plus an absent PID is `not_running`, as without a lock.
    code, summary = reconcile_json(db_path, root)
    [cand] = summary["candidates"]
    assert (code, cand["row"], cand["reason"]) == (0, "13", "process_not_running:pid_absent")
    assert statuses(db_path) == ("lost", "lost")


def test_something_else_at_the_lock_path_cannot_prove_the_wrapper_dead(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    root = Path(store.root)
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    (root / "at").mkdir(mode=0o700)
    Path(lock_path(str(root), "at-1")).mkdir()
    code, summary = reconcile_json(db_path, root)
    [cand] = summary["candidates"]
    assert (code, cand["row"], cand["outcome"]) == (3, "10", "unresolved")
    assert cand["reason"].startswith("attempt_lock_unusable:not_regular_file:")
    assert statuses(db_path) == ("running", "running")


# --- the lock's lifetime is the wrapper's ------------------------------------------------------


def test_the_lock_is_held_from_the_launch_on_and_the_job_never_inherits_it(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    prepared(repo)
    launched = launch(conn, str(root), "run-1", ["sleep", "600"])
    try:
        # Held the moment `launch` returns: no window in which a live job reads unlocked.
        assert probe_lock(str(root), "at-1") == "held"
        assert probe_lock(str(root), "at-1") == "held"  # a probe never takes it away
        children = Path(f"/proc/{launched.pid}/task/{launched.pid}/children")
        wait_until("the job's start", lambda: children.read_text().split() != [])
        [job] = children.read_text().split()
        # Between fork and exec the child still shares the wrapper's descriptors (the lock's is
        # close-on-exec): the job is the child once it runs `sleep`.
        cmdline = Path(f"/proc/{job}/cmdline")
        wait_until("the job's exec", lambda: cmdline.read_bytes().split(b"\0")[:1] == [b"sleep"])
        target = os.path.realpath(lock_path(str(root), "at-1"))
        fds = Path(f"/proc/{job}/fd")
        assert all(os.path.realpath(f) != target for f in fds.iterdir())
        # The wrapper dies, its job lives on: the lock dies with the wrapper (D-17).
        os.kill(launched.pid, signal.SIGKILL)
        launched.process.wait()
        assert Path(f"/proc/{job}").exists()
        assert probe_lock(str(root), "at-1") == "free"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launched.pid, signal.SIGKILL)


def test_a_wrapper_that_published_its_receipt_removes_its_lock_file(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    prepared(repo)
    launched = launch(conn, str(root), "run-1", ["true"])
    assert launched.process.wait(timeout=30) == 0
    assert not Path(lock_path(str(root), "at-1")).exists()
    assert not isinstance(FileReceiptStore(str(root)).read("at-1"), Missing)


def test_a_refused_launch_leaves_no_lock_file_and_a_held_lock_refuses_a_second_launcher(
    repo: Repository, conn: Any, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    prepared(repo)
    (root / "at").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    with lock_holder(root, "at-1"):
        from reconciler.launcher import LaunchRefused

        with pytest.raises(LaunchRefused, match="held by another process"):
            launch(conn, str(root), "run-1", ["sleep", "600"])
    assert statuses_of(repo) == ("queued", "claimed") and journal_get(conn, "at-1") is None


def statuses_of(repo: Repository) -> tuple[str, str]:
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    return run.status, att.status


# --- the sweep ---------------------------------------------------------------------------------


def test_the_sweep_removes_an_ended_attempts_lock_file_and_never_a_live_or_held_one(
    repo: Repository, conn: Any, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    prepared(repo, "run-a", "aa-1")
    prepared(repo, "run-b", "bb-1")
    ended = launch(conn, str(root), "run-a", ["sleep", "600"])
    live = launch(conn, str(root), "run-b", ["sleep", "600"])
    try:
        os.killpg(ended.pid, signal.SIGKILL)
        ended.process.wait()
        store = FileReceiptStore(str(root))
        from reconciler.node import ProcProvider, SystemClock
        from reconciler.ops import sweep
        from reconciler.primary import reconcile_connection

        summary = reconcile_connection(conn, store, ProcProvider(), SystemClock())
        by_run = {c["run_id"]: c for c in summary["candidates"]}
        assert by_run["run-a"]["row"] == "13" and by_run["run-b"]["row"] == "12"
        assert Path(lock_path(str(root), "aa-1")).exists()  # free, of an ended Attempt
        result = sweep(conn, store, ProcProvider(), SystemClock()).as_dict()
        assert result["errors"] == [] and result["receipts"]["kept_active"] == 1
        assert not Path(lock_path(str(root), "aa-1")).exists()
        assert probe_lock(str(root), "bb-1") == "held"  # the live one's is untouched
        assert journal_get(conn, "aa-1") is None
    finally:
        for one in (ended, live):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(one.pid, signal.SIGKILL)
            one.process.wait()


def test_the_sweep_keeps_an_ended_attempt_whose_lock_is_held(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    root = Path(store.root)
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    journal_register(conn, "at-1", "run-1", 1)
    (root / "at").mkdir(mode=0o700)
    with lock_holder(root, "at-1"):
        # An operator ended it (its wrapper lives elsewhere): its row and lock stay.
        out = qlfsm(
            "resolve",
            "--db",
            str(db_path),
            "--run",
            "run-1",
            "--to",
            "failed",
            "--reason",
            "decided by the operator",
            "--json",
        )
        assert out.returncode == 0, out.stderr
        swept = qlfsm("sweep", "--db", str(db_path), "--receipt-root", str(root), "--json")
        counts = json.loads(swept.stdout)["receipts"]
        assert counts["kept_process_alive"] == 1 and counts["rows_resolved"] == 0
        assert Path(lock_path(str(root), "at-1")).exists()
        assert journal_get(conn, "at-1") is not None
    swept = qlfsm("sweep", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert json.loads(swept.stdout)["receipts"]["rows_resolved"] == 1
    assert not Path(lock_path(str(root), "at-1")).exists()


# --- the lock is never a receipt ----------------------------------------------------------------


def test_a_lock_file_is_never_read_as_a_receipt_nor_named_like_one(
    store: FileReceiptStore,
) -> None:
    root = Path(store.root)
    (root / "at").mkdir(mode=0o700)
    fd = hold_lock(str(root), "at-1")
    try:
        assert isinstance(store.read("at-1"), Missing)
    finally:
        os.close(fd)
    ids = ["at-1", "at-1.lock", "at-1.json", "a", "a.lock", "a.json", "x.tmp", "0"]
    receipts = {receipt_name(i) for i in ids}
    temps = {temp_name(i, "0" * 32) for i in ids}
    quarantined = {quarantine_ref(i, s).rsplit("/", 1)[1] for i in ids for s in (1, 2)}
    locks = {lock_name(i) for i in ids}
    assert len(locks) == len(ids) and all(n.endswith(LOCK_SUFFIX) for n in locks)
    assert not locks & (receipts | temps | quarantined)
    assert all(parse_quarantine_ref(f".quarantine/{n[:2]}/{n}") is None for n in locks)
