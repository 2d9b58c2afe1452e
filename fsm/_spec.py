"""A machine as plain data (like h11's ``_state.py``): :class:`MachineSpec` and its
:class:`Edge`\\ s. Machines (:class:`fsm.Lifecycle`, :class:`fsm.DecisionEngine`) are built
from it; ``fsm.draw`` draws it.

An :class:`Edge` is one transition of one machine: ``guard is None`` marks an unguarded edge,
a named guard an edge that fires only when that pure predicate over the evidence holds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Edge:
    """One transition of one machine (see the module docstring)."""

    trigger: str
    source: str
    dest: str
    guard: str | None = None
    # Where the edge comes from: "ADR-0001", "ADR-0380 amendment", "ADR-0068 row 5", ...
    cites: str = ""


@dataclass(frozen=True, slots=True)
class MachineSpec:
    """One machine as data: its states, initial and terminal states, and edges."""

    name: str
    states: tuple[str, ...]
    initial: str
    terminal: frozenset[str]
    edges: tuple[Edge, ...]
