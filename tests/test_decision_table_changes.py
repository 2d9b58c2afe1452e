"""Every single-case change of ADR-0068's decision table changes some decision.

A companion of ``tests/test_pin_decision_tables.py``, which pins each case against spec 04:
here each case of ``fsm.PRIMARY_TABLE`` is deleted, or its row id or any one of its fields is
changed (to each other value of that field the table uses, and to one it does not); the
changed table must be refused when its machine is built, or decide some world of the
exhaustive world space of ``tests/test_primary_core.py`` differently. So no case is dead
weight that the pinned expectation could hide.

Not in the mutation-test selection: it tests the table's data (which mutmut does not mutate)
and takes half a minute, which mutmut would multiply into each mutant's time limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from test_primary_core import ROW_WORLDS, World, observation, worlds

from fsm import (
    PRIMARY_GUARDS,
    PRIMARY_TABLE,
    Case,
    DecisionRow,
    DecisionTable,
    FsmError,
    PrimaryFacts,
)
from fsm._decision import DecisionEngine

R, Q, P, G, RR, RC = PRIMARY_TABLE.evidence


WORLDS: list[World] = [w for w, _ in ROW_WORLDS] + [w for w, _ in worlds()]


def _observed(state: str, facts: PrimaryFacts) -> bool:
    """Has the evidence ``state`` waits for been observed (spec 04's evidence order)?"""
    field = {
        R: facts.run_present,
        Q: facts.first_receipt,
        P: facts.process,
        G: facts.grace_paid or None,
        RR: facts.second_receipt,
        RC: facts.unchanged_on_recheck,
    }[state]
    return field is not None


def _answer(engine: DecisionEngine, world: World) -> list[object]:
    """Drive ``world`` through ``engine`` as a pass does (gather what is asked, resume where it
    stopped), and everything the table decides on the way: the cases taken, each need, what an
    exception in that state decides (row 14), and the deciding case with all its fields. A
    refusal (or the table asking for evidence the world cannot give) is an answer too."""
    seen: list[object] = []
    facts = PrimaryFacts(page_status=world.page_status)
    state: str | None = None
    try:
        while True:
            walk = engine.walk(facts, _observed, state)
            seen += [(t.row.row, *t.case) for t in walk.taken]
            failed = engine.walk(
                facts.__class__(**{**vars(facts), "error": "boom"}),
                _observed,
                walk.state,
                failed=True,
            )
            assert failed.decided is not None
            seen.append(("fail", failed.decided.row.row, *failed.decided.case))
            if walk.decided is not None:
                seen.append((walk.decided.row.row, *walk.decided.case))
                return seen
            assert walk.need is not None
            seen.append(walk.need)
            facts = facts.__class__(**{**vars(facts), **observation(world, walk.need.evidence)})
            state = walk.state
    except (FsmError, IndexError) as exc:
        seen.append(type(exc).__name__)
        return seen


def _changed_tables(ri: int, ci: int) -> Iterator[tuple[str, DecisionTable]]:
    """The table with case ``ci`` of row ``ri`` deleted, or its row id or any one of its fields
    changed (to each other value of that field the table uses, and to one it does not)."""
    rows = PRIMARY_TABLE.rows
    row, case = rows[ri], rows[ri].cases[ci]
    values: dict[int, set[Any]] = {
        i: {c[i] for r in rows for c in r.cases} | {"changed"} for i in range(len(Case._fields))
    }
    variants: list[tuple[str, DecisionRow]] = [
        ("deleted", row._replace(cases=(*row.cases[:ci], *row.cases[ci + 1 :]))),
        ("row id changed", row._replace(row=f"{row.row}x")),
    ]
    for field, name in enumerate(Case._fields):
        for value in sorted(values[field] - {case[field]}, key=str):
            new = case._replace(**{name: value})
            cases = (*row.cases[:ci], new, *row.cases[ci + 1 :])
            variants.append((f"{name}={value}", row._replace(cases=cases)))
    for what, new_row in variants:
        yield what, PRIMARY_TABLE._replace(rows=(*rows[:ri], new_row, *rows[ri + 1 :]))


CASES = [(ri, ci) for ri, r in enumerate(PRIMARY_TABLE.rows) for ci in range(len(r.cases))]


def _unnoticed(tables: Iterable[tuple[str, DecisionTable]]) -> list[str]:
    """The changed tables that build and decide every world exactly as the table does."""
    original = DecisionEngine(PRIMARY_TABLE, PRIMARY_GUARDS)
    expected = [_answer(original, w) for w in WORLDS]
    unnoticed = []
    for what, table in tables:
        try:
            changed = DecisionEngine(table, PRIMARY_GUARDS)
        except FsmError:
            continue  # refused when built: the change cannot go unnoticed
        if all(_answer(changed, w) == e for w, e in zip(WORLDS, expected, strict=True)):
            unnoticed.append(what)
    return unnoticed


@pytest.mark.parametrize(
    ("ri", "ci"),
    CASES,
    ids=[f"row {PRIMARY_TABLE.rows[ri].row} case {ci}" for ri, ci in CASES],
)
def test_deleting_or_changing_any_one_field_of_a_case_changes_some_decision(
    ri: int, ci: int
) -> None:
    assert _unnoticed(_changed_tables(ri, ci)) == []


def test_the_unchanged_table_decides_every_world_alike_when_built_again() -> None:
    assert _unnoticed([("unchanged", PRIMARY_TABLE)]) == ["unchanged"]
