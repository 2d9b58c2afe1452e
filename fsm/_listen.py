"""``fsm.listen``: register a listener and rebuild every cached machine so that it reports to
it. A machine of one's own is given its listeners when built (``Lifecycle(..., listeners=...)``,
``DecisionEngine(..., listeners=...)``); a machine built once and cached (QingLong's, in
``fsm.qinglong``) is built by a function decorated with :func:`rebuilt_on_listen`, and
``listen`` rebuilds it. The toolkit knows no family of machines by name.

Pure (no I/O). Nothing on the product's paths calls it; the orderings suite's coverage
recorder does (``fsm.testing``, docs/orderings.md).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, Protocol, TypeVar

from ._observe import LISTENERS, Listener

_T_co = TypeVar("_T_co", covariant=True)


class Cached(Protocol[_T_co]):
    """A cached builder: call it for the machine; ``cache_clear`` forgets the machine."""

    def __call__(self) -> _T_co: ...

    def cache_clear(self) -> None: ...


_T = TypeVar("_T")
# Every builder decorated with rebuilt_on_listen, in the order they were defined.
_CACHED: list[Cached[Any]] = []


def rebuilt_on_listen(build: Callable[[], _T]) -> Cached[_T]:
    """Build once, on first call, and cache; :func:`listen` and its ``stop`` clear the cache so
    that the next call builds again with the listeners registered then (the builders read
    them when they build)."""
    cached: Cached[_T] = cache(build)
    _CACHED.append(cached)
    return cached


def _rebuild() -> None:
    # A memoized answer would skip the machine (and its callbacks): the rebuilt engines start
    # with empty memos.
    for built in _CACHED:
        built.cache_clear()


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
