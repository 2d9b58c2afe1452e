"""What keeps every `qlfsm` command whole against its process environment (spec 06 "Exit
codes"): SIGINT/SIGTERM (and SIGHUP) at any moment after the entry point starts, and a stdout
or stderr that cannot be written (a closed pipe, a full disk, a closed descriptor).

- A signal raises once (``KeyboardInterrupt`` for SIGINT, :class:`Terminated` for SIGTERM and
  SIGHUP)
  wherever the command is, its module import included; every database change is one
  transaction that rolls back on any exception (``storage.transaction``), so unwinding leaves
  nothing half-written. Later signals are blocked: they cannot cut the unwinding short. One
  that lands where Python cannot raise (a finalizer, a weakref callback) is delivered again.
- A stream that fails is never written again: its descriptor is pointed at /dev/null so that
  the interpreter's own flush at exit cannot fail a second time (that failure is the
  undocumented exit status 120 of CPython).
- :func:`finish` flushes stdout itself, inside the handler, and decides the exit code.

The entry point installs this before it imports any command module. Before that, while the
program imports the ``reconciler`` package, ``reconciler._interrupt`` remembers a signal and
:func:`start` raises it; only the interpreter's own start and the console script's first
imports come before even that.
"""

from __future__ import annotations

import _thread
import contextlib
import io
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

from reconciler._escape import one_line
from reconciler._interrupt import EARLY, ORIGINAL, WATCHED

EXIT_OUTPUT = 4
# 128 + n, as a shell says. SIGHUP: the terminal or the session that started qlfsm went away
# (an ssh connection dropped mid-`startup`); it ends the command like SIGTERM.
EXIT_SIGNAL: dict[int, int] = {signal.SIGHUP: 129, signal.SIGINT: 130, signal.SIGTERM: 143}


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised like ``KeyboardInterrupt`` (not an ``Exception``, so no
    fail-open or per-candidate ``except Exception`` swallows it: the command stops)."""


class _Guarded(io.TextIOBase):
    """sys.stdout / sys.stderr: the first write or flush error is remembered, the descriptor is
    pointed at /dev/null, and every later write is dropped (the output is already incomplete,
    and the exit code says so)."""

    def __init__(self, real: TextIO | None, name: str) -> None:
        super().__init__()
        self.real = real
        self.label = name
        self.error: BaseException | None = None
        if real is None:  # the descriptor was closed when the interpreter started
            self.error = OSError(f"{name} is closed")

    def write(self, text: str) -> int:
        self._attempt(lambda real: real.write(text))
        return len(text)

    def flush(self) -> None:
        self._attempt(lambda real: real.flush())

    def isatty(self) -> bool:
        return self.error is None and self.real is not None and self.real.isatty()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self.real is None:
            raise io.UnsupportedOperation(f"{self.label} is closed")
        return self.real.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.real, "encoding", None) or "utf-8"

    def _attempt(self, act: Callable[[TextIO], object]) -> None:
        if self.error is not None or self.real is None:
            return
        try:
            act(self.real)
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            self.error = exc
            # The text and buffer layers still hold the bytes that failed; the interpreter
            # flushes them again at exit. Give them a descriptor that accepts everything.
            with contextlib.suppress(OSError, ValueError):
                _to_devnull(self.real.fileno())


def _to_devnull(fd: int, flags: int = os.O_WRONLY | os.O_CLOEXEC) -> None:
    try:
        null = os.open(os.devnull, flags)
    except OSError:
        return
    if null != fd:
        try:
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
        finally:
            os.close(null)


@dataclass
class _State:
    in_process: bool = True
    signum: int | None = None
    # What to do after an interrupt, when "run the command again" is not true (the demo's
    # directory is then not empty, D-23); and whether a reader that went away (EPIPE) is
    # an ordinary ending for the running command (`qlfsm demo | head`).
    advice: str | None = None
    quiet_pipe: bool = False
    handlers: dict[int, Any] = field(default_factory=dict)
    streams: tuple[Any, Any] = (None, None)
    mask: set[int] | None = None
    unraisablehook: Any = None
    settled: bool = False
    live: bool = False


_STATE = _State()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # One signal is enough: later ones stay pending (and are dropped at exit) so that they
    # cannot interrupt the rollback, the one stderr line or the final flush.
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    st = _STATE
    if st.settled or st.live:
        return  # the command is over (too late to stop it), or already unwinding
    st.live = True
    st.signum = signum
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def _on_unraisable(unraisable: Any) -> None:
    """A signal's exception raised where Python cannot raise (inside a weakref callback or a
    ``__del__``, e.g. an import lock's) is printed as "Exception ignored" and dropped: the
    command would go on, deaf to further signals. Deliver the signal again instead, from a
    helper thread (from here its handler would run inside this hook, where it is dropped
    again); the handler then raises at the next ordinary point of the command."""
    st = _STATE
    if is_interrupt(unraisable.exc_value) and st.signum is not None and not st.settled:
        st.live = False
        _thread.start_new_thread(_redeliver, (st.signum,))
        return
    (st.unraisablehook or sys.__unraisablehook__)(unraisable)


def _redeliver(signum: int) -> None:
    # This thread alone has the signal unblocked, so the kernel hands it to this thread; its
    # C-level handler flags it for the main thread, where the Python handler runs.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    os.kill(os.getpid(), signum)


def start(*, in_process: bool) -> None:
    """Install the guards. ``in_process``: called as a function (tests, the Python API), so
    :func:`finish` restores the caller's handlers, signal mask and streams and returns the code
    instead of ending the process by the signal."""
    global _STATE
    # A fresh state: what an earlier command run in this process advised or asked for is not
    # this one's.
    _STATE = st = _State(
        in_process=in_process,
        streams=(sys.stdout, sys.stderr),
        mask=signal.pthread_sigmask(signal.SIG_BLOCK, []),
        unraisablehook=sys.unraisablehook,
    )
    # A descriptor 0/1/2 closed by the caller would be handed to the next file opened (the
    # database, say), and whatever wrote to "stdout" would then write into it.
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            # stdin without O_CLOEXEC: a command qlfsm starts inherits it.
            _to_devnull(fd, (os.O_WRONLY | os.O_CLOEXEC) if fd else os.O_RDONLY)
    sys.stdout = _Guarded(sys.stdout, "stdout")
    sys.stderr = _Guarded(sys.stderr, "stderr")
    sys.unraisablehook = _on_unraisable
    for signum in WATCHED:
        # In the program, reconciler._interrupt stood in since the package's import began.
        previous = ORIGINAL.pop(signum) if signum in ORIGINAL else signal.getsignal(signum)
        if previous == signal.SIG_IGN:
            continue  # the caller asked us to ignore it (nohup, a background job): keep that
        st.handlers[signum] = previous
        signal.signal(signum, _on_signal)
    if EARLY:
        # A signal while the program was still importing ends the command here, inside
        # main(), as one that comes later would.
        st.signum = EARLY[0]
        EARLY.clear()
        st.live = True
        raise KeyboardInterrupt if st.signum == signal.SIGINT else Terminated


def settle() -> None:
    """The command is over (returned or raised): from here on a signal waits."""
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    _STATE.settled = True


def interrupted(exc: BaseException, *, fail_open: bool = False) -> int:
    """The one stderr line for a signal, and its exit code: 129 SIGHUP, 130 SIGINT, 143
    SIGTERM, or 0 for `shadow`, which fails open (spec 06)."""
    if isinstance(exc, Terminated):
        # SIGTERM or SIGHUP: the handler recorded which one.
        signum = _STATE.signum if _STATE.signum == signal.SIGHUP else signal.SIGTERM
    else:
        signum = signal.SIGINT
    _STATE.signum = signum
    name = signal.Signals(signum).name  # SIGHUP, SIGINT or SIGTERM
    if fail_open:
        say(
            f"qlfsm: shadow interrupted ({name}): the pass stopped, each change whole or not at "
            "all; start-up continues (fail-open)"
        )
        return 0
    advice = _STATE.advice or "run the command again to finish"
    say(
        f"qlfsm: interrupted ({name}): stopped; each database change commits whole or not at "
        f"all, so nothing is half-written - {advice}"
    )
    return EXIT_SIGNAL[signum]


def advise_after_interrupt(advice: str) -> None:
    """The next step an interrupt line gives instead of "run the command again"."""
    _STATE.advice = advice


def quiet_on_closed_pipe() -> None:
    """A closed pipe on stdout ends the running command quietly with its own code."""
    _STATE.quiet_pipe = True


def say(line: str) -> None:
    """One line on stderr (``one_line``, D-14: it may repeat an argument or a path), if stderr
    can take it."""
    sys.stderr.write(one_line(line) + "\n")
    sys.stderr.flush()


def is_interrupt(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt | Terminated)


def interrupt_in(exc: BaseException) -> BaseException | None:
    """The interrupt behind ``exc``, if any. Python re-raises an exception raised inside some
    of its own machinery as another one caused by it (3.11: a signal landing while a class
    body's descriptors get ``__set_name__`` - a dataclass being imported - surfaces as
    RuntimeError), and an error raised while unwinding from a signal has it as context: both
    are the signal's ending, not an unexpected error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if is_interrupt(current):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def finish(code: int, *, fail_open: bool = False) -> int:
    """Flush stdout here, under the guard; report a lost output in one line; return the exit
    code (or, when a signal ended a command run as the process, end by that signal)."""
    settle()
    sys.stdout.flush()
    error = sys.stdout.error if isinstance(sys.stdout, _Guarded) else None
    if isinstance(error, BrokenPipeError) and _STATE.quiet_pipe:
        error = None  # the reader took what it wanted (`| head`): not a failure (D-23)
    if error is not None:
        reason = " ".join(str(error).split()) or type(error).__name__
        if fail_open:
            say(
                f"qlfsm: warning: the audit record could not be written to stdout ({reason}); "
                "shadow fails open: exit 0"
            )
        else:
            say(
                f"qlfsm: error: the output could not be written to stdout ({reason}); the "
                "command itself finished - run it again with a writable stdout to see it"
            )
            if code == 0:
                code = EXIT_OUTPUT
    sys.stderr.flush()
    st = _STATE
    if st.in_process:
        if isinstance(sys.stdout, _Guarded) or isinstance(sys.stderr, _Guarded):
            sys.stdout, sys.stderr = st.streams
        for watched, handler in st.handlers.items():
            signal.signal(watched, signal.SIG_DFL if handler is None else handler)
        st.handlers = {}
        if st.unraisablehook is not None:
            sys.unraisablehook = st.unraisablehook
        if st.mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, st.mask)
        return code
    signum = st.signum
    if signum is None:
        return code
    if code == EXIT_SIGNAL.get(signum):
        # End by the signal itself, as Python does for an unhandled KeyboardInterrupt: a shell
        # running qlfsm from a script then stops the script too (it sees 128 + n either way).
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
    # A handled signal with another code (`shadow`'s 0). Not through the interpreter's exit:
    # when a KeyboardInterrupt ends an exec() of source text (dataclasses and namedtuple build
    # methods that way, so any import can), CPython sets a process-wide "unhandled
    # KeyboardInterrupt" flag that no `except` clears, and its exit then turns our code into
    # 130. Both streams are flushed above and every connection is closed by now.
    os._exit(code)
