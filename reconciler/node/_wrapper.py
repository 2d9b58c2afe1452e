"""The receipt-publishing wrapper: `python -m reconciler.node._wrapper COMMAND [ARG...]`.

It does what the real QingLong 3.0 launcher script (`ql3-launcher.sh`, argv mode) does, spec 03
"Launcher": read the QL3_RECEIPT_* variables, hide them (and QL3_LAUNCH_*) from the command, run
it in the wrapper's own process group, forward TERM/INT/HUP to it, stay alive until it is gone,
then publish the receipt once and exit with the command's status. A signal death is reported
as 128 + signal number, as a POSIX shell's `wait` does. A publish failure never changes the exit
status; it is reported as one line on stderr. Bad or missing variables: exit 125, nothing run.

The import stays light (stdlib + the receipt codec and store): it runs once per task.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType

from reconciler.node._attempt_lock import lock_name, unlink_own_lock
from reconciler.node._receipt import InvalidReceipt, Receipt, encode_receipt, without_launch_env
from reconciler.node._receipt_store import ReceiptExists, publish_bytes_at

USAGE_EXIT = 125  # the real launcher's code for a malformed launch: the command never ran
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LOCK_FD_VARIABLE = "QL3_LAUNCH_LOCK_FD"


class _Settings:
    def __init__(self, env: Mapping[str, str]) -> None:
        def required(name: str) -> str:
            value = env.get(name, "")
            if not value:
                raise ValueError(f"{name} is missing")
            return value

        def digits(name: str) -> int:
            value = required(name)
            if not value.isascii() or not value.isdigit():
                raise ValueError(f"{name} must be a decimal integer")
            return int(value)

        self.run_id = required("QL3_RECEIPT_RUN_ID")
        self.attempt_id = required("QL3_RECEIPT_ATTEMPT_ID")
        self.sequence = digits("QL3_RECEIPT_CALLBACK_SEQUENCE")
        self.token = required("QL3_RECEIPT_CALLBACK_TOKEN")
        self.started = digits("QL3_RECEIPT_STARTED_AT_MS")
        self.target = required("QL3_RECEIPT_TARGET")
        self.temporary = required("QL3_RECEIPT_TEMPORARY")
        self.lock_fd = _held_lock(env.get(LOCK_FD_VARIABLE))


def _held_lock(value: str | None) -> int | None:
    """The Attempt lock's descriptor the launcher passed, checked to be a lock this process
    holds exclusively (taking LOCK_EX again on the same open file description is immediate),
    and made close-on-exec so the command never inherits it (D-17)."""
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or int(value) < 3:
        raise ValueError(f"{LOCK_FD_VARIABLE} must be a descriptor number >= 3")
    fd = int(value)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.set_inheritable(fd, False)
    except OSError as error:
        raise ValueError(
            f"{LOCK_FD_VARIABLE}={fd} is not the attempt lock ({error.strerror})"
        ) from None
    return fd


def _run(command: Sequence[str], env: dict[str, str]) -> int:
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)  # arrived before the spawn returned: forward right after
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    for forwarded in FORWARDED:
        signal.signal(forwarded, forward)
    try:
        # close_fds: the Attempt lock stays the wrapper's alone (D-17).
        child = subprocess.Popen(list(command), env=env, close_fds=True)
    except OSError as error:
        print(f"qlfsm wrapper: cannot run {command[0]!r}: {error.strerror}", file=sys.stderr)
        # What a shell reports: 127 for a command it cannot find, 126 for one it cannot run.
        return 127 if isinstance(error, FileNotFoundError) else 126
    for early in pending:
        forward(early, None)
    # Popen.wait retries after a forwarded signal interrupts it, so the wrapper (the group
    # leader the handle names) lives exactly as long as the command.
    code = child.wait()
    # A POSIX shell's view of the command's end: its code, or 128 + the killing signal.
    return 128 - code if code < 0 else code & 0xFF


def _publish(settings: _Settings, status: int) -> str | None:
    finished = max(time.time_ns() // 1_000_000, settings.started)
    receipt = Receipt(
        schema_version=1,
        run_id=settings.run_id,
        attempt_id=settings.attempt_id,
        callback_sequence=settings.sequence,
        token=settings.token,
        started_at_ms=settings.started,
        finished_at_ms=finished,
        exit_code=status,
    )
    try:
        publish_bytes_at(settings.target, settings.temporary, encode_receipt(receipt))
    except ReceiptExists:
        return "a receipt already exists; it was kept"
    except InvalidReceipt as error:
        return f"receipt fields are invalid ({error.reason})"
    except (OSError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    try:
        settings = _Settings(os.environ)
    except ValueError as error:
        print(f"qlfsm wrapper: {error}; nothing was run", file=sys.stderr)
        return USAGE_EXIT
    if not args:
        print("qlfsm wrapper: no command given; nothing was run", file=sys.stderr)
        return USAGE_EXIT
    status = _run(args, without_launch_env(os.environ))
    problem = _publish(settings, status)
    if problem is not None:
        # One line, no token: the exit status below is the command's regardless.
        print(f"qlfsm wrapper: receipt not published: {problem}", file=sys.stderr)
    if settings.lock_fd is not None:
        # The lock file's name goes (the lock goes with the process), only after the receipt's
        # publication: a pass that then finds no lock reads the receipt first (ADR-0068 §2 order).
        path = os.path.join(os.path.dirname(settings.target), lock_name(settings.attempt_id))
        unlink_own_lock(settings.lock_fd, path)
    return status


if __name__ == "__main__":
    sys.exit(main())
