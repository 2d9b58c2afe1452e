"""The cyclic garbage collector while a console-script pass loads its modules.

Loading the ADR-0068 pass (``transitions``, ``fsm``, ``storage``, the pass) allocates tens of
thousands of objects that live as long as the process: the collector, run every few hundred
allocations, walks them again and again and finds nothing to free, and it keeps walking them
in every full collection during the pass. In the 256-candidate pass of
``benchmarks/bench_primary.py`` that was 28 M instructions (697 M with it, 669 M without: 4 %)
of work that frees nothing.

So a process qlfsm owns (the console script's `qlfsm reconcile` and `qlfsm startup`, never a
caller's interpreter: ``main(argv)`` run in-process does not call :func:`hold`) switches the
collector off for the imports and, once a pass's modules are loaded (the shadow pass's or the
primary pass's, whichever comes first), moves everything made so far out of its reach
(``gc.freeze``) and switches it on again for the candidates: every pass runs with the
collector on, so a long pass cannot pile up cycles. `qlfsm startup` on the same database:
810 M instructions before, 778 M after. In any other process :func:`release` does nothing.
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """The collector off until :func:`release` (the console script's own process only)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release() -> None:
    """The pass's modules are loaded: freeze what exists, the collector on again. Nothing
    unless :func:`hold` switched it off."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
