"""The decision engine (tables as `transitions` machines) and the ADR-0068 core, pinned.

Every validation rule of a decision table with the smallest table that breaks it and its exact
problem; the engine's answers (first matching case, refusals with machine, state, event and
guards); the core's walk (what it asks, in which order, what it refuses); the terminal mapping
and the filled reason codes. Engines and cores are built fresh in each test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from fsm import (
    Case,
    DecisionEngine,
    DecisionRow,
    DecisionTable,
    Edge,
    EvidenceError,
    GuardRefused,
    IllegalTransition,
    MachineDefinitionError,
    Need,
    Taken,
    Walk,
    drawn_spec,
)
from fsm.qinglong import (
    PRIMARY_DECISION_SPEC,
    PRIMARY_EVIDENCE_FIELDS,
    PRIMARY_GUARDS,
    PRIMARY_TABLE,
    PrimaryCore,
    PrimaryDecision,
    PrimaryFacts,
    decide_primary,
    receipt_terminal,
)
from fsm.qinglong._primary import check_lost_needs_grace, paths_to

G = "run_gone"  # any known guard name


def row(rid: str, *cases: Case, on_exception: bool = False) -> DecisionRow:
    return DecisionRow(rid, "", "", cases, on_exception)


def table(*rows: DecisionRow, evidence: tuple[str, ...] = ("a", "b")) -> DecisionTable:
    return DecisionTable("t", evidence, {"done": "ok", "held": "no"}, rows)


GOOD = (
    row("1", Case("a", G, "b")),
    row("2", Case("b", G, "done")),
    row("3", Case("b", "error_raised", "held")),
)


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (table(*GOOD, evidence=()), "evidence states must be given, each once"),
        (table(*GOOD, evidence=("a", "b", "a")), "evidence states must be given, each once"),
        (
            DecisionTable("t", ("a", "b", "done"), {"done": "ok"}, GOOD),
            "states both evidence and decision: ['done']",
        ),
        (
            table(*GOOD, row("1", Case("a", "error_raised", "done"))),
            "row ids declared twice: ['1']",
        ),
        (table(*GOOD, row("4")), "row 4 applies nowhere"),
        (
            table(*GOOD, row("4", Case("c", G, "done"))),
            "row 4 in 'c': 'c' is not an evidence state",
        ),
        (
            table(*GOOD, row("4", Case("done", G, "b"))),
            "row 4 in 'done': 'done' is not an evidence state",
        ),
        (table(*GOOD, row("4", Case("a", "run_gone2", "x"))), "row 4 in 'a': unknown state 'x'"),
        (table(*GOOD, row("4", Case("a", "nope", "done"))), "row 4 in 'a': unknown guard 'nope'"),
        (
            table(*GOOD, row("4", Case("b", G, "held"))),
            "row 4 in 'b': guard 'run_gone' is tried twice in 'b'",
        ),
        (
            table(row("1", Case("a", G, "b", reason="r")), *GOOD[1:]),
            "row 1 in 'a': a step to more evidence decides nothing",
        ),
        (
            table(row("1", Case("a", G, "b", write="w")), *GOOD[1:]),
            "row 1 in 'a': a step to more evidence decides nothing",
        ),
        (
            table(row("1", Case("a", G, "b", trigger="t")), *GOOD[1:]),
            "row 1 in 'a': a step to more evidence decides nothing",
        ),
        (
            table(
                row("1", Case("a", G, "done")), row("3", Case("b", G, "held"), on_exception=True)
            ),
            "evidence states no row decides from: ['b']",
        ),
        (
            table(row("1", Case("a", G, "done")), row("2", Case("b", G, "done"))),
            "unreachable states ['b', 'held']",
        ),
        (
            table(
                row("1", Case("a", G, "b")),
                row("2", Case("b", G, "a"), Case("b", "error_raised", "done")),
                row("3", Case("a", "error_raised", "held")),
            ),
            "evidence must only be added, in the declared order: ['b -> a']",
        ),
        (
            table(
                row("1", Case("a", G, "a"), Case("a", "error_raised", "b")),
                row("2", Case("b", G, "done"), Case("b", "error_raised", "held")),
            ),
            "evidence must only be added, in the declared order: ['a -> a']",
        ),
    ],
)
def test_each_rule_of_a_decision_table_refuses_the_smallest_table_that_breaks_it(
    bad: DecisionTable, problem: str
) -> None:
    with pytest.raises(MachineDefinitionError) as refused:
        DecisionEngine(bad, PRIMARY_GUARDS)
    assert refused.value.problem == problem
    assert refused.value.machine == "t"


@pytest.mark.parametrize(
    ("observes", "named"),
    [({"a": frozenset()}, ["b"]), ({"a": frozenset(), "b": frozenset(), "c": frozenset()}, ["c"])],
)
def test_observes_that_do_not_name_each_evidence_state_are_refused_naming_the_difference(
    observes: dict[str, frozenset[str]], named: list[str]
) -> None:
    with pytest.raises(MachineDefinitionError) as refused:
        DecisionEngine(table(*GOOD)._replace(observes=observes), PRIMARY_GUARDS)
    assert refused.value.problem == f"observes must name each evidence state: {named}"


def test_the_smallest_good_table_builds() -> None:
    assert DecisionEngine(table(*GOOD), PRIMARY_GUARDS).table == table(*GOOD)


def test_a_table_without_observes_is_walked_but_starts_no_core_and_says_why() -> None:
    with pytest.raises(MachineDefinitionError) as refused:
        DecisionEngine(table(*GOOD), PRIMARY_GUARDS).start(PrimaryFacts(), lambda *a: None)
    assert (refused.value.machine, refused.value.problem) == (
        "t",
        "a core needs the table's observes",
    )
    assert str(refused.value) == (
        "machine 't' is invalid: a core needs the table's observes; fix that machine's declaration"
    )


# --- the engine's answers ----------------------------------------------------------------------


def engine() -> DecisionEngine:
    """A fresh two-step machine: ``a`` (row 1 then row 2 by guard order), ``b`` (rows 2, 3)."""
    return DecisionEngine(
        table(
            row(
                "1",
                Case("a", "run_gone", "done", "gone", "w1", "t1"),
                Case("a", "status_changed", "b"),
            ),
            row(
                "2",
                Case("a", "not_runtime_owned", "held", "owner"),
                Case("b", "trusted_receipt", "done", "r"),
            ),
            row("3", Case("b", "invalid_receipt", "held", "bad")),
            row(
                "9",
                *(Case(s, "error_raised", "held", "err") for s in ("a", "b")),
                on_exception=True,
            ),
        ),
        PRIMARY_GUARDS,
    )


GONE = PrimaryFacts(run_present=False)
CHANGED = PrimaryFacts(run_present=True, run_owner="runtime", run_status="x", page_status="y")


def test_the_first_case_whose_guard_holds_is_taken_in_table_order() -> None:
    e = engine()
    assert e.choose("a", GONE) == Taken(e.table.rows[0], e.table.rows[0].cases[0])
    assert e.choose("a", CHANGED) == Taken(e.table.rows[0], e.table.rows[0].cases[1])
    both = PrimaryFacts(run_present=True, run_owner="legacy", run_status="x", page_status="y")
    # status_changed (row 1) and not_runtime_owned (row 2) both hold: row 1 is first.
    assert e.choose("a", both).case.then == "b"
    owner = PrimaryFacts(run_present=True, run_owner="legacy", run_status="x", page_status="x")
    assert e.choose("a", owner) == Taken(e.table.rows[1], e.table.rows[1].cases[0])


def test_no_case_holding_is_refused_naming_every_guard_tried_there() -> None:
    e = engine()
    with pytest.raises(GuardRefused) as refused:
        e.choose("a", PrimaryFacts(run_present=True, run_owner="runtime"))
    r = refused.value
    assert (r.machine, r.state, r.event) == ("t", "a", "decide")
    assert r.guard == "run_gone | status_changed | not_runtime_owned"
    with pytest.raises(GuardRefused) as refused:
        e.choose("b", PrimaryFacts(error=None), "fail")
    assert (refused.value.state, refused.value.event, refused.value.guard) == (
        "b",
        "fail",
        "error_raised",
    )


def test_leaving_a_decision_state_or_firing_an_unknown_event_is_illegal() -> None:
    e = engine()
    # "to_done" would exist with auto_transitions: the machine offers no shortcut to a decision.
    for state, event in (("done", "decide"), ("held", "fail"), ("a", "go"), ("a", "to_done")):
        with pytest.raises(IllegalTransition) as refused:
            e.choose(state, GONE, event)
        assert (refused.value.machine, refused.value.state, refused.value.event) == (
            "t",
            state,
            event,
        )


def test_the_exception_rows_answer_only_the_fail_event() -> None:
    e = engine()
    failed = PrimaryFacts(run_present=False, error="boom")
    assert e.choose("a", failed).row.row == "1"  # decide ignores the exception rows
    taken = e.choose("a", failed, "fail")
    assert (taken.row.row, taken.case) == ("9", Case("a", "error_raised", "held", "err"))
    assert e.choose("b", failed, "fail").case.state == "b"


def _seen(*states: str) -> Callable[[str, object], bool]:
    return lambda state, facts: state in states


def test_a_walk_stops_at_the_first_evidence_not_observed_naming_the_row_that_asked() -> None:
    e = engine()
    assert e.walk(CHANGED, _seen()) == Walk("a", (), Need("a", None), None)
    w = e.walk(CHANGED, _seen("a"))
    assert w == Walk("b", (e.choose("a", CHANGED),), Need("b", "1"), None)
    trusted = PrimaryFacts(
        run_present=True,
        run_owner="runtime",
        run_status="x",
        page_status="y",
        first_receipt="trusted",
    )
    w = e.walk(trusted, _seen("a", "b"))
    assert w.state == "b"
    assert [t.row.row for t in w.taken] == ["1"]
    assert w.need is None
    assert w.decided == Taken(e.table.rows[1], e.table.rows[1].cases[1])
    # Resumed from b: nothing taken again.
    assert e.walk(trusted, _seen("b"), "b") == Walk("b", (), None, w.decided)
    assert e.walk(GONE, _seen("a")) == Walk("a", (), None, e.choose("a", GONE))


def test_a_failed_walk_decides_the_exception_row_where_it_stands_without_any_evidence() -> None:
    e = engine()
    failed = PrimaryFacts(error="boom")
    assert e.walk(failed, _seen(), failed=True) == Walk(
        "a", (), None, e.choose("a", failed, "fail")
    )
    w = e.walk(failed, _seen(), "b", failed=True)
    assert (w.state, w.decided and w.decided.case.state) == ("b", "b")
    with pytest.raises(GuardRefused):
        e.walk(PrimaryFacts(), _seen(), failed=True)


def test_walking_from_a_decision_state_is_illegal() -> None:
    with pytest.raises(IllegalTransition) as refused:
        engine().walk(GONE, _seen("a", "b"), "done")
    r = refused.value
    assert (r.machine, r.state, r.event) == ("t", "done", "decide")


def test_the_drawn_machine_has_one_edge_per_case_labelled_by_its_row() -> None:
    t = table(*GOOD, row("step 9", Case("a", "error_raised", "held")))
    t = t._replace(rows=tuple(r._replace(cites=f"cites {r.row}") for r in t.rows))
    spec = drawn_spec(t)
    assert spec.name == "t"
    assert spec.states == ("a", "b", "done", "held")
    assert spec.initial == "a"
    assert spec.terminal == frozenset({"done", "held"})
    assert spec.edges == (
        Edge("row 1", "a", "b", G, "cites 1"),
        Edge("row 2", "b", "done", G, "cites 2"),
        Edge("row 3", "b", "held", "error_raised", "cites 3"),
        Edge("step 9", "a", "held", "error_raised", "cites step 9"),
    )
    assert DecisionRow("3b", "", "cites", ()).label == "row 3b"


# --- the ADR-0068 core -------------------------------------------------------------------------

RUN: dict[str, Any] = {
    "run_present": True,
    "run_owner": "runtime",
    "run_status": "running",
    "attempt_count": 1,
    "active_attempts": 1,
    "attempt_status": "running",
    "executor_type": "local_process",
    "handle_present": True,
    "pid_valid": True,
    "cancel_requested": False,
    "cancel_reason": None,
}
DEAD: dict[str, Any] = {
    "process": "not_running",
    "probe_reason": "pid_absent",
    "handle_pid_matches": True,
}


def dead_core() -> PrimaryCore:
    """A fresh core for a running candidate whose process is gone, up to the grace."""
    core = PrimaryCore("running")
    core = core.observe("read_run", **RUN)
    core = core.observe("read_receipt", first_receipt="missing")
    core = core.observe("probe", **DEAD)
    return core


def test_the_core_asks_for_each_evidence_in_order_naming_the_row_that_asked() -> None:
    core = PrimaryCore("running")
    assert (core.state, core.path) == ("read_run", ())  # where it starts, before asking
    assert core.next() == Need("read_run", None)
    assert core.next() == Need("read_run", None)
    core = core.observe("read_run", **RUN)
    assert core.next() == Need("read_receipt", "step 2.2")
    core = core.observe("read_receipt", first_receipt="missing")
    assert core.next() == Need("probe", "step 2.5")
    core = core.observe("probe", **DEAD)
    assert core.next() == Need("pay_grace", "13")
    core = core.observe("pay_grace", grace_paid=False)
    assert core.next() == Need("pay_grace", "13")  # not paid: asked again
    core = core.observe("pay_grace", grace_paid=True)
    assert core.next() == Need("reread_receipt", "13")
    core = core.observe("reread_receipt", second_receipt="missing")
    assert core.next() == Need("recheck_run", "13")
    core = core.observe("recheck_run", unchanged_on_recheck=True)
    decision = core.next()
    assert isinstance(decision, PrimaryDecision)
    assert decision == PrimaryDecision(
        row="13",
        state="lost",
        outcome="recovered",
        reason="process_not_running:pid_absent",
        guard="not_running_after_grace",
        write="lose",
        trigger="lose_after_grace",
        terminal="lost",
        facts=core.facts,
        path=("step 2.2", "step 2.5", "13", "13", "13", "13"),
    )
    assert core.facts == PrimaryFacts(
        page_status="running",
        **RUN,
        first_receipt="missing",
        **DEAD,
        grace_paid=True,
        second_receipt="missing",
        unchanged_on_recheck=True,
    )
    assert core.state == "recheck_run"
    assert core.next() == decision  # a decision does not move the core
    failed = core.fail("OSError: locked").next()
    assert (failed.row, failed.state, failed.reason, failed.path) == (
        "14",
        "failed",
        "error:OSError: locked",
        ("step 2.2", "step 2.5", "13", "13", "13", "14"),
    )


def test_the_core_refuses_other_evidence_and_fields_that_evidence_does_not_fill() -> None:
    core = PrimaryCore("running")
    with pytest.raises(IllegalTransition) as refused:
        core = core.observe("probe", **DEAD)
    r = refused.value
    assert (r.machine, r.state, r.event) == ("primary_decision", "read_run", "probe")
    with pytest.raises(EvidenceError) as bad:
        core = core.observe("read_run", run_present=True, process="running", grace_paid=True)
    assert (bad.value.machine, bad.value.state) == ("primary_decision", "read_run")
    assert bad.value.problem.startswith(
        "read_run does not observe ['grace_paid', 'process']; it observes ['active_attempts', "
    )
    assert core.facts == PrimaryFacts(page_status="running")  # nothing kept
    core = core.observe("read_run", **RUN)
    with pytest.raises(IllegalTransition):
        core = core.observe("read_run", **RUN)  # once
    core = dead_core()
    core = core.observe("pay_grace", grace_paid=True)
    core = core.observe("reread_receipt", second_receipt="trusted", receipt_exit_code=0)
    decided = core.next()
    assert isinstance(decided, PrimaryDecision)
    with pytest.raises(IllegalTransition) as refused:
        core = core.observe("recheck_run", unchanged_on_recheck=True)  # a decision asks for nothing
    assert (refused.value.state, refused.value.event) == ("reread_receipt", "recheck_run")


def test_observing_first_without_asking_is_the_same_as_asking_first() -> None:
    asked, unasked = PrimaryCore("running"), PrimaryCore("running")
    asked.next()
    answers = [
        core.observe("read_run", **RUN).observe("read_receipt", first_receipt="missing").next()
        for core in (asked, unasked)
    ]
    assert answers == [Need("probe", "step 2.5")] * 2


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        (
            {"second_receipt": "trusted", "receipt_exit_code": 0},
            ("13", "completed", "receipt_succeeded_after_grace", "complete", "succeed_by_receipt"),
        ),
        (
            {"second_receipt": "invalid", "receipt_problem": "bad_json"},
            ("13", "quarantined", "invalid_receipt:bad_json", "quarantine", None),
        ),
    ],
)
def test_after_the_grace_a_receipt_decides_as_rows_5_and_6(
    second: dict[str, Any], expected: tuple[object, ...]
) -> None:
    core = dead_core()
    core = core.observe("pay_grace", grace_paid=True)
    core = core.observe("reread_receipt", **second)
    d = core.next()
    assert isinstance(d, PrimaryDecision)
    assert (d.row, d.state, d.reason, d.write, d.trigger) == expected


def test_a_failure_while_gathering_is_row_14_from_where_the_candidate_stands() -> None:
    core = dead_core()
    assert core.next() == Need("pay_grace", "13")
    failed = core.fail("TimeoutError")
    d = failed.next()
    assert d == PrimaryDecision(
        row="14",
        state="failed",
        outcome="failed",
        reason="error:TimeoutError",
        guard="error_raised",
        write=None,
        trigger=None,
        terminal=None,
        facts=failed.facts,
        path=("step 2.2", "step 2.5", "13", "14"),
    )
    assert failed.state == "pay_grace"
    assert failed.facts.error == "TimeoutError"
    assert failed.next() == d
    assert core.next() == Need("pay_grace", "13")  # the core it failed from is as it was
    with pytest.raises(IllegalTransition):
        failed.observe("pay_grace", grace_paid=True)  # nothing more is asked once it failed


def test_a_fresh_core_that_fails_at_once_is_row_14_from_the_first_read() -> None:
    d = PrimaryCore("queued").fail("boom").next()
    assert (d.row, d.path, d.facts.page_status, d.facts.run_present) == (
        "14",
        ("14",),
        "queued",
        None,
    )


# --- decide_primary, the pure function ---------------------------------------------------------


def facts(**fields: object) -> PrimaryFacts:
    return PrimaryFacts(page_status="running", **{**RUN, **fields})


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (
            {},
            ("5", "completed", "receipt_succeeded", "complete", "succeed_by_receipt", "succeeded"),
        ),
        (
            {"receipt_exit_code": 2},
            ("5", "completed", "receipt_failed", "complete", "fail_by_receipt", "failed"),
        ),
        (
            {"cancel_requested": True, "cancel_reason": "timeout", "receipt_exit_code": None},
            ("5", "completed", "receipt_timed_out", "complete", "time_out_by_receipt", "timed_out"),
        ),
        (
            {"cancel_requested": True, "cancel_reason": "user"},
            ("5", "completed", "receipt_cancelled", "complete", "cancel_by_receipt", "cancelled"),
        ),
    ],
)
def test_a_trusted_receipt_completes_by_spec_04s_terminal_mapping(
    given: dict[str, Any], expected: tuple[str, ...]
) -> None:
    f = facts(first_receipt="trusted", receipt_exit_code=0)
    f = PrimaryFacts(**{**dataclasses.asdict(f), **given})
    d = decide_primary(f)
    assert isinstance(d, PrimaryDecision)
    assert (d.row, d.state, d.reason, d.write, d.trigger, d.terminal) == expected
    assert receipt_terminal(f) == expected[-1]
    assert d.outcome == "recovered"
    assert d.facts == f  # equal: decisions are memoized by facts, so maybe not the same object


def test_terminal_of_each_write() -> None:
    claimed = decide_primary(facts(attempt_status="claimed", first_receipt="missing"))
    assert isinstance(claimed, PrimaryDecision)
    assert (claimed.row, claimed.terminal, claimed.trigger, claimed.path) == (
        "7",
        "lost",
        "lose_unstarted_claim",
        ("step 2.2", "7"),
    )
    missing = decide_primary(
        PrimaryFacts(
            page_status="dispatching",
            **{
                **RUN,
                "run_status": "dispatching",
                "attempt_count": 0,
                "active_attempts": 0,
                "attempt_status": None,
            },
        )
    )
    assert isinstance(missing, PrimaryDecision)
    assert (missing.row, missing.terminal, missing.trigger, missing.write, missing.path) == (
        "3",
        "lost",
        "lose_missing_attempt",
        "lose_missing_attempt",
        ("3",),
    )
    running = decide_primary(
        facts(
            first_receipt="missing", process="running", probe_reason="ok", handle_pid_matches=True
        )
    )
    assert isinstance(running, PrimaryDecision)
    assert (running.row, running.state, running.outcome, running.terminal, running.trigger) == (
        "12",
        "retained",
        "remaining",
        "running",
        "adopt_running",
    )
    held = decide_primary(facts(first_receipt="quarantined"))
    assert isinstance(held, PrimaryDecision)
    assert (held.row, held.terminal, held.write, held.trigger, held.reason) == (
        "6",
        None,
        None,
        None,
        "receipt_quarantined_earlier",
    )
    unknown = decide_primary(
        facts(first_receipt="missing", process="unknown", probe_reason="invalid_handle")
    )
    assert isinstance(unknown, PrimaryDecision)
    assert (unknown.row, unknown.reason, unknown.terminal) == ("10", "invalid_handle", None)


def test_a_reason_naming_a_fact_never_observed_is_refused() -> None:
    with pytest.raises(EvidenceError) as refused:
        decide_primary(facts(first_receipt="invalid"))
    r = refused.value
    assert (r.machine, r.state, r.problem) == (
        "primary_decision",
        "read_receipt",
        "row 6 names receipt_problem, never observed",
    )
    d = decide_primary(facts(first_receipt="invalid", receipt_problem="too_large"))
    assert isinstance(d, PrimaryDecision)
    assert d.reason == "invalid_receipt:too_large"


def test_the_pure_function_answers_what_to_gather_next_or_row_14() -> None:
    assert decide_primary(PrimaryFacts(page_status="running")) == Need("read_run", None)
    assert decide_primary(facts()) == Need("read_receipt", "step 2.2")
    failed = decide_primary(PrimaryFacts(page_status="running", error="boom"))
    assert isinstance(failed, PrimaryDecision)
    assert (failed.row, failed.reason, failed.path) == ("14", "error:boom", ("14",))
    failed = decide_primary(facts(first_receipt="trusted", receipt_exit_code=0, error="e"))
    assert isinstance(failed, PrimaryDecision)
    assert (failed.row, failed.path) == ("14", ("14",))
    with pytest.raises(EvidenceError) as refused:
        decide_primary(PrimaryFacts(**{**RUN}))
    r = refused.value
    assert (r.machine, r.state, r.problem) == (
        "primary_decision",
        "read_run",
        "page_status is missing: every candidate comes with its status on the page "
        "(spec 04 row 2 compares it)",
    )


def test_the_terminal_mapping_needs_the_cancel_request_and_an_exit_code() -> None:
    for bad in (
        PrimaryFacts(receipt_exit_code=0),
        PrimaryFacts(cancel_requested=False),
    ):
        with pytest.raises(EvidenceError) as refused:
            receipt_terminal(bad)
        r = refused.value
        assert (r.machine, r.state, r.problem) == (
            "primary_decision",
            "read_receipt",
            "the terminal mapping needs the Run's cancel request (read_run) and the receipt's "
            "exit code (read_receipt)",
        )
    assert receipt_terminal(PrimaryFacts(cancel_requested=True)) == "cancelled"
    assert receipt_terminal(PrimaryFacts(cancel_requested=True, cancel_reason="timeout")) == (
        "timed_out"
    )
    assert receipt_terminal(PrimaryFacts(cancel_requested=False, receipt_exit_code=0)) == (
        "succeeded"
    )
    assert receipt_terminal(PrimaryFacts(cancel_requested=False, receipt_exit_code=-1)) == "failed"


# --- "not_running without the grace and the second read never gives lost", checked when built --


def _lost_paths(t: DecisionTable) -> list[list[str]]:
    return [[f"{x.row.row}:{x.case.state}[{x.case.guard}]" for x in p] for p in paths_to(t, "lost")]


def test_the_paths_into_lost_are_rows_3_4b_7_and_13_after_the_grace_and_both_reads() -> None:
    assert _lost_paths(PRIMARY_TABLE) == [
        ["3:read_run[attempt_missing_before_start]"],
        ["4b:read_run[claimed_not_local_process]"],
        ["step 2.2:read_run[one_active_latest_attempt]", "7:read_receipt[unstarted_claim]"],
        [
            "step 2.2:read_run[one_active_latest_attempt]",
            "step 2.5:read_receipt[durable_identity_stored]",
            "13:probe[trusted_not_running]",
            "13:pay_grace[grace_elapsed]",
            "13:reread_receipt[receipt_still_missing]",
            "13:recheck_run[not_running_after_grace]",
        ],
    ]
    check_lost_needs_grace(PRIMARY_TABLE)  # the table itself passes


def _rewired(state: str, guard: str, change: dict[str, str]) -> DecisionTable:
    """PRIMARY_TABLE with the case (state, guard) changed."""
    rows = tuple(
        r._replace(
            cases=tuple(
                c._replace(**change) if (c.state, c.guard) == (state, guard) else c for c in r.cases
            )
        )
        for r in PRIMARY_TABLE.rows
    )
    return PRIMARY_TABLE._replace(rows=rows)


@pytest.mark.parametrize(
    ("state", "guard", "change", "shown"),
    [
        (
            "probe",
            "exact_process_running",
            {"then": "lost"},
            "probe[exact_process_running]",
        ),
        (
            "probe",
            "trusted_not_running",
            {"then": "reread_receipt"},
            "probe[trusted_not_running] -> reread_receipt[receipt_still_missing] -> "
            "recheck_run[not_running_after_grace]",
        ),
        (
            "pay_grace",
            "grace_elapsed",
            {"then": "recheck_run"},
            "pay_grace[grace_elapsed] -> recheck_run[not_running_after_grace]",
        ),
        (
            "reread_receipt",
            "receipt_still_missing",
            {"then": "lost"},
            "reread_receipt[receipt_still_missing]",
        ),
        (
            "recheck_run",
            "not_running_after_grace",
            {"guard": "grace_elapsed"},
            "recheck_run[grace_elapsed]",
        ),
    ],
    ids=["lost-at-probe", "no-grace", "no-second-read", "no-recheck", "other-guard"],
)
def test_a_table_reaching_lost_after_a_probe_without_all_of_row_13_is_refused(
    state: str, guard: str, change: dict[str, str], shown: str
) -> None:
    with pytest.raises(MachineDefinitionError) as refused:
        check_lost_needs_grace(_rewired(state, guard, change))
    assert refused.value.machine == "primary_decision"
    problem = refused.value.problem
    assert problem.startswith("lost after a probe without the grace and re-reads: read_run[")
    assert problem.endswith(shown)


def test_choosing_from_a_state_the_table_does_not_have_is_an_illegal_transition() -> None:
    with pytest.raises(IllegalTransition) as refused:
        engine().choose("no_such_state", object())
    assert (refused.value.state, refused.value.event) == ("no_such_state", "decide")


def test_a_trigger_with_no_case_in_this_state_is_illegal_not_a_refused_guard() -> None:
    # The exception row applies in `a` only: firing `fail` from `b` is no edge at all (the
    # machine is built without `ignore_invalid_triggers`, which would answer "no guard held").
    e = DecisionEngine(
        table(*GOOD, row("9", Case("a", "error_raised", "held", "err"), on_exception=True)),
        PRIMARY_GUARDS,
    )
    failed = PrimaryFacts(error="boom")
    assert e.choose("a", failed, "fail").row.row == "9"
    with pytest.raises(IllegalTransition) as refused:
        e.choose("b", failed, "fail")
    r = refused.value
    assert (r.machine, r.state, r.event) == ("t", "b", "fail")


# --- facts gathered further on never decide an earlier row (spec 04 row order) -----------------


def test_each_step_of_a_core_sees_only_what_the_steps_so_far_observed() -> None:
    # The core adds facts in the evidence order: after each observation its facts differ from
    # a fresh candidate's only in the fields the evidence observed so far declares, so no
    # guard of an earlier state ever sees a later observation; the core before it is as it was.
    steps: list[tuple[str, dict[str, Any]]] = [
        ("read_run", RUN),
        ("read_receipt", {"first_receipt": "missing"}),
        ("probe", DEAD),
        ("pay_grace", {"grace_paid": True}),
        ("reread_receipt", {"second_receipt": "trusted", "receipt_exit_code": 0}),
    ]
    core = PrimaryCore("running")
    fresh = dataclasses.asdict(core.facts)
    declared: set[str] = set()
    for evidence, fields in steps:
        asked = core.next()
        assert isinstance(asked, Need) and asked.evidence == evidence
        before, facts_before = core, core.facts
        core = core.observe(evidence, **fields)
        declared |= PRIMARY_EVIDENCE_FIELDS[evidence]
        changed = {f for f, v in dataclasses.asdict(core.facts).items() if v != fresh[f]}
        assert changed <= declared, evidence
        assert (before.facts, before.next()) == (facts_before, asked)
    d = core.next()
    assert isinstance(d, PrimaryDecision)
    assert (d.row, d.reason) == ("13", "receipt_succeeded_after_grace")


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        (
            {"second_receipt": "trusted", "receipt_exit_code": 0},
            ("13", "completed", "receipt_succeeded_after_grace", "complete"),
        ),
        (
            {"second_receipt": "invalid", "receipt_problem": "bad_json"},
            ("13", "quarantined", "invalid_receipt:bad_json", "quarantine"),
        ),
    ],
)
def test_a_receipt_found_only_on_the_second_read_decides_row_13_never_row_5_or_6(
    second: dict[str, Any], expected: tuple[str, ...]
) -> None:
    # decide_primary replays every fact from the first state: the receipt of the second read
    # must not decide the first read's rows (spec 04 row 13: "trusted -> as row 5").
    d = decide_primary(facts(first_receipt="missing", **DEAD, grace_paid=True, **second))
    assert isinstance(d, PrimaryDecision)
    assert (d.row, d.state, d.reason, d.write) == expected
    assert d.path == ("step 2.2", "step 2.5", "13", "13", "13")


# --- what a core observes and a walk asks ------------------------------------------------------


def test_the_grace_observed_without_grace_paid_leaves_the_core_where_it_was() -> None:
    # The table asks for pay_grace again unless grace_paid is True: a missing field is not paid.
    core = dead_core()
    assert core.observe("pay_grace") is core
    assert core.observe("pay_grace", grace_paid=False) is core


class Bag:
    """Facts of a table of this test's own, hashed by identity (as a memo key it is always
    found), holding whatever they are given."""

    def __init__(self, **fields: object) -> None:
        self.fields = fields


def test_a_core_observes_a_value_that_cannot_be_a_memo_key_the_long_way() -> None:
    observes = {"a": frozenset({"x"}), "b": frozenset({"y"})}
    e = DecisionEngine(
        table(*GOOD)._replace(observes=observes),
        {G: lambda f: True, "error_raised": lambda f: False},
        evolve=lambda f, fields: Bag(**{**f.fields, **fields}),
    )
    core = e.start(Bag(), lambda step, facts, path: (step.row.row, facts.fields, path))
    core = core.observe("a", x=["not", "hashable"])
    assert core.next() == Need("b", "1")
    assert core.observe("b", y={"nor": "this"}).next() == (
        "2",
        {"x": ["not", "hashable"], "y": {"nor": "this"}},
        ("1", "2"),
    )


def test_a_walk_asks_whether_each_evidence_was_observed_on_the_facts_it_walks() -> None:
    asked: list[tuple[str, object]] = []

    def observed(state: str, facts: object) -> bool:
        asked.append((state, facts))
        return state == "a"

    assert engine().walk(CHANGED, observed).need == Need("b", "1")
    assert asked == [("a", CHANGED), ("b", CHANGED)]


def test_the_primary_decision_spec_is_the_adr_0068_table_as_drawn() -> None:
    assert drawn_spec(PRIMARY_TABLE) == PRIMARY_DECISION_SPEC


def test_holding_lists_every_case_of_the_state_whose_guard_holds_in_table_order() -> None:
    # `fsm.testing.explore_table` reports the rows the table order hides from `holding`.
    e = engine()
    facts = PrimaryFacts(
        run_present=True, run_owner="legacy", run_status="x", page_status="y", error="boom"
    )
    rows = e.table.rows
    assert e.holding("a", facts) == (
        Taken(rows[0], rows[0].cases[1]),  # row 1 `status_changed`
        Taken(rows[1], rows[1].cases[0]),  # row 2 `not_runtime_owned`
    )
    # Only the exception row answers `fail`, and only it: its guard holds on these facts too.
    assert e.holding("a", facts, "fail") == (Taken(rows[3], rows[3].cases[0]),)
    assert e.holding("b", facts, "fail") == (Taken(rows[3], rows[3].cases[1]),)
    # No case of `b` holds on them, although `a`'s cases do.
    assert e.holding("b", facts) == ()
    assert e.holding("a", GONE) == (Taken(rows[0], rows[0].cases[0]),)
