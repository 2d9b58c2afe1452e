"""ADR-0448's decision table (spec 05) as one table: classification, the legacy_shadow guards,
the lifecycle, the pass's trigger and write per row all come from it, and it decides exactly
as the first-matching-row if/else did before it existed."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm import (
    Edge,
    EvidenceError,
    GuardRefused,
    IllegalTransition,
    Need,
    validate_spec,
)
from fsm.qinglong import (
    ATTEMPT_TERMINAL,
    GUARDS,
    LEGACY_DECISION_SPEC,
    LEGACY_EVIDENCE_FIELDS,
    LEGACY_GUARD_ROWS,
    LEGACY_ROWS,
    LEGACY_SPEC,
    LEGACY_TABLE,
    LEGACY_TRIGGERS,
    LEGACY_WRITES,
    QINGLONG_RULES,
    RUN_SPEC,
    RUN_TERMINAL,
    LegacyDecision,
    LegacyEngine,
    LegacyFacts,
    classify_legacy,
    decide_legacy,
    legacy_machine,
)
from reconciler.shadow import WRITES

# spec 05 "Per candidate", transcribed from the spec.
SPEC_05_ROWS = ["1", "2", "2b", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"]

_RUN_LEGAL = frozenset((e.source, e.dest) for e in RUN_SPEC.edges if e.guard is None)


def old_classify(f: LegacyFacts) -> tuple[str, str, str]:
    """classify_legacy as it was written before the table (if/else, first match wins)."""
    if f.error:
        return "12", "failed", "error_raised"
    if (
        not f.run_present
        or f.run_owner != "legacy"
        or not f.origin_enabled
        or f.run_status is None
        or f.run_status in RUN_TERMINAL
        or f.run_status == "lost"
    ):
        return "1", "skipped", "not_eligible"
    if f.active_attempts == 0:
        latest = f.latest_attempt_status
        if latest in ATTEMPT_TERMINAL and (f.run_status, latest) in _RUN_LEGAL:
            return "2", "repaired", "unique_terminal_attempt"
        return "2b", "ambiguous", "no_active_attempt"
    if f.active_attempts > 1:
        return "3", "ambiguous", "multiple_active_attempts"
    if f.evidence_truncated:
        return "4", "ambiguous", "evidence_truncated"
    if f.selection == "ambiguous":
        return "5", "ambiguous", "ambiguous_selection"
    if f.selection == "matched" and f.matched_finished:
        if f.matched_status == "stopped":
            return "6", "cancelled", "stopped_with_finished"
        if f.matched_status in ("succeeded", "failed"):
            return "7", "completed", "unique_finished_evidence"
    if f.origin == "scheduled_system":
        return "8", "pending", "awaiting_system_crond"
    if f.run_status == "queued" and f.attempt_status == "claimed":
        return "9", "abandoned", "no_spawn_evidence"
    if f.run_status in ("dispatching", "running") and f.attempt_status in (
        "claimed",
        "starting",
        "running",
    ):
        return "10", "marked_lost", "no_terminal_evidence"
    return "11", "ambiguous", "illegal_combination"


def new(f: LegacyFacts) -> tuple[str, str, str]:
    d = classify_legacy(f)
    return d.row, d.outcome, d.guard


RUN_STATUSES = (None, "created", "queued", "dispatching", "running", "succeeded", "lost")
ATTEMPT_STATUSES = (None, "claimed", "starting", "running", "succeeded", "failed", "lost")


def test_the_table_decides_like_the_old_if_else_over_every_run_and_attempt_fact() -> None:
    count = 0
    for present, owner, enabled, status, active, latest, error in itertools.product(
        (True, False),
        ("legacy", "runtime", None),
        (True, False),
        RUN_STATUSES,
        (0, 1, 2),
        (*ATTEMPT_STATUSES, "cancelled", "timed_out"),
        (False, True),
    ):
        f = LegacyFacts(
            present,
            run_owner=owner,
            origin="manual",
            origin_enabled=enabled,
            run_status=status,
            active_attempts=active,
            latest_attempt_status=latest,
            error=error,
        )
        assert new(f) == old_classify(f), f
        count += 1
    assert count == 2 * 3 * 2 * 7 * 3 * 9 * 2


def test_the_table_decides_like_the_old_if_else_over_every_evidence_fact() -> None:
    for origin, status, attempt, truncated, selection, matched, finished in itertools.product(
        ("manual", "scheduled_system"),
        ("created", "queued", "dispatching", "running", "waiting_approval"),
        ATTEMPT_STATUSES,
        (False, True),
        ("matched", "ambiguous", "none"),
        (None, "running", "succeeded", "stopped", "failed"),
        (False, True),
    ):
        f = LegacyFacts(
            True,
            run_owner="legacy",
            origin=origin,
            origin_enabled=True,
            run_status=status,
            active_attempts=1,
            attempt_status=attempt,
            evidence_truncated=truncated,
            selection=selection,  # type: ignore[arg-type]
            matched_status=matched,  # type: ignore[arg-type]
            matched_finished=finished,
        )
        assert new(f) == old_classify(f), f


ANY_FACTS = st.builds(
    LegacyFacts,
    run_present=st.booleans(),
    run_owner=st.sampled_from(("legacy", "runtime", None)),
    origin=st.sampled_from(("manual", "scheduled_system", None)),
    origin_enabled=st.booleans(),
    run_status=st.sampled_from(RUN_STATUSES),
    active_attempts=st.integers(0, 3),
    attempt_status=st.sampled_from(ATTEMPT_STATUSES),
    latest_attempt_status=st.sampled_from(ATTEMPT_STATUSES),
    evidence_truncated=st.booleans(),
    selection=st.sampled_from(("matched", "ambiguous", "none")),
    matched_status=st.sampled_from((None, "running", "succeeded", "stopped", "failed")),
    matched_finished=st.booleans(),
    error=st.booleans(),
)


@given(ANY_FACTS)
def test_any_facts_decide_like_the_old_if_else(f: LegacyFacts) -> None:
    assert new(f) == old_classify(f)


# --- One table, read by everyone ----------------------------------------------------------------


def test_every_row_id_of_spec_05_is_in_the_table_exactly_once() -> None:
    ids = [r.row for r in LEGACY_TABLE.rows]
    assert [i for i in ids if i in SPEC_05_ROWS] == SPEC_05_ROWS
    assert [i for i in ids if i not in SPEC_05_ROWS] == ["step 3", "step 4"]  # the evidence steps
    assert len(set(ids)) == len(ids)


def test_the_legacy_shadow_lifecycle_is_the_table_with_one_edge_per_row() -> None:
    # What fsm/qinglong/_tables.py declared by hand before the table (same order, triggers, guards).
    before = [
        ("skip", "skipped", "not_eligible", "1"),
        ("repair", "repaired", "unique_terminal_attempt", "2"),
        ("hold", "ambiguous", "no_active_attempt", "2b"),
        ("hold", "ambiguous", "multiple_active_attempts", "3"),
        ("hold", "ambiguous", "evidence_truncated", "4"),
        ("hold", "ambiguous", "ambiguous_selection", "5"),
        ("cancel", "cancelled", "stopped_with_finished", "6"),
        ("complete", "completed", "unique_finished_evidence", "7"),
        ("wait", "pending", "awaiting_system_crond", "8"),
        ("abandon", "abandoned", "no_spawn_evidence", "9"),
        ("mark_lost", "marked_lost", "no_terminal_evidence", "10"),
        ("hold", "ambiguous", "illegal_combination", "11"),
        ("fail", "failed", "error_raised", "12"),
    ]
    assert list(LEGACY_SPEC.edges) == [
        Edge(t, "candidate", d, g, f"ADR-0448 row {r}") for t, d, g, r in before
    ]
    assert dict(LEGACY_GUARD_ROWS) == {g: r for _, _, g, r in before}
    validate_spec(LEGACY_SPEC, GUARDS, QINGLONG_RULES)
    validate_spec(LEGACY_DECISION_SPEC, GUARDS, QINGLONG_RULES)


def test_the_pass_trigger_and_write_per_outcome_come_from_the_table() -> None:
    # The legacy_shadow trigger of each outcome (fsm/qinglong/_tables.py LEGACY_EDGES), the map the
    # pass used to keep its own copy of; the pass now reads `decision.trigger` from the table.
    assert dict(LEGACY_TRIGGERS) == {
        "skipped": "skip",
        "repaired": "repair",
        "ambiguous": "hold",
        "cancelled": "cancel",
        "completed": "complete",
        "pending": "wait",
        "abandoned": "abandon",
        "marked_lost": "mark_lost",
        "failed": "fail",
    }
    assert dict(LEGACY_WRITES) == {
        "skipped": None,
        "repaired": "repair",
        "ambiguous": None,
        "cancelled": "cancel",
        "completed": "complete",
        "pending": None,
        "abandoned": "abandon",
        "marked_lost": "mark_lost",
        "failed": None,
    }
    d = classify_legacy(LegacyFacts(True, "legacy", "manual", True, "queued", 1, "claimed"))
    assert d == LegacyDecision("9", "abandoned", "no_spawn_evidence")
    assert (d.trigger, d.write) == ("abandon", "abandon")
    assert LEGACY_ROWS["9"].cases[0].then == "abandoned"


def test_every_write_kind_of_the_table_has_exactly_one_writer_in_the_pass() -> None:
    kinds = {w for w in LEGACY_WRITES.values() if w is not None}
    # One effect per kind (a mapping keyed by the kind), and no effect the table never asks for.
    assert set(WRITES) == kinds
    assert all(kind == effect.write for kind, effect in WRITES.items())
    assert len({(e.plan, e.target, e.error) for e in WRITES.values()}) == len(WRITES)


def test_the_shadow_pass_keeps_no_trigger_map_of_its_own() -> None:
    import reconciler.shadow._pass as shadow_pass
    import reconciler.shadow._writes as shadow_writes

    for module in (shadow_pass, shadow_writes):
        assert not hasattr(module, "TRIGGER_OF")
        assert "LEGACY_TRIGGERS" not in vars(module)


def test_every_legacy_guard_holds_exactly_when_its_row_is_the_first_to_match() -> None:
    facts = LegacyFacts(True, "legacy", "scheduled_system", True, "running", 1, "running")
    assert classify_legacy(facts).row == "8"
    # Row 10's own facts hold here too, but row 8 comes first: its edge refuses.
    assert GUARDS["awaiting_system_crond"](facts)
    assert not GUARDS["no_terminal_evidence"](facts)
    with pytest.raises(GuardRefused):
        legacy_machine().plan("candidate", "mark_lost", facts)
    assert legacy_machine().plan("candidate", "wait", facts).dest == "pending"


# --- The evidence order ------------------------------------------------------------------------


def test_the_decision_asks_for_the_attempts_and_the_evidence_only_when_a_row_needs_them() -> None:
    eligible = LegacyFacts(True, "legacy", "manual", True, "running")
    assert decide_legacy(eligible, gathered=()) == Need("read_attempts", "step 3")
    one = LegacyFacts(True, "legacy", "manual", True, "running", 1, "running")
    assert decide_legacy(one, gathered=("read_attempts",)) == Need("read_evidence", "step 4")
    assert decide_legacy(one, gathered=("read_attempts", "read_evidence")) == LegacyDecision(
        "10", "marked_lost", "no_terminal_evidence"
    )
    # Row 1 needs nothing but the Run; an exception decides wherever it happened.
    gone = LegacyFacts(False)
    assert decide_legacy(gone, gathered=()) == LegacyDecision("1", "skipped", "not_eligible")
    boom = LegacyFacts(True, "legacy", "manual", True, "running", error=True)
    assert decide_legacy(boom, gathered=()) == LegacyDecision("12", "failed", "error_raised")


# --- The candidate's core: one evidence state at a time, only the fields it fills ---------------

RUN_READ = {
    "run_present": True,
    "run_owner": "legacy",
    "origin": "manual",
    "origin_enabled": True,
    "run_status": "queued",
}


def test_the_core_asks_step_by_step_and_each_observation_is_a_new_core() -> None:
    start = LegacyEngine().start()
    assert start.next() == Need("read_run", None)
    read_run = start.observe("read_run", **RUN_READ)
    assert start.next() == Need("read_run", None)  # the earlier core is what it was
    assert read_run.next() == Need("read_attempts", "step 3")
    attempts = read_run.observe("read_attempts", active_attempts=1, attempt_status="claimed")
    assert attempts.next() == Need("read_evidence", "step 4")
    decided = attempts.observe("read_evidence", selection="none")
    assert decided.next() == LegacyDecision("9", "abandoned", "no_spawn_evidence")
    assert decided.path == ("step 3", "step 4", "9")
    assert decided.state == "read_evidence"
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'state'"):
        decided.state = "read_run"  # type: ignore[misc]


def test_the_core_is_asked_once_per_observation_never_walking_again_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = LegacyEngine()
    asked: list[str] = []
    # The machine itself is fired once per observation (a fresh engine: its memo is empty).
    choose = engine.machine._choose

    def counted(state: str, facts: object, event: str = "decide") -> Any:
        asked.append(state)
        return choose(state, facts, event)

    monkeypatch.setattr(engine.machine, "_choose", counted)
    core = engine.start().observe("read_run", **RUN_READ)
    core = core.observe("read_attempts", active_attempts=1, attempt_status="claimed")
    core = core.observe("read_evidence", selection="none")
    assert asked == ["read_run", "read_attempts", "read_evidence"]


def test_the_core_refuses_evidence_it_did_not_ask_for_and_fields_another_state_fills() -> None:
    start = LegacyEngine().start()
    with pytest.raises(IllegalTransition):
        start.observe("read_attempts", active_attempts=1)
    with pytest.raises(EvidenceError, match=r"read_run does not observe \['active_attempts'\]"):
        start.observe("read_run", **RUN_READ, active_attempts=1)
    with pytest.raises(EvidenceError, match=r"does not observe \['error'\]"):
        start.observe("read_run", error=True)
    gone = start.observe("read_run", run_present=False)
    assert gone.next() == LegacyDecision("1", "skipped", "not_eligible")
    with pytest.raises(IllegalTransition):  # decided: nothing more is observed
        gone.observe("read_attempts", active_attempts=0)
    assert {s: sorted(f) for s, f in LEGACY_EVIDENCE_FIELDS.items()} == {
        "read_run": ["origin", "origin_enabled", "run_owner", "run_present", "run_status"],
        "read_attempts": ["active_attempts", "attempt_status", "latest_attempt_status"],
        "read_evidence": ["evidence_truncated", "matched_finished", "matched_status", "selection"],
    }


def test_an_exception_decides_row_12_from_the_state_the_core_is_in() -> None:
    read_run = LegacyEngine().start().observe("read_run", **RUN_READ)
    failed = read_run.fail(True)
    assert failed.next() == LegacyDecision("12", "failed", "error_raised")
    assert (failed.state, failed.path) == ("read_attempts", ("step 3", "12"))
    assert failed.facts.error is True and read_run.facts.error is False


@given(ANY_FACTS)
def test_any_facts_gathered_step_by_step_decide_as_the_whole_table_does(f: LegacyFacts) -> None:
    f = replace(f, error=False)  # an exception is the core's `fail`, not evidence
    core = LegacyEngine().start()
    while isinstance(need := core.next(), Need):
        fields = {k: getattr(f, k) for k in LEGACY_EVIDENCE_FIELDS[need.evidence]}
        core = core.observe(need.evidence, **fields)
    assert core.next() == classify_legacy(f)


def test_the_decision_machine_draws_every_row_as_an_edge_labelled_with_its_row() -> None:
    labels = {(e.trigger, e.source, e.dest, e.guard) for e in LEGACY_DECISION_SPEC.edges}
    assert ("row 6", "read_evidence", "cancelled", "stopped_with_finished") in labels
    assert ("row 2b", "read_attempts", "ambiguous", "no_active_attempt") in labels
    assert {e.source for e in LEGACY_DECISION_SPEC.edges if e.trigger == "row 12"} == {
        "read_run",
        "read_attempts",
        "read_evidence",
    }
    rows = {e.trigger.removeprefix("row ") for e in LEGACY_DECISION_SPEC.edges}
    assert rows == {*SPEC_05_ROWS, "step 3", "step 4"}
