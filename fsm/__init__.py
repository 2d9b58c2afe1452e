"""qlfsm's pure core: the QingLong 3.0 run lifecycles as `transitions` machines.

No I/O, and no import of ``storage`` or ``reconciler``. Evidence comes in as data; a guarded
edge is planned here and becomes real only when the caller's storage transaction commits.
"""

from ._errors import FsmError, GuardRefused, IllegalTransition, MachineDefinitionError
from ._guards import GUARDS, LEGACY_GUARD_ROWS, PrimaryFacts
from ._legacy import (
    InstanceEvidence,
    LegacyDecision,
    LegacyFacts,
    classify_legacy,
    select_evidence,
)
from ._machine import (
    Lifecycle,
    Step,
    attempt_machine,
    legacy_machine,
    run_machine,
    transitions_config,
    validate_all,
    validate_spec,
)
from ._tables import (
    ALL_SPECS,
    ATTEMPT_ACTIVE,
    ATTEMPT_SPEC,
    ATTEMPT_STATES,
    ATTEMPT_TERMINAL,
    LEGACY_OUTCOMES,
    LEGACY_SPEC,
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
    "LEGACY_GUARD_ROWS",
    "LEGACY_OUTCOMES",
    "LEGACY_SPEC",
    "RUN_SPEC",
    "RUN_STATES",
    "RUN_TERMINAL",
    "Edge",
    "FsmError",
    "GuardRefused",
    "IllegalTransition",
    "InstanceEvidence",
    "LegacyDecision",
    "LegacyFacts",
    "Lifecycle",
    "MachineDefinitionError",
    "MachineSpec",
    "PrimaryFacts",
    "Step",
    "attempt_machine",
    "classify_legacy",
    "legacy_machine",
    "run_machine",
    "select_evidence",
    "transitions_config",
    "validate_all",
    "validate_spec",
]

# ADR-0068 per-candidate evidence sequence (spec 04), appended by the primary reconciler.
from ._evidence import (
    EVIDENCE_OUTCOMES,
    EVIDENCE_SPEC,
    EvidencePath,
    EvidenceSequence,
    evidence_machine,
    evidence_paths,
)

__all__ += [
    "EVIDENCE_OUTCOMES",
    "EVIDENCE_SPEC",
    "EvidencePath",
    "EvidenceSequence",
    "evidence_machine",
    "evidence_paths",
]
