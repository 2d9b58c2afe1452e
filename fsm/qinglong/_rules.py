"""QingLong's own rules for its Run and Attempt lifecycles, beyond the general checks.

A family of machines may hold itself to more than every machine must: QingLong's builders pass
:data:`QINGLONG_RULES` to :class:`fsm.Lifecycle`; a machine of another lifecycle passes its own
rules, or none. Each rule yields the problems it finds, as text naming the edge.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from fsm import MachineSpec, Rule, show_edge


def one_unguarded_edge_per_pair(spec: MachineSpec) -> Iterator[str]:
    """ADR-0001's table has one trigger into each state: one unguarded edge per pair."""
    unguarded = Counter((e.source, e.dest) for e in spec.edges if e.guard is None)
    twice = sorted(pair for pair, n in unguarded.items() if n > 1)
    if twice:
        yield f"duplicate unguarded edges {twice}"


def require_twin_edges(spec: MachineSpec) -> Iterator[str]:
    """A reconciler's guarded edge is a decision ALONG the lifecycle, never a new lifecycle
    edge: its pair must also be an unguarded edge (ADR-0068 §2; fsm/_tables.py)."""
    lifecycle = {(e.source, e.dest) for e in spec.edges if e.guard is None}
    if not lifecycle:
        return  # a machine of guarded edges only (legacy_shadow, the drawn decisions)
    for e in spec.edges:
        if e.guard is not None and (e.source, e.dest) not in lifecycle:
            yield f"guarded edge {show_edge(e)} is not a legal lifecycle pair"


QINGLONG_RULES: tuple[Rule, ...] = (one_unguarded_edge_per_pair, require_twin_edges)
