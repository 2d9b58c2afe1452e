"""The decision tables pinned field by field: ADR-0068's (spec 04) and ADR-0448's (spec 05).

mutmut does not mutate module-level data, so a wrong guard, next state, reason, write or trigger
in a table would survive every mutant run. Here each table is compared with an expectation
written from its spec (row by row, in "first matching row wins" order): ADR-0068's with the
records' transcription, by the data-level check of `qlfsm diagrams check`; for ADR-0068's, every
single-case change of the table (deleted, or any one field changed) is also shown to change
some decision over a fact space, so that no case is dead weight the expectation could hide.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest
from _support import built_again

from fsm import (
    DecisionTable,
    MachineDefinitionError,
)
from fsm.qinglong import (
    ATTEMPT_SPEC,
    LEGACY_ROW_FACTS,
    LEGACY_SPEC,
    LEGACY_TABLE,
    PRIMARY_DECISIONS,
    PRIMARY_EVIDENCE,
    PRIMARY_EVIDENCE_FIELDS,
    PRIMARY_TABLE,
    RUN_SPEC,
    LegacyFacts,
)
from fsm.qinglong._legacy import LEGACY_STEP_GUARDS, LEGACY_VIEWS, check_one_trigger_per_outcome
from reconciler.diagrams import compare_table
from reconciler.diagrams._check_tables import ADR_0068

R, Q, P, G, RR, RC = PRIMARY_EVIDENCE


def _cases(table: DecisionTable) -> list[tuple[str, str, str, str, str, str | None, str | None]]:
    return [(r.row, *c) for r in table.rows for c in r.cases]


def test_every_case_of_the_adr_0068_table_is_the_one_spec_04_gives() -> None:
    # Row by row, case by case (state, guard, what follows, reason, write, trigger), in spec 04
    # order with its citation, facts and exception row, against the records' transcription
    # (reconciler/diagrams/_record_adr0068.py): the data-level check `qlfsm diagrams check`
    # runs (tests/test_diagrams_tables.py shows each comparison failing, naming the row).
    assert compare_table(ADR_0068, PRIMARY_TABLE, (RUN_SPEC, ATTEMPT_SPEC)) == []
    assert PRIMARY_TABLE.evidence is PRIMARY_EVIDENCE
    assert PRIMARY_TABLE.decisions is PRIMARY_DECISIONS
    # What each gather observes (ADR-0068 §2; the pass's adapter fills exactly these).
    assert {
        R: {
            "run_present",
            "run_owner",
            "run_status",
            "cancel_requested",
            "cancel_reason",
            "attempt_count",
            "active_attempts",
            "attempt_status",
            "executor_type",
            "handle_present",
            "pid_valid",
        },
        Q: {"first_receipt", "receipt_exit_code", "receipt_problem"},
        P: {"process", "probe_reason", "handle_pid_matches"},
        G: {"grace_paid"},
        RR: {"second_receipt", "receipt_exit_code", "receipt_problem"},
        RC: {"unchanged_on_recheck"},
    } == PRIMARY_EVIDENCE_FIELDS


def test_the_table_module_built_again_gives_the_same_table() -> None:
    # The table is built once, when fsm is imported; building it again runs the same helpers
    # (so a wrong helper is seen here, not only in the first import).
    module = importlib.reload(importlib.import_module("fsm.qinglong._primary_table"))
    assert compare_table(ADR_0068, module.PRIMARY_TABLE, (RUN_SPEC, ATTEMPT_SPEC)) == []
    assert module.PRIMARY_TABLE == PRIMARY_TABLE
    assert module.PRIMARY_EVIDENCE_FIELDS == PRIMARY_EVIDENCE_FIELDS
    # The rows the pass names outside the walk (spec 04 "Summary"): the exception row, the rows
    # that name the latest Attempt, and the receipt-root configuration row (D-3c).
    rows = module.PRIMARY_PASS_ROWS
    assert (rows.exception, rows.name_attempt, rows.receipt_root) == (
        "14",
        frozenset({"4", "4b"}),
        "receipt_root",
    )


# --- ADR-0448's table (spec 05 "Per candidate") ------------------------------------------------

LR, LA, LE = "read_run", "read_attempts", "read_evidence"
# (row, evidence state, guard, then, reason, write, trigger): the outcome is the decision
# state; the trigger is the legacy_shadow edge; the write what the pass commits (spec 05).
LEGACY_EXPECTED: list[tuple[str, str, str, str, str, str | None, str | None]] = [
    ("1", LR, "not_eligible", "skipped", "", None, "skip"),
    ("step 3", LR, "eligible_candidate", LA, "", None, None),
    ("2", LA, "unique_terminal_attempt", "repaired", "", "repair", "repair"),
    ("2b", LA, "no_active_attempt", "ambiguous", "", None, "hold"),
    ("3", LA, "multiple_active_attempts", "ambiguous", "", None, "hold"),
    ("step 4", LA, "one_active_attempt", LE, "", None, None),
    ("4", LE, "evidence_truncated", "ambiguous", "", None, "hold"),
    ("5", LE, "ambiguous_selection", "ambiguous", "", None, "hold"),
    ("6", LE, "stopped_with_finished", "cancelled", "", "cancel", "cancel"),
    ("7", LE, "unique_finished_evidence", "completed", "", "complete", "complete"),
    ("8", LE, "awaiting_system_crond", "pending", "", None, "wait"),
    ("9", LE, "no_spawn_evidence", "abandoned", "", "abandon", "abandon"),
    ("10", LE, "no_terminal_evidence", "marked_lost", "", "mark_lost", "mark_lost"),
    ("11", LE, "illegal_combination", "ambiguous", "", None, "hold"),
    *(("12", s, "error_raised", "failed", "", None, "fail") for s in (LR, LA, LE)),
]


def test_every_case_of_the_adr_0448_table_is_the_one_spec_05_gives() -> None:
    assert _cases(LEGACY_TABLE) == LEGACY_EXPECTED
    assert LEGACY_TABLE.name == "legacy_decision"
    assert LEGACY_TABLE.evidence == (LR, LA, LE)
    # The nine outcomes of spec 05, each its own decision state.
    outcomes = "completed cancelled abandoned marked_lost repaired pending ambiguous skipped failed"
    assert dict(LEGACY_TABLE.decisions) == {o: o for o in outcomes.split()}
    assert [r.row for r in LEGACY_TABLE.rows if r.on_exception] == ["12"]
    for r in LEGACY_TABLE.rows:
        section = {"step 3": "§3", "step 4": "§4"}.get(r.row, f"row {r.row}")
        assert r.cites == f"ADR-0448 {section}"


# spec 05 "Per candidate", the facts column word for word; the two steps of the evidence order
# (ADR-0448 §3, §4) have no row in spec 05 and say what they read.
LEGACY_FACTS: dict[str, str] = {
    "1": "Run gone, not legacy-owned, origin not enabled, or Run already terminal/lost",
    "step 3": "an eligible legacy candidate: read its active Attempts",
    "2": "no active Attempt, latest Attempt terminal, and Run → that status is legal",
    "2b": "no active Attempt otherwise",
    "3": "more than one active Attempt",
    "step 4": "exactly one active Attempt: read the cron's RunningInstances and select",
    "4": "evidence truncated (more than 8 rows for the cron)",
    "5": "selection ambiguous",
    "6": "matched row has `finished_at` and status stopped",
    "7": "matched row has `finished_at` and status finished / error",
    "8": "otherwise, origin `scheduled_system`",
    "9": "Run `queued` and Attempt `claimed` (no spawn evidence)",
    "10": "Run `dispatching/running` and Attempt `claimed/starting/running`",
    "11": "anything else (an illegal combination)",
    "12": "exception",
}


def _assert_is_spec_05s_table(table: DecisionTable) -> None:
    assert _cases(table) == LEGACY_EXPECTED
    assert table.name == "legacy_decision"
    assert table.evidence == (LR, LA, LE)
    outcomes = "completed cancelled abandoned marked_lost repaired pending ambiguous skipped failed"
    assert dict(table.decisions) == {o: o for o in outcomes.split()}
    assert {r.row: r.facts for r in table.rows} == LEGACY_FACTS
    assert [r.row for r in table.rows] == list(LEGACY_FACTS)
    assert [r.row for r in table.rows if r.on_exception] == ["12"]
    for r in table.rows:
        section = {"step 3": "§3", "step 4": "§4"}.get(r.row, f"row {r.row}")
        assert r.cites == f"ADR-0448 {section}"


def test_the_adr_0448_table_is_spec_05s_field_by_field_and_a_copy_passes_its_check() -> None:
    # The table is data, checked once where it is built; its check is run again here on a
    # copy, where a wrong check can be seen.
    copy = LEGACY_TABLE._replace(rows=tuple(LEGACY_TABLE.rows))
    _assert_is_spec_05s_table(copy)
    check_one_trigger_per_outcome(copy)
    assert copy == LEGACY_TABLE
    assert copy is not LEGACY_TABLE


def test_the_legacy_module_built_again_gives_spec_05s_table_and_the_same_views() -> None:
    # The ADR-0448 table and its views are built once, when fsm is imported; building them again
    # runs the same helpers (`_row`, `_step`, `legacy_views`, `_step_guard`), so a wrong helper
    # is seen here, not only at the first import.
    module = built_again("fsm.qinglong._legacy")
    _assert_is_spec_05s_table(module.LEGACY_TABLE)
    assert module.LEGACY_TABLE == LEGACY_TABLE
    views = module.LEGACY_VIEWS
    assert views.table == LEGACY_TABLE
    assert views.spec == LEGACY_SPEC
    assert views.decision_spec == module.LEGACY_DECISION_SPEC
    assert dict(views.guard_rows) == dict(LEGACY_VIEWS.guard_rows)
    assert dict(views.triggers) == dict(LEGACY_VIEWS.triggers)
    assert dict(views.writes) == dict(LEGACY_VIEWS.writes)
    assert dict(views.rows) == dict(LEGACY_VIEWS.rows)
    assert [(k, g.__name__, g.__qualname__) for k, g in views.step_guards.items()] == [
        (k, k, k) for k in LEGACY_VIEWS.step_guards
    ]
    held = LegacyFacts(
        run_present=True,
        run_owner="legacy",
        origin_enabled=True,
        run_status="running",
        active_attempts=1,
    )
    for facts in (held, dataclasses.replace(held, active_attempts=2), None):
        assert {k: g(facts) for k, g in views.step_guards.items()} == {
            k: g(facts) for k, g in LEGACY_VIEWS.step_guards.items()
        }


def test_the_legacy_lifecycle_has_one_edge_per_deciding_row_of_spec_05() -> None:
    # spec 07: `candidate` -> outcome by the row's trigger, guarded by the row's guard.
    deciding = [e for e in LEGACY_EXPECTED if e[3] in LEGACY_TABLE.decisions and e[0] != "12"]
    expected = [
        (t, "candidate", then, g, f"ADR-0448 row {row}") for row, _, g, then, _, _, t in deciding
    ]
    expected.append(("fail", "candidate", "failed", "error_raised", "ADR-0448 row 12"))
    edges = [(e.trigger, e.source, e.dest, e.guard, e.cites) for e in LEGACY_SPEC.edges]
    assert edges == expected
    assert LEGACY_SPEC.initial == "candidate"
    assert set(LEGACY_SPEC.terminal) == set(LEGACY_TABLE.decisions)


def _changed(table: DecisionTable, changes: dict[str, dict[str, str]]) -> DecisionTable:
    """``table`` with the one case of each named row changed."""
    rows = tuple(
        r._replace(cases=(r.cases[0]._replace(**changes[r.row]),)) if r.row in changes else r
        for r in table.rows
    )
    return table._replace(rows=rows)


def test_an_outcome_reached_by_two_triggers_or_two_writes_is_refused_naming_it() -> None:
    check_one_trigger_per_outcome(LEGACY_TABLE._replace())  # spec 05's own table: one each
    # Row 1 leads to `repaired` too, by a trigger of its own: exactly two ways in, the least
    # that is wrong.
    two = _changed(LEGACY_TABLE, {"1": {"then": "repaired"}})
    with pytest.raises(MachineDefinitionError) as refused:
        check_one_trigger_per_outcome(two)
    assert refused.value.machine == "legacy_decision"
    assert refused.value.problem == "outcomes with two triggers: ['repaired']"
    # The same trigger but another write is refused as well.
    other_write = _changed(LEGACY_TABLE, {"2b": {"write": "repair"}})
    with pytest.raises(MachineDefinitionError) as refused:
        check_one_trigger_per_outcome(other_write)
    assert refused.value.problem == "outcomes with two triggers: ['ambiguous']"
    # Every outcome with two is named, in order; rows 2b, 3, 4, 5, 11 agree on `ambiguous`.
    both = _changed(LEGACY_TABLE, {"9": {"then": "repaired"}, "2b": {"trigger": "park"}})
    with pytest.raises(MachineDefinitionError) as refused:
        check_one_trigger_per_outcome(both)
    assert refused.value.problem == "outcomes with two triggers: ['ambiguous', 'repaired']"


def test_the_two_step_guards_are_named_and_read_only_their_own_facts() -> None:
    guards = LEGACY_STEP_GUARDS
    assert list(guards) == ["eligible_candidate", "one_active_attempt"]
    # The guards of the table's two steps to more evidence, and no other.
    steps = [c.guard for r in LEGACY_TABLE.rows for c in r.cases if c.then in LEGACY_TABLE.evidence]
    assert list(guards) == steps
    for name, guard in guards.items():
        # transitions labels the diagram's condition by the callable's name.
        assert (guard.__name__, guard.__qualname__) == (name, name)
        own = LEGACY_ROW_FACTS[name]
        held = LegacyFacts(
            run_present=True,
            run_owner="legacy",
            origin_enabled=True,
            run_status="running",
            active_attempts=1,
        )
        assert own(held) and guard(held)
        refused = dataclasses.replace(held, active_attempts=2)
        assert guard(refused) is own(refused)
        assert guard(None) is False
        assert guard(object()) is False
