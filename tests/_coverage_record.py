"""QingLong's orderings coverage: the toolkit's recorder (``fsm.testing``) over QingLong's five
machines, and the files the crash-injection children write.

A :class:`Recording` (``fsm.testing``) registered with ``fsm.listen`` is told every lifecycle
edge taken, every case of the two decision tables taken, and every guard's outcome as the
machine tried it. Counts are firings of the engine: a plan on a scratch model counts like a
fire on a real one (``Repository.fire`` plans, commits, then fires: two), and a legacy_shadow
guard asks the ADR-0448 decision machine again (a count there per asking).

:func:`coverage_doc` lays a recording over the five machines
(``fsm.qinglong.ALL_SPECS``, and the two decision tables' cases) in the shape of
``coverage.json`` (docs/orderings.md);
:func:`blind_spots` names what was never taken and is not listed in
``tests/orderings_unreachable.json`` with its reason. Nothing here runs on a product path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fsm import DecisionTable, listen, testing
from fsm.qinglong import ALL_SPECS, LEGACY_TABLE, PRIMARY_TABLE
from fsm.testing import (
    Recording,
    case_what,
    edge_what,
    guard_what,
    merged,
    recording,
    summary_rows,
)

UNREACHABLE_FILE = Path(__file__).with_name("orderings_unreachable.json")
# The child processes of tests/test_crash_injection.py record into this directory when set.
CHILD_ENV = "QLFSM_COVERAGE_FILE"

TABLES: dict[str, DecisionTable] = {t.name: t for t in (PRIMARY_TABLE, LEGACY_TABLE)}
MACHINES: tuple[str, ...] = tuple(spec.name for spec in ALL_SPECS)

__all__ = [
    "CHILD_ENV",
    "MACHINES",
    "TABLES",
    "UNREACHABLE_FILE",
    "Recording",
    "blind_spots",
    "case_what",
    "child_recorder",
    "coverage_doc",
    "edge_what",
    "guard_what",
    "load_unreachable",
    "merged",
    "read_children",
    "recording",
    "summary_markdown",
    "summary_rows",
]


def read_children(folder: Path) -> Recording:
    """What the crash-injection children wrote (one file per process, rewritten at each kill
    point, so a SIGKILLed child leaves what it had recorded up to its last marker)."""
    rec = Recording()
    for path in sorted(folder.glob("*.json")):
        try:
            rec.merge(Recording.from_json(json.loads(path.read_text())))
        except (ValueError, KeyError):
            continue  # killed while writing: its previous write is lost with it
    return rec


def child_recorder(folder: str) -> Recording:
    """In a crash-injection child: record, and write the counts to ``folder`` at each call of
    the returned recording's ``flush`` (the child's gate hook calls it before it blocks)."""
    rec = _ChildRecording(Path(folder) / f"{os.getpid()}.json")
    listen(rec)
    return rec


class _ChildRecording(Recording):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json()))
        tmp.replace(self.path)


def load_unreachable(path: Path = UNREACHABLE_FILE) -> list[dict[str, str]]:
    data = json.loads(path.read_text())
    assert isinstance(data, list)
    return [{"machine": e["machine"], "what": e["what"], "why": e["why"]} for e in data]


def coverage_doc(rec: Recording, unreachable: list[dict[str, str]]) -> dict[str, Any]:
    """``coverage.json``: per QingLong machine every edge, case and guard with its counts."""
    return testing.coverage_doc(rec, ALL_SPECS, TABLES, unreachable)


def blind_spots(doc: dict[str, Any]) -> list[str]:
    return testing.blind_spots(doc, UNREACHABLE_FILE.name)


def summary_markdown(doc: dict[str, Any]) -> str:
    return testing.summary_markdown(doc, UNREACHABLE_FILE.name)
