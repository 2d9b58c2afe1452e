"""Who may write under the receipt root (docs/decisions.md D-16), and what stands at a path that
should be a real directory. Light on purpose (``os``, ``stat`` and ``reconciler._escape``): the
zero-candidate start-up stats the root with it without paying for the receipt store.

A completion receipt is the evidence ADR-0068 trusts over every other fact: a user who can write
the root or a shard can delete one (the run is then `lost` and retried, its side effects run
twice) or plant files that block start-up. So the root and every shard qlfsm uses must be
writable by their owner alone, and owned by the user running qlfsm or by root.
"""

from __future__ import annotations

import os
import stat

from reconciler._escape import shell_word


class ReceiptRootError(ValueError):
    """The configured receipt root is unusable; the message says what to fix (one line)."""


# A real directory: never a symbolic link to one.
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# spec 03 "Root": the longest receipt root accepted, in bytes of its file-system encoding.
MAX_ROOT_BYTES = 4096
_EMPTY = "receipt root is empty: set it to an absolute directory path"


def validate_receipt_root(path: str, *, empty: str = _EMPTY) -> str:
    """The normalised root, or ReceiptRootError. Pure: never touches the filesystem. Here,
    not in the store, so that the zero-candidate start-up checks it with ``os`` alone;
    ``empty`` is the message for an empty root (the command line names its option)."""
    if not isinstance(path, str) or not path:
        raise ReceiptRootError(empty)
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


# What stands at a path, by the type bits of its mode (for one-line messages).
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int, default: str) -> str:
    """What the mode ``mode`` says stands there ("a FIFO"), else ``default``."""
    return next((name for test, name in _FILE_KINDS if test(mode)), default)


def what_is(path: str) -> str:
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
    return "not a directory" if stat.S_ISDIR(mode) else file_kind(mode, "not a directory")


def root_error(root: str) -> str:
    """The one-line configuration error for a root that exists but is not a real directory."""
    return (
        f"receipt root {root!r} is {what_is(root)}, not a directory: point the receipt root at "
        "the launcher's receipt directory (a real directory, not a link)"
    )


def refuse_loose(kind: str, path: str, st: os.stat_result) -> None:
    """ReceiptRootError unless the directory ``path`` (``st``: its stat) is safe to trust
    (D-16): not writable by group or others, owned by the user running qlfsm or by root. The
    one-line error names it, its mode and owner, and the command that fixes it."""
    mode = stat.S_IMODE(st.st_mode)
    me = os.geteuid()
    loose = bool(mode & (stat.S_IWGRP | stat.S_IWOTH))
    foreign = st.st_uid not in (me, 0)
    if not loose and not foreign:
        return
    word = shell_word(path)
    problems, fixes = [], []
    if loose:
        who = {0o020: "its group", 0o002: "others"}.get(mode & 0o022, "group and others")
        problems.append(f"writable by {who}")
        fixes.append(f"chmod 0700 {word}")
    if foreign:
        problems.append(f"owned by uid {st.st_uid}, not by the user running qlfsm (uid {me})")
        fixes.insert(0, f"chown {me} {word}")
    raise ReceiptRootError(
        f"receipt {kind} {path!r} (mode {mode:04o}, owner uid {st.st_uid}) is "
        f"{' and '.join(problems)}: another local user could delete or plant receipts; fix it "
        f"with `{' && '.join(fixes)}`"
    )


def check_root_dir(root: str) -> bool:
    """The receipt root ``root`` (normalised) looked at with one ``lstat``: True for a real
    directory qlfsm may trust, False when it does not exist; ReceiptRootError when it is
    something else (a file, a link, below a non-directory) or is not safe to trust (D-16)."""
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        raise ReceiptRootError(root_error(root)) from None
    except OSError as error:
        raise ReceiptRootError(
            f"receipt root {root!r} cannot be examined ({error.strerror}): make it a readable "
            "directory"
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise ReceiptRootError(root_error(root))
    refuse_loose("root", root, st)
    return True


def check_shard_dir(root: str, shard: str) -> None:
    """The shard ``<root>/<shard>``, when it exists as a real directory, checked like the root
    (one ``lstat``). Anything else standing there is the read's business (``Unusable``)."""
    path = os.path.join(root, shard)
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        refuse_loose("shard", path, st)


def private_dir(path: str, *, dir_fd: int | None = None) -> None:
    """``mkdir(path, 0700)``, then the mode set to 0700 exactly, whatever the umask (a umask of
    0777 would otherwise leave a directory nobody can use). An existing entry is left as is."""
    try:
        os.mkdir(path, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        return
    fd = os.open(path, OPEN_DIR, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
