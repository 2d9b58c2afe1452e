"""The Attempt lock's files (docs/decisions.md D-17, ``reconciler.node._attempt_lock``), in
process: the probe's `unusable:<why>:<path>` answers and the wrapper's unlink of its own lock.
Real files under ``tmp_path``; the lock is taken by :func:`hold_lock` as the launcher takes it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from pathlib import Path

import pytest

from reconciler.node import (
    FileReceiptStore,
    LockUnavailable,
    hold_lock,
    lock_path,
    unlink_own_lock,
)
from reconciler.node._attempt_lock import _unusable

ATTEMPT = "at-1"


def shard(store: FileReceiptStore) -> Path:
    """The Attempt's shard, created as the launcher leaves it."""
    path = Path(store.root) / ATTEMPT[:2]
    path.mkdir(mode=0o700, exist_ok=True)
    return path


# --- unlink_own_lock --------------------------------------------------------------------------


def test_the_holder_unlinks_its_own_lock_file_and_keeps_the_lock_until_it_closes(
    store: FileReceiptStore,
) -> None:
    shard(store)
    path = lock_path(store.root, ATTEMPT)
    fd = hold_lock(store.root, ATTEMPT)
    try:
        unlink_own_lock(fd, path)
        assert not os.path.lexists(path)
        with pytest.raises(BlockingIOError):  # the open file description still holds it
            _other_takes(fd)
    finally:
        os.close(fd)


def _other_takes(fd: int) -> None:
    """Another open file description of ``fd``'s file (through /proc) tries its flock."""
    other = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)


def test_a_lock_file_replaced_at_its_name_is_not_the_holders_to_unlink(
    store: FileReceiptStore,
) -> None:
    here = shard(store)
    path = lock_path(store.root, ATTEMPT)
    fd = hold_lock(store.root, ATTEMPT)
    try:
        newer = here / "newer"
        newer.write_bytes(b"someone else's\n")
        os.replace(newer, path)
        unlink_own_lock(fd, path)
        assert Path(path).read_bytes() == b"someone else's\n"
    finally:
        os.close(fd)


def test_a_symbolic_link_to_the_held_file_at_its_name_is_left_alone(
    store: FileReceiptStore,
) -> None:
    here = shard(store)
    path = lock_path(store.root, ATTEMPT)
    fd = hold_lock(store.root, ATTEMPT)
    try:
        kept = here / "kept"
        os.rename(path, kept)
        os.symlink(kept, path)  # names the very file the holder locked, through a link
        unlink_own_lock(fd, path)
        assert os.path.islink(path)
        assert kept.exists()
    finally:
        os.close(fd)


def test_a_lock_file_already_gone_is_no_error(store: FileReceiptStore) -> None:
    shard(store)
    path = lock_path(store.root, ATTEMPT)
    fd = hold_lock(store.root, ATTEMPT)
    try:
        os.unlink(path)
        unlink_own_lock(fd, path)  # best effort: nothing to do, nothing raised
        assert not os.path.lexists(path)
    finally:
        os.close(fd)


# --- the probe's `unusable` answers -----------------------------------------------------------


def test_a_shard_that_is_a_symbolic_link_is_unusable_not_followed_naming_the_shard(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, Path(store.root) / ATTEMPT[:2])
    # O_DIRECTORY | O_NOFOLLOW on a link: Linux says ENOTDIR.
    assert store.lock_state(ATTEMPT) == f"unusable:ENOTDIR:{os.path.join(store.root, 'at')}"


def test_a_shard_that_is_a_file_is_unusable_enotdir_naming_the_shard(
    store: FileReceiptStore,
) -> None:
    (Path(store.root) / ATTEMPT[:2]).write_bytes(b"")
    assert store.lock_state(ATTEMPT) == f"unusable:ENOTDIR:{os.path.join(store.root, 'at')}"


def test_a_lock_name_that_is_a_symbolic_link_is_unusable_eloop_naming_the_lock(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    shard(store)
    target = tmp_path / "target"
    target.write_bytes(b"")
    os.symlink(target, lock_path(store.root, ATTEMPT))
    assert store.lock_state(ATTEMPT) == f"unusable:ELOOP:{lock_path(store.root, ATTEMPT)}"


@pytest.mark.parametrize(
    ("error", "why"),
    [
        (OSError(errno.EACCES, "Permission denied"), "EACCES"),
        (OSError("no errno"), "error"),  # errno None
        (OSError(0, "errno 0"), "error"),
        (OSError(99999, "no such errno"), "error"),
    ],
)
def test_an_unusable_answer_names_the_errno_or_error_when_it_has_no_name(
    error: OSError, why: str
) -> None:
    """Not reachable through the probe, whose OSErrors all carry a known errno: the
    fallback of the helper that words it (called directly)."""
    assert _unusable(error, "/r/at/at-1.lock") == f"unusable:{why}:/r/at/at-1.lock"


# --- hold_lock, probe and remove_lock on real files -------------------------------------------


def _holder(path: str) -> int:
    """Another open file description holding ``path``'s exclusive flock (a live wrapper)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_hold_lock_creates_the_file_0600_locked_close_on_exec_and_the_probe_says_held(
    store: FileReceiptStore,
) -> None:
    shard(store)
    path = lock_path(store.root, ATTEMPT)
    assert path == os.path.join(store.root, "at", "at-1.lock")
    assert store.lock_state(ATTEMPT) == "absent"
    fd = hold_lock(store.root, ATTEMPT)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert not os.get_inheritable(fd)
        assert store.lock_state(ATTEMPT) == "held"
        assert store.remove_lock(ATTEMPT) is False  # its wrapper lives: never removed
        assert os.path.exists(path)
        with pytest.raises(BlockingIOError):
            _other_takes(fd)
    finally:
        os.close(fd)
    assert store.lock_state(ATTEMPT) == "free"
    assert store.lock_state(ATTEMPT) == "free"  # the probe released what it took
    fd = _holder(path)
    os.close(fd)
    assert store.remove_lock(ATTEMPT) is True
    assert not os.path.lexists(path)
    assert store.lock_state(ATTEMPT) == "absent"
    assert store.remove_lock(ATTEMPT) is False


def test_no_shard_is_absent_for_the_probe_nothing_to_remove_and_unavailable_to_hold(
    store: FileReceiptStore,
) -> None:
    path = lock_path(store.root, ATTEMPT)
    assert store.lock_state(ATTEMPT) == "absent"
    assert store.remove_lock(ATTEMPT) is False
    with pytest.raises(LockUnavailable) as raised:
        hold_lock(store.root, ATTEMPT)
    assert raised.value.errno == errno.ENOENT
    assert raised.value.strerror == (
        f"cannot open the receipt shard for the lock {path!r} ({os.strerror(errno.ENOENT)})"
    )


def test_a_directory_at_the_lock_name_cannot_be_held_nor_removed(
    store: FileReceiptStore,
) -> None:
    shard(store)
    path = lock_path(store.root, ATTEMPT)
    os.mkdir(path)
    with pytest.raises(LockUnavailable) as raised:
        hold_lock(store.root, ATTEMPT)
    assert raised.value.errno == errno.EISDIR
    assert raised.value.strerror == (
        f"cannot create the attempt lock {path!r} ({os.strerror(errno.EISDIR)}); move whatever "
        "stands there out of the receipt root"
    )
    with pytest.raises(OSError) as refused:
        store.remove_lock(ATTEMPT)
    assert (refused.value.errno, refused.value.strerror) == (
        errno.EEXIST,
        f"{path!r} is not a lock file",
    )
    assert store.lock_state(ATTEMPT) == f"unusable:not_regular_file:{path}"
    assert os.path.isdir(path)


def test_a_fifo_at_the_lock_name_is_not_a_regular_file_to_hold(store: FileReceiptStore) -> None:
    shard(store)
    path = lock_path(store.root, ATTEMPT)
    os.mkfifo(path, 0o600)
    with pytest.raises(LockUnavailable) as raised:
        hold_lock(store.root, ATTEMPT)
    assert (raised.value.errno, raised.value.strerror) == (
        errno.EEXIST,
        f"the attempt lock {path!r} is not a regular file; move it away",
    )
    assert store.lock_state(ATTEMPT) == f"unusable:not_regular_file:{path}"


def test_a_lock_held_by_another_process_is_tried_200_times_5_ms_apart_then_refused(
    store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard(store)
    path = lock_path(store.root, ATTEMPT)
    other = _holder(path)
    sleeps: list[object] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    try:
        with pytest.raises(LockUnavailable) as raised:
            hold_lock(store.root, ATTEMPT)
    finally:
        os.close(other)
    assert sleeps == [0.005] * 200
    assert (raised.value.errno, raised.value.strerror) == (
        errno.EWOULDBLOCK,
        f"the attempt lock {path!r} is held by another process (another launch of this "
        "attempt?); nothing was started",
    )


def no_locks(fd: int, operation: int) -> None:
    """`flock` as some network filesystems answer it: ENOLCK, held by nobody."""
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


def test_a_lock_the_filesystem_cannot_take_is_refused_at_once_naming_its_error(
    store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some network filesystems answer flock with ENOLCK: no other process holds it, and trying
    # again does not help.
    shard(store)
    path = lock_path(store.root, ATTEMPT)

    sleeps: list[object] = []
    monkeypatch.setattr(fcntl, "flock", no_locks)
    monkeypatch.setattr(time, "sleep", sleeps.append)
    with pytest.raises(LockUnavailable) as raised:
        hold_lock(store.root, ATTEMPT)
    assert (raised.value.errno, raised.value.strerror, sleeps) == (
        errno.ENOLCK,
        f"cannot lock {path!r} ({os.strerror(errno.ENOLCK)})",
        [],
    )


def test_a_lock_the_filesystem_cannot_probe_is_unusable_naming_its_error_and_path(
    store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard(store)
    hold = hold_lock(store.root, ATTEMPT)
    os.close(hold)  # the file is there, nobody holds it
    path = lock_path(store.root, ATTEMPT)

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert store.lock_state(ATTEMPT) == f"unusable:ENOLCK:{path}"


@pytest.mark.parametrize("meanwhile", ["unlinked", "replaced", "linked"])
def test_a_lock_file_changed_at_its_name_while_it_was_locked_is_not_removed(
    store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch, meanwhile: str
) -> None:
    """Between remove_lock's exclusive flock and its check of the name, someone else unlinks
    the file, puts another file there, or a symbolic link to the very file it locked."""
    here = shard(store)
    path = lock_path(store.root, ATTEMPT)
    os.close(_holder(path))
    real_flock = fcntl.flock

    def flock_then_change(fd: int, operation: int) -> None:
        real_flock(fd, operation)
        if meanwhile == "unlinked":
            os.unlink(path)
        elif meanwhile == "replaced":
            (here / "newer").write_bytes(b"newer\n")
            os.replace(here / "newer", path)
        else:
            os.rename(path, here / "kept")
            os.symlink(here / "kept", path)

    monkeypatch.setattr(fcntl, "flock", flock_then_change)
    assert store.remove_lock(ATTEMPT) is False
    monkeypatch.undo()
    if meanwhile == "unlinked":
        assert not os.path.lexists(path)
    elif meanwhile == "replaced":
        assert Path(path).read_bytes() == b"newer\n"
    else:
        assert os.path.islink(path)


_GONE = ("not_running", "pid_not_found")
_BLIND = ("unknown", "provider_unavailable")
_ADVICE = (
    "its wrapper lives in another PID namespace; run qlfsm where QingLong runs "
    "(docker exec), not the host"
)


@pytest.mark.parametrize(
    ("verdict", "lock", "expected"),
    [
        (_GONE, "absent", _GONE),
        (_GONE, "free", _GONE),
        (_BLIND, "absent", _BLIND),
        (_BLIND, "free", _BLIND),
        (_GONE, "held", ("unknown", f"attempt_lock_held:pid_not_found:{_ADVICE}")),
        (_BLIND, "held", ("unknown", f"attempt_lock_held:provider_unavailable:{_ADVICE}")),
        (
            _GONE,
            "unusable:not_regular_file:/r/at.lock",
            ("unknown", "attempt_lock_unusable:not_regular_file:/r/at.lock:pid_not_found"),
        ),
        (("running", "identity_matches"), "held", ("running", "identity_matches")),
        (("unknown", "handle_invalid"), "held", ("unknown", "handle_invalid")),
        (("unknown", "handle_invalid"), "unusable:x", ("unknown", "handle_invalid")),
    ],
)
def test_the_attempt_lock_changes_only_a_negative_or_blind_answer_and_says_how(
    verdict: tuple[str, str], lock: str, expected: tuple[str, str]
) -> None:
    from reconciler.node import Evidence, lock_evidence, needs_lock

    evidence = Evidence(verdict[0], verdict[1], 4242)
    assert needs_lock(evidence) is (verdict in (_GONE, _BLIND))
    after = lock_evidence(evidence, lock)
    assert (after.verdict, after.reason, after.pid) == (*expected, 4242)
    if expected == verdict:
        assert after is evidence
