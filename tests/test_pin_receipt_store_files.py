"""The file store's own words and edges, on real files: what the operator reads when a move or a
purge cannot be done (each message whole), the purge of a journal row's copies, a directory at
the receipt's name (D-16) and the quarantine's answers for names it cannot follow."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from reconciler.node import (
    FileReceiptStore,
    QuarantineNotDone,
    parse_quarantine_ref,
    quarantine_ref,
    receipt_path,
)
from reconciler.node._receipt_store import DirectoryAtReceipt, publish_bytes_at

ATTEMPT = "019f70c0-0000-7000-8000-000000000002"


def slot(n: int) -> str:
    return quarantine_ref(ATTEMPT, n)


def plant(store: FileReceiptStore, data: bytes = b"garbage") -> Path:
    path = Path(receipt_path(store.root, ATTEMPT))
    path.parent.mkdir(mode=0o700, exist_ok=True)
    path.write_bytes(data)
    return path


def copy(store: FileReceiptStore, ref: str, data: bytes = b"copy") -> Path:
    path = Path(store.root) / ref
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# -- quarantine's messages ----------------------------------------------------------------------


def test_a_move_through_a_symlinked_shard_says_nothing_was_moved(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    real = tmp_path / "real-shard"
    real.mkdir()
    (real / f"{ATTEMPT}.json").write_bytes(b"garbage")
    shard = os.path.join(store.root, "01")
    os.symlink(real, shard)
    with pytest.raises(QuarantineNotDone) as caught:
        store.quarantine(ATTEMPT, slot(1))
    assert str(caught.value) == (
        f"receipt shard {shard!r} is not a real directory (Not a directory); nothing was moved"
    )
    assert (real / f"{ATTEMPT}.json").read_bytes() == b"garbage"


def test_a_move_under_a_symlinked_root_says_the_root_is_not_usable(tmp_path: Path) -> None:
    real = tmp_path / "real-root"
    real.mkdir(mode=0o700)
    root = tmp_path / "receipts"
    root.symlink_to(real)
    store = FileReceiptStore(str(root))
    with pytest.raises(QuarantineNotDone) as caught:
        store.quarantine(ATTEMPT, slot(1))
    assert str(caught.value) == (
        f"receipt root {str(root)!r} is not a usable directory; nothing was moved"
    )


def test_a_move_when_the_quarantine_is_a_file_says_it_cannot_be_prepared(
    store: FileReceiptStore,
) -> None:
    plant(store)
    (Path(store.root) / ".quarantine").write_bytes(b"")
    with pytest.raises(QuarantineNotDone) as given:
        store.quarantine(ATTEMPT, slot(1))
    assert str(given.value) == (
        f"cannot prepare .quarantine under {store.root!r} (Not a directory); nothing was moved"
    )
    with pytest.raises(QuarantineNotDone) as targeted:
        store.quarantine(ATTEMPT)
    assert str(targeted.value) == (
        f".quarantine under {store.root!r} is not a real directory (Not a directory); nothing "
        "was moved"
    )


def test_a_vanished_receipt_says_nothing_was_moved(store: FileReceiptStore) -> None:
    with pytest.raises(QuarantineNotDone) as no_shard:
        store.quarantine(ATTEMPT, slot(2))
    message = f"the receipt vanished before it could be moved to {slot(2)}; nothing was moved"
    assert str(no_shard.value) == message
    Path(receipt_path(store.root, ATTEMPT)).parent.mkdir(mode=0o700)
    with pytest.raises(QuarantineNotDone) as no_file:
        store.quarantine(ATTEMPT, slot(2))
    assert str(no_file.value) == message


def test_a_receipt_already_moved_to_its_slot_is_quarantined_again_without_an_error(
    store: FileReceiptStore,
) -> None:
    # An earlier pass moved it and stopped before its journal row: nothing is left to move.
    Path(receipt_path(store.root, ATTEMPT)).parent.mkdir(mode=0o700)
    moved = copy(store, slot(2))
    assert store.quarantine(ATTEMPT, slot(2)) == slot(2)
    assert moved.read_bytes() == b"copy"


def test_a_taken_slot_says_it_holds_another_file(store: FileReceiptStore) -> None:
    plant(store)
    copy(store, slot(1), b"earlier")
    with pytest.raises(QuarantineNotDone) as caught:
        store.quarantine(ATTEMPT, slot(1))
    assert str(caught.value) == f"quarantine slot {slot(1)} holds another file; nothing was moved"


def test_with_every_slot_taken_the_message_says_to_purge(store: FileReceiptStore) -> None:
    plant(store)
    copy(store, slot(999))
    copy(store, slot(1000))
    with pytest.raises(QuarantineNotDone) as caught:
        store.quarantine_target(ATTEMPT, slot(999))
    assert str(caught.value) == (
        f"all 1000 quarantine slots of Attempt {ATTEMPT} are taken; purge old copies from the "
        "quarantine, nothing was moved"
    )


def test_a_moved_symlink_whose_target_is_gone_is_still_a_copy(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    # The copy is the link itself: a later call with nothing left to move finds it without
    # following it, whether the shard is gone or only the receipt.
    held = Path(store.root) / slot(1)
    held.parent.mkdir(parents=True)
    held.symlink_to(tmp_path / "gone")
    assert store.quarantine(ATTEMPT, slot(1)) == slot(1)
    Path(receipt_path(store.root, ATTEMPT)).parent.mkdir(mode=0o700)
    assert store.quarantine(ATTEMPT, slot(1)) == slot(1)
    assert held.is_symlink()


# -- holds_quarantine ---------------------------------------------------------------------------


def test_a_quarantine_that_is_a_symlink_loop_holds_no_copy(store: FileReceiptStore) -> None:
    loop = Path(store.root) / ".quarantine"
    loop.symlink_to(loop)
    assert store.holds_quarantine(slot(1)) is False


def test_a_quarantine_shard_that_is_a_file_holds_no_copy(store: FileReceiptStore) -> None:
    (Path(store.root) / ".quarantine").mkdir()
    (Path(store.root) / ".quarantine" / "01").write_bytes(b"")
    assert store.holds_quarantine(slot(1)) is False


# -- delete: a directory at the receipt's name (D-16) --------------------------------------------


def test_deleting_a_directory_at_the_receipt_name_says_to_remove_it(
    store: FileReceiptStore,
) -> None:
    path = receipt_path(store.root, ATTEMPT)
    os.makedirs(path)
    with pytest.raises(DirectoryAtReceipt) as caught:
        store.delete(ATTEMPT)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value) == (
        f"remove the directory at {path!r} (look inside it first): it stands at the receipt "
        "path, and a receipt is a file, so it can be neither read nor quarantined"
    )
    assert caught.value.path == path
    assert os.path.isdir(path)


def test_removing_a_receipt_says_whether_a_file_was_there_even_without_its_shard(
    store: FileReceiptStore,
) -> None:
    assert store.remove_receipt(ATTEMPT) is False  # no shard yet: nothing removed
    path = receipt_path(store.root, ATTEMPT)
    os.makedirs(os.path.dirname(path), mode=0o700)
    assert store.remove_receipt(ATTEMPT) is False  # the shard, but no receipt in it
    Path(path).write_bytes(b"garbage")
    assert store.remove_receipt(ATTEMPT) is True
    assert not os.path.lexists(path)


# -- purge_quarantine ---------------------------------------------------------------------------


def test_purging_removes_the_rows_slots_up_to_its_own_and_no_later_one(
    store: FileReceiptStore,
) -> None:
    for n in (1, 2, 3):
        copy(store, slot(n))
    assert store.purge_quarantine(slot(2)) == 2
    assert not (Path(store.root) / slot(1)).exists()
    assert not (Path(store.root) / slot(2)).exists()
    assert (Path(store.root) / slot(3)).read_bytes() == b"copy"
    assert store.purge_quarantine(slot(2)) == 0  # idempotent


def test_purging_an_unknown_name_is_refused(store: FileReceiptStore) -> None:
    with pytest.raises(ValueError) as caught:
        store.purge_quarantine("../etc/passwd")
    assert str(caught.value) == "'../etc/passwd' is not a quarantine name"


def test_purging_under_a_missing_root_finds_nothing(tmp_path: Path) -> None:
    store = FileReceiptStore(str(tmp_path / "absent"))
    assert store.purge_quarantine(slot(1)) == 0
    assert not (tmp_path / "absent").exists()


def test_purging_without_a_quarantine_creates_none(store: FileReceiptStore) -> None:
    assert store.purge_quarantine(slot(1)) == 0
    assert os.listdir(store.root) == []
    (Path(store.root) / ".quarantine").mkdir()
    assert store.purge_quarantine(slot(1)) == 0
    assert os.listdir(Path(store.root) / ".quarantine") == []


def test_purging_under_a_symlinked_root_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real-root"
    real.mkdir(mode=0o700)
    root = tmp_path / "receipts"
    root.symlink_to(real)
    store = FileReceiptStore(str(root))
    with pytest.raises(OSError) as caught:
        store.purge_quarantine(slot(1))
    assert caught.value.errno == errno.ENOTDIR
    assert caught.value.strerror == (
        f"receipt root {str(root)!r} is not a real directory; nothing was purged"
    )


@pytest.mark.parametrize("where", [".quarantine", ".quarantine/01"])
def test_purging_through_a_quarantine_that_is_not_a_directory_is_refused(
    store: FileReceiptStore, tmp_path: Path, where: str
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (Path(store.root) / where).parent.mkdir(exist_ok=True)
    (Path(store.root) / where).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError) as caught:
        store.purge_quarantine(slot(1))
    assert caught.value.errno == errno.ENOTDIR
    assert caught.value.strerror == (
        f".quarantine/01 under {store.root!r} is not a real directory; nothing was purged"
    )


def test_purging_keeps_a_directory_at_a_copys_name_and_says_so(store: FileReceiptStore) -> None:
    copy(store, slot(1))
    directory = Path(store.root) / slot(2)
    directory.mkdir()
    with pytest.raises(OSError) as caught:
        store.purge_quarantine(slot(2))
    assert caught.value.errno == errno.EISDIR
    assert caught.value.strerror == (
        f"a directory stands at the quarantined copy {str(directory)!r}: look inside it, then "
        "remove it; the row stays until then"
    )
    assert directory.is_dir()


# -- a receipt that is a symbolic link: the link itself is what is moved -------------------------


def test_a_symlinked_receipt_already_linked_to_its_slot_is_that_slots_copy(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    # A move of a link interrupted after its hard link: the slot and the receipt name are the
    # same link (not its target); the target is examined by neither.
    target = tmp_path / "target"
    target.write_bytes(b"not ours")
    path = Path(receipt_path(store.root, ATTEMPT))
    path.parent.mkdir(mode=0o700)
    path.symlink_to(target)
    held = Path(store.root) / slot(1)
    held.parent.mkdir(parents=True)
    os.link(path, held, follow_symlinks=False)
    assert store.quarantine_target(ATTEMPT) == slot(1)
    assert store.quarantine(ATTEMPT, slot(1)) == slot(1)
    assert not path.is_symlink()
    assert held.is_symlink()
    assert target.read_bytes() == b"not ours"


def test_a_dangling_symlinked_receipt_still_has_something_to_move(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    copy(store, slot(1), b"earlier")
    path = Path(receipt_path(store.root, ATTEMPT))
    path.parent.mkdir(mode=0o700)
    path.symlink_to(tmp_path / "gone")
    assert store.quarantine_target(ATTEMPT) == slot(2)
    assert store.quarantine(ATTEMPT) == slot(2)
    assert (Path(store.root) / slot(2)).is_symlink()


def test_a_slot_holding_a_dangling_symlink_is_taken(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    held = Path(store.root) / slot(1)
    held.parent.mkdir(parents=True)
    held.symlink_to(tmp_path / "gone")
    plant(store)
    assert store.quarantine_target(ATTEMPT) == slot(2)
    with pytest.raises(QuarantineNotDone):
        store.quarantine(ATTEMPT, slot(1))
    assert held.is_symlink()


def test_a_receipt_that_cannot_be_hard_linked_says_why(store: FileReceiptStore) -> None:
    # A directory at the receipt's name (D-16): link(2) refuses it, nothing is moved.
    path = receipt_path(store.root, ATTEMPT)
    os.makedirs(path)
    with pytest.raises(QuarantineNotDone) as caught:
        store.quarantine(ATTEMPT, slot(1))
    assert str(caught.value) == (
        f"cannot link the receipt to {slot(1)} (Operation not permitted); nothing was moved"
    )
    assert os.path.isdir(path)


def test_a_receipt_removed_by_a_concurrent_pass_after_the_link_is_moved_all_the_same(
    store: FileReceiptStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another pass unlinks the receipt's name between this one's link and its unlink.
    path = plant(store)
    real_unlink = os.unlink

    def concurrent(name: str, *, dir_fd: int | None = None) -> None:
        if name == path.name:
            real_unlink(name, dir_fd=dir_fd)  # the other pass, first
        real_unlink(name, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", concurrent)
    assert store.quarantine(ATTEMPT, slot(1)) == slot(1)
    assert not path.exists()
    assert (Path(store.root) / slot(1)).read_bytes() == b"garbage"


def test_a_quarantine_name_that_is_not_text_is_none() -> None:
    for value in (None, 5, b".quarantine/01/x.json", ["a", "b", "c"]):
        assert parse_quarantine_ref(value) is None  # type: ignore[arg-type]


def test_a_quarantine_slot_out_of_range_is_refused_in_its_words() -> None:
    for n in (0, 1001):
        with pytest.raises(ValueError, match=r"^quarantine slot must be 1\.\.1000$"):
            quarantine_ref(ATTEMPT, n)


@pytest.mark.parametrize(
    ("target", "temporary"),
    [("r/x.json", "r/.x.tmp"), ("/r/x.json", "/elsewhere/.x.tmp")],
    ids=["a relative target", "a temporary in another directory"],
)
def test_publishing_needs_absolute_paths_in_one_directory(target: str, temporary: str) -> None:
    with pytest.raises(
        ValueError,
        match=r"^receipt target and temporary must be absolute paths in one directory$",
    ):
        publish_bytes_at(target, temporary, b"{}")


def test_a_temporary_that_cannot_be_removed_after_publishing_is_left_harmlessly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(name: str, *, dir_fd: int | None = None) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "unlink", refuse)
    target, temporary = tmp_path / "r" / "x.json", tmp_path / "r" / ".x.tmp"
    publish_bytes_at(str(target), str(temporary), b"{}")
    assert target.read_bytes() == b"{}" and temporary.exists()
