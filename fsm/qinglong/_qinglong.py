"""QingLong's machines, built through the toolkit's public constructors like any user's.

The Run and Attempt lifecycles and the legacy_shadow lifecycle are :class:`fsm.Lifecycle`\\ s
given QingLong's guards (:data:`fsm.qinglong.GUARDS`, read-only) and QingLong's rules
(:data:`fsm.qinglong.QINGLONG_RULES`); the decision machines are built in ``_primary.py`` and
``_legacy.py`` from their tables with :class:`fsm.DecisionEngine`. Each is built once, on first
use, and cached here (``fsm.listen`` rebuilds them).
"""

from __future__ import annotations

from fsm import Lifecycle, MachineSpec, rebuilt_on_listen, validate_spec

from ._guards import GUARDS
from ._legacy import LEGACY_DECISION_SPEC, LEGACY_SPEC
from ._primary import PRIMARY_DECISION_SPEC
from ._rules import QINGLONG_RULES
from ._tables import ATTEMPT_SPEC, RUN_SPEC

# Every machine that is drawn and checked (spec 07): the two lifecycles, the legacy-shadow
# per-candidate lifecycle, and the two decision machines.
ALL_SPECS: tuple[MachineSpec, ...] = (
    RUN_SPEC,
    ATTEMPT_SPEC,
    LEGACY_SPEC,
    PRIMARY_DECISION_SPEC,
    LEGACY_DECISION_SPEC,
)


@rebuilt_on_listen
def run_machine() -> Lifecycle:
    return Lifecycle(RUN_SPEC, GUARDS, rules=QINGLONG_RULES)


@rebuilt_on_listen
def attempt_machine() -> Lifecycle:
    return Lifecycle(ATTEMPT_SPEC, GUARDS, rules=QINGLONG_RULES)


@rebuilt_on_listen
def legacy_machine() -> Lifecycle:
    return Lifecycle(LEGACY_SPEC, GUARDS, rules=QINGLONG_RULES)


def validate_all() -> None:
    """Every QingLong machine as drawn, with QingLong's guards and rules."""
    for spec in ALL_SPECS:
        validate_spec(spec, GUARDS, QINGLONG_RULES)
