"""The clock port: wall time for `*_ms` fields, a monotonic reading and the one-shot sleep of
the publication grace. Injected everywhere; the fake records every sleep."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """Deterministic time: ``sleep`` advances both readings and is recorded in ``sleeps``."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = float(start_ms)
        self._mono = 0.0
        self.sleeps: list[float] = []

    def now_ms(self) -> int:
        return int(self._ms)

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._ms += seconds * 1000.0
        self._mono += seconds
