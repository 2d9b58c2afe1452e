"""The Attempt lock's files (docs/decisions.md D-17, ``reconciler.node._attempt_lock``), in
process: the probe's `unusable:<why>:<path>` answers and the wrapper's unlink of its own lock.
Real files under ``tmp_path``; the lock is taken by :func:`hold_lock` as the launcher takes it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from reconciler.node import FileReceiptStore, hold_lock, lock_path, unlink_own_lock
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
