"""The receipt file store (spec 03 "Receipt file store") and its in-memory fake for tests.

Paths are computed only from a validated Attempt ID; the store never lists or scans a directory.
Neither the root, the shard directory nor the receipt is followed when it is a symbolic link.

The root and the shard are checked as directories, not as receipts: when one of them exists but
is not a real directory (a regular file, a symbolic link, a loop) the store answers
:class:`Unusable`, a configuration problem that is never quarantined and never written to the
journal. A missing root is :class:`RootMissing`, which only a `claimed` Attempt may read as "no
receipt" (the launcher creates the root before any spawn).

Here too: the layout (limits, quarantine names, what a read answers, the port) and the file
operations the launcher and the wrapper share (creating the root and the shard, publishing bytes
once). A receipt's own name and path are the codec's (``_receipt.py``), the lock's are
``_attempt_lock.py``'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from reconciler._atomic import CREATE_NEW, fsync_dir, write_durably
from reconciler._root_check import (
    OPEN_DIR,
    ReceiptRootError,
    check_root_dir,
    check_shard_dir,
    private_dir,
    refuse_loose,
    root_error,
    validate_receipt_root,
    what_is,
)
from reconciler.node._attempt_lock import probe_lock, remove_lock
from reconciler.node._receipt import (
    MAX_RECEIPT_BYTES,
    InvalidReceipt,
    Receipt,
    _require_id,
    decode_receipt,
    encode_receipt,
    receipt_name,
    receipt_path,
    shard_path,
    temp_path,
    validate_id,
)

QUARANTINE_DIR: Final = ".quarantine"
# Later quarantined copies of one Attempt: `<attemptId>+<n>.json`, n = 2, 3, ... ('+' is not in
# the execution-id alphabet, so a name maps back to exactly one Attempt and slot). Bounded so
# that finding a free slot never turns into a scan.
MAX_QUARANTINE_SLOTS: Final = 1000
# O_NONBLOCK: opening a FIFO planted at the receipt's name must not hang the reconciler.
_OPEN_RECEIPT: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class QuarantineNotDone(OSError):
    """The invalid receipt was NOT moved (nothing was linked into `.quarantine`): the caller
    withdraws its journal intent. An error after the link (the copy exists) is a plain OSError."""


def _not_moved(what: str, error: OSError) -> QuarantineNotDone:
    return QuarantineNotDone(f"{what} ({error.strerror}); nothing was moved")


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


def publish_bytes_at(target: str, temporary: str, data: bytes) -> None:
    """Publish `data` once at `target` (spec 03 "Publish once"); both paths are absolute and in
    one directory, created 0700 (whatever the umask, D-16) if it is missing.

    Exclusive 0600 temp file `temporary`, fsync, hard link to `target` (an existing receipt is
    kept: ReceiptExists), unlink the temp, fsync the directory. Never an overwriting rename.
    """
    directory = os.path.dirname(target)
    if not os.path.isabs(target) or os.path.dirname(temporary) != directory:
        raise ValueError("receipt target and temporary must be absolute paths in one directory")
    final, temp = os.path.basename(target), os.path.basename(temporary)
    private_dir(directory)
    dir_fd = os.open(directory, OPEN_DIR)
    try:
        fd = os.open(temp, CREATE_NEW, 0o600, dir_fd=dir_fd)
        try:
            write_durably(fd, data)
            try:
                os.link(temp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                raise ReceiptExists(final.removesuffix(".json")) from None
        finally:
            # A leftover temp is harmless: readers only ever open the final name.
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
        fsync_dir(dir_fd)
    finally:
        os.close(dir_fd)


def _unusable(kind: str, path: str) -> Unusable:
    return Unusable(f"{kind}_is_symlink" if os.path.islink(path) else f"{kind}_not_directory", path)


def _not_a_dir(error: OSError) -> bool:
    # Linux answers ENOTDIR, not ELOOP, for O_DIRECTORY|O_NOFOLLOW on a symlink.
    return error.errno in (errno.ENOTDIR, errno.ELOOP)


def _open_dirs_in(dir_fd: int, names: list[str], *, create: bool) -> int | None:
    """An O_NOFOLLOW descriptor of ``dir_fd``/names[0]/names[1]/..., each a real directory
    (created 0700 when ``create``); None when one is missing and not ``create``."""
    current = os.dup(dir_fd)
    for name in names:
        try:
            if create:
                private_dir(name, dir_fd=current)
            opened = os.open(name, OPEN_DIR, dir_fd=current)
        except FileNotFoundError:
            if create:
                raise
            return None
        finally:
            os.close(current)
        current = opened
    return current


def prepare_receipt_dirs(root: str, attempt_id: str) -> None:
    """The launcher's side, BEFORE its first commit: create the root (with its parents) and the
    Attempt's shard, 0700, and check that both are real directories and that nothing stands at
    the receipt's name yet (the wrapper could not publish over it). ReceiptRootError names the
    problem and the fix; ReceiptExists when the receipt name is taken."""
    root = validate_receipt_root(root)
    shard = _require_id(attempt_id)[:2]
    shard_at = shard_path(root, attempt_id)
    try:
        # The parents as makedirs makes them; the root itself 0700 whatever the umask (D-16).
        if not os.path.exists(os.path.dirname(root)):
            os.makedirs(os.path.dirname(root), exist_ok=True)
        private_dir(root)
    except FileExistsError:
        pass  # something that is not a directory stands there: named just below
    except OSError as error:
        raise ReceiptRootError(
            f"cannot create receipt root {root!r} ({error.strerror}): create it as a directory "
            "(mode 0700) or choose a writable place for it"
        ) from None
    try:
        root_fd = os.open(root, OPEN_DIR)
    except OSError as error:
        if _not_a_dir(error):
            raise ReceiptRootError(root_error(root)) from None
        raise ReceiptRootError(
            f"cannot open receipt root {root!r} ({error.strerror}): make it a readable directory"
        ) from None
    with contextlib.ExitStack() as opened:
        opened.callback(os.close, root_fd)
        # D-16: a root another user can write is refused before the launch commits anything.
        refuse_loose("root", root, os.fstat(root_fd))
        try:
            private_dir(shard, dir_fd=root_fd)
            shard_fd = os.open(shard, OPEN_DIR, dir_fd=root_fd)
        except OSError as error:
            if _not_a_dir(error):
                raise ReceiptRootError(
                    f"receipt shard {shard_at!r} is {what_is(shard_at)}, not a directory: move "
                    "it out of the receipt root (the launcher creates the shards)"
                ) from None
            raise ReceiptRootError(
                f"cannot create receipt shard {shard_at!r} ({error.strerror}): make the receipt "
                "root writable"
            ) from None
        opened.callback(os.close, shard_fd)
        refuse_loose("shard", shard_at, os.fstat(shard_fd))
        try:
            os.stat(receipt_name(attempt_id), dir_fd=shard_fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        raise ReceiptExists(attempt_id)


# "No receipt": a value without fields, one for every read that finds none.
_MISSING = Missing()
# What a MemoryReceiptStore's `put_state` plants: a non-file at the receipt's name, or a shard
# that is not a directory (with the reason its read answers).
_PLANTED_FILES = ("symlink", "fifo", "directory")
_PLANTED_SHARDS = {"shard_symlink": "shard_is_symlink", "shard_file": "shard_not_directory"}


class FileReceiptStore:
    """Receipts as files under `root` (validated at construction, touched only when used)."""

    def __init__(self, root: str) -> None:
        self.root = validate_receipt_root(root)

    def check_root(self) -> bool:
        """True: the root is a real directory; False: it does not exist; ReceiptRootError: it
        exists but is a regular file, a symbolic link (even to a directory), a loop, or lies
        below something that is not a directory. Touches nothing."""
        return check_root_dir(self.root)

    def check_shards(self, attempt_ids: Iterable[str]) -> None:
        """ReceiptRootError when the existing shard of one of ``attempt_ids`` is writable by
        another user (D-16); asked before anything is written. Ids that are not portable are
        skipped (their candidate fails on its own). Touches nothing."""
        for shard in sorted({a[:2] for a in attempt_ids if isinstance(a, str) and validate_id(a)}):
            check_shard_dir(self.root, shard)

    def _open_root(self) -> int | ReadResult:
        try:
            return os.open(self.root, OPEN_DIR)
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
            return os.open(shard, OPEN_DIR, dir_fd=root_fd)
        except FileNotFoundError:
            return _MISSING  # a missing shard: nothing was ever published here
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
        with contextlib.ExitStack() as opened:
            opened.callback(os.close, shard)
            try:
                fd = os.open(receipt_name(attempt_id), _OPEN_RECEIPT, dir_fd=shard)
            except FileNotFoundError:
                return _MISSING
            except OSError as error:
                if error.errno == errno.ELOOP:
                    return Invalid("symlink")
                if error.errno in (errno.ENXIO, errno.ENOTDIR):  # a socket, or worse
                    return Invalid("not_regular_file")
                raise
            opened.callback(os.close, fd)
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                return Invalid(DIRECTORY_PROBLEM + receipt_path(self.root, attempt_id))
            if not stat.S_ISREG(mode):
                return Invalid("not_regular_file")
            with open(fd, "rb", closefd=False) as file:
                data = file.read(MAX_RECEIPT_BYTES + 1)
        return _judge(attempt_id, data)

    def publish(self, receipt: Receipt) -> None:
        data = encode_receipt(receipt)
        os.makedirs(os.path.dirname(self.root), exist_ok=True)
        private_dir(self.root)
        target = receipt_path(self.root, receipt.attempt_id)
        publish_bytes_at(target, temp_path(self.root, receipt.attempt_id), data)

    def _quarantine_root(self) -> int:
        root_fd = self._open_root()
        if isinstance(root_fd, int):
            return root_fd
        raise QuarantineNotDone(
            f"receipt root {self.root!r} is not a usable directory; nothing was moved"
        )

    def _open_shard_for_move(self, root_fd: int, attempt_id: str) -> int | None:
        try:
            return _open_dirs_in(root_fd, [_require_id(attempt_id)[:2]], create=False)
        except OSError as error:
            # A file behind a symlinked shard is not ours to move.
            shard = shard_path(self.root, attempt_id)
            raise _not_moved(f"receipt shard {shard!r} is not a real directory", error) from error

    def quarantine_target(self, attempt_id: str, previous_ref: str | None = None) -> str:
        """The quarantine name the Attempt's current invalid receipt goes to (D-3c): from the
        slot of ``previous_ref`` (the journal row's) upward, the first slot that is free or
        already holds this very file (a move interrupted after its link). Never writes; never
        lists a directory (at most MAX_QUARANTINE_SLOTS names are looked up)."""
        start = first_slot(attempt_id, previous_ref)
        root_fd = self._quarantine_root()
        with contextlib.ExitStack() as opened:
            opened.callback(os.close, root_fd)
            source: os.stat_result | None = None
            shard_fd = self._open_shard_for_move(root_fd, attempt_id)
            if shard_fd is not None:
                opened.callback(os.close, shard_fd)
                with contextlib.suppress(FileNotFoundError):
                    name = receipt_name(attempt_id)
                    source = os.stat(name, dir_fd=shard_fd, follow_symlinks=False)
            try:
                q_fd = _open_dirs_in(root_fd, [QUARANTINE_DIR, attempt_id[:2]], create=False)
            except OSError as error:
                what = f"{QUARANTINE_DIR} under {self.root!r} is not a real directory"
                raise _not_moved(what, error) from error
            if q_fd is None:
                return quarantine_ref(attempt_id, start)
            opened.callback(os.close, q_fd)
            for slot in range(start, MAX_QUARANTINE_SLOTS + 1):
                ref = quarantine_ref(attempt_id, slot)
                try:
                    held = os.stat(ref.rsplit("/", 1)[1], dir_fd=q_fd, follow_symlinks=False)
                except FileNotFoundError:
                    # Free; with nothing left to move, the latest copy's name instead.
                    if source is None and slot > start:
                        return quarantine_ref(attempt_id, slot - 1)
                    return ref
                if source is not None and os.path.samestat(held, source):
                    return ref
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
        ref = own_ref(attempt_id, self.quarantine_target(attempt_id) if ref is None else ref)
        name, slot_name = receipt_name(attempt_id), ref.rsplit("/", 1)[1]
        root_fd = self._quarantine_root()
        with contextlib.ExitStack() as opened:
            opened.callback(os.close, root_fd)
            try:
                q_fd = _open_dirs_in(root_fd, [QUARANTINE_DIR, attempt_id[:2]], create=True)
            except OSError as error:
                what = f"cannot prepare {QUARANTINE_DIR} under {self.root!r}"
                raise _not_moved(what, error) from error
            assert q_fd is not None
            opened.callback(os.close, q_fd)
            shard_fd = self._open_shard_for_move(root_fd, attempt_id)
            if shard_fd is None:
                _require_copy(q_fd, slot_name, ref)  # nothing left to move
                return ref
            opened.callback(os.close, shard_fd)
            self._link_then_unlink(shard_fd, name, q_fd, slot_name, ref)
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
            if not os.path.samestat(held, source):
                # Quarantine never destroys: the slot keeps its file, the receipt stays put.
                raise QuarantineNotDone(
                    f"quarantine slot {ref} holds another file; nothing was moved"
                ) from None
            # else: a previous call linked it and stopped before the unlink
        except OSError as error:
            raise _not_moved(f"cannot link the receipt to {ref}", error) from error
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=shard_fd)
        fsync_dir(shard_fd)
        fsync_dir(q_fd)

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
        self.remove_receipt(attempt_id)

    def lock_state(self, attempt_id: str) -> str:
        """The Attempt lock at its exact path (D-17): ``_attempt_lock.probe_lock``."""
        return probe_lock(self.root, attempt_id)

    def remove_lock(self, attempt_id: str) -> bool:
        """Unlink the Attempt's lock file unless it is held (D-17): ``_attempt_lock``."""
        return remove_lock(self.root, attempt_id)

    def remove_receipt(self, attempt_id: str) -> bool:
        """:meth:`delete`, saying whether a file was there. The shard is opened without
        following a symbolic link and the receipt's name is unlinked inside it (a link at
        that name is removed itself). Idempotent: nothing there is False, not an error."""
        name = receipt_name(attempt_id)
        try:
            shard = os.open(shard_path(self.root, attempt_id), OPEN_DIR)
        except FileNotFoundError:
            return False
        try:
            try:
                os.unlink(name, dir_fd=shard)
            except FileNotFoundError:
                return False
            except IsADirectoryError:
                raise DirectoryAtReceipt(receipt_path(self.root, attempt_id)) from None
            fsync_dir(shard)
        finally:
            os.close(shard)
        return True

    def purge_quarantine(self, ref: str) -> int:
        """Remove every quarantined copy a journal row stands for (slots 1..the slot of ``ref``)
        once the row's purge time passed; the number removed."""
        parsed = parse_quarantine_ref(ref)
        if parsed is None:
            raise ValueError(f"{ref!r} is not a quarantine name")
        attempt_id, last = parsed
        # Neither the root, `.quarantine` nor its shard is followed when it is a symbolic link:
        # each copy is unlinked by name inside the real directory (a link standing at a slot's
        # name is removed itself, never its target). Idempotent: a missing copy, shard or
        # `.quarantine` is "already purged".
        root_fd = self._open_root()
        if isinstance(root_fd, RootMissing):
            return 0
        if not isinstance(root_fd, int):
            raise OSError(
                errno.ENOTDIR,
                f"receipt root {self.root!r} is not a real directory; nothing was purged",
            )
        with contextlib.ExitStack() as opened:
            opened.callback(os.close, root_fd)
            try:
                q_fd = _open_dirs_in(root_fd, [QUARANTINE_DIR, attempt_id[:2]], create=False)
            except OSError as error:
                if _not_a_dir(error):
                    raise OSError(
                        error.errno,
                        f"{QUARANTINE_DIR}/{attempt_id[:2]} under {self.root!r} is not a real "
                        "directory; nothing was purged",
                    ) from error
                raise
            if q_fd is None:
                return 0
            opened.callback(os.close, q_fd)
            removed = 0
            for slot in range(1, last + 1):
                name = quarantine_ref(attempt_id, slot).rsplit("/", 1)[1]
                try:
                    os.unlink(name, dir_fd=q_fd)
                except FileNotFoundError:
                    continue
                except IsADirectoryError:
                    # D-16: a copy is a file; a directory there is someone's, never purged.
                    path = os.path.join(self.root, QUARANTINE_DIR, attempt_id[:2], name)
                    raise OSError(
                        errno.EISDIR,
                        f"a directory stands at the quarantined copy {path!r}: look inside it, "
                        "then remove it; the row stays until then",
                    ) from None
                removed += 1
            if removed:
                fsync_dir(q_fd)
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


class MemoryReceiptStore:
    """An in-memory ReceiptStore for tests: the same rules, raw bytes per Attempt.

    `put_raw` plants arbitrary content (a zero-length file, garbage, a receipt for another
    Attempt); `put_state` plants a non-file ("symlink", "fifo", "directory") or a shard that is
    not a directory ("shard_symlink", "shard_file"); `root_state` is "directory", "missing",
    "file" or "symlink"; `leave_temp` is a crashed publisher's temp (never read, so it changes no
    answer). `on_read` runs before each read, so a test can publish "at any moment", e.g. between
    the two reads around the grace. `quarantined` maps each quarantine name to the bytes moved
    there (a non-file is kept as ``b""``). `locks` plants Attempt locks (D-17).
    """

    root = "memory:"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.quarantined: dict[str, bytes] = {}
        self.special: dict[str, str] = {}
        self.reads: list[str] = []
        self.on_read: list[Callable[[str], None]] = []
        self.root_state = "directory"
        self.locks: dict[str, str] = {}  # the Attempt locks (D-17)

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
        if kind not in _PLANTED_FILES and kind not in _PLANTED_SHARDS:
            raise ValueError(f"unknown special state {kind!r}")
        self.special[_require_id(attempt_id)] = kind

    def leave_temp(self, attempt_id: str) -> None:
        """A publisher crashed after writing its temp and before linking it: readers only ever
        open the final name, so no answer changes and nothing needs to be kept."""
        _require_id(attempt_id)

    def read(self, attempt_id: str) -> ReadResult:
        _require_id(attempt_id)
        self.reads.append(attempt_id)
        for hook in list(self.on_read):
            hook(attempt_id)
        if self.root_state == "missing":
            return RootMissing()
        if self.root_state != "directory":
            symlink = self.root_state == "symlink"
            return Unusable("root_is_symlink" if symlink else "root_not_directory", self.root)
        kind = self.special.get(attempt_id)
        if kind in _PLANTED_SHARDS:
            return Unusable(_PLANTED_SHARDS[kind], shard_path(self.root, attempt_id))
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
        start = first_slot(attempt_id, previous_ref)
        moving = attempt_id in self.files or attempt_id in self.special
        for slot in range(start, MAX_QUARANTINE_SLOTS + 1):
            ref = quarantine_ref(attempt_id, slot)
            if ref not in self.quarantined:
                # Free; with nothing left to move, the latest copy's name (as the file store).
                return ref if moving or slot == start else quarantine_ref(attempt_id, slot - 1)
        raise QuarantineNotDone(f"all quarantine slots of Attempt {attempt_id} are taken")

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str:
        ref = own_ref(attempt_id, self.quarantine_target(attempt_id) if ref is None else ref)
        moving = attempt_id in self.files or self.special.get(attempt_id) in _PLANTED_FILES
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
