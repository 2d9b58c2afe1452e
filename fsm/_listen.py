"""``fsm.listen``: register a listener with QingLong's cached machines and rebuild them so that
they report to it. A machine of one's own is given its listeners when built
(``Lifecycle(..., listeners=...)``, ``DecisionEngine(..., listeners=...)``).

Pure (no I/O). Nothing on the product's paths calls it; the orderings suite's coverage
recorder does (``fsm.testing``, docs/orderings.md).
"""

from __future__ import annotations

from collections.abc import Callable

from . import _legacy, _primary, _qinglong
from ._observe import LISTENERS, Listener


def _rebuild() -> None:
    # The machines are built once and cached; the builders read LISTENERS when they build.
    for built in (
        _qinglong.run_machine,
        _qinglong.attempt_machine,
        _qinglong.legacy_machine,
        _primary.primary_engine,
        _legacy.legacy_engine,
    ):
        built.cache_clear()
    # A memoized answer would skip the machine (and its callbacks): the rebuilt engines start
    # with empty memos.


def listen(listener: Listener) -> Callable[[], None]:
    """Have every machine built from now on report to ``listener``; returns ``stop``, which
    unregisters it and rebuilds the machines without it."""
    LISTENERS.append(listener)
    _rebuild()

    def stop() -> None:
        if listener in LISTENERS:
            LISTENERS.remove(listener)
        _rebuild()

    return stop
