"""The receipt root's checks (``reconciler._root_check``, D-16, spec 03 "Root") on real
directories, each refusal with the exact one-line message the operator sees (issue 28)."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from reconciler._root_check import (
    MAX_ROOT_BYTES,
    ReceiptRootError,
    check_root_dir,
    file_kind,
    private_dir,
    validate_receipt_root,
    what_is,
)

FIX = "point the receipt root at the launcher's receipt directory (a real directory, not a link)"


def refused(root: Path | str) -> str:
    with pytest.raises(ReceiptRootError) as raised:
        check_root_dir(str(root))
    return str(raised.value)


def test_a_root_below_a_regular_file_is_refused_naming_what_stands_in_the_way(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_bytes(b"")
    root = str(tmp_path / "file" / "root")
    assert refused(root) == (
        f"receipt root {root!r} is below a path component that is not a directory, not a "
        f"directory: {FIX}"
    )


def test_a_root_that_is_a_symbolic_link_is_refused_naming_its_target(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "root").symlink_to(tmp_path / "real")
    root = str(tmp_path / "root")
    target = str(tmp_path / "real")
    assert refused(root) == (
        f"receipt root {root!r} is a symbolic link (to {target!r}), not a directory: {FIX}"
    )


def test_a_link_whose_target_cannot_be_read_is_shown_with_a_question_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "root").symlink_to("/elsewhere")

    def unreadable(path: object) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "readlink", unreadable)
    assert what_is(str(tmp_path / "root")) == "a symbolic link (to '?')"


def test_what_stands_at_a_path_is_named_by_its_kind(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    assert what_is(str(tmp_path / "fifo")) == "a FIFO"
    assert what_is("/dev/null") == "a character device"
    assert what_is(str(tmp_path / "dir")) == "not a directory"  # a race: it became one
    assert file_kind(0, "a special file") == "a special file"  # no type bits at all
    assert file_kind(stat.S_IFDIR, "x") == "a directory"


def test_a_root_that_cannot_be_examined_says_why_in_one_line(tmp_path: Path) -> None:
    root = str(tmp_path / ("n" * 300))  # ENAMETOOLONG from lstat
    assert refused(root) == (
        f"receipt root {root!r} cannot be examined (File name too long): make it a readable "
        "directory"
    )


@pytest.mark.parametrize(
    ("mode", "who"),
    [
        (0o770, "its group"),
        (0o771, "its group"),
        (0o702, "others"),
        (0o722, "group and others"),
    ],
)
def test_a_root_others_can_write_is_refused_naming_who_and_the_command_that_fixes_it(
    tmp_path: Path, mode: int, who: str
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.chmod(root, mode)
    word = shlex.quote(str(root))
    assert refused(root) == (
        f"receipt root {str(root)!r} (mode {mode:04o}, owner uid {os.geteuid()}) is writable by "
        f"{who}: another local user could delete or plant receipts; fix it with "
        f"`chmod 0700 {word}`"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another uid")
def test_a_loose_root_of_another_user_names_both_problems_and_chowns_first(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.chmod(root, 0o777)
    os.chown(root, 4321, -1)
    word = shlex.quote(str(root))
    me = os.geteuid()
    assert refused(root) == (
        f"receipt root {str(root)!r} (mode 0777, owner uid 4321) is writable by group and "
        f"others and owned by uid 4321, not by the user running qlfsm (uid {me}): another "
        f"local user could delete or plant receipts; fix it with "
        f"`chown {me} {word} && chmod 0700 {word}`"
    )


def test_the_root_may_be_exactly_the_longest_path_accepted_and_no_longer() -> None:
    longest = "/" + "a" * (MAX_ROOT_BYTES - 1)
    assert validate_receipt_root(longest) == longest
    with pytest.raises(ReceiptRootError) as raised:
        validate_receipt_root(longest + "a")
    assert str(raised.value) == (
        f"receipt root is longer than {MAX_ROOT_BYTES} bytes: use a shorter absolute path"
    )


def test_a_root_with_a_nul_or_that_is_slash_is_refused_with_its_message() -> None:
    with pytest.raises(ReceiptRootError) as raised:
        validate_receipt_root("/tmp/a\0b")
    assert str(raised.value) == "receipt root contains a NUL byte: remove it"
    for slash in ("/", "//", "///", "/./"):
        with pytest.raises(ReceiptRootError) as raised:
            validate_receipt_root(slash)
        assert str(raised.value) == "receipt root is '/': use a dedicated directory below it"
    assert validate_receipt_root("/X") == "/X"  # a name of X's is a name


def test_a_private_directory_is_never_looser_than_0700_even_before_its_mode_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = os.fchmod

    def recording(fd: int, mode: int) -> None:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real(fd, mode)

    monkeypatch.setattr(os, "fchmod", recording)
    old = os.umask(0)
    try:
        private_dir(str(tmp_path / "d"))
    finally:
        os.umask(old)
    assert seen == [0o700]
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700
