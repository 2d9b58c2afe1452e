"""QingLong's machines, built through the toolkit's public constructors like any user's.

The Run and Attempt lifecycles and the legacy_shadow lifecycle are :class:`fsm.Lifecycle`\\ s
given QingLong's guards (:data:`fsm.qinglong.GUARDS`, read-only) and QingLong's rules
(:data:`fsm.qinglong.QINGLONG_RULES`, below); the decision machines are built in
``_primary.py`` and ``_legacy.py`` from their tables with :class:`fsm.DecisionEngine`. Each is
built once, on first use, and cached here (``fsm.listen`` rebuilds them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from fsm import Lifecycle, MachineSpec, Rule, rebuilt_on_listen, show_edge, validate_spec

from ._guards import GUARDS
from ._legacy import LEGACY_DECISION_SPEC, LEGACY_SPEC
from ._primary import PRIMARY_DECISION_SPEC
from ._tables import ATTEMPT_SPEC, RUN_SPEC

# QingLong's own rules for its Run and Attempt lifecycles, beyond the general checks. A family
# of machines may hold itself to more than every machine must: QingLong's builders pass
# QINGLONG_RULES to fsm.Lifecycle; a machine of another lifecycle passes its own rules, or
# none. Each rule yields the problems it finds, as text naming the edge.


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


# Every machine that is drawn and checked (spec 07): the two lifecycles, the legacy-shadow
# per-candidate lifecycle, and the two decision machines.
ALL_SPECS: tuple[MachineSpec, ...] = (
    RUN_SPEC,
    ATTEMPT_SPEC,
    LEGACY_SPEC,
    PRIMARY_DECISION_SPEC,
    LEGACY_DECISION_SPEC,
)


# Each built once, on first use, and cached (``fsm.listen`` rebuilds it).
run_machine = rebuilt_on_listen(lambda: Lifecycle(RUN_SPEC, GUARDS, rules=QINGLONG_RULES))
attempt_machine = rebuilt_on_listen(lambda: Lifecycle(ATTEMPT_SPEC, GUARDS, rules=QINGLONG_RULES))
legacy_machine = rebuilt_on_listen(lambda: Lifecycle(LEGACY_SPEC, GUARDS, rules=QINGLONG_RULES))


def validate_all() -> None:
    """Every QingLong machine as drawn, with QingLong's guards and rules."""
    for spec in ALL_SPECS:
        validate_spec(spec, GUARDS, QINGLONG_RULES)
