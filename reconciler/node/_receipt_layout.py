"""The receipt store's layout (spec 03 "Receipt file store"): limits, names and paths computed
from a validated Attempt ID, quarantine references, what a read answers, and the port."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from reconciler._root_check import MAX_ROOT_BYTES as MAX_ROOT_BYTES
from reconciler._root_check import ReceiptRootError as ReceiptRootError
from reconciler._root_check import validate_receipt_root as validate_receipt_root
from reconciler.node._receipt import (
    MAX_RECEIPT_BYTES,
    InvalidReceipt,
    Receipt,
    decode_receipt,
    validate_id,
)

QUARANTINE_DIR: Final = ".quarantine"
# Later quarantined copies of one Attempt: `<attemptId>+<n>.json`, n = 2, 3, ... ('+' is not in
# the execution-id alphabet, so a name maps back to exactly one Attempt and slot). Bounded so
# that finding a free slot never turns into a scan.
MAX_QUARANTINE_SLOTS: Final = 1000
_OPEN_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted at the receipt's name must not hang the reconciler.
_OPEN_RECEIPT: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_TEMP: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class QuarantineNotDone(OSError):
    """The invalid receipt was NOT moved (nothing was linked into `.quarantine`): the caller
    withdraws its journal intent. An error after the link (the copy exists) is a plain OSError."""


class ReceiptExists(Exception):
    """A receipt is already published for this Attempt; it was kept (publish once)."""

    def __init__(self, attempt_id: str) -> None:
        super().__init__(f"a receipt already exists for Attempt {attempt_id}")
        self.attempt_id = attempt_id


@dataclass(frozen=True, slots=True)
class Missing:
    """No receipt at the Attempt's path: not an error (spec 03 "Read")."""


@dataclass(frozen=True, slots=True)
class Found:
    receipt: Receipt


@dataclass(frozen=True, slots=True)
class Invalid:
    """Something is at the path but it is not a trusted-format receipt; quarantine it."""

    reason: str


@dataclass(frozen=True, slots=True)
class RootMissing:
    """The receipt root does not exist. "No receipt" for a `claimed` Attempt only: for a
    launched one it is a configuration error (the launcher creates the root before spawning)."""


@dataclass(frozen=True, slots=True)
class Unusable:
    """The root or the Attempt's shard exists but is not a real directory: a configuration
    problem, not a receipt (never quarantined). ``reason`` is one of `root_not_directory`,
    `root_is_symlink`, `shard_not_directory`, `shard_is_symlink`; ``path`` names it."""

    reason: str
    path: str


ReadResult = Missing | Found | Invalid | RootMissing | Unusable


# D-16: a directory at a receipt path is neither a receipt nor movable (a directory cannot be
# hard-linked into the quarantine): its invalid reason names it, and every command (the pass,
# its dry run, `explain`, `sweep`) says the same: remove the directory.
DIRECTORY_PROBLEM: Final = "directory:"


def directory_at(problem: object) -> str | None:
    """The path named by an invalid-receipt problem that is a directory, else None."""
    if isinstance(problem, str) and problem.startswith(DIRECTORY_PROBLEM):
        return problem[len(DIRECTORY_PROBLEM) :]
    return None


class DirectoryAtReceipt(ValueError):
    """A directory stands where a receipt file would be (D-16); the message says the fix."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"remove the directory at {path!r} (look inside it first): it stands at the receipt "
            "path, and a receipt is a file, so it can be neither read nor quarantined"
        )
        self.path = path


def _require_id(attempt_id: str) -> str:
    if not validate_id(attempt_id):
        raise ValueError("attempt id is not a portable execution ID")
    return attempt_id


def receipt_name(attempt_id: str) -> str:
    return f"{_require_id(attempt_id)}.json"


def shard_path(root: str, attempt_id: str) -> str:
    return os.path.join(root, _require_id(attempt_id)[:2])


def receipt_path(root: str, attempt_id: str) -> str:
    """`<root>/<attemptId[0:2]>/<attemptId>.json` (spec 03 "Path")."""
    return os.path.join(shard_path(root, attempt_id), receipt_name(attempt_id))


# The Attempt lock (docs/decisions.md D-17): `<shard>/<attemptId>.lock`, beside the receipt.
# Receipt names end in `.json`, temps start with `.` and end in `.tmp`, quarantined copies live
# under `.quarantine/`: no lock name is ever one of them, whatever the two Attempt ids.
LOCK_SUFFIX: Final = ".lock"


def lock_name(attempt_id: str) -> str:
    return f"{_require_id(attempt_id)}{LOCK_SUFFIX}"


def lock_path(root: str, attempt_id: str) -> str:
    """`<root>/<attemptId[0:2]>/<attemptId>.lock`: the file the Attempt's wrapper holds an
    exclusive `flock` on for as long as it lives (D-17)."""
    return os.path.join(shard_path(root, attempt_id), lock_name(attempt_id))


def temp_name(attempt_id: str, nonce_hex: str | None = None) -> str:
    if nonce_hex is None:
        import secrets  # here: only a publication needs a nonce, never the start-up pass

        nonce_hex = secrets.token_hex(16)
    if len(nonce_hex) != 32 or any(c not in "0123456789abcdef" for c in nonce_hex):
        raise ValueError("temp nonce must be 32 lower-case hex digits")
    return f".{_require_id(attempt_id)}.{nonce_hex}.tmp"


def temp_path(root: str, attempt_id: str, nonce_hex: str | None = None) -> str:
    """`<shard>/.<attemptId>.<32 hex>.tmp`, the private file a publisher links from."""
    return os.path.join(shard_path(root, attempt_id), temp_name(attempt_id, nonce_hex))


def quarantine_ref(attempt_id: str, slot: int = 1) -> str:
    """The quarantine name of an Attempt's ``slot``-th invalid receipt, relative to the root.

    Slot 1 is spec 03's `.quarantine/<attemptId[0:2]>/<attemptId>.json`; a later invalid receipt
    of the same Attempt never replaces an earlier copy and goes to
    `.quarantine/<attemptId[0:2]>/<attemptId>+<slot>.json` (D-3c)."""
    if not 1 <= slot <= MAX_QUARANTINE_SLOTS:
        raise ValueError(f"quarantine slot must be 1..{MAX_QUARANTINE_SLOTS}")
    suffix = ".json" if slot == 1 else f"+{slot}.json"
    return f"{QUARANTINE_DIR}/{_require_id(attempt_id)[:2]}/{attempt_id}{suffix}"


def parse_quarantine_ref(ref: str) -> tuple[str, int] | None:
    """(attempt id, slot) of a name made by :func:`quarantine_ref`, else None."""
    parts = ref.split("/") if isinstance(ref, str) else []
    if len(parts) != 3:
        return None
    attempt_id, plus, number = parts[2].removesuffix(".json").partition("+")
    # Short ASCII digits: a hostile journal value ("²", 5000 digits) must not reach int().
    if plus and not (number.isascii() and number.isdigit() and len(number) <= 4):
        return None
    slot = int(number) if plus else 1
    try:
        canonical = quarantine_ref(attempt_id, slot)
    except ValueError:  # not a portable execution ID, or no such slot
        return None
    # Each slot has exactly one name: "+1", "+02" or another shard is none of them.
    return (attempt_id, slot) if canonical == ref else None


def first_slot(attempt_id: str, previous_ref: str | None) -> int:
    """Where the search for the Attempt's quarantine target starts (D-3c): the slot of
    ``previous_ref`` (the journal row's) when it names one of this Attempt's, else 1."""
    parsed = parse_quarantine_ref(previous_ref) if previous_ref is not None else None
    return parsed[1] if parsed is not None and parsed[0] == attempt_id else 1


def own_ref(attempt_id: str, ref: str) -> str:
    """``ref`` when it is a quarantine name of Attempt ``attempt_id``, else ValueError."""
    parsed = parse_quarantine_ref(ref)
    if parsed is None or parsed[0] != attempt_id:
        raise ValueError(f"{ref!r} is not a quarantine name of Attempt {attempt_id}")
    return ref


class ReceiptStore(Protocol):
    """The port the reconciler reads receipts through.

    `check_root` is asked once per pass before anything is written: True when the root is a real
    directory, False when it does not exist, ReceiptRootError when it exists but is not a real
    directory or another user may write it (D-16); `check_shards`, then, raises
    ReceiptRootError when the shard of one of the given Attempts may be written by another.
    `quarantine_target` names the slot an invalid receipt will be moved to (a free
    one, or the one an interrupted move already linked); the caller records the journal intent
    (state `quarantined`, that `quarantine_ref`, `purge_after_ms`) BEFORE `quarantine` moves the
    file (spec 03), and withdraws it when `quarantine` raises QuarantineNotDone.
    `holds_quarantine` says whether a journal row's quarantined copy exists. `delete` is for a
    trusted receipt AFTER its terminal transition committed.
    """

    root: str

    def check_root(self) -> bool: ...

    def check_shards(self, attempt_ids: Iterable[str]) -> None: ...

    def read(self, attempt_id: str) -> ReadResult: ...

    def publish(self, receipt: Receipt) -> None: ...

    def quarantine_target(self, attempt_id: str, previous_ref: str | None = None) -> str: ...

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str: ...

    def holds_quarantine(self, ref: str) -> bool: ...

    def delete(self, attempt_id: str) -> None: ...

    def lock_state(self, attempt_id: str) -> str:
        """The Attempt lock (D-17): `absent`, `free`, `held`, or `unusable:<why>`. Never
        raises for the file's sake and never disturbs the holder."""
        ...

    def remove_lock(self, attempt_id: str) -> bool:
        """Remove the Attempt's lock file if nobody holds it; True when one was removed."""
        ...


def _judge(attempt_id: str, data: bytes) -> ReadResult:
    if len(data) > MAX_RECEIPT_BYTES:
        return Invalid("too_large")
    try:
        receipt = decode_receipt(data)
    except InvalidReceipt as error:
        return Invalid(error.reason)
    if receipt.attempt_id != attempt_id:
        return Invalid("attempt_id_mismatch")
    return Found(receipt)
