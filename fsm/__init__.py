"""qlfsm's pure core: explicit finite-state machines and decision tables, validated when built,
with QingLong 3.0's run lifecycles and start-up decisions as their first users.

No I/O, and no import of ``storage`` or ``reconciler``. Evidence comes in as data; a guarded
edge is planned here and becomes real only when the caller's storage transaction commits.

The toolkit: :class:`Lifecycle` (a machine from a :class:`MachineSpec`, its own guards and
optional extra rules), :class:`DecisionEngine` (a :class:`DecisionTable` decided "first
matching row wins", step by step through a :class:`DecisionCore`), ``fsm.draw`` (DOT and
Mermaid text, and the check of a drawing against a record written apart) and ``fsm.testing``
(exploration with coverage; needs the ``testing`` extra). QingLong's machines are built with
the same constructors (``_qinglong.py``): its tables in ``_tables.py``, ``_primary_table.py``
and ``_legacy.py``, its guards in ``_guards.py``, its rules in ``_rules.py``.
"""

from __future__ import annotations

from ._decision import (
    DECIDE,
    FAIL,
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
from ._guards import (
    GUARDS,
    LEGACY_GUARD_ROWS,
    PRIMARY_GUARDS,
    PrimaryFacts,
)
from ._legacy import (
    LEGACY_DECISION_SPEC,
    LEGACY_EVIDENCE,
    LEGACY_OUTCOMES,
    LEGACY_ROWS,
    LEGACY_SPEC,
    LEGACY_TABLE,
    LEGACY_TRIGGERS,
    LEGACY_WRITES,
    LegacyCore,
    LegacyDecision,
    LegacyEngine,
    LegacyViews,
    classify_legacy,
    decide_legacy,
    legacy_engine,
    legacy_views,
)
from ._legacy_facts import (
    LEGACY_EVIDENCE_FIELDS,
    LEGACY_ROW_FACTS,
    LegacyFacts,
)
from ._listen import (
    listen,
)
from ._machine import (
    Guard,
    Lifecycle,
    Rule,
    Step,
    reachable,
    transitions_config,
    validate_spec,
)
from ._observe import (
    Listener,
)
from ._primary import (
    PRIMARY_DECISION_SPEC,
    PrimaryCore,
    PrimaryDecision,
    decide_primary,
    observed_facts,
    primary_engine,
    receipt_terminal,
)
from ._primary_table import (
    PRIMARY_DECISIONS,
    PRIMARY_EVIDENCE,
    PRIMARY_EVIDENCE_FIELDS,
    PRIMARY_PASS_ROWS,
    PRIMARY_TABLE,
)
from ._qinglong import (
    ALL_SPECS,
    attempt_machine,
    legacy_machine,
    run_machine,
    validate_all,
)
from ._rules import (
    QINGLONG_RULES,
    one_unguarded_edge_per_pair,
    require_twin_edges,
)
from ._selection import (
    InstanceEvidence,
    select_evidence,
)
from ._tables import (
    ATTEMPT_ACTIVE,
    ATTEMPT_SPEC,
    ATTEMPT_STATES,
    ATTEMPT_TERMINAL,
    LEGACY_EDGE_TRIGGERS,
    RECEIPT_TRIGGERS,
    RUN_SPEC,
    RUN_STATES,
    RUN_TERMINAL,
    Edge,
    MachineSpec,
)

__all__ = [
    "ALL_SPECS",
    "ATTEMPT_ACTIVE",
    "ATTEMPT_SPEC",
    "ATTEMPT_STATES",
    "ATTEMPT_TERMINAL",
    "DECIDE",
    "FAIL",
    "GUARDS",
    "LEGACY_DECISION_SPEC",
    "LEGACY_EDGE_TRIGGERS",
    "LEGACY_EVIDENCE",
    "LEGACY_EVIDENCE_FIELDS",
    "LEGACY_GUARD_ROWS",
    "LEGACY_OUTCOMES",
    "LEGACY_ROWS",
    "LEGACY_ROW_FACTS",
    "LEGACY_SPEC",
    "LEGACY_TABLE",
    "LEGACY_TRIGGERS",
    "LEGACY_WRITES",
    "PRIMARY_DECISIONS",
    "PRIMARY_DECISION_SPEC",
    "PRIMARY_EVIDENCE",
    "PRIMARY_EVIDENCE_FIELDS",
    "PRIMARY_GUARDS",
    "PRIMARY_PASS_ROWS",
    "PRIMARY_TABLE",
    "QINGLONG_RULES",
    "RECEIPT_TRIGGERS",
    "RUN_SPEC",
    "RUN_STATES",
    "RUN_TERMINAL",
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
    "InstanceEvidence",
    "LegacyCore",
    "LegacyDecision",
    "LegacyEngine",
    "LegacyFacts",
    "LegacyViews",
    "Lifecycle",
    "Listener",
    "MachineDefinitionError",
    "MachineSpec",
    "Need",
    "PrimaryCore",
    "PrimaryDecision",
    "PrimaryFacts",
    "Rule",
    "Step",
    "Taken",
    "Walk",
    "attempt_machine",
    "classify_legacy",
    "decide_legacy",
    "decide_primary",
    "drawn_spec",
    "legacy_engine",
    "legacy_machine",
    "legacy_views",
    "listen",
    "observed_facts",
    "one_unguarded_edge_per_pair",
    "primary_engine",
    "reachable",
    "receipt_terminal",
    "require_twin_edges",
    "run_machine",
    "select_evidence",
    "transitions_config",
    "validate_all",
    "validate_spec",
    "validate_table",
]
