"""Every single-case change of ADR-0068's decision table changes some decision.

A companion of ``tests/test_pin_decision_tables.py``, which pins each case against spec 04:
here each case of ``fsm.qinglong.PRIMARY_TABLE`` is deleted, or its row id or any one of its
fields is changed (to each other value of that field the table uses, and to one it does not); the
changed table must be refused when its machine is built, or decide some world of the
exhaustive world space of ``tests/test_primary_core.py`` differently. So no case is dead
weight that the pinned expectation could hide.

At the end, one row changed in a copy of the table (row 9's outcome): the pass, its dry run,
the final verifier and ``explain`` decide by the copy, and the diagram check refuses it.

Not in the mutation-test selection: it tests the table's data (which mutmut does not mutate)
and takes half a minute, which mutmut would multiply into each mutant's time limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _primary_support import T0, decisions, make_candidate
from test_primary_core import ROW_WORLDS, World, observation, worlds

import fsm.qinglong._primary
import reconciler.primary._pass as primary_pass_module
from fsm import (
    Case,
    DecisionEngine,
    DecisionRow,
    DecisionTable,
    FsmError,
    drawn_spec,
)
from fsm.qinglong import (
    PRIMARY_GUARDS,
    PRIMARY_TABLE,
    PrimaryFacts,
    observed_facts,
)
from reconciler.diagrams import PRIMARY_DECISION_RECORD, compare, mermaid_source, parse_mermaid
from reconciler.node import (
    Evidence,
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    capture_handle,
    inspect_handle,
)
from reconciler.primary import reconcile_connection
from storage import Repository

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
                facts.__class__(**{**dataclasses.asdict(facts), "error": "boom"}),
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
            facts = facts.__class__(
                **{**dataclasses.asdict(facts), **observation(world, walk.need.evidence)}
            )
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


# --- one row changed in a copy of the table: every consumer follows or fails loudly ------------

ROW_9 = next(i for i, r in enumerate(PRIMARY_TABLE.rows) if r.row == "9")


def _row_9_unresolved() -> DecisionTable:
    """The table with row 9 (`unknown / provider_unavailable`) deciding `unresolved`, not
    `failed`: a copy, the table itself untouched."""
    rows = PRIMARY_TABLE.rows
    [case] = rows[ROW_9].cases
    changed = rows[ROW_9]._replace(cases=(case._replace(then="unresolved"),))
    return PRIMARY_TABLE._replace(rows=(*rows[:ROW_9], changed, *rows[ROW_9 + 1 :]))


@pytest.fixture
def row_9_unresolved(monkeypatch: pytest.MonkeyPatch) -> DecisionTable:
    """Every core made from now on decides by the changed copy."""
    table = _row_9_unresolved()
    engine = DecisionEngine(table, PRIMARY_GUARDS, evolve=observed_facts)
    monkeypatch.setattr(fsm.qinglong._primary, "primary_engine", lambda: engine)
    return table


def _unavailable(handle: str, provider: Any, *, platform: str) -> Evidence:
    # spec 03: /proc cannot be read, so the identity is unknown (row 9).
    found = inspect_handle(handle, provider, platform=platform)
    return Evidence("unknown", "provider_unavailable", found.pid)


def _one_running(repo: Repository) -> FakeProcessTable:
    table = FakeProcessTable()
    pid = table.spawn()
    make_candidate(
        repo, "run-1", "at-1", handle=capture_handle(pid, table, platform="linux"), pid=pid
    )
    return table


def test_row_9_changed_in_a_copy_is_what_the_pass_and_its_dry_run_decide(
    repo: Repository, conn: Any, store: FileReceiptStore, row_9_unresolved: DecisionTable
) -> None:
    procs = _one_running(repo)
    for dry_run in (True, False):
        summary = reconcile_connection(
            conn,
            store,
            procs,
            FakeClock(T0),
            platform="linux",
            probe=_unavailable,
            dry_run=dry_run,
        )
        assert decisions(summary) == [("run-1", "at-1", "9", "unresolved", "provider_unavailable")]


def test_row_9_changed_in_a_copy_is_what_the_final_verifier_revokes_with(
    repo: Repository, conn: Any, store: FileReceiptStore, request: pytest.FixtureRequest
) -> None:
    # Retained by row 12, then the verifier's probe finds /proc unreadable: the table's row 9
    # says how the candidate is revoked, before the change and after it.
    procs = _one_running(repo)
    calls: list[int] = []

    def second_unavailable(handle: str, provider: Any, *, platform: str) -> Evidence:
        calls.append(1)
        if len(calls) % 2 == 0:
            return _unavailable(handle, provider, platform=platform)
        return inspect_handle(handle, provider, platform=platform)

    def verified() -> list[tuple[Any, ...]]:
        summary = reconcile_connection(
            conn, store, procs, FakeClock(T0), platform="linux", probe=second_unavailable
        )
        return decisions(summary)

    assert verified() == [("run-1", "at-1", "12", "failed", "verifier:provider_unavailable")]
    request.getfixturevalue("row_9_unresolved")
    assert verified() == [
        ("run-1", "at-1", "12", "unresolved", "verifier:process_unknown:provider_unavailable")
    ]


def test_row_9_changed_in_a_copy_is_what_explain_predicts(
    repo: Repository,
    db_path: Path,
    store: FileReceiptStore,
    monkeypatch: pytest.MonkeyPatch,
    row_9_unresolved: DecisionTable,
) -> None:
    from reconciler.ops._explain_run import _primary_now

    _one_running(repo)
    monkeypatch.setattr(primary_pass_module, "inspect_handle", _unavailable)
    now = _primary_now(str(db_path), str(store.root), "standalone", "run-1")
    assert (now["row"], now["outcome"], now["reason"]) == (
        "9",
        "unresolved",
        "provider_unavailable",
    )
    assert now["row_facts"] == "probe: `unknown / provider_unavailable`"


def test_row_9_changed_in_a_copy_fails_the_diagram_check_against_the_record() -> None:
    # The table's diagram is checked against ADR-0068's transcription: the same check reads
    # the changed copy's drawing and names the row both ways.
    def problems(table: DecisionTable) -> list[str]:
        drawing = parse_mermaid(mermaid_source(drawn_spec(table)))
        return compare(PRIMARY_DECISION_RECORD, drawing)

    assert problems(PRIMARY_TABLE) == []
    assert problems(_row_9_unresolved()) == [
        "edge not in any table: probe -> unresolved [provider_unavailable] "
        "(drawn as 'row 9 [provider_unavailable]')",
        "missing edge probe -> failed [provider_unavailable] (ADR-0068 row 9)",
    ]
