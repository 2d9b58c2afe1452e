"""QingLong 3.0's machines, built through the public toolkit (``fsm``) like any user's: the
Run and Attempt lifecycles and their edges (``_tables.py``), the guards (``_guards.py``),
ADR-0068's decision table and core (``_primary_table.py``, ``_primary.py``), ADR-0448's legacy
shadow (``_legacy.py``, ``_legacy_facts.py``), the evidence selection (``_selection.py``) and
the rules and cached machines (``_qinglong.py``).

Pure (no I/O). Imports only ``fsm``'s public names, and neither ``storage`` nor ``reconciler``.
"""

from __future__ import annotations

from ._guards import (
    GUARDS,
    PRIMARY_GUARDS,
    PrimaryFacts,
)
from ._legacy import (
    LEGACY_DECISION_SPEC,
    LEGACY_EVIDENCE,
    LEGACY_GUARD_ROWS,
    LEGACY_OUTCOMES,
    LEGACY_ROWS,
    LEGACY_SPEC,
    LEGACY_TABLE,
    LEGACY_TRIGGERS,
    LEGACY_WRITES,
    LegacyCore,
    LegacyDecision,
    LegacyEngine,
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
    QINGLONG_RULES,
    attempt_machine,
    legacy_machine,
    one_unguarded_edge_per_pair,
    require_twin_edges,
    run_machine,
    validate_all,
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
)

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
    "QINGLONG_RULES",
    "RECEIPT_TRIGGERS",
    "RUN_SPEC",
    "RUN_STATES",
    "RUN_TERMINAL",
    "InstanceEvidence",
    "LegacyCore",
    "LegacyDecision",
    "LegacyEngine",
    "LegacyFacts",
    "PrimaryCore",
    "PrimaryDecision",
    "PrimaryFacts",
    "attempt_machine",
    "classify_legacy",
    "decide_legacy",
    "decide_primary",
    "legacy_engine",
    "legacy_machine",
    "legacy_views",
    "observed_facts",
    "one_unguarded_edge_per_pair",
    "primary_engine",
    "receipt_terminal",
    "require_twin_edges",
    "run_machine",
    "select_evidence",
    "validate_all",
]
