"""An in-memory ReceiptStore for tests: the same rules as the file store (spec 03)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from reconciler.node._receipt import (
    MAX_RECEIPT_BYTES,
    Receipt,
    encode_receipt,
)
from reconciler.node._receipt_layout import (
    MAX_QUARANTINE_SLOTS,
    Invalid,
    Missing,
    QuarantineNotDone,
    ReadResult,
    ReceiptExists,
    ReceiptRootError,
    RootMissing,
    Unusable,
    _judge,
    _require_id,
    parse_quarantine_ref,
    quarantine_ref,
    shard_path,
)


class MemoryReceiptStore:
    """An in-memory ReceiptStore for tests: the same rules, raw bytes per Attempt.

    `put_raw` plants arbitrary content (a zero-length file, garbage, a receipt for another
    Attempt); `put_state` plants a non-file ("symlink", "fifo", "directory") or a shard that is
    not a directory ("shard_symlink", "shard_file"); `root_state` is "directory", "missing",
    "file" or "symlink"; `leftover_temps` counts temps a crashed publisher left (they are never
    read). `on_read` runs before each read, so a test can publish "at any moment", e.g. between
    the two reads around the grace. `quarantined` maps each quarantine name to the bytes moved
    there (a non-file is kept as ``b""``). `locks` plants Attempt locks (D-17).
    """

    root = "memory:"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.quarantined: dict[str, bytes] = {}
        self.special: dict[str, str] = {}
        self.leftover_temps: dict[str, int] = {}
        self.reads: list[str] = []
        self.on_read: list[Callable[[str], None]] = []
        self.root_state = "directory"
        self.locks: dict[str, str] = {}  # the Attempt locks (D-17)

    def quarantine_ref(self, attempt_id: str) -> str:
        return quarantine_ref(attempt_id)

    def check_root(self) -> bool:
        if self.root_state == "missing":
            return False
        if self.root_state != "directory":
            raise ReceiptRootError(
                f"receipt root {self.root!r} is a {self.root_state}, not a directory: point the "
                "receipt root at the launcher's receipt directory"
            )
        return True

    def check_shards(self, attempt_ids: Iterable[str]) -> None:
        """Memory has no permissions (D-16 is the file store's)."""

    def put_raw(self, attempt_id: str, data: bytes) -> None:
        self.files[_require_id(attempt_id)] = bytes(data)

    def put_state(self, attempt_id: str, kind: str) -> None:
        if kind not in ("symlink", "fifo", "directory", "shard_symlink", "shard_file"):
            raise ValueError(f"unknown special state {kind!r}")
        self.special[_require_id(attempt_id)] = kind

    def leave_temp(self, attempt_id: str) -> None:
        """A publisher crashed after writing its temp and before linking it."""
        key = _require_id(attempt_id)
        self.leftover_temps[key] = self.leftover_temps.get(key, 0) + 1

    def read(self, attempt_id: str) -> ReadResult:
        _require_id(attempt_id)
        self.reads.append(attempt_id)
        for hook in list(self.on_read):
            hook(attempt_id)
        if self.root_state == "missing":
            return RootMissing()
        if self.root_state != "directory":
            return Unusable(
                f"root_{'is_symlink' if self.root_state == 'symlink' else 'not_directory'}",
                self.root,
            )
        kind = self.special.get(attempt_id)
        if kind in ("shard_symlink", "shard_file"):
            reason = "shard_is_symlink" if kind == "shard_symlink" else "shard_not_directory"
            return Unusable(reason, shard_path(self.root, attempt_id))
        if kind is not None:
            return Invalid("symlink" if kind == "symlink" else "not_regular_file")
        data = self.files.get(attempt_id)
        if data is None:
            return Missing()
        return _judge(attempt_id, data[: MAX_RECEIPT_BYTES + 1])

    def publish(self, receipt: Receipt) -> None:
        data = encode_receipt(receipt)
        if receipt.attempt_id in self.files or receipt.attempt_id in self.special:
            raise ReceiptExists(receipt.attempt_id)
        self.files[receipt.attempt_id] = data

    def quarantine_target(self, attempt_id: str, previous_ref: str | None = None) -> str:
        start = 1
        parsed = parse_quarantine_ref(previous_ref) if previous_ref is not None else None
        if parsed is not None and parsed[0] == attempt_id:
            start = parsed[1]
        moving = attempt_id in self.files or attempt_id in self.special
        for slot in range(start, MAX_QUARANTINE_SLOTS + 1):
            ref = quarantine_ref(attempt_id, slot)
            if ref not in self.quarantined:
                # Free; with nothing left to move, the latest copy's name (as the file store).
                return ref if moving or slot == start else quarantine_ref(attempt_id, slot - 1)
        raise QuarantineNotDone(f"all quarantine slots of Attempt {attempt_id} are taken")

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str:
        ref = self.quarantine_target(attempt_id) if ref is None else ref
        parsed = parse_quarantine_ref(ref)
        if parsed is None or parsed[0] != attempt_id:
            raise ValueError(f"{ref!r} is not a quarantine name of Attempt {attempt_id}")
        moving = attempt_id in self.files or self.special.get(attempt_id) in (
            "symlink",
            "fifo",
            "directory",
        )
        if not moving:
            if ref not in self.quarantined:
                raise QuarantineNotDone(f"the receipt vanished before it could be moved to {ref}")
            return ref
        if self.root_state != "directory" or self.special.get(attempt_id, "").startswith("shard"):
            raise QuarantineNotDone("the receipt root or shard is not a directory")
        if ref in self.quarantined:
            raise QuarantineNotDone(f"quarantine slot {ref} holds another file")
        self.quarantined[ref] = self.files.pop(attempt_id, b"")
        self.special.pop(attempt_id, None)
        return ref

    def holds_quarantine(self, ref: str) -> bool:
        return ref in self.quarantined if parse_quarantine_ref(ref) is not None else True

    def delete(self, attempt_id: str) -> None:
        _require_id(attempt_id)
        self.files.pop(attempt_id, None)

    def lock_state(self, attempt_id: str) -> str:
        """`locks` maps an Attempt to `free`, `held` or `unusable:<why>`; else `absent`."""
        _require_id(attempt_id)
        return self.locks.get(attempt_id, "absent")

    def remove_lock(self, attempt_id: str) -> bool:
        if self.lock_state(attempt_id) != "free":
            return False
        del self.locks[attempt_id]
        return True
