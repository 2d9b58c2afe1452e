"""The receipt file store (spec 03 "Receipt file store"): a port, the real store and a fake.

Paths are computed only from a validated Attempt ID; the store never lists or scans a directory.
Neither the root, the shard directory nor the receipt is followed when it is a symbolic link.

The root and the shard are checked as directories, not as receipts: when one of them exists but
is not a real directory (a regular file, a symbolic link, a loop) the store answers
:class:`Unusable`, a configuration problem that is never quarantined and never written to the
journal. A missing root is :class:`RootMissing`, which only a `claimed` Attempt may read as "no
receipt" (the launcher creates the root before any spawn).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from reconciler.node._receipt import (
    MAX_RECEIPT_BYTES,
    InvalidReceipt,
    Receipt,
    decode_receipt,
    encode_receipt,
    validate_id,
)

MAX_ROOT_BYTES: Final = 4096
QUARANTINE_DIR: Final = ".quarantine"
# Later quarantined copies of one Attempt: `<attemptId>+<n>.json`, n = 2, 3, ... ('+' is not in
# the execution-id alphabet, so a name maps back to exactly one Attempt and slot). Bounded so
# that finding a free slot never turns into a scan.
MAX_QUARANTINE_SLOTS: Final = 1000
_OPEN_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted at the receipt's name must not hang the reconciler.
_OPEN_RECEIPT: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_TEMP: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class ReceiptRootError(ValueError):
    """The configured receipt root is unusable; the message says what to fix (one line)."""


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
    if nonce_hex is None:
        import secrets  # here: only a publication needs a nonce, never the start-up pass

        nonce_hex = secrets.token_hex(16)
    nonce = nonce_hex
    if len(nonce) != 32 or any(c not in "0123456789abcdef" for c in nonce):
        raise ValueError("temp nonce must be 32 lower-case hex digits")
    return f".{_require_id(attempt_id)}.{nonce}.tmp"


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
    if len(parts) != 3 or parts[0] != QUARANTINE_DIR or not parts[2].endswith(".json"):
        return None
    stem = parts[2].removesuffix(".json")
    attempt_id, plus, number = stem.partition("+")
    slot = 1
    if plus:
        # Short ASCII digits without a leading zero: a hostile journal value ("²", 5000 digits)
        # must not reach int(), and each slot has exactly one name.
        if not (number.isascii() and number.isdigit()) or len(number) > 4 or number[0] == "0":
            return None
        slot = int(number)
        if slot < 2:
            return None
    if not validate_id(attempt_id) or parts[1] != attempt_id[:2] or slot > MAX_QUARANTINE_SLOTS:
        return None
    return attempt_id, slot


class ReceiptStore(Protocol):
    """The port the reconciler reads receipts through.

    `check_root` is asked once per pass before anything is written: True when the root is a real
    directory, False when it does not exist, ReceiptRootError when it exists but is not a real
    directory. `quarantine_target` names the slot an invalid receipt will be moved to (a free
    one, or the one an interrupted move already linked); the caller records the journal intent
    (state `quarantined`, that `quarantine_ref`, `purge_after_ms`) BEFORE `quarantine` moves the
    file (spec 03), and withdraws it when `quarantine` raises QuarantineNotDone.
    `holds_quarantine` says whether a journal row's quarantined copy exists. `delete` is for a
    trusted receipt AFTER its terminal transition committed.
    """

    root: str

    def check_root(self) -> bool: ...

    def read(self, attempt_id: str) -> ReadResult: ...

    def publish(self, receipt: Receipt) -> None: ...

    def quarantine_target(self, attempt_id: str, previous_ref: str | None = None) -> str: ...

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str: ...

    def holds_quarantine(self, ref: str) -> bool: ...

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


def _what_is(path: str) -> str:
    """What stands at ``path`` when it is not a real directory (for a one-line message)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "below a path component that is not a directory"
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"a symbolic link (to {target!r})"
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a directory"


def root_error(root: str) -> str:
    """The one-line configuration error for a root that exists but is not a real directory."""
    return (
        f"receipt root {root!r} is {_what_is(root)}, not a directory: point the receipt root at "
        "the launcher's receipt directory (a real directory, not a link)"
    )


def _unusable(kind: str, path: str) -> Unusable:
    try:
        is_link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        is_link = False
    return Unusable(f"{kind}_is_symlink" if is_link else f"{kind}_not_directory", path)


def _not_a_dir(error: OSError) -> bool:
    # Linux answers ENOTDIR, not ELOOP, for O_DIRECTORY|O_NOFOLLOW on a symlink.
    return error.errno in (errno.ENOTDIR, errno.ELOOP)


def _open_dirs_in(dir_fd: int, names: list[str], *, create: bool) -> int | None:
    """An O_NOFOLLOW descriptor of ``dir_fd``/names[0]/names[1]/..., each a real directory
    (created 0700 when ``create``); None when one is missing and not ``create``."""
    current = dir_fd
    try:
        for name in names:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=current)
            try:
                opened = os.open(name, _OPEN_DIR, dir_fd=current)
            except FileNotFoundError:
                if create:
                    raise
                if current != dir_fd:
                    os.close(current)
                return None
            if current != dir_fd:
                os.close(current)
            current = opened
    except BaseException:
        if current != dir_fd:
            os.close(current)
        raise
    return current if current != dir_fd else os.dup(dir_fd)


def prepare_receipt_dirs(root: str, attempt_id: str) -> None:
    """The launcher's side, BEFORE its first commit: create the root (with its parents) and the
    Attempt's shard, 0700, and check that both are real directories and that nothing stands at
    the receipt's name yet (the wrapper could not publish over it). ReceiptRootError names the
    problem and the fix; ReceiptExists when the receipt name is taken."""
    root = validate_receipt_root(root)
    shard = _require_id(attempt_id)[:2]
    shard_at = shard_path(root, attempt_id)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass  # something that is not a directory stands there: named just below
    except OSError as error:
        raise ReceiptRootError(
            f"cannot create receipt root {root!r} ({error.strerror}): create it as a directory "
            "(mode 0700) or choose a writable place for it"
        ) from None
    try:
        root_fd = os.open(root, _OPEN_DIR)
    except OSError as error:
        if _not_a_dir(error):
            raise ReceiptRootError(root_error(root)) from None
        raise ReceiptRootError(
            f"cannot open receipt root {root!r} ({error.strerror}): make it a readable directory"
        ) from None
    try:
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(shard, 0o700, dir_fd=root_fd)
            shard_fd = os.open(shard, _OPEN_DIR, dir_fd=root_fd)
        except OSError as error:
            if _not_a_dir(error):
                raise ReceiptRootError(
                    f"receipt shard {shard_at!r} is {_what_is(shard_at)}, not a directory: move "
                    "it out of the receipt root (the launcher creates the shards)"
                ) from None
            raise ReceiptRootError(
                f"cannot create receipt shard {shard_at!r} ({error.strerror}): make the receipt "
                "root writable"
            ) from None
        try:
            os.stat(receipt_name(attempt_id), dir_fd=shard_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        finally:
            os.close(shard_fd)
        raise ReceiptExists(attempt_id)
    finally:
        os.close(root_fd)


class FileReceiptStore:
    """Receipts as files under `root` (validated at construction, touched only when used)."""

    def __init__(self, root: str) -> None:
        self.root = validate_receipt_root(root)

    def quarantine_ref(self, attempt_id: str) -> str:
        return quarantine_ref(attempt_id)

    def check_root(self) -> bool:
        """True: the root is a real directory; False: it does not exist; ReceiptRootError: it
        exists but is a regular file, a symbolic link (even to a directory), a loop, or lies
        below something that is not a directory. Touches nothing."""
        try:
            mode = os.lstat(self.root).st_mode
        except FileNotFoundError:
            return False
        except OSError as error:
            if _not_a_dir(error):
                raise ReceiptRootError(root_error(self.root)) from None
            raise ReceiptRootError(
                f"receipt root {self.root!r} cannot be examined ({error.strerror}): make it a "
                "readable directory"
            ) from None
        if stat.S_ISDIR(mode):
            return True
        raise ReceiptRootError(root_error(self.root))

    def _open_root(self) -> int | ReadResult:
        try:
            return os.open(self.root, _OPEN_DIR)
        except FileNotFoundError:
            return RootMissing()
        except OSError as error:
            if not _not_a_dir(error):
                raise
        return _unusable("root", self.root)

    def _open_shard(self, attempt_id: str) -> int | ReadResult:
        shard = _require_id(attempt_id)[:2]
        root_fd = self._open_root()
        if not isinstance(root_fd, int):
            return root_fd
        try:
            return os.open(shard, _OPEN_DIR, dir_fd=root_fd)
        except FileNotFoundError:
            return Missing()  # a missing shard: nothing was ever published here
        except OSError as error:
            if not _not_a_dir(error):
                raise
        finally:
            os.close(root_fd)
        return _unusable("shard", shard_path(self.root, attempt_id))

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

    def _quarantine_root(self) -> int:
        root_fd = self._open_root()
        if isinstance(root_fd, int):
            return root_fd
        raise QuarantineNotDone(
            f"receipt root {self.root!r} is not a usable directory; nothing was moved"
        )

    def _open_shard_for_move(self, root_fd: int, attempt_id: str) -> int | None:
        try:
            return os.open(_require_id(attempt_id)[:2], _OPEN_DIR, dir_fd=root_fd)
        except FileNotFoundError:
            return None
        except OSError as error:
            # A file behind a symlinked shard is not ours to move.
            raise QuarantineNotDone(
                f"receipt shard {shard_path(self.root, attempt_id)!r} is not a real directory "
                f"({error.strerror}); nothing was moved"
            ) from error

    def quarantine_target(self, attempt_id: str, previous_ref: str | None = None) -> str:
        """The quarantine name the Attempt's current invalid receipt goes to (D-3c): from the
        slot of ``previous_ref`` (the journal row's) upward, the first slot that is free or
        already holds this very file (a move interrupted after its link). Never writes; never
        lists a directory (at most MAX_QUARANTINE_SLOTS names are looked up)."""
        start = 1
        parsed = parse_quarantine_ref(previous_ref) if previous_ref is not None else None
        if parsed is not None and parsed[0] == attempt_id:
            start = parsed[1]
        root_fd = self._quarantine_root()
        try:
            source: os.stat_result | None = None
            shard_fd = self._open_shard_for_move(root_fd, attempt_id)
            if shard_fd is not None:
                try:
                    source = os.stat(
                        receipt_name(attempt_id), dir_fd=shard_fd, follow_symlinks=False
                    )
                except FileNotFoundError:
                    source = None
                finally:
                    os.close(shard_fd)
            try:
                q_fd = _open_dirs_in(root_fd, [QUARANTINE_DIR, attempt_id[:2]], create=False)
            except OSError as error:
                raise QuarantineNotDone(
                    f"{QUARANTINE_DIR} under {self.root!r} is not a real directory "
                    f"({error.strerror}); nothing was moved"
                ) from error
        finally:
            os.close(root_fd)
        if q_fd is None:
            return quarantine_ref(attempt_id, start)
        try:
            for slot in range(start, MAX_QUARANTINE_SLOTS + 1):
                ref = quarantine_ref(attempt_id, slot)
                try:
                    held = os.stat(ref.rsplit("/", 1)[1], dir_fd=q_fd, follow_symlinks=False)
                except FileNotFoundError:
                    # Free; with nothing left to move, the latest copy's name instead.
                    if source is None and slot > start:
                        return quarantine_ref(attempt_id, slot - 1)
                    return ref
                if source is not None and _same_inode(held, source):
                    return ref
        finally:
            os.close(q_fd)
        raise QuarantineNotDone(
            f"all {MAX_QUARANTINE_SLOTS} quarantine slots of Attempt {attempt_id} are taken; "
            "purge old copies from the quarantine, nothing was moved"
        )

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str:
        """Hard-link the receipt to ``ref`` (default: :meth:`quarantine_target`), then unlink it.
        Idempotent; never replaces or deletes another file.

        Record the journal intent first (spec 03). Raises QuarantineNotDone when nothing was
        linked: the root, the shard or `.quarantine` is not a real directory (a file behind a
        symlinked shard is not ours to move), the slot holds another file, or the entry cannot
        be hard-linked (a directory). Any error after the link is a plain OSError: the copy
        exists, and the next pass finishes the move.
        """
        if ref is None:
            ref = self.quarantine_target(attempt_id)
        parsed = parse_quarantine_ref(ref)
        if parsed is None or parsed[0] != attempt_id:
            raise ValueError(f"{ref!r} is not a quarantine name of Attempt {attempt_id}")
        name, slot_name = receipt_name(attempt_id), ref.rsplit("/", 1)[1]
        root_fd = self._quarantine_root()
        try:
            try:
                q_fd = _open_dirs_in(root_fd, [QUARANTINE_DIR, attempt_id[:2]], create=True)
            except OSError as error:
                raise QuarantineNotDone(
                    f"cannot prepare {QUARANTINE_DIR} under {self.root!r} ({error.strerror}); "
                    "nothing was moved"
                ) from error
            assert q_fd is not None
            try:
                shard_fd = self._open_shard_for_move(root_fd, attempt_id)
                if shard_fd is None:
                    _require_copy(q_fd, slot_name, ref)  # nothing left to move
                    return ref
                try:
                    self._link_then_unlink(shard_fd, name, q_fd, slot_name, ref)
                finally:
                    os.close(shard_fd)
            finally:
                os.close(q_fd)
        finally:
            os.close(root_fd)
        return ref

    @staticmethod
    def _link_then_unlink(shard_fd: int, name: str, q_fd: int, slot_name: str, ref: str) -> None:
        try:
            os.link(name, slot_name, src_dir_fd=shard_fd, dst_dir_fd=q_fd, follow_symlinks=False)
        except FileNotFoundError:
            _require_copy(q_fd, slot_name, ref)  # nothing left to move
            return
        except FileExistsError:
            try:
                source = os.stat(name, dir_fd=shard_fd, follow_symlinks=False)
            except FileNotFoundError:
                return  # moved meanwhile (by a concurrent pass): the slot holds a copy
            held = os.stat(slot_name, dir_fd=q_fd, follow_symlinks=False)
            if not _same_inode(held, source):
                # Quarantine never destroys: the slot keeps its file, the receipt stays put.
                raise QuarantineNotDone(
                    f"quarantine slot {ref} holds another file; nothing was moved"
                ) from None
            # else: a previous call linked it and stopped before the unlink
        except OSError as error:
            raise QuarantineNotDone(
                f"cannot link the receipt to {ref} ({error.strerror}); nothing was moved"
            ) from error
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=shard_fd)
        _fsync_dir_best_effort(shard_fd)
        _fsync_dir_best_effort(q_fd)

    def holds_quarantine(self, ref: str) -> bool:
        """Whether the quarantined copy ``ref`` (a journal row's) exists. A name this store did
        not make cannot be proven absent: True (the candidate keeps blocking)."""
        if parse_quarantine_ref(ref) is None:
            return True
        try:
            os.lstat(os.path.join(self.root, ref))
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as error:
            return error.errno != errno.ELOOP
        return True

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

    def purge_quarantine(self, ref: str) -> int:
        """Remove every quarantined copy a journal row stands for (slots 1..the slot of ``ref``)
        once the row's purge time passed; the number removed."""
        parsed = parse_quarantine_ref(ref)
        if parsed is None:
            raise ValueError(f"{ref!r} is not a quarantine name")
        attempt_id, last = parsed
        removed = 0
        for slot in range(1, last + 1):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.root, quarantine_ref(attempt_id, slot)))
                removed += 1
        return removed


def _require_copy(q_fd: int, slot_name: str, ref: str) -> None:
    """Nothing is left to move: fine when ``ref`` holds a copy (an earlier or concurrent move
    finished); otherwise the receipt vanished unquarantined and no row may claim ``ref``."""
    try:
        os.stat(slot_name, dir_fd=q_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise QuarantineNotDone(
            f"the receipt vanished before it could be moved to {ref}; nothing was moved"
        ) from None


def _same_inode(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


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
    Attempt); `put_state` plants a non-file ("symlink", "fifo", "directory") or a shard that is
    not a directory ("shard_symlink", "shard_file"); `root_state` is "directory", "missing",
    "file" or "symlink"; `leftover_temps` counts temps a crashed publisher left (they are never
    read). `on_read` runs before each read, so a test can publish "at any moment", e.g. between
    the two reads around the grace. `quarantined` maps each quarantine name to the bytes moved
    there (a non-file is kept as ``b""``).
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
