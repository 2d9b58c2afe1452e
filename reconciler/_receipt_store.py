"""The receipt file store (spec 03 "Receipt file store"): a port, the real store and a fake.

Paths are computed only from a validated Attempt ID; the store never lists or scans a directory.
Neither the shard directory nor the receipt is followed when it is a symbolic link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from reconciler._receipt import (
    MAX_RECEIPT_BYTES,
    InvalidReceipt,
    Receipt,
    decode_receipt,
    encode_receipt,
    validate_id,
)

MAX_ROOT_BYTES: Final = 4096
QUARANTINE_DIR: Final = ".quarantine"
_OPEN_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted at the receipt's name must not hang the reconciler.
_OPEN_RECEIPT: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_TEMP: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ReceiptRootError(ValueError):
    """The configured receipt root is unusable; the message says what to fix (one line)."""


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


ReadResult = Missing | Found | Invalid


def validate_receipt_root(path: str) -> str:
    """The normalised root, or ReceiptRootError. Pure: never touches the filesystem."""
    if not isinstance(path, str) or not path:
        raise ReceiptRootError("receipt root is empty: set it to an absolute directory path")
    if "\0" in path:
        raise ReceiptRootError("receipt root contains a NUL byte: remove it")
    if len(os.fsencode(path)) > MAX_ROOT_BYTES:
        raise ReceiptRootError(
            f"receipt root is longer than {MAX_ROOT_BYTES} bytes: use a shorter absolute path"
        )
    if not path.startswith("/"):
        raise ReceiptRootError(f"receipt root {path!r} is relative: use an absolute path")
    normalised = os.path.normpath(path)
    if normalised.strip("/") == "":
        raise ReceiptRootError("receipt root is '/': use a dedicated directory below it")
    return normalised


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


def temp_name(attempt_id: str, nonce_hex: str | None = None) -> str:
    nonce = secrets.token_hex(16) if nonce_hex is None else nonce_hex
    if len(nonce) != 32 or any(c not in "0123456789abcdef" for c in nonce):
        raise ValueError("temp nonce must be 32 lower-case hex digits")
    return f".{_require_id(attempt_id)}.{nonce}.tmp"


def temp_path(root: str, attempt_id: str, nonce_hex: str | None = None) -> str:
    """`<shard>/.<attemptId>.<32 hex>.tmp`, the private file a publisher links from."""
    return os.path.join(shard_path(root, attempt_id), temp_name(attempt_id, nonce_hex))


def quarantine_ref(attempt_id: str) -> str:
    """`.quarantine/<attemptId[0:2]>/<attemptId>.json`, relative to the root (spec 03)."""
    return f"{QUARANTINE_DIR}/{_require_id(attempt_id)[:2]}/{attempt_id}.json"


class ReceiptStore(Protocol):
    """The port the reconciler reads receipts through.

    `quarantine` only moves the file: the caller must record the journal intent (state
    `quarantined`, `quarantine_ref`, `purge_after_ms`) BEFORE calling it (spec 03). `delete` is
    for a trusted receipt AFTER its terminal transition committed.
    """

    def read(self, attempt_id: str) -> ReadResult: ...

    def publish(self, receipt: Receipt) -> None: ...

    def quarantine(self, attempt_id: str) -> str: ...

    def delete(self, attempt_id: str) -> None: ...

    def quarantine_ref(self, attempt_id: str) -> str: ...


def _fsync_dir_best_effort(dir_fd: int) -> None:
    # Some filesystems cannot fsync a directory; restart safety does not depend on it.
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def _open_or_make_dir(path: str) -> int:
    """An O_NOFOLLOW descriptor of directory `path`, creating it 0700 if it is missing."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    return os.open(path, _OPEN_DIR)


def publish_bytes_in(dir_fd: int, final_name: str, temporary_name: str, data: bytes) -> None:
    """Publish `data` once as `final_name` in the directory `dir_fd` (spec 03 "Publish once").

    Exclusive 0600 temp file, fsync, hard link to the final name (an existing receipt is kept:
    ReceiptExists), unlink the temp, fsync the directory. Never an overwriting rename.
    """
    fd = os.open(temporary_name, _CREATE_TEMP, 0o600, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(
                temporary_name,
                final_name,
                src_dir_fd=dir_fd,
                dst_dir_fd=dir_fd,
                follow_symlinks=False,
            )
        except FileExistsError:
            raise ReceiptExists(final_name.removesuffix(".json")) from None
    finally:
        # A leftover temp is harmless: readers only ever open the final name.
        with contextlib.suppress(OSError):
            os.unlink(temporary_name, dir_fd=dir_fd)
    _fsync_dir_best_effort(dir_fd)


def publish_bytes_at(target: str, temporary: str, data: bytes) -> None:
    """`publish_bytes_in` for two absolute paths in one directory (the wrapper's env form)."""
    directory = os.path.dirname(target)
    if not os.path.isabs(target) or os.path.dirname(temporary) != directory:
        raise ValueError("receipt target and temporary must be absolute paths in one directory")
    dir_fd = _open_or_make_dir(directory)
    try:
        publish_bytes_in(dir_fd, os.path.basename(target), os.path.basename(temporary), data)
    finally:
        os.close(dir_fd)


class FileReceiptStore:
    """Receipts as files under `root` (validated at construction, touched only when used)."""

    def __init__(self, root: str) -> None:
        self.root = validate_receipt_root(root)

    def quarantine_ref(self, attempt_id: str) -> str:
        return quarantine_ref(attempt_id)

    def _open_shard(self, attempt_id: str) -> int | ReadResult:
        path = shard_path(self.root, attempt_id)
        try:
            return os.open(path, _OPEN_DIR)
        except FileNotFoundError:
            return Missing()  # missing root or shard: nothing was ever published here
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        # Linux answers ENOTDIR, not ELOOP, for O_DIRECTORY|O_NOFOLLOW on a symlink: lstat
        # only to name the reason.
        try:
            is_link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            is_link = False
        return Invalid("shard_is_symlink" if is_link else "shard_not_directory")

    def read(self, attempt_id: str) -> ReadResult:
        shard = self._open_shard(attempt_id)
        if not isinstance(shard, int):
            return shard
        try:
            try:
                fd = os.open(receipt_name(attempt_id), _OPEN_RECEIPT, dir_fd=shard)
            except FileNotFoundError:
                return Missing()
            except OSError as error:
                if error.errno == errno.ELOOP:
                    return Invalid("symlink")
                if error.errno in (errno.ENXIO, errno.ENOTDIR):  # a socket, or worse
                    return Invalid("not_regular_file")
                raise
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return Invalid("not_regular_file")
                data = _read_at_most(fd, MAX_RECEIPT_BYTES + 1)
            finally:
                os.close(fd)
        finally:
            os.close(shard)
        return _judge(attempt_id, data)

    def publish(self, receipt: Receipt) -> None:
        data = encode_receipt(receipt)
        attempt_id = receipt.attempt_id
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        dir_fd = _open_or_make_dir(shard_path(self.root, attempt_id))
        try:
            publish_bytes_in(dir_fd, receipt_name(attempt_id), temp_name(attempt_id), data)
        finally:
            os.close(dir_fd)

    def quarantine(self, attempt_id: str) -> str:
        """Hard-link the receipt to its quarantine name, then unlink it. Idempotent.

        Record the journal intent first (spec 03). Raises OSError when the shard is not a real
        directory (a file behind a symlinked shard is not ours to move) or when the entry cannot
        be hard-linked (a directory): the candidate then stays blocked, as it must.
        """
        ref = quarantine_ref(attempt_id)
        name = receipt_name(attempt_id)
        os.makedirs(os.path.join(self.root, QUARANTINE_DIR), mode=0o700, exist_ok=True)
        q_fd = _open_or_make_dir(os.path.join(self.root, os.path.dirname(ref)))
        try:
            try:
                shard = os.open(shard_path(self.root, attempt_id), _OPEN_DIR)
            except FileNotFoundError:
                return ref  # nothing left to move: an earlier call finished, or none existed
            try:
                try:
                    os.link(name, name, src_dir_fd=shard, dst_dir_fd=q_fd, follow_symlinks=False)
                except FileNotFoundError:
                    return ref
                except FileExistsError:
                    pass  # a previous call linked it and stopped before the unlink
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=shard)
                _fsync_dir_best_effort(shard)
                _fsync_dir_best_effort(q_fd)
            finally:
                os.close(shard)
        finally:
            os.close(q_fd)
        return ref

    def delete(self, attempt_id: str) -> None:
        name = receipt_name(attempt_id)
        try:
            shard = os.open(shard_path(self.root, attempt_id), _OPEN_DIR)
        except FileNotFoundError:
            return
        try:
            try:
                os.unlink(name, dir_fd=shard)
            except FileNotFoundError:
                return
            _fsync_dir_best_effort(shard)
        finally:
            os.close(shard)

    def purge_quarantine(self, attempt_id: str) -> bool:
        """Remove a quarantined copy once its journal row's purge time passed."""
        try:
            os.unlink(os.path.join(self.root, quarantine_ref(attempt_id)))
        except FileNotFoundError:
            return False
        return True


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


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


class MemoryReceiptStore:
    """An in-memory ReceiptStore for tests: the same rules, raw bytes per Attempt.

    `put_raw` plants arbitrary content (a zero-length file, garbage, a receipt for another
    Attempt); `put_state` plants a non-file ("symlink", "fifo", "directory"); `leftover_temps`
    counts temps a crashed publisher left (they are never read). `on_read` runs before each read,
    so a test can publish "at any moment", e.g. between the two reads around the grace.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.quarantined: dict[str, bytes] = {}
        self.special: dict[str, str] = {}
        self.leftover_temps: dict[str, int] = {}
        self.reads: list[str] = []
        self.on_read: list[Callable[[str], None]] = []

    def quarantine_ref(self, attempt_id: str) -> str:
        return quarantine_ref(attempt_id)

    def put_raw(self, attempt_id: str, data: bytes) -> None:
        self.files[_require_id(attempt_id)] = bytes(data)

    def put_state(self, attempt_id: str, kind: str) -> None:
        if kind not in ("symlink", "fifo", "directory", "shard_symlink"):
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
        kind = self.special.get(attempt_id)
        if kind is not None:
            return Invalid(
                {"symlink": "symlink", "shard_symlink": "shard_is_symlink"}.get(
                    kind, "not_regular_file"
                )
            )
        data = self.files.get(attempt_id)
        if data is None:
            return Missing()
        return _judge(attempt_id, data[: MAX_RECEIPT_BYTES + 1])

    def publish(self, receipt: Receipt) -> None:
        data = encode_receipt(receipt)
        if receipt.attempt_id in self.files or receipt.attempt_id in self.special:
            raise ReceiptExists(receipt.attempt_id)
        self.files[receipt.attempt_id] = data

    def quarantine(self, attempt_id: str) -> str:
        ref = quarantine_ref(attempt_id)
        if attempt_id in self.files:
            self.quarantined.setdefault(attempt_id, self.files.pop(attempt_id))
        self.special.pop(attempt_id, None)
        return ref

    def delete(self, attempt_id: str) -> None:
        _require_id(attempt_id)
        self.files.pop(attempt_id, None)
