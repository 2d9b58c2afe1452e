"""Durable file writes: every byte synced before a name points at it, and the directory synced
after a name changed. The standard library alone: the zero-candidate start-up loads it (the
first boot, the shadow cursor) without the node's modules.
"""

from __future__ import annotations

import contextlib
import os

# A new file that must not exist yet; a symbolic link planted at its name is refused.
CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


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


def fsync_file(path: str) -> None:
    """The file at ``path`` synced to disk (errors raised)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: int | str) -> None:
    """A new or removed name in ``directory`` (a descriptor or a path) made durable, best
    effort: some filesystems cannot sync a directory, and nothing depends on it but timing."""
    if isinstance(directory, int):
        with contextlib.suppress(OSError):
            os.fsync(directory)
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_file(
    path: str, tmp: str, data: bytes, *, mode: int = 0o600, flags: int = CREATE_NEW
) -> None:
    """Replace ``path`` with ``data`` so that a crash or a signal leaves the old file or the new
    one, never a part: ``data`` written to the file ``tmp`` (in the same directory, opened with
    ``flags``), fsync, rename over ``path``, fsync of the directory. On any failure after
    ``tmp`` was created (an interrupt too) it is removed and the error raised; ``path`` is then
    untouched."""
    fd = os.open(tmp, flags, mode)  # outside the cleanup: a name that exists is not ours
    try:
        write_durably(fd, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))
