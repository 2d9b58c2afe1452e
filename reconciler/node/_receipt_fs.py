"""The receipt store's file operations (spec 03): opening the root and shard without following
links, creating them, and publishing bytes atomically (temp, fsync, link)."""

from __future__ import annotations

import contextlib
import errno
import os

from reconciler._root_check import (
    ReceiptRootError,
    private_dir,
    refuse_loose,
    validate_receipt_root,
    what_is,
)
from reconciler._root_check import root_error as root_error
from reconciler.node._receipt_layout import (
    _CREATE_TEMP,
    _OPEN_DIR,
    ReceiptExists,
    Unusable,
    _require_id,
    receipt_name,
    shard_path,
)


def _fsync_dir_best_effort(dir_fd: int) -> None:
    # Some filesystems cannot fsync a directory; restart safety does not depend on it.
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def write_durably(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to the new file ``fd``, fsync, then ``fd`` closed (whatever
    happens)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_bytes_at(target: str, temporary: str, data: bytes) -> None:
    """Publish `data` once at `target` (spec 03 "Publish once"); both paths are absolute and in
    one directory, created 0700 (whatever the umask, D-16) if it is missing.

    Exclusive 0600 temp file `temporary`, fsync, hard link to `target` (an existing receipt is
    kept: ReceiptExists), unlink the temp, fsync the directory. Never an overwriting rename.
    """
    directory = os.path.dirname(target)
    if not os.path.isabs(target) or os.path.dirname(temporary) != directory:
        raise ValueError("receipt target and temporary must be absolute paths in one directory")
    final, temp = os.path.basename(target), os.path.basename(temporary)
    private_dir(directory)
    dir_fd = os.open(directory, _OPEN_DIR)
    try:
        fd = os.open(temp, _CREATE_TEMP, 0o600, dir_fd=dir_fd)
        try:
            write_durably(fd, data)
            try:
                os.link(temp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                raise ReceiptExists(final.removesuffix(".json")) from None
        finally:
            # A leftover temp is harmless: readers only ever open the final name.
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
        _fsync_dir_best_effort(dir_fd)
    finally:
        os.close(dir_fd)


def _unusable(kind: str, path: str) -> Unusable:
    return Unusable(f"{kind}_is_symlink" if os.path.islink(path) else f"{kind}_not_directory", path)


def _not_a_dir(error: OSError) -> bool:
    # Linux answers ENOTDIR, not ELOOP, for O_DIRECTORY|O_NOFOLLOW on a symlink.
    return error.errno in (errno.ENOTDIR, errno.ELOOP)


def _open_dirs_in(dir_fd: int, names: list[str], *, create: bool) -> int | None:
    """An O_NOFOLLOW descriptor of ``dir_fd``/names[0]/names[1]/..., each a real directory
    (created 0700 when ``create``); None when one is missing and not ``create``."""
    current = os.dup(dir_fd)
    for name in names:
        try:
            if create:
                private_dir(name, dir_fd=current)
            opened = os.open(name, _OPEN_DIR, dir_fd=current)
        except FileNotFoundError:
            if create:
                raise
            return None
        finally:
            os.close(current)
        current = opened
    return current


def prepare_receipt_dirs(root: str, attempt_id: str) -> None:
    """The launcher's side, BEFORE its first commit: create the root (with its parents) and the
    Attempt's shard, 0700, and check that both are real directories and that nothing stands at
    the receipt's name yet (the wrapper could not publish over it). ReceiptRootError names the
    problem and the fix; ReceiptExists when the receipt name is taken."""
    root = validate_receipt_root(root)
    shard = _require_id(attempt_id)[:2]
    shard_at = shard_path(root, attempt_id)
    try:
        # The parents as makedirs makes them; the root itself 0700 whatever the umask (D-16).
        if not os.path.exists(os.path.dirname(root)):
            os.makedirs(os.path.dirname(root), exist_ok=True)
        private_dir(root)
    except FileExistsError:
        pass  # something that is not a directory stands there: named just below
    except OSError as error:
        raise ReceiptRootError(
            f"cannot create receipt root {root!r} ({error.strerror}): create it as a directory "
            "(mode 0700) or choose a writable place for it"
        ) from None
    try:
        root_fd = os.open(root, _OPEN_DIR)
    except OSError as error:
        if _not_a_dir(error):
            raise ReceiptRootError(root_error(root)) from None
        raise ReceiptRootError(
            f"cannot open receipt root {root!r} ({error.strerror}): make it a readable directory"
        ) from None
    with contextlib.ExitStack() as opened:
        opened.callback(os.close, root_fd)
        # D-16: a root another user can write is refused before the launch commits anything.
        refuse_loose("root", root, os.fstat(root_fd))
        try:
            private_dir(shard, dir_fd=root_fd)
            shard_fd = os.open(shard, _OPEN_DIR, dir_fd=root_fd)
        except OSError as error:
            if _not_a_dir(error):
                raise ReceiptRootError(
                    f"receipt shard {shard_at!r} is {what_is(shard_at)}, not a directory: move "
                    "it out of the receipt root (the launcher creates the shards)"
                ) from None
            raise ReceiptRootError(
                f"cannot create receipt shard {shard_at!r} ({error.strerror}): make the receipt "
                "root writable"
            ) from None
        opened.callback(os.close, shard_fd)
        refuse_loose("shard", shard_at, os.fstat(shard_fd))
        try:
            os.stat(receipt_name(attempt_id), dir_fd=shard_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        raise ReceiptExists(attempt_id)
