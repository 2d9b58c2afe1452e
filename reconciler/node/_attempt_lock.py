"""The Attempt lock: evidence of a live wrapper that no PID namespace can hide (D-17).

A `ql3lp1` handle carries the wrapper's PID as the launcher's PID namespace saw it, and the boot
id is the kernel's, shared by every namespace. A reconciler in another namespace (the host
against a container's volume, a sidecar) therefore sees a live wrapper's PID absent or someone
else's, and `not_running` would make ADR-0068 row 13 mark a running job `lost`.

So the runs qlfsm launches carry one more fact. The launcher creates `<shard>/<attemptId>.lock`
(:func:`lock_path`, an exact path, never a directory listing) and takes an exclusive
``flock`` on it BEFORE the spawn; the wrapper inherits that open file description (``pass_fds``)
and keeps it for as long as it lives; the launcher then closes its own descriptor. The kernel
releases a `flock` when the last descriptor of its open file description is closed, which for
the wrapper is its death, in whatever namespace it ran. `flock`, not `fcntl`/`lockf`: POSIX
record locks belong to a process, are not inherited across `fork` and are dropped when the
process closes ANY descriptor of the file, so the launcher could not hand one to the wrapper.

The lock lives exactly as long as the wrapper, the process the handle names, not as long as the
job's process group: the wrapper's descriptor is close-on-exec and the wrapper runs the command
with ``close_fds``, so the job never holds it. A job that outlives its wrapper (the wrapper was
killed) is judged as before, by the handle: no receipt can come any more, and a descriptor
leaked to a daemon would otherwise keep start-up blocked with no process left to find.

Probing (:func:`probe_lock`) opens the file read-only with ``O_NOFOLLOW``, never creates it,
asks ``LOCK_SH | LOCK_NB`` and releases at once: it never waits, and a held lock fails the
request without touching the holder's lock. While the lock is free the probe holds a shared lock
for a moment; the only one who could mind is a launcher taking it, and it retries
(:func:`hold_lock`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from typing import TYPE_CHECKING, Final

from reconciler._atomic import fsync_dir
from reconciler._root_check import OPEN_DIR
from reconciler.node._receipt import _require_id, shard_path

ABSENT: Final = "absent"
FREE: Final = "free"
HELD: Final = "held"

# Never O_CREAT: a probe creates nothing. O_NONBLOCK: a FIFO planted there must not hang it.
_OPEN_PROBE: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_HOLD: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# A probe holds a shared lock for microseconds: the launcher tries this long before refusing.
_HOLD_TRIES: Final = 200
_HOLD_PAUSE_S: Final = 0.005


# The Attempt lock (docs/decisions.md D-17): `<shard>/<attemptId>.lock`, beside the receipt.
# Receipt names end in `.json`, temps start with `.` and end in `.tmp`, quarantined copies live
# under `.quarantine/`: no lock name is ever one of them, whatever the two Attempt ids.
LOCK_SUFFIX: Final = ".lock"


def lock_name(attempt_id: str) -> str:
    return f"{_require_id(attempt_id)}{LOCK_SUFFIX}"


def lock_path(root: str, attempt_id: str) -> str:
    """`<root>/<attemptId[0:2]>/<attemptId>.lock`: the file the Attempt's wrapper holds an
    exclusive `flock` on for as long as it lives (D-17)."""
    return os.path.join(shard_path(root, attempt_id), lock_name(attempt_id))


if TYPE_CHECKING:
    from reconciler.node._identity import Evidence


class LockUnavailable(OSError):
    """The launcher could not take the Attempt lock; the message says why and what to do."""


def lock_evidence(evidence: Evidence, lock: str) -> Evidence:
    """The probe's answer with the Attempt lock taken into account (D-17).

    A held lock means the wrapper lives, whatever ``/proc`` here shows, so a `not_running`
    answer becomes `unknown` (ADR-0068 row 10: unresolved), never a negative; an unusable lock
    file cannot prove the wrapper dead either. A held lock also names the cause of an
    `unknown / provider_unavailable` (row 9): seen from another PID namespace the handle's PID
    is often a kernel thread there, whose stat (process group 0) no handle can match; the
    candidate is then row 10 with the reason that says where to run qlfsm. A free or absent
    lock leaves every answer as it is (runs QingLong launched itself have no lock file), and a
    `running` answer or an invalid handle never changes."""
    if lock in (ABSENT, FREE) or not needs_lock(evidence):
        return evidence
    from reconciler.node._identity import Evidence  # here: the wrapper imports this module

    if lock == HELD:
        # The advice: where a reconciler sees the wrapper's PID as the launcher saw it.
        reason = (
            f"attempt_lock_held:{evidence.reason}:its wrapper lives in another PID namespace; "
            "run qlfsm where QingLong runs (docker exec), not the host"
        )
    else:
        reason = f"attempt_lock_unusable:{lock.partition(':')[2]}:{evidence.reason}"
    return Evidence("unknown", reason, evidence.pid)


def needs_lock(evidence: Evidence) -> bool:
    """Whether the lock can change ``evidence`` (:func:`lock_evidence`): only then is it read."""
    return evidence.verdict == "not_running" or evidence.reason == "provider_unavailable"


def probe_lock(root: str, attempt_id: str) -> str:
    """`absent`, `free`, `held` or `unusable:<why>[:<path>]` for the Attempt's lock file.
    Never raises for the file's sake; creates, waits for and changes nothing."""
    name = lock_name(attempt_id)
    try:
        shard = os.open(shard_path(root, attempt_id), OPEN_DIR)
    except FileNotFoundError:
        return ABSENT
    except OSError as error:
        return _unusable(error, shard_path(root, attempt_id))
    try:
        try:
            fd = os.open(name, _OPEN_PROBE, dir_fd=shard)
        except FileNotFoundError:
            return ABSENT
        except OSError as error:
            return _unusable(error, lock_path(root, attempt_id))
    finally:
        os.close(shard)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"unusable:not_regular_file:{lock_path(root, attempt_id)}"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return HELD
            return _unusable(error, lock_path(root, attempt_id))
        fcntl.flock(fd, fcntl.LOCK_UN)
        return FREE
    finally:
        os.close(fd)


def _unusable(error: OSError, path: str) -> str:
    return f"unusable:{errno.errorcode.get(error.errno or 0, 'error')}:{path}"


def hold_lock(root: str, attempt_id: str) -> int:
    """Create (or open) the Attempt's lock file, 0600, in its existing shard and take an
    exclusive `flock`; the descriptor (close-on-exec) holds it. Raises LockUnavailable."""
    path = lock_path(root, attempt_id)
    try:
        shard = os.open(shard_path(root, attempt_id), OPEN_DIR)
    except OSError as error:
        raise LockUnavailable(
            error.errno, f"cannot open the receipt shard for the lock {path!r} ({error.strerror})"
        ) from None
    try:
        fd = os.open(lock_name(attempt_id), _OPEN_HOLD, 0o600, dir_fd=shard)
    except OSError as error:
        raise LockUnavailable(
            error.errno,
            f"cannot create the attempt lock {path!r} ({error.strerror}); move whatever stands "
            "there out of the receipt root",
        ) from None
    finally:
        os.close(shard)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LockUnavailable(
                errno.EEXIST, f"the attempt lock {path!r} is not a regular file; move it away"
            )
        for _ in range(_HOLD_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise LockUnavailable(
                        error.errno, f"cannot lock {path!r} ({error.strerror})"
                    ) from None
            time.sleep(_HOLD_PAUSE_S)  # a probe holds it for a moment; anyone else, refused
        raise LockUnavailable(
            errno.EWOULDBLOCK,
            f"the attempt lock {path!r} is held by another process (another launch of this "
            "attempt?); nothing was started",
        )
    except BaseException:
        os.close(fd)
        raise


def remove_lock(root: str, attempt_id: str) -> bool:
    """Unlink the Attempt's lock file if nobody holds it: taken exclusively first (never
    waiting), checked to be the very file at the name, then unlinked inside its shard (no
    symbolic link followed). True when a file was removed; False when there is none or it is
    held. OSError for anything else (the caller keeps what tells it to come back)."""
    name = lock_name(attempt_id)
    try:
        shard = os.open(shard_path(root, attempt_id), OPEN_DIR)
    except FileNotFoundError:
        return False
    try:
        try:
            fd = os.open(name, _OPEN_PROBE, dir_fd=shard)
        except FileNotFoundError:
            return False
        try:
            here = os.fstat(fd)
            if not stat.S_ISREG(here.st_mode):
                raise OSError(errno.EEXIST, f"{lock_path(root, attempt_id)!r} is not a lock file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # EWOULDBLOCK / EAGAIN
                return False  # its wrapper lives: never removed
            try:
                now = os.stat(name, dir_fd=shard, follow_symlinks=False)
            except FileNotFoundError:
                return False
            if not os.path.samestat(now, here):
                return False  # replaced meanwhile: not the file we locked
            os.unlink(name, dir_fd=shard)
            fsync_dir(shard)
            return True
        finally:
            os.close(fd)
    finally:
        os.close(shard)


def unlink_own_lock(fd: int, path: str) -> None:
    """Unlink the lock file's name while this process holds it through ``fd``, only while the
    name still names that very file; the lock itself goes when ``fd`` is closed (the
    wrapper's exit, or the launcher giving up). Best effort: a leftover is the sweep's."""
    with contextlib.suppress(OSError):
        here = os.fstat(fd)
        now = os.lstat(path)
        if os.path.samestat(now, here):
            os.unlink(path)
