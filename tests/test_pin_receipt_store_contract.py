"""The ReceiptStore port as a contract: the real file store and the in-memory fake answer alike.

Every test of the first part runs twice, once against :class:`FileReceiptStore` on real files
under ``tmp_path`` and once against :class:`MemoryReceiptStore`, through a bench that plants the
same situation in each (garbage bytes, a non-file at the receipt's name, a shard or a root that
is not a directory, held copies in the quarantine, Attempt locks). The port's documented answers
(``ReceiptStore``'s docstring, spec 03 "Receipt file store", D-3c, D-16, D-17) are asserted on
both; where the fake deliberately differs (its messages, a directory at the receipt's name, the
bytes it keeps for a moved non-file) its own documented behaviour is pinned in the second part.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from reconciler.node import (
    MAX_QUARANTINE_SLOTS,
    FileReceiptStore,
    Found,
    Invalid,
    MemoryReceiptStore,
    Missing,
    QuarantineNotDone,
    Receipt,
    ReceiptExists,
    ReceiptRootError,
    ReceiptStore,
    RootMissing,
    Unusable,
    encode_receipt,
    hold_lock,
    quarantine_ref,
    receipt_path,
)
from reconciler.node._receipt import shard_path

ATTEMPT = "019f70c0-0000-7000-8000-000000000002"
OTHER = "019f70c0-0000-7000-8000-000000000003"
RECEIPT = Receipt(1, "019f70c0-0000-7000-8000-000000000001", ATTEMPT, 1, "A" * 43, 3, 8, 0)


class Bench(Protocol):
    """Plants one situation in a store, whatever its kind."""

    store: ReceiptStore

    def put_raw(self, attempt_id: str, data: bytes) -> None: ...

    def put_state(self, attempt_id: str, kind: str) -> None: ...

    def set_root(self, state: str) -> None: ...

    def set_lock(self, attempt_id: str, state: str) -> None: ...

    def hold_copy(self, ref: str, data: bytes) -> None: ...

    def copy_at(self, ref: str) -> bytes | None: ...


class FileBench:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "receipts"
        self.root.mkdir(mode=0o700)
        self.files = FileReceiptStore(str(self.root))
        self.store: ReceiptStore = self.files
        self.held: list[int] = []

    def _shard(self, attempt_id: str) -> Path:
        shard = Path(shard_path(str(self.root), attempt_id))
        shard.mkdir(mode=0o700, exist_ok=True)
        return shard

    def put_raw(self, attempt_id: str, data: bytes) -> None:
        Path(receipt_path(str(self.root), attempt_id)).parent.mkdir(mode=0o700, exist_ok=True)
        Path(receipt_path(str(self.root), attempt_id)).write_bytes(data)

    def put_state(self, attempt_id: str, kind: str) -> None:
        path = Path(receipt_path(str(self.root), attempt_id))
        if kind == "shard_symlink":  # what the shard held stays behind the link
            elsewhere = self.tmp / "elsewhere-shard"
            if path.parent.is_dir():
                path.parent.rename(elsewhere)
            else:
                elsewhere.mkdir()
            path.parent.symlink_to(elsewhere)
            return
        if kind == "shard_file":
            path.parent.write_bytes(b"")
            return
        self._shard(attempt_id)
        if kind == "symlink":
            path.symlink_to(self.tmp / "a-target")
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            assert kind == "directory"
            path.mkdir()

    def set_root(self, state: str) -> None:
        real = self.tmp / "real-root"  # what the root held stays behind a link
        self.root.rename(real)
        if state == "file":
            self.root.write_bytes(b"")
        elif state == "symlink":
            self.root.symlink_to(real)
        else:
            assert state == "missing"

    def set_lock(self, attempt_id: str, state: str) -> None:
        self._shard(attempt_id)
        fd = hold_lock(str(self.root), attempt_id)
        if state == "held":
            self.held.append(fd)
        else:
            assert state == "free"
            os.close(fd)

    def hold_copy(self, ref: str, data: bytes) -> None:
        copy = self.root / ref
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(data)

    def copy_at(self, ref: str) -> bytes | None:
        copy = self.root / ref
        try:
            mode = os.lstat(copy).st_mode
        except FileNotFoundError:
            return None
        return copy.read_bytes() if stat.S_ISREG(mode) else b""

    def close(self) -> None:
        for fd in self.held:
            os.close(fd)


class MemoryBench:
    def __init__(self) -> None:
        self.memory = MemoryReceiptStore()
        self.store: ReceiptStore = self.memory

    def put_raw(self, attempt_id: str, data: bytes) -> None:
        self.memory.put_raw(attempt_id, data)

    def put_state(self, attempt_id: str, kind: str) -> None:
        self.memory.put_state(attempt_id, kind)

    def set_root(self, state: str) -> None:
        self.memory.root_state = state

    def set_lock(self, attempt_id: str, state: str) -> None:
        self.memory.locks[attempt_id] = state

    def hold_copy(self, ref: str, data: bytes) -> None:
        self.memory.quarantined[ref] = data

    def copy_at(self, ref: str) -> bytes | None:
        return self.memory.quarantined.get(ref)


@pytest.fixture(params=["file", "memory"])
def bench(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bench]:
    if request.param == "memory":
        yield MemoryBench()
        return
    files = FileBench(tmp_path)
    try:
        yield files
    finally:
        files.close()


def slot(n: int, attempt_id: str = ATTEMPT) -> str:
    return quarantine_ref(attempt_id, n)


# -- check_root ---------------------------------------------------------------------------------


def test_a_store_says_its_root_is_a_directory_or_missing(bench: Bench) -> None:
    assert bench.store.check_root() is True
    bench.set_root("missing")
    assert bench.store.check_root() is False


@pytest.mark.parametrize("state", ["file", "symlink"])
def test_a_store_refuses_a_root_that_is_not_a_real_directory(bench: Bench, state: str) -> None:
    bench.set_root(state)
    with pytest.raises(ReceiptRootError):
        bench.store.check_root()


# -- read ---------------------------------------------------------------------------------------


def test_a_read_answers_what_stands_at_the_receipt_path(bench: Bench) -> None:
    assert bench.store.read(ATTEMPT) == Missing()
    bench.store.publish(RECEIPT)
    assert bench.store.read(ATTEMPT) == Found(RECEIPT)
    bench.put_raw(OTHER, b"garbage")
    assert bench.store.read(OTHER) == Invalid("invalid_json")


def test_a_read_calls_more_than_4096_bytes_too_large_and_exactly_4096_a_receipt(
    bench: Bench,
) -> None:
    data = encode_receipt(RECEIPT)
    bench.put_raw(ATTEMPT, data + b" " * (4096 - len(data)))
    assert bench.store.read(ATTEMPT) == Found(RECEIPT)
    bench.put_raw(ATTEMPT, data + b" " * (4097 - len(data)))
    assert bench.store.read(ATTEMPT) == Invalid("too_large")


@pytest.mark.parametrize(("kind", "reason"), [("symlink", "symlink"), ("fifo", "not_regular_file")])
def test_a_read_calls_a_non_file_at_the_receipt_name_invalid(
    bench: Bench, kind: str, reason: str
) -> None:
    bench.put_state(ATTEMPT, kind)
    assert bench.store.read(ATTEMPT) == Invalid(reason)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("shard_symlink", "shard_is_symlink"), ("shard_file", "shard_not_directory")],
)
def test_a_read_calls_a_shard_that_is_not_a_directory_unusable_and_names_it(
    bench: Bench, kind: str, reason: str
) -> None:
    bench.put_state(ATTEMPT, kind)
    assert bench.store.read(ATTEMPT) == Unusable(reason, shard_path(bench.store.root, ATTEMPT))


@pytest.mark.parametrize(
    ("state", "answer"),
    [
        ("missing", RootMissing()),
        ("symlink", Unusable("root_is_symlink", "")),
        ("file", Unusable("root_not_directory", "")),
    ],
)
def test_a_read_under_a_root_that_is_not_a_directory_names_the_root(
    bench: Bench, state: str, answer: RootMissing | Unusable
) -> None:
    bench.put_raw(ATTEMPT, encode_receipt(RECEIPT))
    bench.set_root(state)
    if isinstance(answer, Unusable):
        answer = Unusable(answer.reason, bench.store.root)
    assert bench.store.read(ATTEMPT) == answer


# -- publish / delete ---------------------------------------------------------------------------


def test_publishing_twice_raises_receipt_exists_naming_the_attempt(bench: Bench) -> None:
    bench.store.publish(RECEIPT)
    with pytest.raises(ReceiptExists) as caught:
        bench.store.publish(RECEIPT)
    assert str(caught.value) == f"a receipt already exists for Attempt {ATTEMPT}"
    assert caught.value.attempt_id == ATTEMPT


def test_publishing_over_a_non_file_keeps_it(bench: Bench) -> None:
    bench.put_state(ATTEMPT, "fifo")
    with pytest.raises(ReceiptExists):
        bench.store.publish(RECEIPT)
    assert bench.store.read(ATTEMPT) == Invalid("not_regular_file")


def test_deleting_a_receipt_that_is_not_there_is_fine(bench: Bench) -> None:
    bench.store.delete(ATTEMPT)
    bench.store.publish(RECEIPT)
    bench.store.delete(ATTEMPT)
    assert bench.store.read(ATTEMPT) == Missing()
    bench.store.delete(ATTEMPT)


# -- quarantine_target --------------------------------------------------------------------------


def test_the_target_of_a_first_invalid_receipt_is_slot_one(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    assert bench.store.quarantine_target(ATTEMPT) == slot(1)


def test_the_target_starts_at_the_slot_of_the_journal_rows_ref(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    assert bench.store.quarantine_target(ATTEMPT, slot(3)) == slot(3)
    # Another Attempt's name does not move the start.
    assert bench.store.quarantine_target(ATTEMPT, slot(3, OTHER)) == slot(1)


def test_the_target_skips_slots_holding_other_files(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    bench.hold_copy(slot(1), b"first")
    bench.hold_copy(slot(2), b"second")
    assert bench.store.quarantine_target(ATTEMPT) == slot(3)


def test_with_nothing_to_move_the_target_is_the_start_slot_when_it_is_free(bench: Bench) -> None:
    assert bench.store.quarantine_target(ATTEMPT) == slot(1)
    bench.hold_copy(slot(1, OTHER), b"another Attempt's, in the same quarantine shard")
    assert bench.store.quarantine_target(ATTEMPT) == slot(1)
    assert bench.store.quarantine_target(ATTEMPT, slot(4)) == slot(4)


def test_with_nothing_to_move_the_target_is_the_latest_copy(bench: Bench) -> None:
    bench.hold_copy(slot(1), b"first")
    bench.hold_copy(slot(2), b"second")
    assert bench.store.quarantine_target(ATTEMPT) == slot(2)


def test_the_last_slot_is_a_target(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    bench.hold_copy(slot(MAX_QUARANTINE_SLOTS - 1), b"old")
    target = bench.store.quarantine_target(ATTEMPT, slot(MAX_QUARANTINE_SLOTS - 1))
    assert target == slot(MAX_QUARANTINE_SLOTS)


def test_with_every_slot_taken_there_is_no_target(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    bench.hold_copy(slot(MAX_QUARANTINE_SLOTS - 1), b"old")
    bench.hold_copy(slot(MAX_QUARANTINE_SLOTS), b"older")
    with pytest.raises(QuarantineNotDone):
        bench.store.quarantine_target(ATTEMPT, slot(MAX_QUARANTINE_SLOTS - 1))


# -- quarantine ---------------------------------------------------------------------------------


def test_quarantine_moves_the_receipt_to_its_target(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    assert bench.store.quarantine(ATTEMPT) == slot(1)
    assert bench.copy_at(slot(1)) == b"garbage"
    assert bench.store.read(ATTEMPT) == Missing()
    assert bench.store.holds_quarantine(slot(1)) is True
    # Idempotent: the copy is there, nothing is left to move.
    assert bench.store.quarantine(ATTEMPT, slot(1)) == slot(1)
    assert bench.copy_at(slot(1)) == b"garbage"


def test_quarantine_moves_the_receipt_to_the_slot_it_is_given(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    assert bench.store.quarantine(ATTEMPT, slot(3)) == slot(3)
    assert bench.copy_at(slot(3)) == b"garbage"
    assert bench.copy_at(slot(1)) is None


def test_quarantine_moves_a_non_file_too(bench: Bench) -> None:
    bench.put_state(ATTEMPT, "fifo")
    assert bench.store.quarantine(ATTEMPT) == slot(1)
    assert bench.store.read(ATTEMPT) == Missing()
    assert bench.store.holds_quarantine(slot(1)) is True


def test_quarantine_refuses_a_foreign_name(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    with pytest.raises(ValueError, match="is not a quarantine name of Attempt"):
        bench.store.quarantine(ATTEMPT, slot(1, OTHER))


def test_quarantine_of_a_vanished_receipt_not_quarantined_is_not_done(bench: Bench) -> None:
    with pytest.raises(QuarantineNotDone, match="the receipt vanished before it could be moved"):
        bench.store.quarantine(ATTEMPT, slot(2))


def test_quarantine_never_replaces_a_copy_in_its_slot(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    bench.hold_copy(slot(1), b"earlier")
    with pytest.raises(QuarantineNotDone, match="holds another file"):
        bench.store.quarantine(ATTEMPT, slot(1))
    assert bench.copy_at(slot(1)) == b"earlier"
    assert bench.store.read(ATTEMPT) == Invalid("invalid_json")


def test_quarantine_through_a_shard_that_is_not_a_directory_is_not_done(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    bench.put_state(ATTEMPT, "shard_symlink")  # the file behind the link: not ours to move
    with pytest.raises(QuarantineNotDone):
        bench.store.quarantine(ATTEMPT, slot(1))
    assert bench.copy_at(slot(1)) is None


def test_quarantine_under_a_root_that_is_not_a_directory_is_not_done(bench: Bench) -> None:
    bench.put_raw(ATTEMPT, b"garbage")
    bench.set_root("symlink")
    with pytest.raises(QuarantineNotDone):
        bench.store.quarantine(ATTEMPT, slot(1))


# -- holds_quarantine ---------------------------------------------------------------------------


def test_holds_quarantine_says_whether_the_copy_is_there(bench: Bench) -> None:
    assert bench.store.holds_quarantine(slot(2)) is False
    bench.hold_copy(slot(2), b"copy")
    assert bench.store.holds_quarantine(slot(2)) is True


@pytest.mark.parametrize("ref", ["garbage", f".quarantine/01/{ATTEMPT}+1.json", "a/b/c"])
def test_a_name_the_store_did_not_make_cannot_be_proven_absent(bench: Bench, ref: str) -> None:
    assert bench.store.holds_quarantine(ref) is True


# -- the Attempt lock (D-17) --------------------------------------------------------------------


def test_an_absent_lock_is_absent_and_nothing_is_removed(bench: Bench) -> None:
    assert bench.store.lock_state(ATTEMPT) == "absent"
    assert bench.store.remove_lock(ATTEMPT) is False


def test_a_free_lock_is_free_and_removed(bench: Bench) -> None:
    bench.set_lock(ATTEMPT, "free")
    assert bench.store.lock_state(OTHER) == "absent"
    assert bench.store.lock_state(ATTEMPT) == "free"
    assert bench.store.remove_lock(ATTEMPT) is True
    assert bench.store.lock_state(ATTEMPT) == "absent"


def test_a_held_lock_is_held_and_never_removed(bench: Bench) -> None:
    bench.set_lock(ATTEMPT, "held")
    assert bench.store.lock_state(ATTEMPT) == "held"
    assert bench.store.remove_lock(ATTEMPT) is False
    assert bench.store.lock_state(ATTEMPT) == "held"


# -- where the fake deliberately differs: its own documented behaviour ---------------------------


def test_the_memory_stores_messages_name_what_to_fix() -> None:
    memory = MemoryReceiptStore()
    memory.root_state = "file"
    with pytest.raises(ReceiptRootError) as root:
        memory.check_root()
    assert str(root.value) == (
        "receipt root 'memory:' is a file, not a directory: point the receipt root at the "
        "launcher's receipt directory"
    )
    memory.root_state = "directory"
    with pytest.raises(QuarantineNotDone) as vanished:
        memory.quarantine(ATTEMPT, slot(2))
    assert str(vanished.value) == f"the receipt vanished before it could be moved to {slot(2)}"
    memory.put_raw(ATTEMPT, b"garbage")
    memory.quarantined[slot(1)] = b"earlier"
    with pytest.raises(QuarantineNotDone) as taken:
        memory.quarantine(ATTEMPT, slot(1))
    assert str(taken.value) == f"quarantine slot {slot(1)} holds another file"


@pytest.mark.parametrize(("root_state", "shard"), [("symlink", None), ("directory", "shard_file")])
def test_the_memory_store_moves_nothing_through_a_root_or_shard_that_is_not_a_directory(
    root_state: str, shard: str | None
) -> None:
    memory = MemoryReceiptStore()
    memory.put_raw(ATTEMPT, b"garbage")
    if shard is not None:
        memory.put_state(ATTEMPT, shard)
    memory.root_state = root_state
    with pytest.raises(QuarantineNotDone) as caught:
        memory.quarantine(ATTEMPT, slot(1))
    assert str(caught.value) == "the receipt root or shard is not a directory"
    assert memory.quarantined == {}
    assert memory.files == {ATTEMPT: b"garbage"}


def test_the_memory_store_with_every_slot_taken_says_so() -> None:
    memory = MemoryReceiptStore()
    memory.put_raw(ATTEMPT, b"garbage")
    memory.quarantined = {slot(n): b"" for n in (MAX_QUARANTINE_SLOTS - 1, MAX_QUARANTINE_SLOTS)}
    with pytest.raises(QuarantineNotDone) as caught:
        memory.quarantine_target(ATTEMPT, slot(MAX_QUARANTINE_SLOTS - 1))
    assert str(caught.value) == f"all quarantine slots of Attempt {ATTEMPT} are taken"


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_the_memory_store_keeps_a_moved_non_file_as_empty_bytes(kind: str) -> None:
    memory = MemoryReceiptStore()
    memory.put_state(ATTEMPT, kind)
    assert memory.quarantine(ATTEMPT) == slot(1)
    assert memory.quarantined == {slot(1): b""}
    assert memory.special == {}


def test_the_memory_store_calls_a_directory_at_the_receipt_name_not_a_regular_file() -> None:
    # The file store names the directory (D-16: `directory:<path>`); the fake has no path.
    memory = MemoryReceiptStore()
    memory.put_state(ATTEMPT, "directory")
    assert memory.read(ATTEMPT) == Invalid("not_regular_file")


def test_the_memory_store_plants_only_the_states_it_knows() -> None:
    memory = MemoryReceiptStore()
    with pytest.raises(ValueError) as caught:
        memory.put_state(ATTEMPT, "socket")
    assert str(caught.value) == "unknown special state 'socket'"
    assert memory.special == {}
    for kind in ("shard_symlink", "shard_file", "symlink", "fifo", "directory"):
        memory.put_state(ATTEMPT, kind)
        assert memory.special == {ATTEMPT: kind}


def test_the_memory_store_records_each_read_by_attempt() -> None:
    memory = MemoryReceiptStore()
    memory.read(ATTEMPT)
    memory.read(OTHER)
    assert memory.reads == [ATTEMPT, OTHER]
