"""One start-up at a time per database (docs/decisions.md D-20).

`startup`, `reconcile` and `shadow` (not their dry runs, which write nothing) first take an
exclusive ``flock(2)`` on ``<database>.qlfsm-startup.lock``, a file beside the database (the
real path, so a symbolic link to the database finds the same lock). The holder writes its pid
into it, so that a second start-up can say whom it waits for. The wait polls a non-blocking
lock and is charged to the command's one lock budget (``$QLFSM_LOCK_BUDGET_S``, the budget
`startup` spends across all its passes); past it the command ends with exit 75 (try again).

The kernel drops the lock when its holder exits, however it exits (a SIGKILL too): nothing
stale can keep a start-up waiting. The file itself stays (unlinking a lock file others may be
waiting on lets two holders in at once).

A directory in which the file cannot be created (read-only, or not this user's): no single
flight. A pass there cannot write the database either (WAL needs its -wal/-shm files in that
directory), and what a second pass finds decided meanwhile is read again and never blocks
(reconciler.primary._pass, "decided elsewhere").

Light on purpose: the zero-candidate `reconcile` takes this lock, and must import neither
``typing``, ``argparse`` nor ``json`` (fcntl and errno are built-in modules), nor
``contextlib`` (for two ``suppress``: plain ``try``; its cost: benchmarks/README.md, "Figures
once quoted in the code").
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable

from reconciler._errors import FatalError
from reconciler._escape import one_line
from reconciler._notify import to_stderr
from storage import Busy, LockBudget

SUFFIX = ".qlfsm-startup.lock"
# How often a waiting start-up tries the lock again: well under one grace (50 ms on edge).
POLL_S = 0.02
# A holder writes its pid right after it gets the lock; a waiter gives it this long to appear
# before it says whom it waits for without the pid.
PID_WAIT_S = 0.2
# Directories this process cannot create a file in: run without single flight (module doc).
_NO_FILE_HERE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})

# Lock paths this process holds: a `startup` holds the lock across its passes, and the primary
# pass it runs must not wait for its own process (flock locks are per open file description).
_held: set[str] = set()


class StartupLocked(Busy):
    """Another start-up held the single-flight lock past the lock budget: try again (75)."""

    def __init__(self, db: str, pid: int | None, waited_s: float, lock: str) -> None:
        super().__init__(0, waited_s, db)
        who = f"the start-up of pid {pid}" if pid is not None else "another start-up"
        # Its own message, not the locked database's.
        self.args = (
            f"{who} still holds {lock!r} for database {db!r} (waited {waited_s:.1f} s, "
            "$QLFSM_LOCK_BUDGET_S); try again when it has finished",
        )
        self.pid = pid


def startup_lock_path(db: str) -> str:
    """The single-flight lock file of the database ``db``: beside its real path."""
    return os.path.realpath(db) + SUFFIX


class single_flight:  # lower case: used as `with single_flight(db, budget):`
    """Hold the start-up lock of ``db`` for the block (module docstring). Entering waits at
    most what ``budget`` has left (and charges the wait to it), saying once on stderr whom it
    waits for; past the budget it raises :class:`StartupLocked`. Nested in a block of the
    same process that holds it already: nothing to take. ``notify`` gets the one line that
    says whom it waits for (default: stderr, ``reconciler._notify``)."""

    __slots__ = ("budget", "db", "fd", "notify", "path")

    def __init__(
        self, db: str, budget: LockBudget, notify: Callable[[str], None] | None = None
    ) -> None:
        self.db = db
        self.budget = budget
        self.notify = to_stderr if notify is None else notify
        self.path = startup_lock_path(db)
        self.fd: int | None = None

    def __enter__(self) -> single_flight:
        # Held by this process already (a nested block), or a directory we cannot create a
        # file in (module docstring): nothing to take.
        fd = None if self.path in _held else _open(self.path)
        if fd is None:
            return self
        try:
            self._wait(fd)
            # Our pid for the next waiter's message; a lock file we may only read keeps none.
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError:
                pass
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        _held.add(self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        _held.discard(self.path)
        try:  # noqa: SIM105 - not contextlib.suppress: see the module docstring
            os.ftruncate(fd, 0)  # no pid of a process that no longer holds it
        except OSError:
            pass
        os.close(fd)  # releases the lock

    def _wait(self, fd: int) -> None:
        started = time.monotonic()
        allowed = self.budget.remaining()
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            waited = time.monotonic() - started
            pid = _holder(fd)
            if waited >= allowed:
                self.budget.spent += waited
                raise StartupLocked(self.db, pid, waited, self.path)
            if not told and (pid is not None or waited >= PID_WAIT_S):
                who = f"pid {pid}" if pid is not None else "another process"
                # No path: `shadow` prints this too, and its stderr names none (spec 05).
                self.notify(
                    one_line(
                        f"qlfsm: waiting for the start-up of {who} (one start-up at a time per "
                        f"database; at most {allowed - waited:.1f} s more, $QLFSM_LOCK_BUDGET_S)"
                    )
                )
                told = True
            time.sleep(min(POLL_S, max(0.0, allowed - waited)))
        self.budget.spent += time.monotonic() - started


def _open(path: str) -> int | None:
    """The lock file, opened (created when missing) and checked to be a regular file; None
    when this directory cannot hold it (no single flight)."""
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, os.O_RDWR | flags, 0o644)
    except OSError as exc:
        if exc.errno not in _NO_FILE_HERE:
            raise _unusable(path, exc) from exc
        try:
            # Another user's lock file: a read-only descriptor can still take the lock.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as again:
            if again.errno in _NO_FILE_HERE or again.errno == errno.ENOENT:
                return None
            raise _unusable(path, again) from again
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FatalError(
            f"the start-up lock {path!r} is not a regular file; remove it and run again"
        )
    return fd


def _unusable(path: str, exc: OSError) -> FatalError:
    return FatalError(
        f"the start-up lock {path!r} cannot be opened ({exc.strerror}); remove it, or fix its "
        "directory, and run again"
    )


def _holder(fd: int) -> int | None:
    """The pid the holder wrote into the lock file, if it did."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None
