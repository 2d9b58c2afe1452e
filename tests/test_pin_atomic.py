"""The durable file writes (``reconciler._atomic``) on real files: every byte written and synced
before a name points at it, the directory synced after, the descriptor closed whatever happens,
and a failed replacement leaves the old file and no temporary behind (issue 28)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler._atomic import CREATE_NEW, fsync_dir, fsync_file, replace_file, write_durably


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, bytes | None]]]:
    """Every fsync made, as what was synced: ("dir", None) or ("file", its bytes then)."""
    seen: list[tuple[str, bytes | None]] = []
    real = os.fsync

    def recording(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            seen.append(("dir", None))
        else:
            # What the file holds when it is synced (reopened: ``fd`` may be write-only).
            seen.append(("file", Path(f"/proc/self/fd/{fd}").read_bytes()))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    yield seen


def closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        return exc.errno == errno.EBADF
    return False


def test_write_durably_writes_every_byte_when_the_kernel_takes_a_few_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    fd = os.open(tmp_path / "f", CREATE_NEW, 0o600)
    write_durably(fd, b"0123456789abcdef")
    monkeypatch.undo()
    assert (tmp_path / "f").read_bytes() == b"0123456789abcdef"
    assert closed(fd)


def test_write_durably_syncs_the_whole_file_then_closes_it(
    tmp_path: Path, synced: list[tuple[str, bytes | None]]
) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    write_durably(fd, b"payload")
    assert synced == [("file", b"payload")]
    assert closed(fd)


def test_write_durably_closes_the_descriptor_when_the_write_fails(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    fd = os.open(tmp_path / "f", os.O_RDONLY)  # a write to it fails (EBADF)
    with pytest.raises(OSError) as raised:
        write_durably(fd, b"x")
    assert raised.value.errno == errno.EBADF
    assert closed(fd)


def test_fsync_file_syncs_the_file_and_raises_for_a_missing_one(
    tmp_path: Path, synced: list[tuple[str, bytes | None]]
) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    fsync_file(str(tmp_path / "f"))
    assert synced == [("file", b"abc")]
    with pytest.raises(FileNotFoundError):
        fsync_file(str(tmp_path / "missing"))


def test_fsync_file_leaves_no_descriptor_open(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    before = set(os.listdir("/proc/self/fd"))
    fsync_file(str(tmp_path / "f"))
    assert set(os.listdir("/proc/self/fd")) == before


def test_fsync_dir_syncs_a_directory_by_path_or_descriptor(
    tmp_path: Path, synced: list[tuple[str, bytes | None]]
) -> None:
    before = set(os.listdir("/proc/self/fd"))
    fsync_dir(str(tmp_path))
    assert set(os.listdir("/proc/self/fd")) == before
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync_dir(fd)
        assert not closed(fd)  # the caller's descriptor stays the caller's
    finally:
        os.close(fd)
    assert synced == [("dir", None), ("dir", None)]


def test_fsync_dir_is_best_effort_for_a_path_or_descriptor_it_cannot_sync(
    tmp_path: Path, synced: list[tuple[str, bytes | None]]
) -> None:
    fsync_dir(str(tmp_path / "missing"))
    (tmp_path / "file").write_bytes(b"abc")
    fsync_dir(str(tmp_path / "file"))  # not a directory: nothing synced, nothing raised
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    os.close(fd)
    fsync_dir(fd)  # a closed descriptor (EBADF)
    assert synced == []


def test_replace_file_writes_a_private_file_synced_before_the_rename_and_its_directory_after(
    tmp_path: Path, synced: list[tuple[str, bytes | None]]
) -> None:
    old = os.umask(0)  # the modes as given, not as a umask would narrow them
    try:
        path = tmp_path / "state"
        path.write_bytes(b"old")
        replace_file(str(path), str(tmp_path / "state.tmp"), b"new")
    finally:
        os.umask(old)
    assert path.read_bytes() == b"new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
    assert synced == [("file", b"new"), ("dir", None)]


def test_replace_file_creates_the_file_with_the_mode_and_flags_given(tmp_path: Path) -> None:
    old = os.umask(0)  # the modes as given, not as a umask would narrow them
    try:
        path = tmp_path / "metrics"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        (tmp_path / "metrics.tmp").write_bytes(b"a longer leftover")
        replace_file(str(path), str(tmp_path / "metrics.tmp"), b"m", mode=0o644, flags=flags)
        replace_file(str(tmp_path / "other"), str(tmp_path / "other.tmp"), b"o", mode=0o640)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"m"
    assert stat.S_IMODE((tmp_path / "other").stat().st_mode) == 0o640


def test_replace_file_refuses_a_temporary_name_that_exists_and_leaves_it_alone(
    tmp_path: Path,
) -> None:
    path, tmp = tmp_path / "state", tmp_path / "state.tmp"
    path.write_bytes(b"old")
    tmp.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        replace_file(str(path), str(tmp), b"new")
    assert tmp.read_bytes() == b"someone else's"
    assert path.read_bytes() == b"old"


def test_replace_file_that_cannot_rename_removes_its_temporary_and_keeps_the_old_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state"
    path.mkdir()  # a directory: the rename over it fails
    (path / "inside").write_bytes(b"kept")
    with pytest.raises(IsADirectoryError):
        replace_file(str(path), str(tmp_path / "state.tmp"), b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
    assert (path / "inside").read_bytes() == b"kept"


def test_replace_file_raises_the_write_error_even_when_its_temporary_is_already_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, tmp = tmp_path / "state", tmp_path / "state.tmp"
    path.write_bytes(b"old")

    def full_disk(fd: int, data: object) -> int:
        os.unlink(tmp)  # gone before the cleanup looks: its unlink fails, quietly
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError) as raised:
        replace_file(str(path), str(tmp), b"new")
    monkeypatch.undo()
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_replace_file_interrupted_while_writing_removes_its_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, tmp = tmp_path / "state", tmp_path / "state.tmp"
    path.write_bytes(b"old")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        replace_file(str(path), str(tmp), b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]
