"""Spec 07: the records' tables (transcribed independently of `fsm`), rendering the machines,
and checking the rendered files against the tables.
"""

from __future__ import annotations

from reconciler.diagrams._check import check, compare, parse_mermaid, parse_svg
from reconciler.diagrams._check_tables import check_tables, compare_table
from reconciler.diagrams._dot import PINNED_RENDERER, DiagramsError, find_dot, source_digest
from reconciler.diagrams._path import path_svg
from reconciler.diagrams._record_adr0001 import ADR_0001_ATTEMPT_TABLE, ADR_0001_RUN_TABLE
from reconciler.diagrams._record_adr0068 import ADR_0068_TABLE
from reconciler.diagrams._record_adr0448 import ADR_0448_TABLE
from reconciler.diagrams._record_rows import ExpectedEdge, MachineRecord
from reconciler.diagrams._records import (
    LEGACY_DECISION_RECORD,
    PRIMARY_DECISION_RECORD,
    RECORDS,
    RECORDS_BY_MACHINE,
)
from reconciler.diagrams._render import dot_source, mermaid_source, render, render_sources

__all__ = [
    "ADR_0001_ATTEMPT_TABLE",
    "ADR_0001_RUN_TABLE",
    "ADR_0068_TABLE",
    "ADR_0448_TABLE",
    "LEGACY_DECISION_RECORD",
    "PINNED_RENDERER",
    "PRIMARY_DECISION_RECORD",
    "RECORDS",
    "RECORDS_BY_MACHINE",
    "DiagramsError",
    "ExpectedEdge",
    "MachineRecord",
    "check",
    "check_tables",
    "compare",
    "compare_table",
    "dot_source",
    "find_dot",
    "mermaid_source",
    "parse_mermaid",
    "parse_svg",
    "path_svg",
    "render",
    "render_sources",
    "source_digest",
]
