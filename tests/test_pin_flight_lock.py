"""The start-up single-flight lock (docs/decisions.md D-20, ``reconciler._flight``), in process.

`test_single_flight.py` runs real `qlfsm` processes against one another; here the lock is
taken by :class:`single_flight` itself, in this process, on a real lock file under
``tmp_path``, so that a mutation test sees each decision. A second holder is another open
file description of the same file (``flock`` locks belong to open file descriptions, so two of
one process exclude each other). Time is the only thing faked: ``time.monotonic`` reads a
script and ``time.sleep`` records its argument, so that each poll of the wait, each line it
says and each second it charges to the budget are exact.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest

from reconciler._errors import FatalError
from reconciler._flight import StartupLocked, single_flight, startup_lock_path
from storage import Busy, LockBudget

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux flock/caps")

PID = 4242  # the pid a holder wrote into the lock file (no process needs to have it)


# --- helpers ----------------------------------------------------------------------------------


class FakeTime:
    """``time.monotonic`` answers ``readings`` in turn (then one second later per read, so a
    loop that reads more than the script still ends); ``time.sleep`` records its argument and
    calls ``on_sleep`` with how many sleeps there were so far."""

    def __init__(self, readings: Sequence[float], on_sleep: Callable[[int], None]) -> None:
        self.readings = list(readings)
        self.last = 0.0
        self.sleeps: list[object] = []
        self.on_sleep = on_sleep

    def monotonic(self) -> float:
        self.last = self.readings.pop(0) if self.readings else self.last + 1.0
        return self.last

    def sleep(self, seconds: object) -> None:
        self.sleeps.append(seconds)
        self.on_sleep(len(self.sleeps))


def fake_time(
    monkeypatch: pytest.MonkeyPatch,
    readings: Sequence[float],
    on_sleep: Callable[[int], None] = lambda n: None,
) -> FakeTime:
    fake = FakeTime(readings, on_sleep)
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    monkeypatch.setattr(time, "sleep", fake.sleep)
    return fake


def hold(path: str, content: bytes | None = f"{PID}\n".encode()) -> int:
    """Another holder of the lock file ``path`` (created if missing): an open file description
    of its own with the exclusive flock, ``content`` written as a holder writes its pid."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if content is not None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, content, 0)
    return fd


def is_locked(path: str) -> bool:
    """Whether someone holds ``path``'s flock: another open file description cannot take it."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_CAP_DAC = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


@contextmanager
def permission_bits_apply() -> Iterator[None]:
    """For the block, this thread obeys permission bits as any user does: for root, its
    effective CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH are dropped (capset(2) on this thread
    only) and raised again after; for another user there is nothing to do."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        pytest.skip(f"capget: {os.strerror(ctypes.get_errno())}")
    saved = data[0].effective
    data[0].effective = saved & ~_CAP_DAC
    if libc.capset(ctypes.byref(header), data) != 0:
        pytest.skip(f"capset: {os.strerror(ctypes.get_errno())}")
    try:
        yield
    finally:
        data[0].effective = saved
        assert libc.capset(ctypes.byref(header), data) == 0


@contextmanager
def alarm_after(seconds: float) -> Iterator[None]:
    """A blocking call of the block is interrupted by TimeoutError after ``seconds``."""

    def ring(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def waiting_line(who: str, more: str) -> str:
    return (
        f"qlfsm: waiting for the start-up of {who} (one start-up at a time per database; "
        f"at most {more} s more, $QLFSM_LOCK_BUDGET_S)"
    )


def locked_message(who: str, lock: str, db: str, waited: str) -> str:
    return (
        f"{who} still holds {lock!r} for database {db!r} (waited {waited} s, "
        "$QLFSM_LOCK_BUDGET_S); try again when it has finished"
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "ql.db")


# --- a free lock ------------------------------------------------------------------------------


def test_a_free_lock_is_held_for_the_block_with_this_pid_in_it_and_released_empty_after(
    db: str,
) -> None:
    path = startup_lock_path(db)
    notes: list[str] = []
    budget = LockBudget(5.0)
    with single_flight(db, budget, notes.append) as flight:
        assert flight.path == path == os.path.realpath(db) + ".qlfsm-startup.lock"
        assert is_locked(path)
        assert Path(path).read_bytes() == f"{os.getpid()}\n".encode()
        assert flight.fd is not None
        # Close-on-exec (a job the start-up launches must not keep the lock) and non-blocking.
        assert not os.get_inheritable(flight.fd)
        assert fcntl.fcntl(flight.fd, fcntl.F_GETFL) & os.O_NONBLOCK
    assert flight.fd is None
    assert not is_locked(path)
    assert Path(path).read_bytes() == b""  # no pid of a process that no longer holds it
    assert notes == []
    assert 0.0 <= budget.spent < 5.0
    # Taken again by the next block of this process: the first one left nothing behind.
    with single_flight(db, budget, notes.append) as again:
        assert again.fd is not None
        assert is_locked(path)
    assert not is_locked(path)


def test_a_nested_block_of_the_process_holding_the_lock_takes_nothing_and_never_waits(
    db: str,
) -> None:
    with single_flight(db, LockBudget(0.0)) as outer:
        assert outer.fd is not None
        with single_flight(db, LockBudget(0.0)) as inner:  # a zero budget: any wait would fail
            assert inner.fd is None
            assert is_locked(outer.path)
        assert is_locked(outer.path)  # the inner block's end releases nothing
    assert not is_locked(outer.path)


def test_the_lock_file_is_created_mode_0644(db: str) -> None:
    old = os.umask(0o022)
    try:
        with single_flight(db, LockBudget(1.0)) as flight:
            mode = stat.S_IMODE(os.stat(flight.path).st_mode)
    finally:
        os.umask(old)
    assert mode == 0o644


def test_a_pid_that_cannot_be_written_leaves_the_lock_file_empty_not_a_stale_pid(
    db: str,
) -> None:
    """The previous holder was SIGKILLed with its pid in the file; this one cannot write its
    own (a file size limit of 0 here): the file is emptied, never left naming the dead pid."""
    path = startup_lock_path(db)
    Path(path).write_bytes(b"4242\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    flight = single_flight(db, LockBudget(1.0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
    try:
        flight.__enter__()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    try:
        assert is_locked(path)
        assert Path(path).read_bytes() == b""
    finally:
        flight.__exit__(None, None, None)


# --- waiting for a holder ---------------------------------------------------------------------


def test_a_holder_that_wrote_its_pid_is_named_once_and_its_release_ends_the_wait(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = startup_lock_path(db)
    holder = hold(path)
    budget = LockBudget(5.0)
    budget.spent = 0.25  # what earlier passes spent: 4.75 s left

    def release(sleeps: int) -> None:
        if sleeps == 3:
            os.close(holder)

    clock = fake_time(monkeypatch, [0.5, 0.625, 0.75, 0.875, 1.0], release)
    notes: list[str] = []
    with single_flight(db, budget, notes.append) as flight:
        assert flight.fd is not None
        assert is_locked(path)
        assert Path(path).read_bytes() == f"{os.getpid()}\n".encode()
    # Named at the first poll (its pid is there already), once; at most 4.75 - 0.125 s more.
    assert notes == [waiting_line(f"pid {PID}", "4.6")]
    assert clock.sleeps == [0.02, 0.02, 0.02]
    assert clock.readings == []
    assert budget.spent == 0.25 + (1.0 - 0.5)  # the whole wait charged to the budget


def test_a_holder_with_no_pid_yet_is_another_process_after_0_2_s_and_past_the_budget_is_75(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = startup_lock_path(db)
    holder = hold(path, content=None)
    budget = LockBudget(0.5)
    budget.spent = 0.125  # 0.375 s left
    clock = fake_time(monkeypatch, [0.0, 0.2, 0.37, 0.375])
    notes: list[str] = []
    try:
        with (
            pytest.raises(StartupLocked) as raised,
            single_flight(db, budget, notes.append),
        ):
            pytest.fail("entered a lock another process holds")
        # Said once, when the pid had had PID_WAIT_S (0.2 s) to appear: 0.375 - 0.2 s left.
        assert notes == [waiting_line("another process", "0.2")]
        # Polls every 20 ms, the last one no later than the budget's end.
        assert clock.sleeps == [0.02, pytest.approx(0.005)]
        assert clock.readings == []
        error = raised.value
        assert isinstance(error, Busy)
        assert str(error) == locked_message("another start-up", path, db, "0.4")
        assert error.args == (str(error),)
        assert (error.pid, error.tries, error.waited_s, error.path) == (None, 0, 0.375, db)
        assert budget.spent == 0.5
        assert is_locked(path)  # the holder's lock, untouched
    finally:
        os.close(holder)
    assert not is_locked(path)


def test_a_zero_budget_fails_at_once_naming_the_holders_pid(db: str) -> None:
    path = startup_lock_path(db)
    holder = hold(path)
    budget = LockBudget(0.0)
    notes: list[str] = []
    try:
        with pytest.raises(StartupLocked) as raised, single_flight(db, budget, notes.append):
            pytest.fail("entered a lock another process holds")
    finally:
        os.close(holder)
    error = raised.value
    assert notes == []
    assert str(error) == locked_message(
        f"the start-up of pid {PID}", path, db, f"{error.waited_s:.1f}"
    )
    assert (error.pid, error.tries, error.path) == (PID, 0, db)
    assert 0.0 <= error.waited_s < 5.0
    assert budget.spent == error.waited_s
    assert not is_locked(path)  # the failed start-up keeps no descriptor of it


def test_the_waiting_line_goes_to_stderr_when_no_notify_is_given(
    db: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = startup_lock_path(db)
    holder = hold(path)
    fake_time(monkeypatch, [0.0, 0.125, 0.25])
    try:
        with pytest.raises(StartupLocked), single_flight(db, LockBudget(0.25)):
            pytest.fail("entered a lock another process holds")
    finally:
        os.close(holder)
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", waiting_line(f"pid {PID}", "0.1") + "\n")


@pytest.mark.parametrize(
    ("content", "pid"),
    [
        (b"4242\n", 4242),
        (b"1\n", 1),
        (b"0\n", None),  # no process is pid 0
        (b"", None),  # not written yet
        (b"\xff4242\n", None),  # not ASCII: no pid, and no error either
        (b"x4242\n", None),
        (b" " * 32 + b"7\n", None),  # only the first 32 bytes are read
    ],
)
def test_the_pid_a_holder_wrote_is_read_from_the_first_32_bytes_as_a_positive_integer(
    db: str, content: bytes, pid: int | None
) -> None:
    path = startup_lock_path(db)
    holder = hold(path, content)
    try:
        with pytest.raises(StartupLocked) as raised, single_flight(db, LockBudget(0.0)):
            pytest.fail("entered a lock another process holds")
    finally:
        os.close(holder)
    assert raised.value.pid == pid
    who = "another start-up" if pid is None else f"the start-up of pid {pid}"
    assert str(raised.value).startswith(f"{who} still holds {path!r} ")


# --- lock files that cannot be used -----------------------------------------------------------


def test_a_symbolic_link_at_the_lock_path_is_refused_and_its_target_left_alone(
    db: str, tmp_path: Path
) -> None:
    path = startup_lock_path(db)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep\n")
    os.symlink(target, path)
    with pytest.raises(FatalError) as raised, single_flight(db, LockBudget(1.0)):
        pytest.fail("entered through a symbolic link")
    assert str(raised.value) == (
        f"the start-up lock {path!r} cannot be opened ({os.strerror(errno.ELOOP)}); remove it, "
        "or fix its directory, and run again"
    )
    assert target.read_bytes() == b"keep\n"
    assert not is_locked(str(target))


def test_a_fifo_at_the_lock_path_is_not_a_regular_file(db: str) -> None:
    path = startup_lock_path(db)
    os.mkfifo(path, 0o644)
    with alarm_after(2.0), pytest.raises(FatalError) as raised, single_flight(db, LockBudget(1.0)):
        pytest.fail("entered a FIFO")
    assert str(raised.value) == (
        f"the start-up lock {path!r} is not a regular file; remove it and run again"
    )


def test_a_directory_where_no_lock_file_can_be_created_runs_without_single_flight(
    db: str, tmp_path: Path
) -> None:
    """Read-only, or not this user's (module docstring): no lock, and no error either."""
    path = startup_lock_path(db)
    tmp_path.chmod(0o555)
    try:
        with permission_bits_apply(), single_flight(db, LockBudget(0.0)) as flight:
            assert flight.fd is None
            assert not os.path.lexists(path)
    finally:
        tmp_path.chmod(0o700)
    assert not os.path.lexists(path)


def test_another_users_read_only_lock_file_is_locked_through_a_read_only_descriptor(
    db: str,
) -> None:
    path = startup_lock_path(db)
    Path(path).write_bytes(b"4242\n")
    os.chmod(path, 0o444)
    with permission_bits_apply(), single_flight(db, LockBudget(1.0)) as flight:
        assert flight.fd is not None
        assert is_locked(path)
        assert not os.get_inheritable(flight.fd)
        assert fcntl.fcntl(flight.fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    assert not is_locked(path)
    assert Path(path).read_bytes() == b"4242\n"  # a file we may only read keeps what it had


def test_a_lock_file_this_user_can_neither_write_nor_read_runs_without_single_flight(
    db: str,
) -> None:
    path = startup_lock_path(db)
    Path(path).write_bytes(b"")
    os.chmod(path, 0o000)
    with permission_bits_apply(), single_flight(db, LockBudget(0.0)) as flight:
        assert flight.fd is None
    assert not is_locked(path)


def test_a_read_only_fifo_at_the_lock_path_is_refused_without_waiting_for_a_writer(
    db: str,
) -> None:
    path = startup_lock_path(db)
    os.mkfifo(path, 0o444)
    with (
        alarm_after(2.0),
        permission_bits_apply(),
        pytest.raises(FatalError) as raised,
        single_flight(db, LockBudget(1.0)),
    ):
        pytest.fail("entered a FIFO")
    assert str(raised.value) == (
        f"the start-up lock {path!r} is not a regular file; remove it and run again"
    )


def test_a_read_only_lock_file_replaced_by_a_symbolic_link_meanwhile_is_refused(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The name changes between the read-write open (refused) and the read-only one: the
    second open does not follow the link either."""
    path = startup_lock_path(db)
    Path(path).write_bytes(b"")
    os.chmod(path, 0o444)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    link = tmp_path / "link"
    os.symlink(target, link)
    real_open = os.open
    swapped: list[str] = []

    def open_then_swap(file: str, flags: int, *args: int, **kwargs: int) -> int:
        try:
            return real_open(file, flags, *args, **kwargs)
        except PermissionError:
            if file == path and not swapped:
                os.replace(link, path)  # someone else, between the two opens
                swapped.append(file)
            raise

    monkeypatch.setattr(os, "open", open_then_swap)
    with (
        permission_bits_apply(),
        pytest.raises(FatalError) as raised,
        single_flight(db, LockBudget(1.0)),
    ):
        pytest.fail("entered through a symbolic link")
    monkeypatch.undo()
    assert swapped == [path]
    assert str(raised.value) == (
        f"the start-up lock {path!r} cannot be opened ({os.strerror(errno.ELOOP)}); remove it, "
        "or fix its directory, and run again"
    )
    assert not is_locked(str(target))
