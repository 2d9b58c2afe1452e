"""The resume cursor of the ADR-0448 shadow pass, kept in a private file between start-ups
(spec 05 "Supervisor"): read only from a regular file this tool wrote, written atomically."""

from __future__ import annotations

import json
import os
import stat

from reconciler._atomic import replace_file
from reconciler._root_check import file_kind

# Where the ADR-0448 pass resumes: the last (2.x cron id, Run id) of the keyset page it finished
# (spec 05 "Supervisor"). The one home of the type: the pass, its ports and the entry use it.
Cursor = tuple[int, str]

# A cursor file holds one small JSON object; anything larger is not one qlfsm wrote.
MAX_CURSOR_BYTES = 4096
_TOO_LARGE = f"is larger than a cursor ({MAX_CURSOR_BYTES} bytes at most)"


class InvalidResumeCursor(Exception):
    """The --resume-cursor file is not one this tool wrote (its message says what it is)."""


def _not_regular(mode: int) -> str:
    return f"names {file_kind(mode, 'a special file')}, not a regular file"


def read_cursor(path: str) -> Cursor | None:
    """The cursor a previous `shadow` left in ``path``; None when there is none.

    Only a regular file is read, and at most MAX_CURSOR_BYTES of it: a FIFO would block the
    open (start-up would hang) and /dev/zero would never end. The path is checked with lstat
    BEFORE it is opened (opening a device can have effects of its own); the open itself
    refuses a symbolic link (O_NOFOLLOW: the file is replaced by rename when written, so a
    link would be read but never written) and cannot block (O_NONBLOCK), and fstat confirms
    that what was opened is still a regular file.
    """
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidResumeCursor(_not_regular(st.st_mode))
        if st.st_size > MAX_CURSOR_BYTES:
            raise InvalidResumeCursor(_TOO_LARGE)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise InvalidResumeCursor(_not_regular(mode))
            with open(fd, "rb", closefd=False) as file:
                data = file.read(MAX_CURSOR_BYTES + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:  # no cursor (the lstat), or it went before the open
        return None
    except OSError as exc:
        raise InvalidResumeCursor(f"cannot be read ({exc.strerror})") from exc
    if len(data) > MAX_CURSOR_BYTES:
        raise InvalidResumeCursor(_TOO_LARGE)
    try:
        parsed = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise InvalidResumeCursor("is not a cursor qlfsm wrote (not JSON)") from exc
    if (
        not isinstance(parsed, dict)
        or parsed.get("schemaVersion") != 1
        or type(parsed.get("createdAtMs")) is not int
        or not isinstance(parsed.get("runId"), str)
    ):
        raise InvalidResumeCursor("is not a cursor qlfsm wrote (unknown fields)")
    return (int(parsed["createdAtMs"]), str(parsed["runId"]))


def store_cursor(path: str, cursor: Cursor | None) -> None:
    """Write the next cursor (mode 0600, atomically: a new file, fsync, rename over the old
    one, so a crash or a signal leaves the old cursor or the new one, never a part), or remove
    the file when the pass has nothing left to resume."""
    if cursor is None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISREG(st.st_mode):  # only ever a file this tool could have written
            os.unlink(path)
        return
    data = json.dumps({"schemaVersion": 1, "createdAtMs": cursor[0], "runId": cursor[1]})
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    replace_file(path, tmp, data.encode("utf-8"))
