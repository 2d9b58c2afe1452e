"""Quarantine never destroys (D-3c): every invalid receipt of an Attempt keeps its bytes under
its own quarantine name until the journal row's purge time, on real files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    ForbiddenProvider,
    dead_handle,
    make_candidate,
    only,
    receipt,
    run_pass,
)

from reconciler.node import (
    MAX_QUARANTINE_SLOTS,
    FakeClock,
    FileReceiptStore,
    MemoryReceiptStore,
    QuarantineNotDone,
    encode_receipt,
    parse_quarantine_ref,
    quarantine_ref,
    receipt_path,
)
from reconciler.primary import QUARANTINE_KEEP_MS
from storage import Repository, journal_get

ATTEMPT = "019f70c0-0000-7000-8000-000000000002"


def plant(store: FileReceiptStore, data: bytes, attempt_id: str = ATTEMPT) -> Path:
    path = Path(receipt_path(store.root, attempt_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_the_first_copy_has_spec_03s_name_and_later_ones_a_numbered_name() -> None:
    assert quarantine_ref(ATTEMPT) == f".quarantine/01/{ATTEMPT}.json"
    assert quarantine_ref(ATTEMPT, 2) == f".quarantine/01/{ATTEMPT}+2.json"
    for slot in (1, 2, 17, MAX_QUARANTINE_SLOTS):
        assert parse_quarantine_ref(quarantine_ref(ATTEMPT, slot)) == (ATTEMPT, slot)
    # '+' is not in the id alphabet: no name of one Attempt is a name of another.
    assert parse_quarantine_ref(".quarantine/a./a.2.json") == ("a.2", 1)
    for bad in (
        f".quarantine/01/{ATTEMPT}+1.json",
        f".quarantine/01/{ATTEMPT}+02.json",
        f".quarantine/01/{ATTEMPT}+.json",
        f".quarantine/01/{ATTEMPT}+\u00b2.json",
        f".quarantine/01/{ATTEMPT}+-3.json",
        f".quarantine/01/{ATTEMPT}+{'9' * 5000}.json",
        f".quarantine/02/{ATTEMPT}.json",
        f"quarantine/01/{ATTEMPT}.json",
        "../etc/passwd",
    ):
        assert parse_quarantine_ref(bad) is None, bad
    with pytest.raises(ValueError):
        quarantine_ref(ATTEMPT, MAX_QUARANTINE_SLOTS + 1)


def test_a_second_invalid_receipt_gets_its_own_name_and_the_first_is_kept(
    store: FileReceiptStore,
) -> None:
    first = plant(store, b"first garbage")
    ref1 = store.quarantine(ATTEMPT, store.quarantine_target(ATTEMPT))
    plant(store, b"second garbage")
    ref2 = store.quarantine_target(ATTEMPT, ref1)
    assert ref2 == quarantine_ref(ATTEMPT, 2)
    assert store.quarantine(ATTEMPT, ref2) == ref2
    root = Path(store.root)
    assert (root / ref1).read_bytes() == b"first garbage"
    assert (root / ref2).read_bytes() == b"second garbage"
    assert not first.exists()


def test_a_slot_taken_by_another_file_is_never_replaced_nor_is_the_receipt_deleted(
    store: FileReceiptStore,
) -> None:
    path = plant(store, b"new invalid")
    taken = Path(store.root) / quarantine_ref(ATTEMPT)
    taken.parent.mkdir(parents=True)
    taken.write_bytes(b"old invalid")
    # Forcing the taken slot: refused, both files intact (the old code unlinked the new one).
    with pytest.raises(QuarantineNotDone):
        store.quarantine(ATTEMPT, quarantine_ref(ATTEMPT))
    assert path.read_bytes() == b"new invalid" and taken.read_bytes() == b"old invalid"
    # Asked for a slot, the store names the next free one.
    ref = store.quarantine(ATTEMPT)
    assert ref == quarantine_ref(ATTEMPT, 2)
    assert (Path(store.root) / ref).read_bytes() == b"new invalid"
    assert taken.read_bytes() == b"old invalid" and not path.exists()


def test_a_move_interrupted_after_its_link_finishes_in_the_same_slot(
    store: FileReceiptStore,
) -> None:
    plant(store, b"one")
    store.quarantine(ATTEMPT)
    path = plant(store, b"two")
    slot2 = Path(store.root) / quarantine_ref(ATTEMPT, 2)
    os.link(path, slot2)  # crashed between link and unlink
    assert store.quarantine_target(ATTEMPT, quarantine_ref(ATTEMPT)) == quarantine_ref(ATTEMPT, 2)
    assert store.quarantine(ATTEMPT) == quarantine_ref(ATTEMPT, 2)
    assert not path.exists() and slot2.read_bytes() == b"two"
    assert not (Path(store.root) / quarantine_ref(ATTEMPT, 3)).exists()


def test_finding_a_slot_writes_nothing(store: FileReceiptStore) -> None:
    plant(store, b"x")
    before = sorted(p.relative_to(store.root) for p in Path(store.root).rglob("*"))
    assert store.quarantine_target(ATTEMPT) == quarantine_ref(ATTEMPT)
    assert sorted(p.relative_to(store.root) for p in Path(store.root).rglob("*")) == before


def test_purge_removes_every_copy_the_journal_row_stands_for(store: FileReceiptStore) -> None:
    refs = []
    for n in range(3):
        plant(store, f"bad {n}".encode())
        refs.append(store.quarantine(ATTEMPT))
    assert refs == [quarantine_ref(ATTEMPT, s) for s in (1, 2, 3)]
    assert store.purge_quarantine(refs[-1]) == 3
    assert not any((Path(store.root) / r).exists() for r in refs)


def test_the_memory_store_keeps_every_copy_too() -> None:
    memory = MemoryReceiptStore()
    memory.put_raw(ATTEMPT, b"a")
    ref1 = memory.quarantine(ATTEMPT, memory.quarantine_target(ATTEMPT))
    memory.put_raw(ATTEMPT, b"b")
    ref2 = memory.quarantine(ATTEMPT, memory.quarantine_target(ATTEMPT, ref1))
    assert memory.quarantined == {ref1: b"a", ref2: b"b"}
    assert memory.holds_quarantine(ref2) and not memory.holds_quarantine(quarantine_ref(ATTEMPT, 3))


# --- through the reconciler ---------------------------------------------------------------------


def test_two_passes_two_invalid_receipts_both_kept_until_the_purge_time(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    forged_1 = receipt("run-1", "at-1", token="x" * 43)
    store.publish(forged_1)
    clock = FakeClock()
    first = only(run_pass(conn, store, ForbiddenProvider(), clock))
    assert (first["row"], first["reason"]) == ("6", "invalid_receipt:token_mismatch")
    row1 = journal_get(conn, "at-1")
    assert row1 is not None and row1.quarantine_ref == quarantine_ref("at-1")
    # A second invalid receipt appears at the path (a hostile or broken publisher).
    second_bytes = b'{"schemaVersion":1,"runId":"run-1"}'
    path = Path(receipt_path(store.root, "at-1"))
    path.write_bytes(second_bytes)
    clock.advance(60.0)
    second = only(run_pass(conn, store, ForbiddenProvider(), clock))
    assert (second["row"], second["outcome"]) == ("6", "unresolved")
    row2 = journal_get(conn, "at-1")
    assert row2 is not None and row2.state == "quarantined"
    assert row2.quarantine_ref == quarantine_ref("at-1", 2)
    assert row2.purge_after_ms is not None and row1.purge_after_ms is not None
    assert row2.purge_after_ms >= row1.purge_after_ms
    assert row2.purge_after_ms >= clock.now_ms() + QUARANTINE_KEEP_MS
    root = Path(store.root)
    assert (root / quarantine_ref("at-1")).read_bytes() == encode_receipt(forged_1)
    assert (root / quarantine_ref("at-1", 2)).read_bytes() == second_bytes
    assert not path.exists()
    # And the next boot still blocks on it.
    assert only(run_pass(conn, store, ForbiddenProvider(), clock))["reason"] == (
        "receipt_quarantined_earlier"
    )
