"""The data-level check of `qlfsm diagrams check`: fsm's decision tables, the lifecycle edges
and error codes they name, against the records' transcription — a change on either side fails
naming the row.

It replaces the positional copy of ADR-0068's table these tests kept. Each old assertion is one
of its comparisons (the parametrized changes below show each can fail):

- the cases, field by field, in spec 04 order -> ``case N`` of each row (evidence state, guard,
  what follows, reason, write, trigger) and the row order, steps included;
- the table's name, its evidence order, its decisions with their summary outcomes -> the three
  table-wide comparisons;
- only row 14 answers an exception -> the exception-row comparison;
- every row cites its record -> the citation comparison; every row has facts -> the facts
  comparison (word for word, but for the rows fsm paraphrases).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fsm import (
    DecisionRow,
    DecisionTable,
)
from fsm.qinglong import (
    ATTEMPT_SPEC,
    LEGACY_SPEC,
    LEGACY_TABLE,
    PRIMARY_TABLE,
    RUN_SPEC,
)
from reconciler.diagrams import check, check_tables
from reconciler.diagrams._check_tables import (
    ADR_0068,
    ADR_0448,
    RecordTable,
    primary_error_codes,
)
from reconciler.diagrams._record_adr0068 import PARAPHRASED_FACTS


def _row(table: DecisionTable, row: str, change: Callable[[DecisionRow], DecisionRow]) -> Any:
    return table._replace(rows=tuple(change(r) if r.row == row else r for r in table.rows))


def _case(row: str, index: int, **fields: object) -> Callable[[DecisionTable], DecisionTable]:
    def change(r: DecisionRow) -> DecisionRow:
        cases = list(r.cases)
        cases[index] = cases[index]._replace(**fields)
        return r._replace(cases=tuple(cases))

    return lambda table: _row(table, row, change)


def _field(row: str, **fields: object) -> Callable[[DecisionTable], DecisionTable]:
    return lambda table: _row(table, row, lambda r: r._replace(**fields))


def _without(row: str) -> Callable[[DecisionTable], DecisionTable]:
    return lambda t: t._replace(rows=tuple(r for r in t.rows if r.row != row))


def _swap(a: int, b: int) -> Callable[[DecisionTable], DecisionTable]:
    def change(t: DecisionTable) -> DecisionTable:
        rows = list(t.rows)
        rows[a], rows[b] = rows[b], rows[a]
        return t._replace(rows=tuple(rows))

    return change


def test_fsm_s_tables_and_the_records_transcription_agree_column_by_column() -> None:
    assert check_tables() == []
    # The comparison reads real data: both tables and the registry of error codes.
    assert {r.row for r in PRIMARY_TABLE.rows} - PARAPHRASED_FACTS
    assert primary_error_codes()["lose_after_grace"] == "RECOVERY_PROCESS_NOT_RUNNING"


PRIMARY_CHANGES: list[tuple[str, Callable[[DecisionTable], DecisionTable], str]] = [
    # (what changes in fsm's ADR-0068 table, how, what the check must say)
    ("row 9's decision", _case("9", 0, then="unresolved"), "ADR-0068 row 9: case 1 is"),
    ("row 9's guard", _case("9", 0, guard="identity_unknown"), "ADR-0068 row 9: case 1 is"),
    ("row 1's state", _case("1", 0, state="probe"), "ADR-0068 row 1: case 1 is"),
    ("row 12's reason", _case("12", 0, reason="running"), "ADR-0068 row 12: case 1 is"),
    ("row 3's write", _case("3", 0, write="lose"), "ADR-0068 row 3: case 1 is"),
    ("row 7's trigger", _case("7", 0, trigger="lose_after_grace"), "ADR-0068 row 7: case 1 is"),
    ("a case of row 13", _case("13", 6, reason="lost"), "ADR-0068 row 13: case 7 is"),
    ("step 2.2's next", _case("step 2.2", 0, then="probe"), "ADR-0068 step 2.2: case 1 is"),
    (
        "row 8 loses a case",
        _field("8", cases=next(r for r in PRIMARY_TABLE.rows if r.row == "8").cases[:1]),
        "ADR-0068 row 8: case 2 is None in fsm",
    ),
    ("row 6's citation", _field("6", cites="ADR-0068 row 7"), "ADR-0068 row 6: cites"),
    ("row 1's facts", _field("1", facts="one active Attempt"), "ADR-0068 row 1: facts"),
    ("row 13's facts gone", _field("13", facts=""), "ADR-0068 row 13: no facts in fsm"),
    (
        "row 14 no longer the exception row",
        _field("14", on_exception=False),
        "ADR-0068 row 14: is not the exception row in fsm, is in the record",
    ),
    (
        "row 9 the exception row",
        _field("9", on_exception=True),
        "ADR-0068 row 9: is the exception row in fsm",
    ),
    ("rows 1 and 2 swapped", _swap(0, 1), "ADR-0068: rows in the order ['2', '1',"),
    ("row 11 deleted", _without("11"), "ADR-0068 row 11: not in fsm"),
    ("the table's name", lambda t: t._replace(name="primary"), "ADR-0068: the table is named"),
    (
        "the evidence order",
        lambda t: t._replace(evidence=tuple(reversed(t.evidence))),
        "ADR-0068: evidence order",
    ),
    (
        "a decision's outcome",
        lambda t: t._replace(decisions={**t.decisions, "quarantined": "recovered"}),
        "ADR-0068: decisions",
    ),
]


@pytest.mark.parametrize(
    ("change", "named"),
    [pytest.param(c, n, id=i) for i, c, n in PRIMARY_CHANGES],
)
def test_a_change_to_the_adr_0068_table_fails_the_check_naming_the_row(
    change: Callable[[DecisionTable], DecisionTable], named: str
) -> None:
    differences = check_tables(primary=change(PRIMARY_TABLE))
    assert any(d.startswith(named) for d in differences), differences
    assert all(d.startswith("ADR-0068") for d in differences)


def test_the_lifecycle_edges_a_row_names_are_compared_with_the_record() -> None:
    edges = tuple(
        e for e in RUN_SPEC.edges if not (e.cites == "ADR-0068 row 13" and e.source == "running")
    )
    differences = check_tables(run=dataclasses.replace(RUN_SPEC, edges=edges))
    assert differences == [
        "ADR-0068 row 13: the record's edge ('run', 'running', 'lost', "
        "'not_running_after_grace') is not in fsm's lifecycles"
    ]
    row_13 = [e for e in ATTEMPT_SPEC.edges if e.cites == "ADR-0068 row 13"][-1]
    extra = dataclasses.replace(
        ATTEMPT_SPEC,
        edges=(*ATTEMPT_SPEC.edges, dataclasses.replace(row_13, dest="failed")),
    )
    assert check_tables(attempt=extra) == [
        "ADR-0068 row 13: fsm's edge ('attempt', 'running', 'failed', "
        "'not_running_after_grace') is not in the record"
    ]


def test_a_trigger_that_fires_no_edge_of_its_row_is_named() -> None:
    # The lifecycles rename row 12's trigger; the table still names the old one.
    def renamed(spec: Any) -> Any:
        edges = tuple(
            dataclasses.replace(e, trigger="adopt") if e.trigger == "adopt_running" else e
            for e in spec.edges
        )
        return dataclasses.replace(spec, edges=edges)

    differences = check_tables(run=renamed(RUN_SPEC), attempt=renamed(ATTEMPT_SPEC))
    assert differences == ["ADR-0068 row 12: trigger 'adopt_running' fires no edge citing the row"]


def test_the_error_code_a_row_writes_is_compared_with_the_record() -> None:
    codes = {**primary_error_codes(), "lose_unstarted_claim": "RECOVERY_PROCESS_NOT_RUNNING"}
    assert check_tables(error_codes=codes) == [
        "ADR-0068 row 7: error code ['RECOVERY_PROCESS_NOT_RUNNING'] by the pass, "
        "['RECOVERY_UNSTARTED_CLAIM'] in the record"
    ]


def _record_row(record: RecordTable, row: str, **fields: object) -> RecordTable:
    rows = tuple(dataclasses.replace(r, **fields) if r.row == row else r for r in record.rows)
    return dataclasses.replace(record, rows=rows)


def test_a_change_to_the_record_transcription_fails_the_check_naming_the_row() -> None:
    nine = next(r for r in ADR_0068.rows if r.row == "9")
    changed = _record_row(
        ADR_0068, "9", decides=(dataclasses.replace(nine.decides[0], dest="unresolved"),)
    )
    differences = check_tables(records=(changed, ADR_0448))
    assert differences == [
        "ADR-0068 row 9: case 1 is ('probe', 'provider_unavailable', 'failed', "
        "'provider_unavailable', None, None) in fsm, ('probe', 'provider_unavailable', "
        "'unresolved', 'provider_unavailable', None, None) in the record"
    ]
    wrong_code = _record_row(ADR_0068, "13", error_code="RECOVERY_UNSTARTED_CLAIM")
    assert [d.split(":")[0] for d in check_tables(records=(wrong_code, ADR_0448))] == [
        "ADR-0068 row 13"
    ]
    five = next(r for r in ADR_0068.rows if r.row == "5")
    fewer = _record_row(ADR_0068, "5", edges=five.edges[1:])
    assert [d.split(":")[0] for d in check_tables(records=(fewer, ADR_0448))] == ["ADR-0068 row 5"]


LEGACY_CHANGES: list[tuple[str, Callable[[DecisionTable], DecisionTable], str]] = [
    ("row 6's trigger", _case("6", 0, trigger="complete"), "ADR-0448 row 6: case 1 is"),
    ("row 6's write", _case("6", 0, write=None), "ADR-0448 row 6: case 1 is"),
    ("row 10's decision", _case("10", 0, then="ambiguous"), "ADR-0448 row 10: case 1 is"),
    ("row 4's facts", _field("4", facts="evidence truncated"), "ADR-0448 row 4: facts"),
    ("step 3's citation", _field("step 3", cites="ADR-0448 §4"), "ADR-0448 step 3: cites"),
    ("row 12 not the exception row", _field("12", on_exception=False), "ADR-0448 row 12: is not"),
    ("row 2b deleted", _without("2b"), "ADR-0448 row 2b: not in fsm"),
]


@pytest.mark.parametrize(
    ("change", "named"),
    [pytest.param(c, n, id=i) for i, c, n in LEGACY_CHANGES],
)
def test_a_change_to_the_adr_0448_table_fails_the_check_naming_the_row(
    change: Callable[[DecisionTable], DecisionTable], named: str
) -> None:
    differences = check_tables(legacy=change(LEGACY_TABLE))
    assert any(d.startswith(named) for d in differences), differences
    assert all(d.startswith("ADR-0448") for d in differences)


def test_the_legacy_lifecycle_and_the_record_transcription_are_compared_too() -> None:
    cut = dataclasses.replace(
        LEGACY_SPEC, edges=tuple(e for e in LEGACY_SPEC.edges if e.cites != "ADR-0448 row 9")
    )
    differences = check_tables(legacy_shadow=cut)
    assert differences == [
        "ADR-0448 row 9: the record's edge ('legacy_shadow', 'candidate', 'abandoned', "
        "'no_spawn_evidence') is not in fsm's lifecycles",
        "ADR-0448 row 9: trigger 'abandon' fires no edge citing the row",
    ]
    ten = next(r for r in ADR_0448.rows if r.row == "10")
    changed = _record_row(
        ADR_0448, "10", decides=(dataclasses.replace(ten.decides[0], trigger="hold"),)
    )
    assert [d.split(":")[0] for d in check_tables(records=(ADR_0068, changed))] == [
        "ADR-0448 row 10"
    ]


def test_qlfsm_diagrams_check_runs_the_data_level_check_after_the_drawings(
    tmp_path: Path,
) -> None:
    # `check` (what `qlfsm diagrams check` calls) ends with the table comparison: by default
    # the real one, which passes; a table difference is reported like a drawing's.
    assert check(tmp_path, records=()) == []
    assert check(tmp_path, records=(), tables=lambda: ["ADR-0068 row 9: x"]) == [
        "ADR-0068 row 9: x"
    ]
