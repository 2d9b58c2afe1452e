"""The clock port: wall time for `*_ms` fields, a monotonic reading and the one-shot sleep of
the publication grace. Injected everywhere; the fake records every sleep."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


def witness_ms(clock: object) -> int | None:
    """A second reading of the wall time from another source than ``clock.now_ms()``, when the
    clock offers one (``SystemClock``: the kernel's; ``FakeClock``: what a test sets), else
    None. D-16: a purge time is judged by both."""
    read = getattr(clock, "witness_ms", None)
    value = read() if callable(read) else None
    return value if type(value) is int else None


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def witness_ms(self) -> int | None:
        """The wall time as the kernel keeps it, read from ``/proc/stat`` (btime) and
        ``/proc/uptime`` without any libc time call: a clock that a process-local override
        (`faketime`, an LD_PRELOAD) cannot move. Whole seconds of btime make it up to a second
        early. None off Linux or when either file cannot be read (D-16)."""
        try:
            with open("/proc/stat", "rb") as f:
                btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
            with open("/proc/uptime", "rb") as f:
                uptime = float(f.read().split()[0])
        except (OSError, ValueError, IndexError, StopIteration):
            return None
        return int((btime + uptime) * 1000)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """Deterministic time: ``sleep`` advances both readings and is recorded in ``sleeps``."""

    def __init__(self, start_ms: int = 1_700_000_000_000, *, witness_ms: int | None = None) -> None:
        self._ms = float(start_ms)
        self._mono = 0.0
        self.sleeps: list[float] = []
        # The second wall clock (see :func:`witness_ms`): None, unless a test sets one.
        self.witness: int | None = witness_ms

    def now_ms(self) -> int:
        return int(self._ms)

    def witness_ms(self) -> int | None:
        return self.witness

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._ms += seconds * 1000.0
        self._mono += seconds
