"""qlfsm's toolkit: explicit finite-state machines and decision tables, validated when built.
Pure: no I/O, and no import of ``fsm.qinglong``, ``storage`` or ``reconciler``. Evidence comes
in as data; a guarded edge is planned here and becomes real only when the caller's storage
transaction commits.

What is where: :class:`MachineSpec` and :class:`Edge` (a machine as data, ``_spec.py``);
:class:`Lifecycle` (a machine from a spec, its own guards and optional extra rules,
``_machine.py``); :class:`DecisionEngine` (a :class:`DecisionTable` decided "first matching row
wins", step by step through a :class:`DecisionCore`, ``_decision.py``); :func:`listen` and
:func:`rebuilt_on_listen` (observers, ``_observe.py``); ``fsm.draw`` (DOT and Mermaid text, and
the check of a drawing against a record written apart) and ``fsm.testing`` (exploration with
coverage; needs the ``testing`` extra).

QingLong 3.0's run lifecycles, guards, rules and start-up decision tables are the toolkit's
first user and live apart, in ``fsm.qinglong``, built through these public names only.
"""

from __future__ import annotations

from ._decision import (
    Case,
    DecisionCore,
    DecisionEngine,
    DecisionRow,
    DecisionTable,
    Need,
    Taken,
    Walk,
    drawn_spec,
    validate_table,
)
from ._errors import (
    EvidenceError,
    FsmError,
    GuardRefused,
    IllegalTransition,
    MachineDefinitionError,
)
from ._machine import (
    Guard,
    Lifecycle,
    Rule,
    Step,
    reachable,
    show_edge,
    transitions_config,
    validate_spec,
)
from ._observe import (
    Listener,
    listen,
    rebuilt_on_listen,
)
from ._spec import (
    Edge,
    MachineSpec,
)

__all__ = [
    "Case",
    "DecisionCore",
    "DecisionEngine",
    "DecisionRow",
    "DecisionTable",
    "Edge",
    "EvidenceError",
    "FsmError",
    "Guard",
    "GuardRefused",
    "IllegalTransition",
    "Lifecycle",
    "Listener",
    "MachineDefinitionError",
    "MachineSpec",
    "Need",
    "Rule",
    "Step",
    "Taken",
    "Walk",
    "drawn_spec",
    "listen",
    "reachable",
    "rebuilt_on_listen",
    "show_edge",
    "transitions_config",
    "validate_spec",
    "validate_table",
]
