"""The `ql3lp1` durable process handle and the three-valued process probe (spec 03).

`unknown` is never read as "gone": only a different boot, an absent PID, a different process
group / start time, or a zombie/dead state is trusted negative evidence.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from reconciler.node._receipt import MAX_SAFE_INTEGER, _as_javascript_reads_it, _reject_constant

HANDLE_PREFIX: Final = "ql3lp1."
MAX_HANDLE_BYTES: Final = 512
MAX_HANDLE_ID_UNITS: Final = 255

# ASCII classes with fullmatch: Python's `\d` would also accept non-ASCII digits.
_BOOT_ID = re.compile(r"[A-Za-z0-9-]{1,64}")
_TICKS = re.compile(r"[0-9]{1,32}")
_DECIMAL = re.compile(r"[0-9]{1,20}")
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_DEAD_STATES: Final = frozenset({"Z", "X", "x"})
_STAT_BOUND: Final = 64 * 1024

# ensure_ascii=False: JSON.stringify leaves non-ASCII characters unescaped. One encoder for
# every handle (json.dumps with options would build one per call).
_HANDLE_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

Verdict = Literal["running", "not_running", "unknown"]


class ProviderUnavailable(Exception):
    """The boot id or /proc could not be read: the answer is `unknown`, never `not_running`."""


class CaptureFailed(Exception):
    """The launcher could not prove the spawned process's identity; the launch must fail."""


@dataclass(frozen=True, slots=True)
class ProcessHandle:
    handle_id: str
    boot_id: str
    pid: int
    pgid: int
    start_ticks: str


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    state: str
    pgrp: int
    start_ticks: str


@dataclass(frozen=True, slots=True)
class Evidence:
    verdict: Verdict
    reason: str
    pid: int | None = None  # the handle's PID when it parsed: the caller compares RunAttempts.pid


def _positive_safe_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SAFE_INTEGER


def format_handle(h: ProcessHandle) -> str:
    """`ql3lp1.` + base64url-nopad of the compact JSON {v,h,b,p,g,s}; raises ValueError."""
    hid = h.handle_id
    if not isinstance(hid, str) or not hid or "\0" in hid:
        raise ValueError("handle id must be a non-empty string without NUL")
    # An ASCII id holds no surrogate: the per-character scan is only for the rest.
    if not hid.isascii() and any("\ud800" <= c <= "\udfff" for c in hid):
        raise ValueError("handle id must not contain lone surrogates")
    # The real bound is JavaScript's string length: UTF-16 code units, not code points.
    if len(hid.encode("utf-16-le")) // 2 > MAX_HANDLE_ID_UNITS:
        raise ValueError("handle id is longer than 255 UTF-16 code units")
    if not isinstance(h.boot_id, str) or _BOOT_ID.fullmatch(h.boot_id) is None:
        raise ValueError("boot id must match [A-Za-z0-9-]{1,64}")
    if not _positive_safe_int(h.pid):
        raise ValueError("pid must be a positive integer")
    if not _positive_safe_int(h.pgid):
        raise ValueError("process group id must be a positive integer")
    ticks = h.start_ticks
    if not isinstance(ticks, str) or _TICKS.fullmatch(ticks) is None or int(ticks) < 1:
        raise ValueError("start ticks must be a decimal string >= 1 of at most 32 digits")
    text = _HANDLE_JSON({"v": 1, "h": hid, "b": h.boot_id, "p": h.pid, "g": h.pgid, "s": ticks})
    encoded = base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")
    handle = HANDLE_PREFIX + encoded
    if len(handle.encode("utf-8")) > MAX_HANDLE_BYTES:
        raise ValueError(f"handle is longer than {MAX_HANDLE_BYTES} bytes")
    return handle


# What JavaScript's String.prototype.trim() removes (WhiteSpace and LineTerminator): QingLong's
# reader trims the boot id before its format check. str.strip() would remove another set.
_JS_TRIM: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


# One decoder for every handle (json.loads with an option builds one per call; NaN / Infinity
# are refused, as JSON.parse refuses them), and base64url's two letters as base64's (what
# base64.urlsafe_b64decode translates).
_HANDLE_PAYLOAD = json.JSONDecoder(parse_constant=_reject_constant).decode
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def parse_handle(s: object) -> ProcessHandle | None:
    """The handle's fields, or None for anything malformed. Never raises.

    Accepts exactly what QingLong's `parseLocalProcessDurableHandle` accepts (spec 03; D-19):
    the payload's keys in any order, extra keys, JSON whitespace, duplicate keys (the last one
    counts, as in JSON.parse), `1.0` for an integer, a boot id with surrounding whitespace
    (trimmed, as QingLong trims it before its check) and start ticks with leading zeros (compared
    as a number by :func:`inspect_handle`). The writer (:func:`format_handle`) keeps the canonical
    form.
    """
    fields = _handle_fields(s)
    return None if fields is None else ProcessHandle(*fields)


def _handle_fields(s: object) -> tuple[str, str, int, int, str] | None:
    """:func:`parse_handle`'s fields (id, boot id, pid, process group, start ticks), or None:
    what the probe reads of a handle, without a record it would throw away."""
    try:
        if not isinstance(s, str) or not s.startswith(HANDLE_PREFIX):
            return None
        # Buffer.byteLength counts a lone surrogate as the 3 bytes of U+FFFD: so does this.
        if len(s.encode("utf-8", "surrogatepass")) > MAX_HANDLE_BYTES:
            return None
        encoded = s[len(HANDLE_PREFIX) :]
        if _B64URL.fullmatch(encoded) is None:
            return None
        # Node's base64url decoder is lenient: a last lone character carries no whole byte and
        # is dropped, unused low bits are ignored. binascii (not strict) ignores the bits too.
        if len(encoded) % 4 == 1:
            encoded = encoded[:-1]
        # ASCII by the pattern above: base64.urlsafe_b64decode, without its generic checks.
        padded = (encoded + "=" * (-len(encoded) % 4)).encode("ascii")
        raw = binascii.a2b_base64(padded.translate(_FROM_URLSAFE))
        # Buffer.toString('utf8') replaces invalid sequences with U+FFFD, it does not refuse.
        payload = _HANDLE_PAYLOAD(raw.decode("utf-8", errors="replace"))
        if not isinstance(payload, dict):
            return None
        version, hid, boot = payload.get("v"), payload.get("h"), payload.get("b")
        ticks = payload.get("s")
        if type(version) not in (int, float) or version != 1:
            return None
        if not isinstance(hid, str) or not hid or "\0" in hid:
            return None
        # JavaScript's `length`: UTF-16 code units (a lone surrogate, from a JSON escape, is one).
        if len(hid.encode("utf-16-le", "surrogatepass")) // 2 > MAX_HANDLE_ID_UNITS:
            return None
        if not isinstance(boot, str):
            return None
        boot = boot.strip(_JS_TRIM)
        if _BOOT_ID.fullmatch(boot) is None:
            return None
        # As JavaScript's `typeof === 'number'`, Number.isSafeInteger and `>= 1` accept them
        # (`5.0`, `5e0` are the number 5 there).
        pid, pgid = (_as_javascript_reads_it(payload.get(key)) for key in ("p", "g"))
        if not (_positive_safe_int(pid) and _positive_safe_int(pgid)):
            return None
        if not isinstance(ticks, str) or _TICKS.fullmatch(ticks) is None or int(ticks) < 1:
            return None
        return hid, boot, pid, pgid, ticks
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeError, RecursionError):
        return None


def parse_proc_stat(text: str, pid: int) -> ProcStat | None:
    """State, process group and start ticks from `/proc/<pid>/stat`, or None if malformed.

    The command name may hold spaces and parentheses: split after the LAST ')' (spec 03).
    """
    if not isinstance(text, str) or not _positive_safe_int(pid):
        return None
    open_at = text.find("(")
    close_at = text.rfind(")")
    if open_at < 1 or close_at <= open_at:
        return None
    observed = text[:open_at].strip()
    if _DECIMAL.fullmatch(observed) is None or int(observed) != pid:
        return None
    fields = text[close_at + 1 :].split()
    if len(fields) < 20:
        return None
    state, pgrp, ticks = fields[0], fields[2], fields[19]
    if _DECIMAL.fullmatch(pgrp) is None or not _positive_safe_int(int(pgrp)):
        return None
    if _TICKS.fullmatch(ticks) is None or int(ticks) < 1:
        return None
    return ProcStat(pid=pid, state=state, pgrp=int(pgrp), start_ticks=ticks)


class ProcessProvider(Protocol):
    """The port to the process table. Any method may raise ProviderUnavailable."""

    def boot_id(self) -> str: ...

    def read_stat(self, pid: int) -> str | None:
        """The text of `/proc/<pid>/stat`, or None when no such PID exists (and the process
        table itself was readable: see :class:`PassProvider`)."""
        ...


class ProcProvider:
    """The real provider: `<proc_root>/sys/kernel/random/boot_id` and `<proc_root>/<pid>/stat`."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._boot_path = os.path.join(proc_root, "sys/kernel/random/boot_id")

    def boot_id(self) -> str:
        try:
            with open(self._boot_path, "rb") as f:
                value = f.read(256).decode("ascii").strip()
        except (OSError, UnicodeError) as error:
            raise ProviderUnavailable(f"boot id unreadable: {type(error).__name__}") from None
        if _BOOT_ID.fullmatch(value) is None:
            raise ProviderUnavailable("boot id has an invalid format")
        return value

    def read_stat(self, pid: int) -> str | None:
        # os.open/os.read: one file, read whole (a stat line is far below the bound).
        try:
            fd = os.open(f"{self.proc_root}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            try:
                chunks = []
                size = 0
                while size < _STAT_BOUND and (chunk := os.read(fd, _STAT_BOUND - size)):
                    chunks.append(chunk)
                    size += len(chunk)
            finally:
                os.close(fd)
        except OSError as error:
            # ENOENT: no such PID; ESRCH: it exited while the file was being read. Either only
            # once the process table itself is confirmed there: a /proc that vanished (or was
            # unmounted) has no <pid>/stat either, and "no such PID" would read as `not_running`
            # (spec 03: unknown is never gone). One stat(2) of the boot id file confirms it.
            if error.errno in (errno.ENOENT, errno.ESRCH):
                self._confirm_table()
                return None
            raise ProviderUnavailable(f"stat unreadable: {type(error).__name__}") from None
        return b"".join(chunks).decode("utf-8", errors="replace")

    def _confirm_table(self) -> None:
        try:
            os.stat(self._boot_path)
        except OSError as error:
            raise ProviderUnavailable(f"process table unreadable: {type(error).__name__}") from None


class PassProvider:
    """The process table as ONE pass sees it: the boot id read once (on first use; a failed
    read is not kept, so the next probe asks again), `<pid>/stat` read per probe.

    Safe only because an absent stat is confirmed before it counts: :class:`ProcProvider`
    confirms its `/proc` itself before answering None; any other provider is asked for its
    boot id again, which must still be readable and the same. Otherwise the probe gets
    ProviderUnavailable (`unknown / provider_unavailable`), never "no such PID" (spec 03;
    docs/decisions.md D-13)."""

    __slots__ = ("_boot", "_confirms", "inner")

    def __init__(self, inner: ProcessProvider) -> None:
        self.inner = inner
        self._boot: str | None = None
        self._confirms = isinstance(inner, ProcProvider)

    def boot_id(self) -> str:
        if self._boot is None:
            self._boot = self.inner.boot_id()
        return self._boot

    def read_stat(self, pid: int) -> str | None:
        text = self.inner.read_stat(pid)
        # Not a ProcProvider: the boot id read again (it raises if the table is gone).
        if text is None and not self._confirms and self.inner.boot_id() != self.boot_id():
            raise ProviderUnavailable("boot id changed during the pass")
        return text


@dataclass(slots=True)
class _FakeProcess:
    pgid: int
    start_ticks: str
    state: str = "S"
    comm: str = "fake (worker) x"


@dataclass(slots=True)
class FakeProcessTable:
    """An in-memory ProcessProvider: spawn, exit (zombie), reap, PID reuse, reboot, outage."""

    boot: str = "00000000-0000-4000-8000-000000000001"
    processes: dict[int, _FakeProcess] = field(default_factory=dict)
    unavailable: bool = False
    clock_ticks: int = 1000
    next_pid: int = 4000
    boots: int = 1
    stat_reads: int = 0

    def boot_id(self) -> str:
        if self.unavailable:
            raise ProviderUnavailable("fake provider is unavailable")
        return self.boot

    def read_stat(self, pid: int) -> str | None:
        if self.unavailable:
            raise ProviderUnavailable("fake provider is unavailable")
        self.stat_reads += 1
        proc = self.processes.get(pid)
        if proc is None:
            return None
        rest = ["0"] * 50
        rest[0], rest[1], rest[2], rest[19] = proc.state, "1", str(proc.pgid), proc.start_ticks
        return f"{pid} ({proc.comm}) {' '.join(rest)}\n"

    def spawn(self, pid: int | None = None, pgid: int | None = None, state: str = "S") -> int:
        if pid is None:
            while self.next_pid in self.processes:
                self.next_pid += 1
            pid = self.next_pid
            self.next_pid += 1
        self.clock_ticks += 1
        self.processes[pid] = _FakeProcess(
            pgid if pgid is not None else pid, str(self.clock_ticks), state
        )
        return pid

    def exit(self, pid: int) -> None:
        """The process died but was not reaped yet: a zombie."""
        self.processes[pid].state = "Z"

    def reap(self, pid: int) -> None:
        self.processes.pop(pid, None)

    def reuse(self, pid: int, pgid: int | None = None) -> None:
        """Another process now holds `pid`: new start ticks."""
        self.reap(pid)
        self.spawn(pid, pgid)

    def reboot(self) -> None:
        self.boots += 1
        self.boot = f"00000000-0000-4000-8000-{self.boots:012d}"
        self.processes.clear()

    def make_unavailable(self, unavailable: bool = True) -> None:
        self.unavailable = unavailable


def inspect_handle(
    handle_text: object, provider: ProcessProvider, *, platform: str = sys.platform
) -> Evidence:
    """The three-valued answer of spec 03 "Inspection" for a stored handle."""
    handle = _handle_fields(handle_text)
    if handle is None:  # checked first, as the real inspector does, before any I/O
        return Evidence("unknown", "invalid_handle")
    _, boot, pid, pgid, ticks = handle
    if not platform.startswith("linux"):
        return Evidence("unknown", "unsupported_platform", pid)
    try:
        if provider.boot_id() != boot:
            return Evidence("not_running", "boot_id_differs", pid)
        text = provider.read_stat(pid)
        if text is None:
            return Evidence("not_running", "pid_absent", pid)
        snapshot = parse_proc_stat(text, pid)
    except Exception:  # spec 03: ANY provider error is provider_unavailable, never "gone"
        return Evidence("unknown", "provider_unavailable", pid)
    if snapshot is None:
        return Evidence("unknown", "provider_unavailable", pid)
    if snapshot.pgrp != pgid:
        return Evidence("not_running", "process_group_differs", pid)
    # Compared as numbers: spec 03 allows leading zeros in the handle (`"0123"`), /proc writes
    # none (`123`); as strings a live process would read `not_running` and be marked lost.
    if int(snapshot.start_ticks) != int(ticks):
        return Evidence("not_running", "start_ticks_differ", pid)
    if snapshot.state in _DEAD_STATES:
        return Evidence("not_running", "zombie_or_dead", pid)
    return Evidence("running", "identity_matches", pid)


def capture_handle(
    pid: int,
    provider: ProcessProvider,
    handle_id: str | None = None,
    *,
    platform: str = sys.platform,
) -> str:
    """Build the handle of a just-spawned process; raises CaptureFailed (spec 03 "Capture")."""
    # Imported here: only the launcher makes handles, and the start-up pass must not pay for
    # `uuid` at import.
    import uuid

    if not platform.startswith("linux"):
        raise CaptureFailed("this platform cannot prove a durable process identity")
    if not _positive_safe_int(pid):
        raise CaptureFailed("pid must be a positive integer")
    try:
        boot = provider.boot_id()
        text = provider.read_stat(pid)
    except Exception as error:
        raise CaptureFailed(f"process identity unreadable: {error}") from error
    if text is None:
        raise CaptureFailed(f"process {pid} is gone")
    snapshot = parse_proc_stat(text, pid)
    if snapshot is None:
        raise CaptureFailed(f"/proc/{pid}/stat is malformed")
    hid = handle_id if handle_id is not None else str(uuid.uuid4())
    try:
        return format_handle(ProcessHandle(hid, boot, pid, snapshot.pgrp, snapshot.start_ticks))
    except ValueError as error:
        raise CaptureFailed(str(error)) from error
