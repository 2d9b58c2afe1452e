"""Who listens while the machines decide: a registry the machine builders consult.

Pure: a list, a protocol, the reporting callbacks and the bounded memo, no I/O. Empty on
every product path, and then nothing changes: the builders (``Lifecycle``,
``DecisionEngine``) add their reporting callbacks to the `transitions` machine only when a
listener is registered at BUILD time, so a machine built with nobody listening is exactly the
machine it always was. ``fsm.listen`` registers one and
rebuilds the cached machines; while anyone listens the memos of plans and decisions are not
filled (a memo hit would decide without the machine, so without its callbacks).

``fsm.listen`` registers a listener and rebuilds every cached machine so that it reports to
it. A machine of one's own is given its listeners when built (``Lifecycle(..., listeners=...)``,
``DecisionEngine(..., listeners=...)``); a machine built once and cached (QingLong's, in
``fsm.qinglong``) is built by a function decorated with :func:`rebuilt_on_listen`, and
``listen`` rebuilds it. The toolkit knows no family of machines by name. Nothing on the
product's paths calls it; the orderings suite's coverage recorder does (``fsm.testing``,
docs/orderings.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Protocol, TypeVar


class Listener(Protocol):
    """What the machines report, through `transitions`' own callbacks."""

    def edge(self, machine: str, source: str, trigger: str, dest: str, guard: str | None) -> None:
        """A lifecycle machine took ``source --trigger [guard]--> dest`` (its ``after``)."""

    def case(self, machine: str, row: str, state: str, then: str, guard: str) -> None:
        """A decision machine took ``row``'s case ``state [guard] -> then`` (its ``after``)."""

    def guard(self, machine: str, name: str, held: bool) -> None:
        """``machine`` evaluated its condition ``name`` (the named guard): ``held`` or not."""


# Read by the builders at build time and by the reporting callbacks when they run.
LISTENERS: list[Listener] = []


_C = TypeVar("_C", bound=Callable[..., Any])


def named(name: str, fn: _C) -> _C:
    """``fn``, named ``name``: `transitions` labels a condition by its callable's name."""
    fn.__name__ = name
    fn.__qualname__ = name
    return fn


def reporting(
    machine: str, name: str, condition: Callable[[Any], bool], own: Sequence[Listener]
) -> Callable[[Any], bool]:
    """``condition`` (the guard ``name``) that also tells ``own`` and every registered
    listener whether it held, as tried."""

    def report(event: Any) -> bool:
        held = condition(event)
        for listener in (*own, *LISTENERS):
            listener.guard(machine, name, held)
        return held

    return named(name, report)


def told(own: Sequence[Listener], tell: Callable[[Listener], None]) -> Callable[[Any], None]:
    """An ``after`` callback that tells ``own`` and every registered listener what was taken."""

    def after(event: Any) -> None:
        for listener in (*own, *LISTENERS):
            tell(listener)

    return after


_K = TypeVar("_K")
_V = TypeVar("_V")


def remembered(
    memo: dict[_K, _V], key: _K, bound: int, reports: bool, compute: Callable[[], _V]
) -> _V:
    """``memo[key]``, else ``compute()``, kept while ``memo`` holds fewer than ``bound``
    answers and nobody listens (a kept answer would decide without the machine's callbacks).
    An unhashable key is computed every time."""
    try:
        found = memo.get(key)
    except TypeError:
        return compute()
    if found is None:
        found = compute()
        if len(memo) < bound and not reports:
            memo[key] = found
    return found


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
