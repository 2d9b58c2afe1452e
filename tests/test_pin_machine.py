"""Machine validation and the `Lifecycle` wrapper, pinned case by case.

Every rule of ``validate_spec`` is exercised with the smallest spec that breaks it (and only
it), with the exact problem reported; a `Lifecycle` built here, not the cached ones, is fired
to show how it refuses: IllegalTransition for no such edge, GuardRefused naming the guards.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from transitions.core import MachineError

from fsm import (
    Edge,
    GuardRefused,
    IllegalTransition,
    Lifecycle,
    MachineDefinitionError,
    MachineSpec,
    Step,
    validate_spec,
)
from fsm.qinglong import (
    ALL_SPECS,
    ATTEMPT_SPEC,
    GUARDS,
    LEGACY_DECISION_SPEC,
    LEGACY_SPEC,
    PRIMARY_DECISION_SPEC,
    QINGLONG_RULES,
    RUN_SPEC,
    LegacyFacts,
    PrimaryFacts,
)

TRUSTED = PrimaryFacts(run_status="running", first_receipt="trusted")


def spec(
    *edges: Edge,
    states: tuple[str, ...] = ("a", "b", "c"),
    terminal: frozenset[str] = frozenset({"c"}),
    initial: str = "a",
    name: str = "toy",
) -> MachineSpec:
    return MachineSpec(name, states, initial, terminal, edges)


GOOD = (Edge("go", "a", "b"), Edge("end", "b", "c"))


def problem_of(bad: MachineSpec) -> str:
    with pytest.raises(MachineDefinitionError) as raised:
        validate_spec(bad, GUARDS, QINGLONG_RULES)
    assert raised.value.machine == bad.name
    assert f"machine {bad.name!r} is invalid: {raised.value.problem}" in str(raised.value)
    # The builder refuses the same table with the same words.
    with pytest.raises(MachineDefinitionError) as built:
        Lifecycle(bad, GUARDS, rules=QINGLONG_RULES)
    assert built.value.problem == raised.value.problem
    return raised.value.problem


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (spec(*GOOD, states=("a", "b", "c", "b")), "a state is declared twice"),
        (spec(*GOOD, initial="z"), "initial state 'z' is unknown"),
        (
            spec(*GOOD, terminal=frozenset({"c", "zz", "yy"})),
            "unknown terminal states ['yy', 'zz']",
        ),
        (
            spec(*GOOD, Edge("away", "b", "nowhere")),
            "edge b -> nowhere (away) names unknown state 'nowhere'",
        ),
        (
            spec(*GOOD, Edge("back", "elsewhere", "a")),
            "edge elsewhere -> a (back) names unknown state 'elsewhere'",
        ),
        (spec(*GOOD, Edge("undo", "c", "a")), "edge c -> a (undo) leaves terminal 'c'"),
        (
            spec(*GOOD, Edge("guess", "a", "b", "no_such_guard")),
            "edge a -> b (guess) [no_such_guard] has unknown guard 'no_such_guard'",
        ),
        (spec(*GOOD, Edge("go_again", "a", "b")), "duplicate unguarded edges [('a', 'b')]"),
        (
            spec(
                *GOOD,
                Edge("decide", "a", "b", "trusted_receipt"),
                Edge("decide", "a", "b", "trusted_receipt"),
            ),
            "an edge is declared twice",
        ),
        (
            spec(*GOOD, Edge("go", "a", "c")),
            "ambiguous triggers: a --go--> b | c",
        ),
        (
            spec(
                *GOOD,
                Edge("skip", "a", "c"),
                Edge("decide", "a", "b", "trusted_receipt"),
                Edge("decide", "a", "c", "trusted_receipt"),
            ),
            "ambiguous triggers: a --decide [trusted_receipt]--> b | c",
        ),
        (
            spec(
                Edge("go", "a", "b"),
                Edge("go", "a", "c"),
                Edge("end", "b", "c"),
                Edge("end", "b", "d"),
                Edge("on", "d", "c"),
                states=("a", "b", "c", "d"),
            ),
            "ambiguous triggers: a --go--> b | c; b --end--> c | d",
        ),
        (
            spec(*GOOD, Edge("go", "a", "b", "trusted_receipt")),
            "trigger mixes guarded and unguarded [('go', 'a')]",
        ),
        (
            spec(*GOOD, Edge("jump", "a", "c", "trusted_receipt")),
            "guarded edge a -> c (jump) [trusted_receipt] is not a legal lifecycle pair",
        ),
        (spec(Edge("go", "a", "c")), "unreachable states ['b']"),
        (
            # d is reachable only from b, and b from nothing: both are unreachable.
            spec(
                Edge("go", "a", "c"),
                Edge("on", "b", "d"),
                Edge("end", "d", "c"),
                states=("a", "b", "c", "d"),
            ),
            "unreachable states ['b', 'd']",
        ),
        (
            spec(Edge("go", "a", "b"), Edge("skip", "a", "c"), Edge("on", "a", "d")),
            "edge a -> d (on) names unknown state 'd'",
        ),
        (
            spec(
                Edge("go", "a", "b"),
                Edge("skip", "a", "c"),
                Edge("on", "a", "d"),
                states=("a", "b", "c", "d"),
            ),
            "non-terminal dead ends ['b', 'd']",
        ),
    ],
    ids=[
        "state-twice",
        "unknown-initial",
        "unknown-terminals",
        "unknown-dest",
        "unknown-source",
        "leaves-terminal",
        "unknown-guard",
        "duplicate-unguarded",
        "guarded-edge-twice",
        "unguarded-fork",
        "guarded-fork",
        "two-forks",
        "mixed-trigger",
        "guarded-not-lifecycle",
        "unreachable",
        "reachable-only-from-unreachable",
        "unknown-state-before-dead-end",
        "dead-ends",
    ],
)
def test_each_validation_rule_reports_its_own_problem(bad: MachineSpec, problem: str) -> None:
    assert problem_of(bad) == problem


def test_the_message_says_where_to_fix_the_table() -> None:
    with pytest.raises(MachineDefinitionError) as raised:
        validate_spec(spec(*GOOD, initial="z", name="mine"), GUARDS, QINGLONG_RULES)
    assert str(raised.value) == (
        "machine 'mine' is invalid: initial state 'z' is unknown; fix that machine's declaration"
    )


@pytest.mark.parametrize(
    "good",
    [
        spec(*GOOD),
        # every state terminal, no edge at all: a one-state machine is valid
        spec(states=("a",), terminal=frozenset({"a"})),
        # guarded edges alone (no lifecycle table) need no lifecycle pair
        spec(Edge("go", "a", "b", "trusted_receipt"), Edge("end", "b", "c", "unstarted_claim")),
        # one trigger, one source, two guards, one destination each: not ambiguous
        spec(
            Edge("decide", "a", "b", "trusted_receipt"),
            Edge("decide", "a", "c", "unstarted_claim"),
            Edge("end", "b", "c", "trusted_receipt"),
        ),
        # two triggers along one lifecycle pair, one of them guarded
        spec(*GOOD, Edge("go_by_receipt", "a", "b", "trusted_receipt")),
        RUN_SPEC,
        ATTEMPT_SPEC,
        LEGACY_SPEC,
        PRIMARY_DECISION_SPEC,
    ],
    ids=[
        "toy",
        "one-state",
        "guards-only",
        "guarded-split",
        "guarded-along-lifecycle",
        "run",
        "attempt",
        "legacy",
        "primary-decision",
    ],
)
def test_a_valid_spec_is_accepted(good: MachineSpec) -> None:
    validate_spec(good, GUARDS, QINGLONG_RULES)
    assert Lifecycle(good, GUARDS, rules=QINGLONG_RULES).spec is good


# --- a Lifecycle built here ------------------------------------------------------------------


class Thing:
    state: str


@pytest.fixture(scope="module")
def run() -> Lifecycle:
    return Lifecycle(RUN_SPEC, GUARDS, rules=QINGLONG_RULES)


def test_a_fresh_lifecycle_answers_about_its_own_table(run: Lifecycle) -> None:
    assert run.name == "run"
    assert run.is_legal("running", "succeeded")
    assert not run.is_legal("succeeded", "running")
    assert not run.is_legal("created", "running")
    assert run.lifecycle_trigger("created", "queued") == "queue"
    assert run.lifecycle_trigger("lost", "retry_wait") == "schedule_retry"
    with pytest.raises(IllegalTransition) as raised:
        run.lifecycle_trigger("created", "running")
    assert (raised.value.machine, raised.value.state, raised.value.event) == (
        "run",
        "created",
        "-> running",
    )
    out = run.edges_from("queued")
    assert {(e.trigger, e.dest, e.guard) for e in out} == {
        ("dispatch", "dispatching", None),
        ("cancel", "cancelled", None),
        ("time_out", "timed_out", None),
        # The legacy shadow's writes (ADR-0448 rows 2, 6, 7), each along a legal pair.
        ("cancel_by_repair", "cancelled", "unique_terminal_attempt"),
        ("time_out_by_repair", "timed_out", "unique_terminal_attempt"),
        ("cancel_by_instance", "cancelled", "stopped_with_finished"),
        ("dispatch_by_instance", "dispatching", "unique_finished_evidence"),
    }
    assert all(e.source == "queued" for e in out)
    with pytest.raises(IllegalTransition) as unknown:
        run.edges_from("bogus")
    assert (unknown.value.machine, unknown.value.state, unknown.value.event) == (
        "run",
        "bogus",
        "<any>",
    )


def test_a_lifecycle_trigger_is_never_a_guarded_one() -> None:
    # running -> succeeded is both `succeed` (lifecycle) and `succeed_by_receipt` (guarded).
    toy = Lifecycle(
        spec(Edge("go_by_receipt", "a", "b", "trusted_receipt"), *GOOD),
        GUARDS,
        rules=QINGLONG_RULES,
    )
    assert toy.lifecycle_trigger("a", "b") == "go"
    guarded_only = Lifecycle(
        spec(Edge("go", "a", "b", "trusted_receipt"), Edge("end", "b", "c", "unstarted_claim")),
        GUARDS,
        rules=QINGLONG_RULES,
    )
    with pytest.raises(IllegalTransition):
        guarded_only.lifecycle_trigger("a", "b")
    assert guarded_only.is_legal("a", "b")


def test_planning_fires_the_table_and_reports_the_step(run: Lifecycle) -> None:
    assert run.plan("created", "queue") == Step("run", "queue", "created", "queued", None)
    assert run.plan("running", "succeed_by_receipt", TRUSTED) == Step(
        "run", "succeed_by_receipt", "running", "succeeded", "trusted_receipt"
    )


@pytest.mark.parametrize(
    ("state", "trigger"),
    [
        ("created", "succeed"),  # no such edge from here
        ("succeeded", "queue"),  # terminal
        ("created", "to_succeeded"),  # auto transitions are off
        ("created", "no_such_trigger"),
        ("bogus", "queue"),  # no such state
    ],
)
def test_planning_without_an_edge_raises_illegal_transition(
    run: Lifecycle, state: str, trigger: str
) -> None:
    with pytest.raises(IllegalTransition) as raised:
        run.plan(state, trigger)
    assert (raised.value.machine, raised.value.state, raised.value.event) == (
        "run",
        state,
        trigger,
    )


def test_a_refused_guard_is_named_and_several_guards_are_all_named() -> None:
    run = Lifecycle(RUN_SPEC, GUARDS, rules=QINGLONG_RULES)
    with pytest.raises(GuardRefused) as one:
        run.plan("running", "succeed_by_receipt", PrimaryFacts(run_status="running"))
    assert (one.value.machine, one.value.state, one.value.event, one.value.guard) == (
        "run",
        "running",
        "succeed_by_receipt",
        "trusted_receipt",
    )
    assert "refused by guard 'trusted_receipt'" in str(one.value)
    legacy = Lifecycle(LEGACY_SPEC, GUARDS, rules=QINGLONG_RULES)
    with pytest.raises(GuardRefused) as many:
        legacy.plan("candidate", "hold", LegacyFacts(run_present=False))
    assert many.value.guard == (
        "ambiguous_selection | evidence_truncated | illegal_combination"
        " | multiple_active_attempts | no_active_attempt"
    )


@pytest.mark.parametrize(
    ("changes", "guard"),
    [
        ({"active_attempts": 0}, "no_active_attempt"),
        ({"active_attempts": 2}, "multiple_active_attempts"),
        ({"evidence_truncated": True}, "evidence_truncated"),
        ({"selection": "ambiguous"}, "ambiguous_selection"),
        ({"run_status": "queued", "attempt_status": "running"}, "illegal_combination"),
    ],
)
def test_of_several_guards_on_one_trigger_the_step_names_the_one_that_held(
    changes: dict[str, object], guard: str
) -> None:
    base = LegacyFacts(
        run_present=True,
        run_owner="legacy",
        origin="manual",
        origin_enabled=True,
        run_status="running",
        active_attempts=1,
        attempt_status="running",
    )
    facts = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    step = Lifecycle(LEGACY_SPEC, GUARDS, rules=QINGLONG_RULES).plan("candidate", "hold", facts)
    assert (step.dest, step.guard) == ("ambiguous", guard)


def test_a_fresh_lifecycle_offers_no_to_state_trigger_and_ignores_no_invalid_one() -> None:
    for s in (RUN_SPEC, ATTEMPT_SPEC, LEGACY_SPEC, PRIMARY_DECISION_SPEC):
        lifecycle = Lifecycle(s, GUARDS, rules=QINGLONG_RULES)
        thing = Thing()
        lifecycle.attach(thing, s.initial)
        try:
            assert not [n for n in dir(thing) if n.startswith("to_")]
            for target in s.states:
                with pytest.raises(IllegalTransition):
                    lifecycle.fire(thing, f"to_{target}")
                with pytest.raises(IllegalTransition):
                    lifecycle.plan(s.initial, f"to_{target}")
            assert thing.state == s.initial
        finally:
            lifecycle.detach(thing)


def test_an_attached_model_moves_along_fired_edges_and_is_refused_without_moving() -> None:
    attempt = Lifecycle(ATTEMPT_SPEC, GUARDS, rules=QINGLONG_RULES)
    thing = Thing()
    attempt.attach(thing, "starting")
    try:
        assert thing.state == "starting"
        assert attempt.fire(thing, "run") == Step("attempt", "run", "starting", "running", None)
        assert thing.state == "running"
        with pytest.raises(GuardRefused):
            attempt.fire(thing, "fail_by_receipt", PrimaryFacts(run_status="running"))
        assert thing.state == "running"
        with pytest.raises(IllegalTransition) as raised:
            attempt.fire(thing, "start")
        assert (raised.value.state, raised.value.event) == ("running", "start")
        assert thing.state == "running"
        step = attempt.fire(thing, "fail_by_receipt", TRUSTED)
        assert (step.source, step.dest, step.guard) == ("running", "failed", "trusted_receipt")
        assert thing.state == "failed"
    finally:
        attempt.detach(thing)


def test_attaching_in_an_unknown_state_is_refused() -> None:
    attempt = Lifecycle(ATTEMPT_SPEC, GUARDS, rules=QINGLONG_RULES)
    with pytest.raises(IllegalTransition) as raised:
        attempt.attach(Thing(), "bogus")
    assert (raised.value.machine, raised.value.state, raised.value.event) == (
        "attempt",
        "bogus",
        "<attach>",
    )


def test_a_detached_model_can_be_attached_again_in_another_state() -> None:
    run = Lifecycle(RUN_SPEC, GUARDS, rules=QINGLONG_RULES)
    thing = Thing()
    run.attach(thing, "created")
    run.detach(thing)
    run.attach(thing, "running")
    try:
        assert thing.state == "running"
        assert run.fire(thing, "succeed").dest == "succeeded"
        assert thing.state == "succeeded"
    finally:
        run.detach(thing)


def test_a_trigger_called_on_an_attached_model_from_the_wrong_state_is_not_ignored() -> None:
    # transitions' own error, raised by the model's trigger method: never a silent no-op.
    run = Lifecycle(RUN_SPEC, GUARDS, rules=QINGLONG_RULES)
    thing = Thing()
    run.attach(thing, "created")
    try:
        with pytest.raises(MachineError):
            thing.trigger("succeed")  # type: ignore[attr-defined]
        assert thing.state == "created"
    finally:
        run.detach(thing)


def test_evidence_that_cannot_be_a_memo_key_is_planned_every_time_all_the_same() -> None:
    # The plan memo is keyed by the evidence; evidence that is not hashable (a list, a dict)
    # skips the memo both ways and is planned through the machine as any other.
    run = Lifecycle(RUN_SPEC, GUARDS, rules=QINGLONG_RULES)
    for unhashable in ([], {"first_receipt": "trusted"}):
        for _ in range(2):
            assert run.plan("created", "queue", unhashable) == Step(
                "run", "queue", "created", "queued", None
            )
            # A guard reads only a facts object: anything else satisfies none of them.
            with pytest.raises(GuardRefused) as refused:
                run.plan("running", "succeed_by_receipt", unhashable)
            assert refused.value.guard == "trusted_receipt"


def test_all_specs_lists_the_five_lifecycles_and_decision_machines_in_drawing_order() -> None:
    assert ALL_SPECS == (
        RUN_SPEC,
        ATTEMPT_SPEC,
        LEGACY_SPEC,
        PRIMARY_DECISION_SPEC,
        LEGACY_DECISION_SPEC,
    )


def test_triggers_from_a_state_are_listed_in_table_order_each_once() -> None:
    toy = Lifecycle(
        spec(
            Edge("go", "a", "b"),
            Edge("end", "a", "c"),
            Edge("go_by_receipt", "a", "b", "trusted_receipt"),
            Edge("go_by_receipt", "a", "c", "invalid_receipt"),
            Edge("end", "b", "c"),
        ),
        GUARDS,
        rules=QINGLONG_RULES,
    )
    assert toy.triggers_from("a") == ("go", "end", "go_by_receipt")
    assert toy.triggers_from("b") == ("end",)
    assert toy.triggers_from("c") == ()


def test_holding_lists_the_unguarded_edges_and_each_guarded_one_whose_guard_holds() -> None:
    toy = Lifecycle(
        spec(
            Edge("go", "a", "b", "trusted_receipt"),
            Edge("go", "a", "c", "invalid_receipt"),
            Edge("end", "a", "c"),
            Edge("end", "b", "c"),
        ),
        GUARDS,
    )
    go_b, go_c, end_a, end_b = toy.spec.edges
    assert toy.holding("a", "go", TRUSTED) == (go_b,)
    assert toy.holding("a", "go", PrimaryFacts(first_receipt="invalid")) == (go_c,)
    assert toy.holding("a", "go", PrimaryFacts()) == ()
    assert toy.holding("a", "end") == (end_a,)
    assert toy.holding("b", "end") == (end_b,)
    assert toy.holding("b", "go", TRUSTED) == ()


def test_a_drawn_guard_refuses_to_be_evaluated_naming_itself() -> None:
    from fsm import transitions_config

    (edge,) = [t for t in transitions_config(spec(Edge("go", "a", "b", "run_gone"))) if t]
    (condition,) = edge["conditions"]
    assert condition.__name__ == "run_gone"
    with pytest.raises(MachineDefinitionError) as raised:
        condition(SimpleNamespace(kwargs={"evidence": TRUSTED}))
    assert (raised.value.machine, raised.value.problem) == (
        "<drawing>",
        "guard 'run_gone' is drawn, not evaluated",
    )
