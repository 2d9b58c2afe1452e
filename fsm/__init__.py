"""qlfsm's pure core: the QingLong 3.0 run lifecycles as `transitions` machines.

No I/O, and no import of ``storage`` or ``reconciler``. Evidence comes in as data; a guarded
edge is planned here and becomes real only when the caller's storage transaction commits.

The reconcilers' decision tables live here once, as data: ADR-0068's in ``_primary_table.py``
(decided by :class:`PrimaryCore` / :func:`decide_primary`), ADR-0448's in ``_legacy.py``
(decided step by step by a :class:`LegacyCore`, or at once by :func:`classify_legacy`);
``_decision.py`` builds the `transitions` machine that decides from either, and
:class:`DecisionCore`, the immutable walk of one candidate through it.

The public names are resolved lazily (PEP 562): a name of the lifecycle tables (``RUN_STATES``,
``RUN_SPEC``, ...) loads ``_tables.py`` alone, without `transitions`; the first name of a
machine, a guard or a decision loads its module and `transitions` with it.
"""

from __future__ import annotations

import importlib

# No `typing` at run time: a name of the lifecycle tables alone (`qlfsm db`, `inspect`) loads
# ``_tables.py`` and nothing more.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_EXPORTS: dict[str, str] = {
    "Case": "_decision",
    "DecisionCore": "_decision",
    "DecisionRow": "_decision",
    "DecisionTable": "_decision",
    "Need": "_decision",
    "EvidenceError": "_errors",
    "FsmError": "_errors",
    "GuardRefused": "_errors",
    "IllegalTransition": "_errors",
    "MachineDefinitionError": "_errors",
    "GUARDS": "_guards",
    "LEGACY_GUARD_ROWS": "_guards",
    "PRIMARY_GUARDS": "_guards",
    "PrimaryFacts": "_guards",
    "LEGACY_DECISION_SPEC": "_legacy",
    "LEGACY_EVIDENCE": "_legacy",
    "LEGACY_OUTCOMES": "_legacy",
    "LEGACY_ROWS": "_legacy",
    "LEGACY_SPEC": "_legacy",
    "LEGACY_TABLE": "_legacy",
    "LEGACY_TRIGGERS": "_legacy",
    "LEGACY_WRITES": "_legacy",
    "LegacyCore": "_legacy",
    "LegacyDecision": "_legacy",
    "LegacyEngine": "_legacy",
    "LegacyViews": "_legacy",
    "classify_legacy": "_legacy",
    "decide_legacy": "_legacy",
    "legacy_engine": "_legacy",
    "legacy_views": "_legacy",
    "LEGACY_EVIDENCE_FIELDS": "_legacy_facts",
    "LEGACY_ROW_FACTS": "_legacy_facts",
    "LegacyFacts": "_legacy_facts",
    "listen": "_listen",
    "ALL_SPECS": "_machine",
    "Lifecycle": "_machine",
    "Step": "_machine",
    "attempt_machine": "_machine",
    "legacy_machine": "_machine",
    "run_machine": "_machine",
    "transitions_config": "_machine",
    "validate_all": "_machine",
    "validate_spec": "_machine",
    "Listener": "_observe",
    "PRIMARY_DECISION_SPEC": "_primary",
    "PrimaryCore": "_primary",
    "PrimaryDecision": "_primary",
    "decide_primary": "_primary",
    "observed_facts": "_primary",
    "primary_engine": "_primary",
    "receipt_terminal": "_primary",
    "PRIMARY_DECISIONS": "_primary_table",
    "PRIMARY_EVIDENCE": "_primary_table",
    "PRIMARY_EVIDENCE_FIELDS": "_primary_table",
    "PRIMARY_PASS_ROWS": "_primary_table",
    "PRIMARY_TABLE": "_primary_table",
    "InstanceEvidence": "_selection",
    "select_evidence": "_selection",
    "ATTEMPT_ACTIVE": "_tables",
    "ATTEMPT_SPEC": "_tables",
    "ATTEMPT_STATES": "_tables",
    "ATTEMPT_TERMINAL": "_tables",
    "LEGACY_EDGE_TRIGGERS": "_tables",
    "RECEIPT_TRIGGERS": "_tables",
    "RUN_SPEC": "_tables",
    "RUN_STATES": "_tables",
    "RUN_TERMINAL": "_tables",
    "Edge": "_tables",
    "MachineSpec": "_tables",
}

__all__ = [
    "ALL_SPECS",
    "ATTEMPT_ACTIVE",
    "ATTEMPT_SPEC",
    "ATTEMPT_STATES",
    "ATTEMPT_TERMINAL",
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

if TYPE_CHECKING:
    from ._decision import Case as Case
    from ._decision import DecisionCore as DecisionCore
    from ._decision import DecisionRow as DecisionRow
    from ._decision import DecisionTable as DecisionTable
    from ._decision import Need as Need
    from ._errors import EvidenceError as EvidenceError
    from ._errors import FsmError as FsmError
    from ._errors import GuardRefused as GuardRefused
    from ._errors import IllegalTransition as IllegalTransition
    from ._errors import MachineDefinitionError as MachineDefinitionError
    from ._guards import GUARDS as GUARDS
    from ._guards import LEGACY_GUARD_ROWS as LEGACY_GUARD_ROWS
    from ._guards import PRIMARY_GUARDS as PRIMARY_GUARDS
    from ._guards import PrimaryFacts as PrimaryFacts
    from ._legacy import LEGACY_DECISION_SPEC as LEGACY_DECISION_SPEC
    from ._legacy import LEGACY_EVIDENCE as LEGACY_EVIDENCE
    from ._legacy import LEGACY_OUTCOMES as LEGACY_OUTCOMES
    from ._legacy import LEGACY_ROWS as LEGACY_ROWS
    from ._legacy import LEGACY_SPEC as LEGACY_SPEC
    from ._legacy import LEGACY_TABLE as LEGACY_TABLE
    from ._legacy import LEGACY_TRIGGERS as LEGACY_TRIGGERS
    from ._legacy import LEGACY_WRITES as LEGACY_WRITES
    from ._legacy import LegacyCore as LegacyCore
    from ._legacy import LegacyDecision as LegacyDecision
    from ._legacy import LegacyEngine as LegacyEngine
    from ._legacy import LegacyViews as LegacyViews
    from ._legacy import classify_legacy as classify_legacy
    from ._legacy import decide_legacy as decide_legacy
    from ._legacy import legacy_engine as legacy_engine
    from ._legacy import legacy_views as legacy_views
    from ._legacy_facts import LEGACY_EVIDENCE_FIELDS as LEGACY_EVIDENCE_FIELDS
    from ._legacy_facts import LEGACY_ROW_FACTS as LEGACY_ROW_FACTS
    from ._legacy_facts import LegacyFacts as LegacyFacts
    from ._listen import listen as listen
    from ._machine import ALL_SPECS as ALL_SPECS
    from ._machine import Lifecycle as Lifecycle
    from ._machine import Step as Step
    from ._machine import attempt_machine as attempt_machine
    from ._machine import legacy_machine as legacy_machine
    from ._machine import run_machine as run_machine
    from ._machine import transitions_config as transitions_config
    from ._machine import validate_all as validate_all
    from ._machine import validate_spec as validate_spec
    from ._observe import Listener as Listener
    from ._primary import PRIMARY_DECISION_SPEC as PRIMARY_DECISION_SPEC
    from ._primary import PrimaryCore as PrimaryCore
    from ._primary import PrimaryDecision as PrimaryDecision
    from ._primary import decide_primary as decide_primary
    from ._primary import observed_facts as observed_facts
    from ._primary import primary_engine as primary_engine
    from ._primary import receipt_terminal as receipt_terminal
    from ._primary_table import PRIMARY_DECISIONS as PRIMARY_DECISIONS
    from ._primary_table import PRIMARY_EVIDENCE as PRIMARY_EVIDENCE
    from ._primary_table import PRIMARY_EVIDENCE_FIELDS as PRIMARY_EVIDENCE_FIELDS
    from ._primary_table import PRIMARY_PASS_ROWS as PRIMARY_PASS_ROWS
    from ._primary_table import PRIMARY_TABLE as PRIMARY_TABLE
    from ._selection import InstanceEvidence as InstanceEvidence
    from ._selection import select_evidence as select_evidence
    from ._tables import ATTEMPT_ACTIVE as ATTEMPT_ACTIVE
    from ._tables import ATTEMPT_SPEC as ATTEMPT_SPEC
    from ._tables import ATTEMPT_STATES as ATTEMPT_STATES
    from ._tables import ATTEMPT_TERMINAL as ATTEMPT_TERMINAL
    from ._tables import LEGACY_EDGE_TRIGGERS as LEGACY_EDGE_TRIGGERS
    from ._tables import RECEIPT_TRIGGERS as RECEIPT_TRIGGERS
    from ._tables import RUN_SPEC as RUN_SPEC
    from ._tables import RUN_STATES as RUN_STATES
    from ._tables import RUN_TERMINAL as RUN_TERMINAL
    from ._tables import Edge as Edge
    from ._tables import MachineSpec as MachineSpec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fsm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"fsm.{module}"), name)
    globals()[name] = value
    return value
