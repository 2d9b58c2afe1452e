"""The Run and Attempt tables of spec 01, fired through the repository on a real SQLite file."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _support import SYSTEM, T0, Model, attempt_in, run_in
from test_pin_legacy import BASE as _LEGACY

from fsm import (
    Edge,
    GuardRefused,
    IllegalTransition,
    Lifecycle,
    MachineDefinitionError,
    MachineSpec,
)
from fsm.qinglong import (
    ATTEMPT_SPEC,
    ATTEMPT_STATES,
    ATTEMPT_TERMINAL,
    GUARDS,
    QINGLONG_RULES,
    RUN_SPEC,
    RUN_STATES,
    RUN_TERMINAL,
    LegacyFacts,
    PrimaryFacts,
    attempt_machine,
    run_machine,
    validate_all,
)
from storage import AttemptChange, Repository, RunChange

# spec 01, transcribed independently of fsm/qinglong/_tables.py.
RUN_ALLOWED: dict[str, set[str]] = {
    "created": {"queued", "cancelled"},
    "queued": {"dispatching", "cancelled", "timed_out"},
    # spec 01 (**): `timed_out` is the RUN_TRANSITIONS amendment.
    "dispatching": {"running", "retry_wait", "failed", "cancelled", "lost", "timed_out"},
    "running": {
        "waiting_approval",
        "retry_wait",
        "succeeded",
        "failed",
        "cancelled",
        "timed_out",
        "lost",
    },
    "waiting_approval": {"running", "cancelled", "timed_out"},
    "retry_wait": {"queued", "cancelled", "timed_out"},
    "lost": {"queued", "failed", "cancelled", "retry_wait"},
}
ATTEMPT_ALLOWED: dict[str, set[str]] = {
    "claimed": {"starting", "cancelled", "lost"},
    "starting": {"running", "failed", "cancelled", "timed_out", "lost"},
    "running": {"succeeded", "failed", "cancelled", "timed_out", "lost"},
}
RUN_LEGAL = sorted((s, d) for s, ds in RUN_ALLOWED.items() for d in ds)
ATTEMPT_LEGAL = sorted((s, d) for s, ds in ATTEMPT_ALLOWED.items() for d in ds)
RUN_ILLEGAL = sorted(
    (s, d) for s in RUN_STATES for d in RUN_STATES if d not in RUN_ALLOWED.get(s, set())
)
ATTEMPT_ILLEGAL = sorted(
    (s, d) for s in ATTEMPT_STATES for d in ATTEMPT_STATES if d not in ATTEMPT_ALLOWED.get(s, set())
)
SPEC_EVENTS = set(
    [
        "run.created",
        "run.queued",
        "run.dispatching",
        "run.running",
        "run.cancel_requested",
        "run.retry_wait",
        "run.waiting_approval",
        "run.succeeded",
        "run.failed",
        "run.cancelled",
        "run.timed_out",
        "run.lost",
        "attempt.claimed",
        "attempt.starting",
        "attempt.running",
        "attempt.succeeded",
        "attempt.failed",
        "attempt.cancelled",
        "attempt.timed_out",
        "attempt.lost",
        "attempt.late_callback_ignored",
        "run.reconciled",
    ]
)
RUN_ID = "019f70c0-0000-7000-8000-0000000000aa"
ATT_ID = "019f70c0-0000-7000-8000-0000000000bb"


def lifecycle_pairs(spec: MachineSpec) -> set[tuple[str, str]]:
    return {(e.source, e.dest) for e in spec.edges if e.guard is None}


def test_the_run_table_is_exactly_spec_01_with_the_amendment() -> None:
    assert lifecycle_pairs(RUN_SPEC) == set(RUN_LEGAL)
    assert set(RUN_SPEC.states) == set(RUN_STATES) and len(RUN_STATES) == 11
    assert {"succeeded", "failed", "cancelled", "timed_out"} == RUN_TERMINAL
    assert "lost" not in RUN_TERMINAL


def test_the_attempt_table_is_exactly_spec_01() -> None:
    assert lifecycle_pairs(ATTEMPT_SPEC) == set(ATTEMPT_LEGAL)
    assert set(ATTEMPT_STATES) == {
        "claimed",
        "starting",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "timed_out",
        "lost",
    }
    assert {"succeeded", "failed", "cancelled", "timed_out", "lost"} == ATTEMPT_TERMINAL


@pytest.mark.parametrize(
    ("source", "dest", "cites"),
    [
        ("lost", "retry_wait", "ADR-0380 amendment"),
        ("dispatching", "timed_out", "RUN_TRANSITIONS amendment"),
    ],
)
def test_each_amendment_of_spec_01_is_present_and_marked_with_its_record(
    source: str, dest: str, cites: str
) -> None:
    edges = [e for e in RUN_SPEC.edges if (e.source, e.dest) == (source, dest) and not e.guard]
    assert len(edges) == 1
    assert edges[0].cites == cites
    assert run_machine().is_legal(source, dest)


def test_every_other_plain_run_edge_is_adr_0001s() -> None:
    amended = {("lost", "retry_wait"), ("dispatching", "timed_out")}
    others = [e for e in RUN_SPEC.edges if e.guard is None and (e.source, e.dest) not in amended]
    assert others and all(e.cites == "ADR-0001" for e in others)


@pytest.mark.parametrize(("source", "dest"), RUN_LEGAL, ids=lambda p: str(p))
def test_every_legal_run_pair_fires_through_the_repository_and_reads_back(
    repo: Repository, reader: Repository, source: str, dest: str
) -> None:
    version = run_in(repo, RUN_ID, source)
    trigger = run_machine().lifecycle_trigger(source, dest)
    done = repo.advance(RUN_ID, version, [RunChange(trigger)], actor=SYSTEM, at_ms=T0 + 1)
    assert [(s.source, s.dest, s.guard) for s in done.steps] == [(source, dest, None)]
    run = reader.get_run(RUN_ID)
    assert run is not None
    assert (run.status, run.version, run.event_sequence) == (dest, version + 1, version + 1)
    last = reader.events_of(RUN_ID)[-1]
    assert (last.sequence, last.type, last.attempt_id) == (version + 1, f"run.{dest}", None)
    assert {e.type for e in reader.events_of(RUN_ID)} <= SPEC_EVENTS
    assert last.payload == {"from_status": source, "to_status": dest, "version": version + 1}


@pytest.mark.parametrize(("source", "dest"), ATTEMPT_LEGAL, ids=lambda p: str(p))
def test_every_legal_attempt_pair_fires_through_the_repository_and_reads_back(
    repo: Repository, reader: Repository, source: str, dest: str
) -> None:
    version = attempt_in(repo, RUN_ID, ATT_ID, source)
    trigger = attempt_machine().lifecycle_trigger(source, dest)
    change = AttemptChange(ATT_ID, trigger)
    repo.advance(RUN_ID, version, [change], actor=SYSTEM, at_ms=T0 + 5)
    att = reader.get_attempt(ATT_ID)
    assert att is not None and att.status == dest
    assert att.finished_at_ms == (T0 + 5 if dest in ATTEMPT_TERMINAL else None)
    run = reader.get_run(RUN_ID)
    assert run is not None
    assert (run.status, run.version, run.event_sequence) == (
        "dispatching",
        version + 1,
        version + 1,
    )
    last = reader.events_of(RUN_ID)[-1]
    assert (last.type, last.attempt_id, last.sequence) == (f"attempt.{dest}", ATT_ID, version + 1)
    assert {e.type for e in reader.events_of(RUN_ID)} <= SPEC_EVENTS
    assert last.payload == {
        "attempt_id": ATT_ID,
        "from_status": source,
        "to_status": dest,
        "version": version + 1,
    }


def _trigger_towards(lifecycle: Lifecycle, dest: str) -> str:
    """The lifecycle trigger that enters ``dest`` elsewhere in the table."""
    for e in lifecycle.spec.edges:
        if e.guard is None and e.dest == dest:
            return e.trigger
    return "nonexistent_trigger"


def _assert_refused_and_nothing_moved(
    repo: Repository,
    snapshot: Callable[[], object],
    lifecycle: Lifecycle,
    version: int,
    source: str,
    dest: str,
    make: Callable[[str], RunChange | AttemptChange],
) -> None:
    trigger = _trigger_towards(lifecycle, dest)
    with pytest.raises(IllegalTransition):
        lifecycle.lifecycle_trigger(source, dest)
    assert not lifecycle.is_legal(source, dest)
    model = Model()
    lifecycle.attach(model, source)
    try:
        before = snapshot()
        with pytest.raises(IllegalTransition) as raised:
            repo.advance(RUN_ID, version, [make(trigger)], actor=SYSTEM, at_ms=T0 + 1)
        assert (raised.value.state, raised.value.event) == (source, trigger)
        with pytest.raises(IllegalTransition):
            repo.fire(model, RUN_ID, version, make(trigger), actor=SYSTEM, at_ms=T0 + 1)
        assert snapshot() == before
        assert model.state == source
    finally:
        lifecycle.detach(model)


@pytest.mark.parametrize(("source", "dest"), RUN_ILLEGAL, ids=lambda p: str(p))
def test_every_illegal_run_pair_is_refused_and_moves_nothing(
    repo: Repository, snapshot: Callable[[], object], source: str, dest: str
) -> None:
    version = run_in(repo, RUN_ID, source)
    _assert_refused_and_nothing_moved(
        repo, snapshot, run_machine(), version, source, dest, RunChange
    )


@pytest.mark.parametrize(("source", "dest"), ATTEMPT_ILLEGAL, ids=lambda p: str(p))
def test_every_illegal_attempt_pair_is_refused_and_moves_nothing(
    repo: Repository, snapshot: Callable[[], object], source: str, dest: str
) -> None:
    version = attempt_in(repo, RUN_ID, ATT_ID, source)
    _assert_refused_and_nothing_moved(
        repo,
        snapshot,
        attempt_machine(),
        version,
        source,
        dest,
        lambda trigger: AttemptChange(ATT_ID, trigger),
    )


def test_an_attempt_may_not_move_once_its_run_is_terminal(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    from storage import Conflict

    version = attempt_in(repo, RUN_ID, ATT_ID, "running")
    version = repo.advance(
        RUN_ID, version, [RunChange("start"), RunChange("cancel")], actor=SYSTEM, at_ms=T0
    ).version
    before = snapshot()
    with pytest.raises(Conflict):
        repo.advance(RUN_ID, version, [AttemptChange(ATT_ID, "succeed")], actor=SYSTEM, at_ms=T0)
    assert snapshot() == before


# --- machine validation ------------------------------------------------------------------


def spec(
    *edges: Edge, states: tuple[str, ...] = ("a", "b", "c"), terminal: str = "c"
) -> MachineSpec:
    return MachineSpec("bad", states, "a", frozenset({terminal}), edges)


GOOD = (Edge("go", "a", "b"), Edge("end", "b", "c"))


def test_a_well_formed_spec_builds_and_the_shipped_specs_validate() -> None:
    Lifecycle(spec(*GOOD), GUARDS, rules=QINGLONG_RULES)
    validate_all()


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (spec(*GOOD, Edge("away", "b", "nowhere")), "unknown state 'nowhere'"),
        (spec(Edge("go", "a", "c"), states=("a", "b", "c")), "unreachable states ['b']"),
        (
            spec(Edge("go", "a", "b"), Edge("skip", "a", "c"), states=("a", "b", "c")),
            "non-terminal dead ends ['b']",
        ),
        (spec(*GOOD, Edge("go_again", "a", "b")), "duplicate unguarded edges [('a', 'b')]"),
        (
            spec(*GOOD, Edge("jump", "a", "c", "trusted_receipt")),
            "guarded edge a -> c (jump) [trusted_receipt] is not a legal lifecycle pair",
        ),
        (spec(*GOOD, Edge("guess", "a", "b", "no_such_guard")), "unknown guard"),
        (spec(*GOOD, Edge("undo", "c", "a")), "leaves terminal 'c'"),
        (
            MachineSpec("bad", ("a", "b", "c"), "z", frozenset({"c"}), GOOD),
            "initial state 'z' is unknown",
        ),
        (
            spec(*GOOD, Edge("go", "a", "b", "trusted_receipt")),
            "trigger mixes guarded and unguarded",
        ),
        (
            spec(*GOOD, Edge("go", "a", "c"), Edge("end", "a", "b", "trusted_receipt")),
            "ambiguous triggers: a --go--> b | c",
        ),
        (
            spec(
                *GOOD,
                Edge("decide", "a", "b", "trusted_receipt"),
                Edge("decide", "a", "c", "trusted_receipt"),
                Edge("skip", "a", "c"),
            ),
            "ambiguous triggers: a --decide [trusted_receipt]--> b | c",
        ),
    ],
    ids=[
        "unknown-state",
        "unreachable",
        "dead-end",
        "duplicate-unguarded",
        "guarded-not-legal",
        "unknown-guard",
        "leaves-terminal",
        "unknown-initial",
        "mixed-trigger",
        "unguarded-fork",
        "guarded-fork",
    ],
)
def test_machine_validation_rejects_a_bad_spec_when_the_machine_is_built(
    bad: MachineSpec, problem: str
) -> None:
    with pytest.raises(MachineDefinitionError) as raised:
        Lifecycle(bad, GUARDS, rules=QINGLONG_RULES)
    assert problem in raised.value.problem
    assert raised.value.machine == "bad"


# --- guards ----------------------------------------------------------------------------------

# ADR-0448's facts (spec 05): a legacy Run running with one running Attempt, no evidence
# (_LEGACY, test_pin_legacy's row 10 candidate).


def _legacy(**changes: Any) -> LegacyFacts:
    return dataclasses.replace(_LEGACY, **changes)


EVIDENCE: dict[str, object] = {
    "trusted_receipt": PrimaryFacts(run_status="running", first_receipt="trusted"),
    "not_running_after_grace": PrimaryFacts(
        run_status="running",
        attempt_status="running",
        active_attempts=1,
        first_receipt="missing",
        process="not_running",
        handle_pid_matches=True,
        grace_paid=True,
        second_receipt="missing",
        unchanged_on_recheck=True,
    ),
    "claimed_not_local_process": PrimaryFacts(
        run_status="dispatching",
        attempt_status="claimed",
        active_attempts=1,
        executor_type="remote_worker",
    ),
    "unstarted_claim": PrimaryFacts(
        run_status="dispatching",
        attempt_status="claimed",
        active_attempts=1,
        first_receipt="missing",
    ),
    "attempt_missing_before_start": PrimaryFacts(run_status="dispatching"),
    "exact_process_running": PrimaryFacts(
        run_status="dispatching",
        first_receipt="missing",
        process="running",
        handle_pid_matches=True,
    ),
    # The legacy writes' edges (ADR-0448 rows 2, 6, 7, 9, 10): facts on which that row is the
    # first that matches.
    "unique_terminal_attempt": _legacy(
        active_attempts=0, attempt_status=None, latest_attempt_status="succeeded"
    ),
    "stopped_with_finished": _legacy(
        selection="matched", matched_status="stopped", matched_finished=True
    ),
    "unique_finished_evidence": _legacy(
        selection="matched", matched_status="succeeded", matched_finished=True
    ),
    "no_spawn_evidence": _legacy(run_status="queued", attempt_status="claimed"),
    "no_terminal_evidence": _LEGACY,
}
GUARDED = [
    (kind, e)
    for kind, s in (("run", RUN_SPEC), ("attempt", ATTEMPT_SPEC))
    for e in s.edges
    if e.guard is not None
]


def test_every_guard_of_a_run_or_attempt_edge_has_evidence_in_this_file() -> None:
    assert {e.guard for _, e in GUARDED} == set(EVIDENCE)
    assert set(EVIDENCE) <= set(GUARDS)


@pytest.mark.parametrize(
    ("kind", "edge"), GUARDED, ids=[f"{k}:{e.source}-{e.trigger}" for k, e in GUARDED]
)
def test_a_guarded_edge_is_refused_without_its_evidence_and_taken_with_it(
    repo: Repository,
    reader: Repository,
    snapshot: Callable[[], object],
    kind: str,
    edge: Edge,
) -> None:
    lifecycle = run_machine() if kind == "run" else attempt_machine()
    with pytest.raises(GuardRefused) as raised:
        lifecycle.plan(edge.source, edge.trigger, None)
    assert (raised.value.state, raised.value.event) == (edge.source, edge.trigger)
    assert edge.guard is not None and raised.value.guard is not None
    assert edge.guard in raised.value.guard
    with pytest.raises(GuardRefused):
        # Evidence of the right type that establishes nothing: no guard holds on it.
        nothing = PrimaryFacts(run_status=edge.source, attempt_status="running", active_attempts=1)
        lifecycle.plan(edge.source, edge.trigger, nothing)

    if kind == "run":
        version = run_in(repo, RUN_ID, edge.source)

        def make(evidence: object) -> RunChange | AttemptChange:
            return RunChange(edge.trigger, evidence=evidence)
    else:
        version = attempt_in(repo, RUN_ID, ATT_ID, edge.source)

        def make(evidence: object) -> RunChange | AttemptChange:
            return AttemptChange(ATT_ID, edge.trigger, evidence=evidence)

    before = snapshot()
    with pytest.raises(GuardRefused) as raised:
        repo.advance(RUN_ID, version, [make(None)], actor=SYSTEM, at_ms=T0 + 1)
    assert (raised.value.state, raised.value.event) == (edge.source, edge.trigger)
    assert snapshot() == before

    assert edge.guard is not None
    done = repo.advance(RUN_ID, version, [make(EVIDENCE[edge.guard])], actor=SYSTEM, at_ms=T0 + 1)
    assert [(s.source, s.dest, s.guard) for s in done.steps] == [
        (edge.source, edge.dest, edge.guard)
    ]
    if kind == "run":
        run = reader.get_run(RUN_ID)
        assert run is not None and run.status == edge.dest
    else:
        att = reader.get_attempt(ATT_ID)
        assert att is not None and att.status == edge.dest


@pytest.mark.parametrize("lifecycle", [run_machine(), attempt_machine()], ids=["run", "attempt"])
def test_auto_transitions_are_off_so_no_to_state_trigger_exists(lifecycle: Lifecycle) -> None:
    model = Model()
    lifecycle.attach(model, lifecycle.spec.initial)
    try:
        assert not [name for name in dir(model) if name.startswith("to_")]
        assert not [name for name in lifecycle._machine.events if name.startswith("to_")]
        with pytest.raises(IllegalTransition):
            lifecycle.fire(model, "to_succeeded")
        assert model.state == lifecycle.spec.initial
    finally:
        lifecycle.detach(model)


def test_planning_never_moves_or_keeps_a_model_attached() -> None:
    lifecycle = run_machine()
    before = list(lifecycle._machine.models)
    step = lifecycle.plan("created", "queue")
    assert (step.source, step.dest, step.trigger) == ("created", "queued", "queue")
    with pytest.raises(IllegalTransition):
        lifecycle.plan("no_such_state", "queue")
    assert lifecycle._machine.models == before


def test_edges_from_lists_what_leaves_a_state_and_rejects_an_unknown_state() -> None:
    dests = {e.dest for e in run_machine().edges_from("lost") if e.guard is None}
    assert dests == RUN_ALLOWED["lost"]
    assert run_machine().edges_from("succeeded") == ()
    with pytest.raises(IllegalTransition):
        run_machine().edges_from("bogus")


def test_fired_on_a_model_the_edge_moves_it_and_a_refusal_carries_state_and_event(
    tmp_path: Path,
) -> None:
    lifecycle = attempt_machine()
    model = Model()
    lifecycle.attach(model, "running")
    try:
        with pytest.raises(GuardRefused) as raised:
            lifecycle.fire(model, "succeed_by_receipt", None)
        assert (raised.value.state, raised.value.event, model.state) == (
            "running",
            "succeed_by_receipt",
            "running",
        )
        step = lifecycle.fire(model, "succeed_by_receipt", EVIDENCE["trusted_receipt"])
        assert (step.dest, step.guard, model.state) == ("succeeded", "trusted_receipt", "succeeded")
        with pytest.raises(IllegalTransition) as illegal:
            lifecycle.fire(model, "fail")
        assert (illegal.value.state, illegal.value.event) == ("succeeded", "fail")
    finally:
        lifecycle.detach(model)


@pytest.mark.parametrize(
    ("kind", "edge"), GUARDED, ids=[f"{k}:{e.source}-{e.trigger}" for k, e in GUARDED]
)
def test_a_remembered_plan_is_the_plan_and_a_refusal_is_never_remembered(
    kind: str, edge: Edge
) -> None:
    # Plans are remembered per (state, trigger, evidence): asking again, in any order, must
    # give what `transitions` decided the first time, and refused evidence must stay refused.
    lifecycle = run_machine() if kind == "run" else attempt_machine()
    assert edge.guard is not None
    holds = EVIDENCE[edge.guard]
    nothing = PrimaryFacts(run_status=edge.source, attempt_status="running", active_attempts=1)
    for _ in range(2):
        with pytest.raises(GuardRefused):
            lifecycle.plan(edge.source, edge.trigger, nothing)
        step = lifecycle.plan(edge.source, edge.trigger, holds)
        assert (step.source, step.dest, step.guard) == (edge.source, edge.dest, edge.guard)
    with pytest.raises(IllegalTransition):
        lifecycle.plan("no-such-state", edge.trigger, holds)
