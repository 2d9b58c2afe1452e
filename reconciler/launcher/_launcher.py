"""`qlfsm launch`: start a prepared Run's command the way QingLong's launcher does (spec 03
"Launcher", QingLong ADR-0070).

Order (each step only after the previous one is durable):
1. validate ids and the receipt root; read the prepared Run (queued/dispatching, exactly one
   Attempt, `claimed`, executor `local_process`); refuse an Attempt that already has a journal
   row (QingLong: "registration conflicts"); create and check the receipt root and the shard
   (real directories, 0700, nothing at the receipt's name) -- all before anything is written,
   so a refusal leaves nothing behind (D-3b); then create the Attempt lock
   `<shard>/<attemptId>.lock` and take an exclusive `flock` on it (D-17);
2. transaction 1: Run -> `dispatching` (if queued), Attempt -> `starting` with the SHA-256 of a
   fresh 256-bit callback token, and the journal row `pending`, all in ONE transaction;
3. spawn ``python -m reconciler.node._wrapper CMD...`` in a new session (its own process group, so
   it survives this process) with the QL3_RECEIPT_* variables; no spawn inside a transaction
   (spec 01 "Transaction rules"); a failure between the commit and the spawn marks the launch
   failed (`LAUNCH_SPAWN_FAILED`); the locked descriptor is passed to the wrapper, which holds
   the lock from then on for as long as it lives, and this process closes its own (D-17);
4. capture the wrapper's ``ql3lp1`` handle from /proc; on failure kill the group;
5. transaction 2: Attempt -> `running` (handle, pid, started time), Run -> `running`.
Then return (or, with ``wait``, wait for the command). The token is never stored or logged.
One timestamp, taken before transaction 1, is the journal's `registered_at_ms`, the Attempt's
`started_at_ms` and the receipt's `startedAtMs` (as QingLong's launcher does).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import IO, TYPE_CHECKING, Any

from reconciler._clock import Clock, SystemClock
from reconciler._root_check import ReceiptRootError, validate_receipt_root
from reconciler.node import (
    LockUnavailable,
    ProcessProvider,
    ProcProvider,
    ReceiptExists,
    capture_handle,
    hold_lock,
    lock_path,
    prepare_receipt_dirs,
    receipt_path,
    remove_lock,
    temp_path,
    token_sha256_hex,
    unlink_own_lock,
    validate_id,
    without_launch_env,
)

if TYPE_CHECKING:
    from storage import Change

LAUNCHER = ("executor", "local-launcher")


class LaunchRefused(ValueError):
    """The Run is not a prepared local-process Run (nothing was changed)."""


class LaunchFailed(RuntimeError):
    """The command could not be started or its identity not captured (the group was stopped)."""


@dataclass
class Launched:
    run_id: str
    attempt_id: str
    pid: int
    handle: str
    started_at_ms: int
    process: subprocess.Popen[bytes]

    def as_dict(self) -> dict[str, Any]:
        # No token, command or environment (spec 04 "Summary" rule, applied here too).
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "process"}


def new_token() -> tuple[str, str]:
    """(token, sha256 hex): 256 random bits, base64url without padding (spec 03)."""
    token = secrets.token_urlsafe(32)
    return token, token_sha256_hex(token)


def launch(
    conn: sqlite3.Connection,
    receipt_root: str,
    run_id: str,
    command: Sequence[str],
    *,
    provider: ProcessProvider | None = None,
    clock: Clock | None = None,
    env: Mapping[str, str] | None = None,
    log: IO[bytes] | int | None = None,
) -> Launched:
    """Launch ``command`` for the prepared Run ``run_id``; see the module docstring."""
    from storage import (
        Actor,
        AttemptChange,
        Expect,
        RegistrationConflict,
        Repository,
        RunChange,
        in_transaction,
        journal_get,
        journal_register,
    )

    provider = provider if provider is not None else ProcProvider()
    clock = clock if clock is not None else SystemClock()
    if not validate_id(run_id):
        raise LaunchRefused(
            f"run id {run_id!r} is not a valid execution id; use 1-36 characters from "
            "A-Z a-z 0-9 . _ : - starting with a letter or digit"
        )
    root = validate_receipt_root(receipt_root)
    if not command:
        raise LaunchRefused("no command given: put it after `--`")
    repo = Repository(conn)
    actor = Actor(*LAUNCHER)
    run = repo.get_run(run_id)
    if run is None:
        raise LaunchRefused(
            f"run {run_id!r} does not exist; to create it as QingLong's scheduler does and "
            "launch it, add --create (list runs with `qlfsm inspect`)"
        )
    attempts = repo.attempts_of(run_id)
    if run.execution_owner != "runtime" or run.status not in ("queued", "dispatching"):
        raise LaunchRefused(
            f"run {run_id} is {run.execution_owner}/{run.status}; a prepared run is "
            "runtime-owned and queued or dispatching"
        )
    if len(attempts) != 1 or attempts[0].status != "claimed":
        raise LaunchRefused(
            f"run {run_id} needs exactly one claimed attempt (it has {len(attempts)}); "
            "launch only a prepared run"
        )
    att = attempts[0]
    if att.executor_type != "local_process" or not validate_id(att.id):
        raise LaunchRefused(f"attempt {att.id} is not a local_process attempt with a valid id")
    # Parity with QingLong's register: an existing row (another time, another run, a
    # quarantine) is refused BEFORE anything is written or spawned.
    existing = journal_get(conn, att.id)
    if existing is not None:
        raise LaunchRefused(f"{RegistrationConflict(existing)}; nothing was changed")
    try:
        # D-3b: the directories are prepared and checked before the first commit, so a bad
        # root refuses the launch instead of stranding a committed `starting` Attempt.
        prepare_receipt_dirs(root, att.id)
        # D-17: the lock is taken before anything is committed, so a launch that gets past
        # this point always has a live holder: this process until the spawn, then the wrapper.
        lock_fd = hold_lock(root, att.id)
    except ReceiptRootError as exc:
        raise LaunchRefused(f"{exc}; nothing was changed") from exc
    except ReceiptExists as exc:
        raise LaunchRefused(
            f"something already stands at the receipt path {receipt_path(root, att.id)!r}, so "
            "the command could not publish its receipt; move it out of the receipt root (it "
            "may be evidence) and launch again; nothing was changed"
        ) from exc
    except LockUnavailable as exc:
        raise LaunchRefused(f"{exc.strerror}; nothing was changed") from exc

    def prepare(c: sqlite3.Connection) -> int:
        changes: list[Change] = []
        if run.status == "queued":
            changes.append(RunChange("dispatch", dedupe_key=f"local-launch:{att.id}:dispatching"))
        changes.append(
            AttemptChange(
                att.id,
                "start",
                set={"callback_token_hash": token_hash},
                dedupe_key=f"local-launch:{att.id}:starting",
            )
        )
        expect = Expect(
            run={"status": run.status},
            attempts={att.id: {"status": "claimed", "callback_sequence": att.callback_sequence}},
        )
        done = repo.advance_in(
            c, run_id, run.version, changes, actor=actor, at_ms=started, expect=expect
        )
        # spec 03: the journal row is registered before the wrapper can publish anything.
        journal_register(c, att.id, run_id, started)
        return done.version

    def failed(exc: BaseException, code: str, what: str) -> LaunchFailed:
        """A launch that failed after committing `starting` (D-3b), its lock given up: the
        Attempt and Run marked failed with ``code`` (best effort), so it never blocks a
        start-up; the LaunchFailed to raise, saying ``what`` went wrong. An interrupt is marked
        the same way and then goes on."""
        if _mark_failed(conn, run_id, att.id, version, clock, code):
            marked = f"run {run_id} was marked failed, so it does not block the next start-up"
        else:
            marked = (
                f"run {run_id} could NOT be marked failed and blocks start-up until it is "
                f"settled (inspect it with `qlfsm inspect --run {run_id}`)"
            )
        if not isinstance(exc, Exception):
            raise exc
        return LaunchFailed(f"{what}; {marked}")

    try:
        token, token_hash = new_token()
        # One timestamp for the journal registration, the Attempt's start and the receipt.
        started = max(clock.now_ms(), run.created_at_ms, att.created_at_ms)
    except BaseException:
        _close_lock(lock_fd)
        raise
    try:
        version = in_transaction(conn, prepare)
    except BaseException as exc:
        _close_lock(lock_fd, lock_path(root, att.id))  # nothing committed: no lock file left
        if isinstance(exc, RegistrationConflict):  # a row appeared since the check
            raise LaunchRefused(f"{exc}; nothing was changed") from exc
        raise
    try:
        wrapper_env = without_launch_env(os.environ if env is None else env)
        wrapper_env.update(
            QL3_RECEIPT_RUN_ID=run_id,
            QL3_RECEIPT_ATTEMPT_ID=att.id,
            QL3_RECEIPT_CALLBACK_SEQUENCE="1",
            QL3_RECEIPT_CALLBACK_TOKEN=token,
            QL3_RECEIPT_STARTED_AT_MS=str(started),
            QL3_RECEIPT_TARGET=receipt_path(root, att.id),
            QL3_RECEIPT_TEMPORARY=temp_path(root, att.id),
            QL3_LAUNCH_LOCK_FD=str(lock_fd),  # D-17: the wrapper keeps it locked
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler.node._wrapper", "--", *command],
            env=wrapper_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL if log is None else log,
            stderr=subprocess.DEVNULL if log is None else subprocess.STDOUT,
            close_fds=True,
            # D-17: the wrapper gets a descriptor of the same locked open file description.
            pass_fds=(lock_fd,),
            start_new_session=True,  # its own session and process group: it outlives us
        )
    except BaseException as exc:
        # D-3b: committed `starting`, no process: failed, so it never blocks a start-up.
        _close_lock(lock_fd, lock_path(root, att.id))  # no wrapper will hold it
        what = f"cannot start the wrapper ({_why(exc)})"
        raise failed(exc, "LAUNCH_SPAWN_FAILED", what) from exc
    _close_lock(lock_fd)  # D-17: from here on the wrapper alone holds the lock, until it dies
    try:
        handle = capture_handle(proc.pid, provider)
        finish = max(clock.now_ms(), started)
        repo.advance(
            run_id,
            version,
            [
                AttemptChange(
                    att.id,
                    "run",
                    set={"executor_handle": handle, "pid": proc.pid, "started_at_ms": started},
                    dedupe_key=f"local-launch:{att.id}:running",
                ),
                RunChange(
                    "start",
                    set={} if run.started_at_ms is not None else {"started_at_ms": started},
                    dedupe_key=f"local-launch:{att.id}:run-running",
                ),
            ],
            actor=actor,
            at_ms=finish,
            expect=Expect(
                attempts={att.id: {"status": "starting", "callback_token_hash": token_hash}}
            ),
        )
    except BaseException as exc:
        # spec 03 "Capture": the launch fails and the spawned group is stopped. SIGKILL:
        # the wrapper must not publish a receipt for a launch that failed.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        # Handed over, the wrapper stopped: the lock file goes unless someone holds it (best
        # effort; a leftover is the sweep's).
        with contextlib.suppress(OSError, ValueError):
            remove_lock(root, att.id)
        what = (
            f"launched process could not be recorded ({_why(exc)}); the process group was stopped"
        )
        raise failed(exc, "LAUNCH_CAPTURE_FAILED", what) from exc
    return Launched(run_id, att.id, proc.pid, handle, started, proc)


def _close_lock(fd: int, path: str | None = None) -> None:
    """Close the launcher's descriptor of the Attempt lock (D-17). With ``path`` (no live
    wrapper will hold it), the lock file's name goes first, while still held, and only if it
    still names this file (best effort: a leftover is the sweep's)."""
    try:
        if path is not None:
            unlink_own_lock(fd, path)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _why(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(f"{type(exc).__name__}: {text}".split())[:300]


def _mark_failed(
    conn: sqlite3.Connection,
    run_id: str,
    attempt_id: str,
    version: int,
    clock: Clock,
    code: str,
) -> bool:
    """Best effort: the Attempt and Run to `failed`, so the failed launch does not block the
    next start-up (the ADR-0068 pass would hold a `starting` Attempt without a handle). True
    when that commit happened; never raises."""
    try:
        from storage import Actor, AttemptChange, Repository, RunChange, journal_resolve

        summary = "Local launch failed before the process identity was recorded"
        errors = {"error_code": code, "error_summary": summary}
        repo = Repository(conn)
        run = repo.get_run(run_id)
        att = repo.get_attempt(attempt_id)
        if run is None or att is None or run.version != version:
            return False
        at = max(clock.now_ms(), run.created_at_ms, att.created_at_ms)
        repo.advance(
            run_id,
            version,
            [
                AttemptChange(
                    attempt_id, "fail", set=errors, dedupe_key=f"local-launch:{attempt_id}:failed"
                ),
                RunChange(
                    "fail",
                    set={**errors, "finished_at_ms": at},
                    dedupe_key=f"local-launch:{attempt_id}:run-failed",
                ),
            ],
            actor=Actor(*LAUNCHER),
            at_ms=at,
        )
        # The row only says a receipt may appear; none will. A failure here leaves a
        # `pending` row of a failed Attempt, which blocks nothing.
        with contextlib.suppress(Exception):
            journal_resolve(conn, attempt_id)
        return True
    except Exception:
        return False
