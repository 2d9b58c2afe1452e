"""Spec 07: the records' tables (transcribed independently of `fsm`), rendering the machines,
and checking the rendered files against the tables.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

from reconciler._lazy import lazy_exports

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from reconciler.diagrams._check import Drawing as Drawing
    from reconciler.diagrams._check import DrawnEdge as DrawnEdge
    from reconciler.diagrams._check import check as check
    from reconciler.diagrams._check import compare as compare
    from reconciler.diagrams._check import parse_mermaid as parse_mermaid
    from reconciler.diagrams._check import parse_svg as parse_svg
    from reconciler.diagrams._check_tables import check_tables as check_tables
    from reconciler.diagrams._check_tables import compare_table as compare_table
    from reconciler.diagrams._dot import INSTALL_HINT as INSTALL_HINT
    from reconciler.diagrams._dot import PINNED_RENDERER as PINNED_RENDERER
    from reconciler.diagrams._dot import DiagramsError as DiagramsError
    from reconciler.diagrams._dot import find_dot as find_dot
    from reconciler.diagrams._dot import source_digest as source_digest

    # the path of an explained run, the README, the data-level check
    from reconciler.diagrams._path import path_svg as path_svg
    from reconciler.diagrams._records import ADR_0001_ATTEMPT_TABLE as ADR_0001_ATTEMPT_TABLE
    from reconciler.diagrams._records import ADR_0001_RUN_TABLE as ADR_0001_RUN_TABLE
    from reconciler.diagrams._records import ADR_0068_TABLE as ADR_0068_TABLE
    from reconciler.diagrams._records import ADR_0448_TABLE as ADR_0448_TABLE
    from reconciler.diagrams._records import LEGACY_DECISION_RECORD as LEGACY_DECISION_RECORD
    from reconciler.diagrams._records import PRIMARY_DECISION_RECORD as PRIMARY_DECISION_RECORD
    from reconciler.diagrams._records import RECORDS as RECORDS
    from reconciler.diagrams._records import RECORDS_BY_MACHINE as RECORDS_BY_MACHINE
    from reconciler.diagrams._records import ExpectedEdge as ExpectedEdge
    from reconciler.diagrams._records import MachineRecord as MachineRecord
    from reconciler.diagrams._render import dot_source as dot_source
    from reconciler.diagrams._render import mermaid_source as mermaid_source
    from reconciler.diagrams._render import readme as readme
    from reconciler.diagrams._render import render as render
    from reconciler.diagrams._render import render_sources as render_sources

_EXPORTS: dict[str, str] = {
    "ADR_0001_ATTEMPT_TABLE": "reconciler.diagrams._records",
    "ADR_0001_RUN_TABLE": "reconciler.diagrams._records",
    "ADR_0068_TABLE": "reconciler.diagrams._records",
    "ADR_0448_TABLE": "reconciler.diagrams._records",
    "ExpectedEdge": "reconciler.diagrams._records",
    "LEGACY_DECISION_RECORD": "reconciler.diagrams._records",
    "MachineRecord": "reconciler.diagrams._records",
    "PRIMARY_DECISION_RECORD": "reconciler.diagrams._records",
    "RECORDS": "reconciler.diagrams._records",
    "RECORDS_BY_MACHINE": "reconciler.diagrams._records",
    "Drawing": "reconciler.diagrams._check",
    "DrawnEdge": "reconciler.diagrams._check",
    "check": "reconciler.diagrams._check",
    "compare": "reconciler.diagrams._check",
    "parse_mermaid": "reconciler.diagrams._check",
    "parse_svg": "reconciler.diagrams._check",
    "dot_source": "reconciler.diagrams._render",
    "mermaid_source": "reconciler.diagrams._render",
    "render": "reconciler.diagrams._render",
    "render_sources": "reconciler.diagrams._render",
    "INSTALL_HINT": "reconciler.diagrams._dot",
    "PINNED_RENDERER": "reconciler.diagrams._dot",
    "DiagramsError": "reconciler.diagrams._dot",
    "find_dot": "reconciler.diagrams._dot",
    "source_digest": "reconciler.diagrams._dot",
    # the path of an explained run, the README, the data-level check
    "path_svg": "reconciler.diagrams._path",
    "readme": "reconciler.diagrams._render",
    "check_tables": "reconciler.diagrams._check_tables",
    "compare_table": "reconciler.diagrams._check_tables",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
