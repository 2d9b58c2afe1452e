"""The receipt file store against real files (spec 03 "Receipt file store")."""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
from pathlib import Path

import pytest

from reconciler.node import (
    FileReceiptStore,
    Found,
    Invalid,
    MemoryReceiptStore,
    Missing,
    Receipt,
    ReceiptExists,
    ReceiptRootError,
    ReceiptStore,
    RootMissing,
    Unusable,
    encode_receipt,
    quarantine_ref,
    receipt_path,
    temp_path,
    validate_receipt_root,
)
from reconciler.node._receipt_store import publish_bytes_at

ATTEMPT = "019f70c0-0000-7000-8000-000000000002"
RECEIPT = Receipt(1, "019f70c0-0000-7000-8000-000000000001", ATTEMPT, 1, "A" * 43, 3, 8, 0)


def final(store: FileReceiptStore, attempt_id: str = ATTEMPT) -> Path:
    return Path(receipt_path(store.root, attempt_id))


def plant(store: FileReceiptStore, data: bytes, attempt_id: str = ATTEMPT) -> Path:
    path = final(store, attempt_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_the_paths_are_computed_from_the_attempt_id_alone() -> None:
    assert receipt_path("/r", ATTEMPT) == f"/r/01/{ATTEMPT}.json"
    assert temp_path("/r", ATTEMPT, "0" * 32) == f"/r/01/.{ATTEMPT}.{'0' * 32}.tmp"
    assert quarantine_ref(ATTEMPT) == f".quarantine/01/{ATTEMPT}.json"
    with pytest.raises(ValueError):
        receipt_path("/r", "../etc")


def test_a_published_receipt_is_read_back(store: FileReceiptStore) -> None:
    store.publish(RECEIPT)
    assert store.read(ATTEMPT) == Found(RECEIPT)
    path = final(store)
    assert path.read_bytes() == encode_receipt(RECEIPT)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert os.listdir(path.parent) == [path.name]  # the temp was unlinked


def test_publishing_twice_keeps_the_first_receipt(store: FileReceiptStore) -> None:
    store.publish(RECEIPT)
    with pytest.raises(ReceiptExists):
        store.publish(dataclasses.replace(RECEIPT, exit_code=9))
    assert store.read(ATTEMPT) == Found(RECEIPT)
    assert os.listdir(final(store).parent) == [final(store).name]


def test_publishing_never_replaces_an_existing_file_even_an_invalid_one(
    store: FileReceiptStore,
) -> None:
    plant(store, b"garbage")
    with pytest.raises(ReceiptExists):
        store.publish(RECEIPT)
    assert final(store).read_bytes() == b"garbage"


def test_publishing_by_paths_links_the_temp_to_the_target(tmp_path: Path) -> None:
    target = tmp_path / "01" / f"{ATTEMPT}.json"
    temp = tmp_path / "01" / f".{ATTEMPT}.{'a' * 32}.tmp"
    publish_bytes_at(str(target), str(temp), encode_receipt(RECEIPT))
    assert target.read_bytes() == encode_receipt(RECEIPT)
    assert not temp.exists()


def test_a_missing_root_is_told_apart_from_a_missing_receipt(tmp_path: Path) -> None:
    # Not "no receipt": for a launched Attempt it is a configuration error (the reconciler
    # decides by the Attempt's status); the store only says what it saw.
    store = FileReceiptStore(str(tmp_path / "absent"))
    assert store.read(ATTEMPT) == RootMissing()
    assert store.check_root() is False
    assert not Path(store.root).exists()  # reading never creates anything


def test_a_missing_file_in_an_existing_shard_is_no_receipt(store: FileReceiptStore) -> None:
    final(store).parent.mkdir(parents=True)
    assert store.read(ATTEMPT) == Missing()


def test_a_leftover_temp_file_is_never_read_as_a_receipt(store: FileReceiptStore) -> None:
    temp = Path(temp_path(store.root, ATTEMPT))
    temp.parent.mkdir(parents=True)
    temp.write_bytes(encode_receipt(RECEIPT))
    assert store.read(ATTEMPT) == Missing()


def test_a_symlinked_receipt_is_rejected(store: FileReceiptStore, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(encode_receipt(RECEIPT))
    final(store).parent.mkdir(parents=True)
    final(store).symlink_to(elsewhere)
    assert store.read(ATTEMPT) == Invalid("symlink")


def test_a_symlinked_shard_directory_is_rejected(store: FileReceiptStore, tmp_path: Path) -> None:
    real_shard = tmp_path / "real-shard"
    real_shard.mkdir()
    (real_shard / f"{ATTEMPT}.json").write_bytes(encode_receipt(RECEIPT))
    final(store).parent.symlink_to(real_shard)
    # A configuration problem, not an invalid receipt: nothing to quarantine.
    assert store.read(ATTEMPT) == Unusable("shard_is_symlink", str(final(store).parent))


def test_a_shard_that_is_a_file_is_rejected(store: FileReceiptStore) -> None:
    final(store).parent.write_bytes(b"")
    assert store.read(ATTEMPT) == Unusable("shard_not_directory", str(final(store).parent))


def test_a_fifo_is_not_a_regular_file_and_reading_it_does_not_block(
    store: FileReceiptStore,
) -> None:
    final(store).parent.mkdir(parents=True)
    os.mkfifo(final(store))
    assert store.read(ATTEMPT) == Invalid("not_regular_file")


def test_a_directory_is_not_a_regular_file_and_its_reason_names_it(
    store: FileReceiptStore,
) -> None:
    # D-16: the reason names the directory, so every command can say "remove the directory".
    final(store).mkdir(parents=True)
    assert store.read(ATTEMPT) == Invalid(f"directory:{final(store)}")


def test_a_socket_is_not_a_regular_file(tmp_path: Path) -> None:
    # AF_UNIX paths are short: use a short root.
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"qr{os.getpid()}"
    try:
        store = FileReceiptStore(str(root))
        final(store).parent.mkdir(parents=True)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(final(store)))
            assert store.read(ATTEMPT) == Invalid("not_regular_file")
    finally:
        final(store).unlink(missing_ok=True)
        final(store).parent.rmdir()
        root.rmdir()


def test_an_oversized_file_is_invalid(store: FileReceiptStore) -> None:
    plant(store, encode_receipt(RECEIPT) + b" " * 5000)
    assert store.read(ATTEMPT) == Invalid("too_large")


def test_an_empty_file_is_invalid(store: FileReceiptStore) -> None:
    plant(store, b"")
    assert store.read(ATTEMPT) == Invalid("empty")


def test_a_receipt_for_another_attempt_at_this_path_is_invalid(store: FileReceiptStore) -> None:
    other = dataclasses.replace(RECEIPT, attempt_id="01-other")
    plant(store, encode_receipt(other))
    assert store.read(ATTEMPT) == Invalid("attempt_id_mismatch")


def test_quarantine_moves_the_file_and_is_idempotent(store: FileReceiptStore) -> None:
    plant(store, b"garbage")
    ref = store.quarantine(ATTEMPT)
    assert ref == f".quarantine/01/{ATTEMPT}.json"
    assert (Path(store.root) / ref).read_bytes() == b"garbage"
    assert not final(store).exists()
    assert store.read(ATTEMPT) == Missing()
    assert store.quarantine(ATTEMPT) == ref
    assert (Path(store.root) / ref).read_bytes() == b"garbage"


def test_quarantine_finishes_after_a_crash_between_link_and_unlink(
    store: FileReceiptStore,
) -> None:
    path = plant(store, b"garbage")
    quarantined = Path(store.root) / quarantine_ref(ATTEMPT)
    quarantined.parent.mkdir(parents=True)
    os.link(path, quarantined)
    assert store.quarantine(ATTEMPT) == quarantine_ref(ATTEMPT)
    assert not path.exists()
    assert quarantined.read_bytes() == b"garbage"


def test_quarantine_moves_a_symlink_itself_not_its_target(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"keep me")
    final(store).parent.mkdir(parents=True)
    final(store).symlink_to(elsewhere)
    ref = store.quarantine(ATTEMPT)
    assert (Path(store.root) / ref).is_symlink()
    assert elsewhere.read_bytes() == b"keep me"
    assert not final(store).is_symlink()


def test_quarantine_refuses_to_follow_a_symlinked_shard(
    store: FileReceiptStore, tmp_path: Path
) -> None:
    real_shard = tmp_path / "real-shard"
    real_shard.mkdir()
    (real_shard / f"{ATTEMPT}.json").write_bytes(b"x")
    final(store).parent.symlink_to(real_shard)
    with pytest.raises(OSError):
        store.quarantine(ATTEMPT)
    assert (real_shard / f"{ATTEMPT}.json").exists()


def test_delete_removes_the_receipt_and_a_missing_one_is_fine(store: FileReceiptStore) -> None:
    store.delete(ATTEMPT)
    store.publish(RECEIPT)
    store.delete(ATTEMPT)
    assert store.read(ATTEMPT) == Missing()
    store.delete(ATTEMPT)


@pytest.mark.parametrize(
    ("root", "fix"),
    [
        ("", "empty"),
        ("relative/dir", "absolute"),
        ("/", "dedicated directory"),
        ("//", "dedicated directory"),
        ("/a/..", "dedicated directory"),
        ("/a\0b", "NUL"),
        ("/" + "a" * 4096, "shorter"),
    ],
)
def test_a_bad_root_is_a_configuration_error_saying_what_to_fix(root: str, fix: str) -> None:
    with pytest.raises(ReceiptRootError, match=fix) as caught:
        validate_receipt_root(root)
    assert "\n" not in str(caught.value)


def test_root_validation_never_touches_the_filesystem(tmp_path: Path) -> None:
    root = tmp_path / "not" / "there"
    assert validate_receipt_root(str(root) + "/") == str(root)
    FileReceiptStore(str(root))
    assert not (tmp_path / "not").exists()


def test_the_memory_store_follows_the_same_port_rules() -> None:
    memory: ReceiptStore = MemoryReceiptStore()
    assert memory.read(ATTEMPT) == Missing()
    memory.publish(RECEIPT)
    assert memory.read(ATTEMPT) == Found(RECEIPT)
    with pytest.raises(ReceiptExists):
        memory.publish(RECEIPT)
    memory.delete(ATTEMPT)
    assert memory.read(ATTEMPT) == Missing()


def test_the_memory_store_can_plant_broken_states_and_late_publications() -> None:
    memory = MemoryReceiptStore()
    memory.put_raw(ATTEMPT, b"")
    assert memory.read(ATTEMPT) == Invalid("empty")
    assert memory.quarantine(ATTEMPT) == quarantine_ref(ATTEMPT)
    assert memory.quarantined[quarantine_ref(ATTEMPT)] == b""
    assert memory.read(ATTEMPT) == Missing()
    memory.put_state(ATTEMPT, "fifo")
    assert memory.read(ATTEMPT) == Invalid("not_regular_file")
    memory.quarantine(ATTEMPT)
    memory.leave_temp(ATTEMPT)
    assert memory.read(ATTEMPT) == Missing()

    def publish_late(attempt_id: str) -> None:
        memory.on_read.clear()
        memory.publish(RECEIPT)

    memory.on_read.append(publish_late)
    assert memory.read(ATTEMPT) == Found(RECEIPT)
