"""The ADR-0068 decision core (spec 04), fed facts directly: no database, no files, no /proc.

A small "world" (the Run, its Attempts, what the two receipt reads, the probe and the re-check
would show) is turned into observations exactly when the core asks for them, as a pass does.
The core's answer is compared with a transcription of the pass's if/else as it decided before
the table existed, over every world of a small exhaustive space.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from fsm import (
    Case,
    DecisionEngine,
    DecisionRow,
    DecisionTable,
    EvidenceError,
    GuardRefused,
    IllegalTransition,
    MachineDefinitionError,
    Need,
)
from fsm.qinglong import (
    ATTEMPT_ACTIVE,
    ATTEMPT_SPEC,
    PRIMARY_DECISIONS,
    PRIMARY_EVIDENCE,
    PRIMARY_GUARDS,
    PRIMARY_TABLE,
    RECEIPT_TRIGGERS,
    RUN_SPEC,
    PrimaryCore,
    PrimaryDecision,
    PrimaryFacts,
    attempt_machine,
    decide_primary,
    run_machine,
)
from fsm.qinglong._primary import check_lost_needs_grace, paths_to

# spec 04 "Per candidate", transcribed from the spec.
SPEC_04_ROWS = [
    "1", "2", "3", "3b", "4", "4b", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14"
]  # fmt: skip


class Attempt(NamedTuple):
    status: str
    executor_type: str = "local_process"
    handle: str | None = "ql3lp1:..."
    pid: object = 4242


class Run(NamedTuple):
    owner: str = "runtime"
    status: str = "running"
    cancel_requested: bool = False
    cancel_reason: str | None = None


class Read(NamedTuple):
    kind: str  # trusted | invalid | missing | quarantined (first read only)
    exit_code: int = 0
    problem: str = "token_mismatch"


class Probe(NamedTuple):
    verdict: str
    reason: str
    pid: int | None = 4242


class World(NamedTuple):
    page_status: str
    run: Run | None
    attempts: tuple[Attempt, ...]
    first: Read = Read("missing")
    probe: Probe = Probe("not_running", "pid_absent")
    second: Read = Read("missing")
    changed: bool = False


MISSING = Read("missing")
DEAD = Probe("not_running", "pid_absent")
ALIVE = Probe("running", "identity_matches")


def _pid_valid(pid: object) -> bool:
    return isinstance(pid, int) and not isinstance(pid, bool) and pid >= 1


def observation(world: World, evidence: str) -> dict[str, object]:
    """What a pass would see when gathering ``evidence`` in ``world`` (the adapter's job)."""
    if evidence == "read_run":
        if world.run is None:
            return {"run_present": False}
        attempts = world.attempts
        latest = attempts[-1] if attempts else None
        return {
            "run_present": True,
            "run_owner": world.run.owner,
            "run_status": world.run.status,
            "cancel_requested": world.run.cancel_requested,
            "cancel_reason": world.run.cancel_reason,
            "attempt_count": len(attempts),
            "active_attempts": sum(1 for a in attempts if a.status in ATTEMPT_ACTIVE),
            "attempt_status": latest.status if latest else None,
            "executor_type": latest.executor_type if latest else None,
            "handle_present": bool(latest.handle) if latest else None,
            "pid_valid": _pid_valid(latest.pid) if latest else None,
        }
    if evidence in ("read_receipt", "reread_receipt"):
        read = world.first if evidence == "read_receipt" else world.second
        key = "first_receipt" if evidence == "read_receipt" else "second_receipt"
        seen: dict[str, object] = {key: read.kind}
        if read.kind == "trusted":
            seen["receipt_exit_code"] = read.exit_code
        if read.kind == "invalid":
            seen["receipt_problem"] = read.problem
        return seen
    if evidence == "probe":
        latest = world.attempts[-1]
        return {
            "process": world.probe.verdict,
            "probe_reason": world.probe.reason,
            "handle_pid_matches": world.probe.pid == latest.pid,
        }
    if evidence == "pay_grace":
        return {"grace_paid": True}
    assert evidence == "recheck_run"
    return {"unchanged_on_recheck": not world.changed}


def drive(world: World) -> PrimaryDecision:
    core = PrimaryCore(world.page_status)
    while isinstance(step := core.next(), Need):
        core = core.observe(step.evidence, **observation(world, step.evidence))
    return step


def _terminal(run: Run, read: Read) -> str:
    if run.cancel_requested:
        return "timed_out" if run.cancel_reason == "timeout" else "cancelled"
    return "succeeded" if read.exit_code == 0 else "failed"


def old_pass(world: World) -> tuple[str, str, str]:
    """The pass's if/else before the table (reconciler/primary/_pass.py, phases 1 and 2),
    transcribed branch for branch: (row, outcome, reason). With spec 04's corrected row 4b:
    the executor type is checked before any receipt is read (it was row 8, after it)."""
    run = world.run
    attempts = world.attempts if run is not None else ()
    active = [a for a in attempts if a.status in ATTEMPT_ACTIVE]
    if len(active) > 1:
        return "1", "unresolved", "multiple_active_attempts"
    if run is None:
        return "2", "unresolved", "run_gone"
    if run.owner != "runtime":
        return "2", "unresolved", "not_runtime_owned"
    if run.status != world.page_status:
        return "2", "unresolved", "status_changed"
    if not attempts and run.status == "dispatching":
        return "3", "recovered", "attempt_missing_before_start"
    if not active:
        return "3b", "unresolved", "no_active_attempt"
    latest = attempts[-1]
    if latest.status not in ATTEMPT_ACTIVE:
        return "4", "unresolved", "latest_attempt_not_active"
    if latest.executor_type != "local_process":
        if latest.status == "claimed":
            return "4b", "recovered", "unstarted_claim"
        return "4b", "unresolved", "executor_not_local_process"
    if world.first.kind == "trusted":
        return "5", "recovered", f"receipt_{_terminal(run, world.first)}"
    if world.first.kind == "invalid":
        return "6", "unresolved", f"invalid_receipt:{world.first.problem}"
    if world.first.kind == "quarantined":
        return "6", "unresolved", "receipt_quarantined_earlier"
    if latest.status == "claimed":
        return "7", "recovered", "unstarted_claim"
    if not latest.handle:
        return "8", "unresolved", "handle_missing"
    if not _pid_valid(latest.pid):
        return "8", "unresolved", "pid_invalid"
    probe = world.probe
    if probe.verdict == "unknown":
        if probe.reason == "provider_unavailable":
            return "9", "failed", "provider_unavailable"
        return "10", "unresolved", probe.reason
    if probe.pid != latest.pid:
        return "11", "unresolved", "handle_pid_mismatch"
    if probe.verdict == "running":
        return "12", "remaining", "process_running"
    if world.second.kind == "trusted":
        return "13", "recovered", f"receipt_{_terminal(run, world.second)}_after_grace"
    if world.second.kind == "invalid":
        return "13", "unresolved", f"invalid_receipt:{world.second.problem}"
    if world.changed:
        return "13", "unresolved", "changed_before_lost"
    return "13", "recovered", f"process_not_running:{probe.reason}"


# --- Every row and every variant, reached by facts alone --------------------------------------

RUNNING = Attempt("running")
ROW_WORLDS: list[tuple[World, tuple[str, str, str]]] = [
    (World("running", Run(), (RUNNING, RUNNING)), ("1", "unresolved", "multiple_active_attempts")),
    (World("running", None, ()), ("2", "unresolved", "run_gone")),
    (World("running", Run(owner="legacy"), (RUNNING,)), ("2", "unresolved", "not_runtime_owned")),
    (World("dispatching", Run(), (RUNNING,)), ("2", "unresolved", "status_changed")),
    (
        World("dispatching", Run(status="dispatching"), ()),
        ("3", "recovered", "attempt_missing_before_start"),
    ),
    (World("running", Run(), ()), ("3b", "unresolved", "no_active_attempt")),
    (World("running", Run(), (Attempt("failed"),)), ("3b", "unresolved", "no_active_attempt")),
    (
        World("running", Run(), (RUNNING, Attempt("failed"))),
        ("4", "unresolved", "latest_attempt_not_active"),
    ),
    (
        World("running", Run(), (RUNNING,), Read("trusted", 0)),
        ("5", "recovered", "receipt_succeeded"),
    ),
    (World("running", Run(), (RUNNING,), Read("trusted", 3)), ("5", "recovered", "receipt_failed")),
    (
        World(
            "running",
            Run(cancel_requested=True, cancel_reason="timeout"),
            (RUNNING,),
            Read("trusted", 0),
        ),
        ("5", "recovered", "receipt_timed_out"),
    ),
    (
        World(
            "running",
            Run(cancel_requested=True, cancel_reason="user"),
            (RUNNING,),
            Read("trusted", 0),
        ),
        ("5", "recovered", "receipt_cancelled"),
    ),
    (
        World("running", Run(), (RUNNING,), Read("invalid", problem="too_large")),
        ("6", "unresolved", "invalid_receipt:too_large"),
    ),
    (
        World("running", Run(), (RUNNING,), Read("quarantined")),
        ("6", "unresolved", "receipt_quarantined_earlier"),
    ),
    (World("running", Run(), (Attempt("claimed"),)), ("7", "recovered", "unstarted_claim")),
    (
        World("running", Run(), (Attempt("running", executor_type="container"),)),
        ("4b", "unresolved", "executor_not_local_process"),
    ),
    (
        # The receipt is never read: a trusted one would not complete it (spec 04 row 4b).
        World("running", Run(), (Attempt("claimed", executor_type="container"),), Read("trusted")),
        ("4b", "recovered", "unstarted_claim"),
    ),
    (
        World("running", Run(), (Attempt("starting", handle=None),)),
        ("8", "unresolved", "handle_missing"),
    ),
    (World("running", Run(), (Attempt("running", pid=0),)), ("8", "unresolved", "pid_invalid")),
    (World("running", Run(), (Attempt("running", pid=True),)), ("8", "unresolved", "pid_invalid")),
    (
        World("running", Run(), (RUNNING,), MISSING, Probe("unknown", "provider_unavailable")),
        ("9", "failed", "provider_unavailable"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, Probe("unknown", "invalid_handle", None)),
        ("10", "unresolved", "invalid_handle"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, Probe("unknown", "unsupported_platform")),
        ("10", "unresolved", "unsupported_platform"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, Probe("running", "identity_matches", 7)),
        ("11", "unresolved", "handle_pid_mismatch"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, Probe("not_running", "pid_absent", 7)),
        ("11", "unresolved", "handle_pid_mismatch"),
    ),
    (World("running", Run(), (RUNNING,), MISSING, ALIVE), ("12", "remaining", "process_running")),
    (
        World("dispatching", Run(status="dispatching"), (Attempt("starting"),), MISSING, ALIVE),
        ("12", "remaining", "process_running"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, DEAD, Read("trusted", 0)),
        ("13", "recovered", "receipt_succeeded_after_grace"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, DEAD, Read("invalid", problem="bad_json")),
        ("13", "unresolved", "invalid_receipt:bad_json"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, DEAD, MISSING, changed=True),
        ("13", "unresolved", "changed_before_lost"),
    ),
    (
        World("running", Run(), (RUNNING,), MISSING, Probe("not_running", "boot_id_differs")),
        ("13", "recovered", "process_not_running:boot_id_differs"),
    ),
]


@pytest.mark.parametrize(
    ("world", "expected"), ROW_WORLDS, ids=[f"row-{e[0]}-{e[2]}" for _, e in ROW_WORLDS]
)
def test_fed_facts_alone_the_core_reaches_the_row_of_spec_04(
    world: World, expected: tuple[str, str, str]
) -> None:
    decision = drive(world)
    assert (decision.row, decision.outcome, decision.reason) == expected
    assert old_pass(world) == expected
    assert decision.outcome == PRIMARY_DECISIONS[decision.state]


def test_the_core_reaches_every_row_of_spec_04_and_every_case_of_the_table() -> None:
    reached = {(d.row, d.state, d.guard) for d in map(drive, (w for w, _ in ROW_WORLDS))}
    reached_rows = {row for row, _, _ in reached}
    # Row 14 is the exception: any gather or write raising.
    core = PrimaryCore("running")
    core = core.observe("read_run", **observation(World("running", Run(), (RUNNING,)), "read_run"))
    failed = core.fail("OSError: disk I/O error").next()
    assert (failed.row, failed.outcome, failed.reason) == (
        "14",
        "failed",
        "error:OSError: disk I/O error",
    )
    assert sorted(reached_rows | {"14"}, key=SPEC_04_ROWS.index) == SPEC_04_ROWS
    deciding = {
        (r.row, c.then, c.guard)
        for r in PRIMARY_TABLE.rows
        for c in r.cases
        if c.then in PRIMARY_DECISIONS and r.row != "14"
    }
    assert deciding == reached


def test_every_row_id_of_spec_04_is_in_the_table_exactly_once() -> None:
    ids = [r.row for r in PRIMARY_TABLE.rows]
    assert [i for i in ids if i in SPEC_04_ROWS] == SPEC_04_ROWS
    # The other rows are the evidence steps of ADR-0068 §2 (read the receipt; probe).
    assert [i for i in ids if i not in SPEC_04_ROWS] == ["step 2.2", "step 2.5"]
    assert len(set(ids)) == len(ids)


# --- The same decisions as before the table, exhaustively ---------------------------------------


BASE_RUNS: list[Run | None] = [
    None,
    *(
        Run(owner, status, *cancel)
        for owner, status, cancel in itertools.product(
            ("runtime", "legacy"),
            ("dispatching", "running"),
            ((False, None), (True, "timeout"), (True, "user")),
        )
    ),
]
BASE_ATTEMPTS: list[tuple[Attempt, ...]] = [
    (),
    (Attempt("failed"),),
    (RUNNING, RUNNING),
    (RUNNING, Attempt("failed")),
    (Attempt("failed"), Attempt("claimed")),
    *(
        (Attempt(status, executor, handle, pid),)
        for status, executor, handle, pid in itertools.product(
            ("claimed", "starting", "running"),
            ("local_process", "container"),
            ("ql3lp1:...", None),
            (4242, 0, None),
        )
    ),
]
# What each later evidence may show, keyed by the World field it comes from.
OPTIONS: dict[str, list[object]] = {
    "first": [
        Read("trusted", 0),
        Read("trusted", 2),
        Read("invalid"),
        Read("quarantined"),
        MISSING,
    ],
    "probe": [
        Probe("unknown", "provider_unavailable"),
        Probe("unknown", "invalid_handle", None),
        Probe("unknown", "unsupported_platform"),
        ALIVE,
        Probe("running", "identity_matches", 1),
        DEAD,
        Probe("not_running", "start_ticks_differ"),
        Probe("not_running", "pid_absent", 1),
    ],
    "second": [Read("trusted", 0), Read("trusted", 9), Read("invalid", problem="late"), MISSING],
    "changed": [False, True],
}
FIELD_OF = {
    "read_receipt": "first",
    "probe": "probe",
    "reread_receipt": "second",
    "recheck_run": "changed",
}


def asked(world: World) -> tuple[PrimaryDecision, list[str]]:
    """Drive ``world``; also say which World fields the core asked about."""
    core = PrimaryCore(world.page_status)
    fields: list[str] = []
    while isinstance(step := core.next(), Need):
        if step.evidence in FIELD_OF:
            fields.append(FIELD_OF[step.evidence])
        core = core.observe(step.evidence, **observation(world, step.evidence))
    return step, fields


def worlds() -> Iterator[tuple[World, PrimaryDecision]]:
    """Every distinct world of a small space, each with its decision: the database side is
    enumerated; each later piece of evidence is varied over its options only when the core
    asked for it (worlds that differ in evidence never asked for decide alike)."""
    for page, run, attempts in itertools.product(
        ("dispatching", "running"), BASE_RUNS, BASE_ATTEMPTS
    ):
        todo: list[tuple[World, frozenset[str]]] = [(World(page, run, attempts), frozenset())]
        while todo:
            world, fixed = todo.pop()
            decision, fields = asked(world)
            free = [f for f in fields if f not in fixed]
            if not free:
                yield world, decision
                continue
            for value in OPTIONS[free[0]]:
                change: dict[str, Any] = {free[0]: value}
                todo.append((world._replace(**change), fixed | {free[0]}))


def test_the_table_decides_every_world_of_a_small_space_as_the_pass_did_before() -> None:
    rows: set[str] = set()
    for world, decision in worlds():
        assert (decision.row, decision.outcome, decision.reason) == old_pass(world), world
        rows.add(decision.row)
    assert rows == set(SPEC_04_ROWS) - {"14"}


# --- lost only after the grace and the second read ---------------------------------------------

DEAD_WORLD = World("running", Run(), (RUNNING,), MISSING, DEAD, MISSING)


def test_a_not_running_verdict_asks_for_the_grace_and_nothing_else() -> None:
    core = PrimaryCore("running")
    for evidence, asked_by in (
        ("read_run", None),
        ("read_receipt", "step 2.2"),
        ("probe", "step 2.5"),
    ):
        assert core.next() == Need(evidence, asked_by)
        core = core.observe(evidence, **observation(DEAD_WORLD, evidence))
    assert core.next() == Need("pay_grace", "13")
    for early in ("reread_receipt", "recheck_run", "probe", "read_receipt"):
        with pytest.raises(IllegalTransition) as refused:
            core = core.observe(early, **observation(DEAD_WORLD, early))
        assert (refused.value.state, refused.value.event) == ("pay_grace", early)
    # A grace that was not fully paid (the pass measured too little) is asked for again.
    core = core.observe("pay_grace", grace_paid=False)
    assert core.next() == Need("pay_grace", "13")
    core = core.observe("pay_grace", grace_paid=True)
    assert core.next() == Need("reread_receipt", "13")
    core = core.observe("reread_receipt", second_receipt="missing")
    assert core.next() == Need("recheck_run", "13")
    core = core.observe("recheck_run", unchanged_on_recheck=True)
    decision = core.next()
    assert isinstance(decision, PrimaryDecision)
    assert (decision.state, decision.trigger, decision.terminal) == (
        "lost",
        "lose_after_grace",
        "lost",
    )
    assert decision.path == ("step 2.2", "step 2.5", "13", "13", "13", "13")


def everything_but(**missing: object) -> PrimaryFacts:
    full = PrimaryFacts(
        page_status="running",
        run_present=True,
        run_owner="runtime",
        run_status="running",
        attempt_count=1,
        active_attempts=1,
        attempt_status="running",
        executor_type="local_process",
        handle_present=True,
        pid_valid=True,
        cancel_requested=False,
        first_receipt="missing",
        process="not_running",
        probe_reason="pid_absent",
        handle_pid_matches=True,
        grace_paid=True,
        second_receipt="missing",
        unchanged_on_recheck=True,
    )
    return dataclasses.replace(full, **missing)  # type: ignore[arg-type]


def test_with_every_fact_of_row_13_observed_the_pure_function_decides_lost() -> None:
    decision = decide_primary(everything_but())
    assert isinstance(decision, PrimaryDecision)
    assert (decision.row, decision.state, decision.reason) == (
        "13",
        "lost",
        "process_not_running:pid_absent",
    )


@pytest.mark.parametrize(
    ("missing", "needed"),
    [
        ({"grace_paid": False}, "pay_grace"),
        ({"second_receipt": None}, "reread_receipt"),
        ({"unchanged_on_recheck": None}, "recheck_run"),
        ({"grace_paid": False, "second_receipt": None, "unchanged_on_recheck": None}, "pay_grace"),
    ],
)
def test_without_the_grace_or_the_second_read_not_running_never_decides_lost(
    missing: dict[str, object], needed: str
) -> None:
    # Even when later facts are filled in (by mistake), the machine stops at the first
    # evidence state whose evidence was not observed.
    assert decide_primary(everything_but(**missing)) == Need(needed, "13")


def test_no_fact_combination_gives_lost_after_a_probe_without_grace_and_both_reads() -> None:
    values = {
        "first_receipt": ("missing", "trusted", "invalid", None),
        "process": ("not_running", "running", "unknown", None),
        "handle_pid_matches": (True, False),
        "grace_paid": (True, False),
        "second_receipt": ("missing", "trusted", "invalid", None),
        "unchanged_on_recheck": (True, False, None),
        "receipt_exit_code": (0, None),
    }
    lost_after_probe = 0
    for combo in itertools.product(*values.values()):
        facts = everything_but(**dict(zip(values, combo, strict=True)))
        try:
            decided = decide_primary(facts)
        except EvidenceError:
            continue  # a trusted receipt without its exit code: refused, never guessed
        if isinstance(decided, PrimaryDecision) and decided.state == "lost":
            lost_after_probe += 1
            assert facts.process == "not_running" and facts.handle_pid_matches
            assert facts.grace_paid and facts.second_receipt == "missing"
            assert facts.unchanged_on_recheck is True
            assert decided.path[-4:] == ("13", "13", "13", "13")
    assert lost_after_probe == 2  # the one fact set, with either exit code (not looked at)


def test_a_table_with_lost_straight_after_the_probe_is_refused_when_built() -> None:
    def shortcut(row: DecisionRow) -> DecisionRow:
        if row.row != "13":
            return row
        cases = (Case("probe", "trusted_not_running", "lost", "x", "lose"), *row.cases[1:])
        return row._replace(cases=cases)

    bad = PRIMARY_TABLE._replace(rows=tuple(map(shortcut, PRIMARY_TABLE.rows)))
    with pytest.raises(MachineDefinitionError) as refused:
        check_lost_needs_grace(bad)
    assert "lost after a probe without the grace" in refused.value.problem
    assert "probe[trusted_not_running]" in refused.value.problem
    check_lost_needs_grace(PRIMARY_TABLE)


# --- The protocol ------------------------------------------------------------------------------


def test_the_core_refuses_evidence_it_did_not_ask_for_and_fields_that_evidence_does_not_fill() -> (
    None
):
    core = PrimaryCore("running")
    with pytest.raises(IllegalTransition) as early:
        core = core.observe("probe", process="not_running")
    assert (early.value.machine, early.value.state, early.value.event) == (
        "primary_decision",
        "read_run",
        "probe",
    )
    with pytest.raises(EvidenceError) as wrong:
        core = core.observe("read_run", run_present=True, process="running")
    assert "['process']" in str(wrong.value) and wrong.value.state == "read_run"
    assert core.facts == PrimaryFacts(page_status="running")  # nothing was recorded


def test_an_observation_made_again_on_the_same_start_is_answered_as_the_first_was() -> None:
    # Every candidate of a page status starts on the same facts; the second candidate's
    # identical observation is chosen from the engine's one cache, with the same answer.
    seen = observation(World("running", Run(), (RUNNING,)), "read_run")
    first = PrimaryCore("running").observe("read_run", **seen)
    engine = first.engine
    again = PrimaryCore("running").observe("read_run", **seen)
    assert again.next() == first.next() and again.facts == first.facts
    assert (again.state, again.path) == (first.state, first.path)
    # Other values are other observations: checked and chosen anew.
    other = PrimaryCore("running").observe("read_run", **{**seen, "active_attempts": 2})
    assert other.next() != first.next()
    with pytest.raises(EvidenceError):
        PrimaryCore("running").observe("read_run", **seen, process="running")
    with pytest.raises(IllegalTransition):
        first.observe("read_run", **seen)  # asked for the receipt now, not the Run
    engine.forget()
    assert PrimaryCore("running").observe("read_run", **seen).next() == first.next()


def test_asking_twice_gives_the_same_answer_and_a_decision_does_not_move_the_core() -> None:
    core = PrimaryCore("running")
    assert core.next() == core.next() == Need("read_run", None)
    core = core.observe("read_run", **observation(World("running", Run(), (RUNNING,)), "read_run"))
    core = core.observe("read_receipt", first_receipt="trusted", receipt_exit_code=0)
    first, again = core.next(), core.next()
    assert first == again and isinstance(first, PrimaryDecision)
    assert (first.row, first.write, first.trigger) == ("5", "complete", "succeed_by_receipt")
    with pytest.raises(IllegalTransition):
        core = core.observe("probe", process="running")
    # The commit of that decision raised: row 14, from where the decision was taken.
    failed = core.fail("Conflict: run changed").next()
    assert (failed.row, failed.state, failed.reason) == (
        "14",
        "failed",
        "error:Conflict: run changed",
    )


@pytest.mark.parametrize("evidence", PRIMARY_EVIDENCE)
def test_an_exception_in_any_evidence_state_is_row_14(evidence: str) -> None:
    core = PrimaryCore("running")
    while (step := core.next()) != Need(evidence, getattr(step, "asked_by", None)):
        assert isinstance(step, Need)
        core = core.observe(step.evidence, **observation(DEAD_WORLD, step.evidence))
    decided = core.fail("TimeoutError").next()
    assert (decided.row, decided.outcome, decided.reason) == ("14", "failed", "error:TimeoutError")
    assert core.state == evidence


def test_the_pure_function_wants_the_page_status_and_a_trusted_receipts_exit_code() -> None:
    with pytest.raises(EvidenceError, match="page_status"):
        decide_primary(PrimaryFacts(run_present=False))
    facts = everything_but(process=None, first_receipt="trusted")
    with pytest.raises(EvidenceError, match="exit code"):
        decide_primary(facts)


def test_facts_that_contradict_themselves_are_refused_not_guessed() -> None:
    # A verdict the table does not know matches no row of the probe state.
    facts = everything_but(process="exploded")
    with pytest.raises(GuardRefused) as refused:
        decide_primary(facts)
    assert (refused.value.state, refused.value.event) == ("probe", "decide")


# --- The decision and the edge its write fires share one guard ----------------------------------


def _edges(trigger: str) -> list[tuple[str, str | None]]:
    return [
        (spec.name, e.guard)
        for spec in (RUN_SPEC, ATTEMPT_SPEC)
        for e in spec.edges
        if e.trigger == trigger
    ]


def test_every_decided_trigger_is_a_run_edge_guarded_by_the_deciding_guard() -> None:
    for row in PRIMARY_TABLE.rows:
        for case in row.cases:
            if case.write == "complete":
                triggers = list(RECEIPT_TRIGGERS.values())
            elif case.trigger is not None:
                triggers = [case.trigger]
            else:
                continue
            for trigger in triggers:
                edges = _edges(trigger)
                assert ("run", case.guard) in edges, (row.row, trigger)
                assert {guard for _, guard in edges} == {case.guard}, (row.row, trigger)


@pytest.mark.parametrize(
    "world",
    [w for w, e in ROW_WORLDS if e[0] in ("3", "5", "7", "12", "13") and e[1] != "unresolved"],
    ids=lambda w: str(drive(w).reason),
)
def test_the_decisions_own_facts_satisfy_the_guard_of_the_run_and_attempt_edges(
    world: World,
) -> None:
    # The facts the decision was taken on are the evidence its write hands to the edges.
    decision = drive(world)
    assert decision.trigger is not None and world.run is not None
    run_from = world.run.status
    attempt_from = world.attempts[-1].status if world.attempts else None
    if decision.write == "complete":
        # D-3: a receipt walks the legal edges through `running` first (same guard).
        run_from, attempt_from = "running", "running"
    planned = 0
    if decision.trigger != "adopt_running" or run_from == "dispatching":
        step = run_machine().plan(run_from, decision.trigger, decision.facts)
        assert (step.guard, step.dest) == (decision.guard, decision.terminal)
        planned += 1
    if attempt_from is not None and (
        decision.trigger != "adopt_running" or attempt_from == "starting"
    ):
        step = attempt_machine().plan(attempt_from, decision.trigger, decision.facts)
        assert (step.guard, step.dest) == (decision.guard, decision.terminal)
        planned += 1
    assert planned >= 1 or decision.row == "12"  # row 12 on a running pair moves nothing


def test_a_lost_edge_refuses_facts_that_lack_the_grace() -> None:
    with pytest.raises(GuardRefused):
        run_machine().plan("running", "lose_after_grace", everything_but(grace_paid=False))


# --- The engine validates tables and wraps transitions' errors ---------------------------------


def _table(*rows: DecisionRow) -> DecisionTable:
    return DecisionTable("bad", ("a", "b"), {"done": "ok"}, rows)


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ((DecisionRow("1", "", "", (Case("a", "run_gone", "done"),)),), "no row decides from"),
        (
            (
                DecisionRow("1", "", "", (Case("a", "run_gone", "b"),)),
                DecisionRow("1", "", "", (Case("b", "run_gone", "done"),)),
            ),
            "row ids declared twice",
        ),
        (
            (
                DecisionRow("1", "", "", (Case("a", "no_such_guard", "b"),)),
                DecisionRow("2", "", "", (Case("b", "run_gone", "done"),)),
            ),
            "unknown guard",
        ),
        (
            (
                DecisionRow("1", "", "", (Case("a", "run_gone", "b"),)),
                DecisionRow("2", "", "", (Case("b", "run_gone", "a"),)),
            ),
            "unreachable states ['done']",
        ),
        (
            (
                DecisionRow("1", "", "", (Case("a", "run_gone", "b", "why"),)),
                DecisionRow("2", "", "", (Case("b", "run_gone", "done"),)),
            ),
            "a step to more evidence decides nothing",
        ),
        (
            (
                DecisionRow("1", "", "", (Case("a", "run_gone", "b"),)),
                DecisionRow(
                    "2", "", "", (Case("b", "run_gone", "done"), Case("b", "run_gone", "a"))
                ),
            ),
            "tried twice",
        ),
    ],
    ids=["idle-state", "duplicate-row", "unknown-guard", "unreachable", "step-decides", "twice"],
)
def test_a_bad_decision_table_is_refused_when_its_machine_is_built(
    rows: tuple[DecisionRow, ...], problem: str
) -> None:
    with pytest.raises(MachineDefinitionError) as refused:
        DecisionEngine(_table(*rows), PRIMARY_GUARDS)
    assert problem in refused.value.problem
    assert refused.value.machine == "bad"


def test_deciding_from_a_decision_state_is_an_illegal_transition() -> None:
    engine = DecisionEngine(
        _table(
            DecisionRow("1", "", "", (Case("a", "run_gone", "b"),)),
            DecisionRow("2", "", "", (Case("b", "run_gone", "done"),)),
        ),
        PRIMARY_GUARDS,
    )
    with pytest.raises(IllegalTransition) as refused:
        engine.choose("done", PrimaryFacts(run_present=False))
    assert (refused.value.state, refused.value.event) == ("done", "decide")


# --- carried over from the retired evidence sequence (fsm/_evidence.py) ------------------------


def test_on_every_path_the_receipt_is_read_before_the_process_is_probed() -> None:
    # ADR-0068 §2 steps 2-5: no path of the table reaches `probe` except through a receipt
    # read that found nothing; and no decision after a probe skips that read.
    for dest in PRIMARY_DECISIONS:
        for path in paths_to(PRIMARY_TABLE, dest):
            states = [t.case.state for t in path]
            if "probe" in states:
                assert "read_receipt" in states
                assert states.index("read_receipt") < states.index("probe")
                to_probe = next(t for t in path if t.case.then == "probe")
                assert to_probe.case.guard == "durable_identity_stored"


def test_a_claim_is_lost_only_after_the_first_receipt_read_found_nothing() -> None:
    core = PrimaryCore("dispatching")
    core = core.observe(
        "read_run",
        run_present=True,
        run_owner="runtime",
        run_status="dispatching",
        cancel_requested=False,
        cancel_reason=None,
        attempt_count=1,
        active_attempts=1,
        attempt_status="claimed",
        executor_type="local_process",
        handle_present=False,
        pid_valid=False,
    )
    assert core.next() == Need("read_receipt", "step 2.2")  # not lost yet: read first
    core = core.observe("read_receipt", first_receipt="missing")
    decided = core.next()
    assert isinstance(decided, PrimaryDecision)
    assert (decided.row, decided.state, decided.trigger) == ("7", "lost", "lose_unstarted_claim")


def test_the_pure_function_fed_a_decisions_own_facts_decides_as_the_core_did() -> None:
    # decide_primary replays the table over facts gathered to the end: a fact observed late
    # (a receipt found only on the second read) must not decide an earlier row (row 5).
    checked = 0
    for _world, decision in worlds():
        again = decide_primary(decision.facts)
        assert isinstance(again, PrimaryDecision)
        assert (again.row, again.outcome, again.reason) == (
            decision.row,
            decision.outcome,
            decision.reason,
        ), decision.facts
        checked += 1
    assert checked > 100


def test_a_receipt_trusted_only_on_the_second_read_is_row_13_from_the_complete_facts() -> None:
    facts = everything_but()
    late = dataclasses.replace(facts, second_receipt="trusted", receipt_exit_code=0)
    decision = decide_primary(late)
    assert isinstance(decision, PrimaryDecision)
    assert (decision.row, decision.reason) == ("13", "receipt_succeeded_after_grace")
