"""``prepare_receipt_dirs``, the launcher's side of the receipt root (D-16), in process: each
refusal in its own words, and a parent another launch creates meanwhile. The launcher's tests run
it as a child, which a mutation run cannot see (issue 28).

Two refusals need an error no directory of a test can cause for a process running as root (it
may create and open anything): they are reached with a real limit on open files, set just below
the descriptor the call would open next and restored afterwards."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.node import ReceiptExists, ReceiptRootError, prepare_receipt_dirs

ATTEMPT = "at-1"  # its shard is `at`
TOO_MANY = os.strerror(24)  # EMFILE


@contextmanager
def open_files_below(nth_free: int) -> Iterator[None]:
    """The open-file limit set so that only the first ``nth_free - 1`` free descriptors open."""
    taken = [os.dup(0) for _ in range(nth_free)]
    for fd in taken:
        os.close(fd)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(taken), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def refusal(root: Path) -> str:
    with pytest.raises(ReceiptRootError) as raised:
        prepare_receipt_dirs(str(root), ATTEMPT)
    return str(raised.value)


def test_a_root_whose_parent_cannot_be_made_says_to_create_it_or_choose_another_place(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_bytes(b"")
    root = tmp_path / "file" / "deep" / "receipts"
    assert refusal(root) == (
        f"cannot create receipt root {str(root)!r} ({os.strerror(20)}): create it as a "
        "directory (mode 0700) or choose a writable place for it"
    )


def test_a_root_that_is_a_file_is_named_with_what_it_is(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.write_bytes(b"")
    assert refusal(root) == (
        f"receipt root {str(root)!r} is a regular file, not a directory: point the receipt root "
        "at the launcher's receipt directory (a real directory, not a link)"
    )


def test_a_root_that_cannot_be_opened_says_to_make_it_a_readable_directory(
    tmp_path: Path,
) -> None:
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    with open_files_below(1):
        message = refusal(root)
    assert message == (
        f"cannot open receipt root {str(root)!r} ({TOO_MANY}): make it a readable directory"
    )


def test_a_shard_that_is_a_file_is_named_with_what_it_is(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    (root / "at").write_bytes(b"")
    assert refusal(root) == (
        f"receipt shard {str(root / 'at')!r} is a regular file, not a directory: move it out "
        "of the receipt root (the launcher creates the shards)"
    )


@pytest.mark.parametrize("kind", ["root", "shard"])
def test_a_root_or_shard_writable_by_others_is_refused_with_the_command_that_fixes_it(
    tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    loose = root if kind == "root" else root / "at"
    loose.mkdir(exist_ok=True)
    loose.chmod(0o777)
    assert refusal(root) == (
        f"receipt {kind} {str(loose)!r} (mode 0777, owner uid {os.geteuid()}) is writable by "
        "group and others: another local user could delete or plant receipts; fix it with "
        f"`chmod 0700 {loose}`"
    )
    assert (root / "at").exists() == (kind == "shard")  # a loose root: no shard made in it


@pytest.mark.parametrize("what", ["file", "dangling symbolic link"])
def test_anything_at_the_receipts_name_is_a_receipt_that_exists(tmp_path: Path, what: str) -> None:
    root = tmp_path / "receipts"
    (root / "at").mkdir(mode=0o700, parents=True)
    root.chmod(0o700)
    name = root / "at" / f"{ATTEMPT}.json"
    if what == "file":
        name.write_bytes(b"")
    else:
        name.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ReceiptExists) as raised:
        prepare_receipt_dirs(str(root), ATTEMPT)
    assert (str(raised.value), raised.value.attempt_id) == (
        f"a receipt already exists for Attempt {ATTEMPT}",
        ATTEMPT,
    )


def test_a_shard_that_cannot_be_made_says_to_make_the_root_writable(tmp_path: Path) -> None:
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    with open_files_below(2):  # the root opens; the new shard does not
        message = refusal(root)
    assert message == (
        f"cannot create receipt shard {str(root / 'at')!r} ({TOO_MANY}): make the receipt root "
        "writable"
    )


def test_a_parent_another_launch_creates_meanwhile_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "deep"
    root = parent / "receipts"
    real_exists = os.path.exists

    def concurrent(path: str) -> bool:
        there = real_exists(path)
        if path == str(parent):
            parent.mkdir()  # another launch, just after this one looked
        return there

    monkeypatch.setattr(os.path, "exists", concurrent)
    prepare_receipt_dirs(str(root), ATTEMPT)
    assert (root / "at").is_dir()
