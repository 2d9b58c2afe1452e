"""Helpers for the ADR-0068 reconciler and launcher tests (no tests here).

Candidates are built on real SQLite files through the repository's lifecycle edges, with
real `sleep` processes and real `/proc` handles unless a test says otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reconciler.node import (
    FakeClock,
    ProcessProvider,
    ProcProvider,
    ProviderUnavailable,
    Receipt,
    ReceiptStore,
    capture_handle,
)
from reconciler.primary import reconcile_connection
from storage import Actor, AttemptChange, Repository, RunChange

T0 = 1_700_000_000_000
SYSTEM = Actor("system")
TOKEN = "tok_" + "A" * 40
TOKEN_HASH = hashlib.sha256(TOKEN.encode()).hexdigest()

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def make_run(repo: Repository, run_id: str, status: str = "dispatching") -> int:
    """A runtime Run walked created -> queued (-> dispatching (-> running)); its version."""
    v = repo.create_run(run_id=run_id, at_ms=T0).version
    path = {"queued": ["queue"], "dispatching": ["queue", "dispatch"]}
    path["running"] = [*path["dispatching"], "start"]
    for trigger in path[status]:
        v = repo.advance(run_id, v, [RunChange(trigger)], actor=SYSTEM, at_ms=T0).version
    return v


def make_candidate(
    repo: Repository,
    run_id: str,
    attempt_id: str,
    *,
    attempt: str = "running",
    run: str = "running",
    handle: str | None = None,
    pid: int | None = None,
    executor_type: str = "local_process",
) -> int:
    """A Run with ONE Attempt in ``attempt``, the Run in ``run``; returns the Run version.

    `starting` carries the token hash; `running` also the handle, pid and started time, as
    the launcher writes them.
    """
    v = make_run(repo, run_id, "dispatching")
    v = repo.create_attempt(
        run_id=run_id,
        attempt_id=attempt_id,
        expected_version=v,
        at_ms=T0,
        executor_type=executor_type,
    ).version
    if attempt in ("starting", "running"):
        start_set: dict[str, object] = {"callback_token_hash": TOKEN_HASH}
        if attempt == "starting" and handle is not None:
            start_set.update(executor_handle=handle, pid=pid)
        v = repo.advance(
            run_id, v, [AttemptChange(attempt_id, "start", set=start_set)], actor=SYSTEM, at_ms=T0
        ).version
    if attempt == "running":
        sets: dict[str, object] = {"started_at_ms": T0}
        if handle is not None:
            sets.update(executor_handle=handle, pid=pid)
        v = repo.advance(
            run_id, v, [AttemptChange(attempt_id, "run", set=sets)], actor=SYSTEM, at_ms=T0
        ).version
    if run == "running":
        v = repo.advance(run_id, v, [RunChange("start")], actor=SYSTEM, at_ms=T0).version
    return v


def receipt(run_id: str, attempt_id: str, exit_code: int = 0, **kw: Any) -> Receipt:
    fields: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "attempt_id": attempt_id,
        "callback_sequence": 1,
        "token": TOKEN,
        "started_at_ms": T0 + 10,
        "finished_at_ms": T0 + 20,
        "exit_code": exit_code,
    }
    fields.update(kw)
    return Receipt(**fields)


def recovery_events(repo: Repository, run_id: str, after: int) -> list[tuple[str, str, str | None]]:
    """(type, actor type, actor id) of the events past sequence ``after``."""
    return [
        (e.type, e.actor_type, e.actor_id) for e in repo.events_of(run_id) if e.sequence > after
    ]


def last_sequence(repo: Repository, run_id: str) -> int:
    return max(e.sequence for e in repo.events_of(run_id))


@dataclass
class Sleeper:
    """A real `sleep` in its own process group and its captured `ql3lp1` handle."""

    proc: subprocess.Popen[bytes]
    handle: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@contextlib.contextmanager
def sleepers(n: int = 1) -> Iterator[list[Sleeper]]:
    made: list[Sleeper] = []
    try:
        for _ in range(n):
            proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
            made.append(Sleeper(proc, capture_handle(proc.pid, ProcProvider())))
        yield made
    finally:
        for s in made:
            s.stop()


def dead_handle() -> tuple[str, int]:
    """The handle and pid of a real process that has exited and been reaped."""
    with sleepers() as [s]:
        pass
    return s.handle, s.pid


def proc_root(tmp_path: Path, boot_id: str, pids: list[int]) -> ProcProvider:
    """A ProcProvider over a fake /proc: the given boot id and copies of real stat files."""
    root = tmp_path / "fakeproc"
    (root / "sys/kernel/random").mkdir(parents=True)
    (root / "sys/kernel/random/boot_id").write_text(boot_id + "\n")
    for pid in pids:
        (root / str(pid)).mkdir()
        shutil.copyfile(f"/proc/{pid}/stat", root / str(pid) / "stat")
    return ProcProvider(str(root))


@dataclass
class CountingProvider:
    """The real /proc provider, counting every read (a test can assert how many)."""

    inner: ProcProvider = field(default_factory=ProcProvider)
    calls: list[str] = field(default_factory=list)

    def boot_id(self) -> str:
        self.calls.append("boot_id")
        return self.inner.boot_id()

    def read_stat(self, pid: int) -> str | None:
        self.calls.append(f"stat:{pid}")
        return self.inner.read_stat(pid)


@dataclass
class ForbiddenProvider:
    """A provider that must never be asked: it records the call and fails."""

    calls: list[str] = field(default_factory=list)

    def boot_id(self) -> str:
        self.calls.append("boot_id")
        raise ProviderUnavailable("this test forbids reading /proc")

    def read_stat(self, pid: int) -> str | None:
        self.calls.append(f"stat:{pid}")
        raise ProviderUnavailable("this test forbids reading /proc")


NOT_A_DIRECTORY = ("regular_file", "symlink_to_directory", "symlink_loop", "dangling_symlink")


def plant_not_a_directory(path: Path, kind: str) -> None:
    """Something at ``path`` that is not a real directory (one of NOT_A_DIRECTORY)."""
    if kind == "regular_file":
        path.write_bytes(b"not a directory\n")
    elif kind == "symlink_to_directory":
        real = path.parent / f"real-{path.name}"
        real.mkdir()
        path.symlink_to(real)
    elif kind == "symlink_loop":
        path.symlink_to(path)
    elif kind == "dangling_symlink":
        path.symlink_to(path.parent / "nowhere")
    else:
        raise ValueError(kind)


def other_connection(db_path: Path) -> sqlite3.Connection:
    """A second writer (someone else changing the database under the reconciler)."""
    conn = sqlite3.connect(str(db_path), isolation_level=None, timeout=5)
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


RECONCILER = ("reconciler", "local-startup")
RECEIPT = ("executor", "completion-receipt")


def run_pass(
    conn: Any,
    store: ReceiptStore,
    provider: ProcessProvider | None = None,
    clock: FakeClock | None = None,
) -> dict[str, Any]:
    return reconcile_connection(conn, store, provider or ProcProvider(), clock or FakeClock())


def only(summary: dict[str, Any]) -> dict[str, Any]:
    [entry] = summary["candidates"]
    return dict(entry)


def status(repo: Repository, run_id: str, attempt_id: str | None = None) -> tuple[str, ...]:
    run = repo.get_run(run_id)
    assert run is not None
    if attempt_id is None:
        return (run.status,)
    att = repo.get_attempt(attempt_id)
    assert att is not None
    return run.status, att.status


def qlfsm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m reconciler` with ``args``, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def decisions(summary: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each candidate of a primary summary as (run, attempt, row, outcome, reason)."""
    return [
        (c["run_id"], c["attempt_id"], c["row"], c["outcome"], c["reason"])
        for c in summary["candidates"]
    ]


def insert_bare_runs(conn: sqlite3.Connection, count: int) -> None:
    """``count`` running runtime Runs with no Attempt, ids ``run-000``...: one transaction, one
    more than a candidate page holds when ``count`` is 257 (spec 04 "Truncated")."""
    conn.execute("BEGIN")
    for i in range(count):
        conn.execute(
            'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
            "execution_origin, execution_owner, status, version, event_sequence, created_at_ms) "
            "VALUES (?, 'p', 't', '1', 'manual', 'manual', 'runtime', 'running', 1, 0, 1)",
            (f"run-{i:03d}",),
        )
    conn.execute("COMMIT")
