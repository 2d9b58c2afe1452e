"""qlfsm's pure core: the QingLong 3.0 run lifecycles as `transitions` machines.

No I/O, and no import of ``storage`` or ``reconciler``. Evidence comes in as data; a guarded
edge is planned here and becomes real only when the caller's storage transaction commits.

The reconcilers' decision tables live here once, as data: ADR-0068's in ``_primary_table.py``
(decided by :class:`PrimaryCore` / :func:`decide_primary`), ADR-0448's in ``_legacy.py``
(decided step by step by a :class:`LegacyCore`, or at once by :func:`classify_legacy`);
``_decision.py`` builds the `transitions` machine that decides from either, and
:class:`DecisionCore`, the immutable walk of one candidate through it.
"""

from ._decision import Case, DecisionCore, DecisionRow, DecisionTable, Need
from ._errors import (
    EvidenceError,
    FsmError,
    GuardRefused,
    IllegalTransition,
    MachineDefinitionError,
)
from ._guards import GUARDS, LEGACY_GUARD_ROWS, PRIMARY_GUARDS, PrimaryFacts
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
from ._legacy_facts import LEGACY_EVIDENCE_FIELDS, LEGACY_ROW_FACTS, LegacyFacts
from ._listen import listen
from ._machine import (
    ALL_SPECS,
    Lifecycle,
    Step,
    attempt_machine,
    legacy_machine,
    run_machine,
    transitions_config,
    validate_all,
    validate_spec,
)
from ._observe import Listener
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
from ._selection import InstanceEvidence, select_evidence
from ._tables import (
    ATTEMPT_ACTIVE,
    ATTEMPT_SPEC,
    ATTEMPT_STATES,
    ATTEMPT_TERMINAL,
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
    "GUARDS",
    "LEGACY_DECISION_SPEC",
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
    "RECEIPT_TRIGGERS",
    "RUN_SPEC",
    "RUN_STATES",
    "RUN_TERMINAL",
    "Case",
    "DecisionCore",
    "DecisionRow",
    "DecisionTable",
    "Edge",
    "EvidenceError",
    "FsmError",
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
    "Step",
    "attempt_machine",
    "classify_legacy",
    "decide_legacy",
    "decide_primary",
    "legacy_engine",
    "legacy_machine",
    "legacy_views",
    "listen",
    "observed_facts",
    "primary_engine",
    "receipt_terminal",
    "run_machine",
    "select_evidence",
    "transitions_config",
    "validate_all",
    "validate_spec",
]
