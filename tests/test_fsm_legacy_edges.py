"""The Run and Attempt edges of the ADR-0448 writes as data (``fsm/qinglong/_tables.py``
``RUN_LEGACY_EDGES`` / ``ATTEMPT_LEGACY_EDGES``): each a legal ADR-0001 pair, guarded by the
guard of the row it cites, and the machines that hold them built without the legacy table."""

from __future__ import annotations

import dataclasses

import pytest
from test_fsm_tables import RUN_ALLOWED

from fsm import (
    Edge,
    Lifecycle,
    MachineDefinitionError,
    MachineSpec,
    validate_spec,
)
from fsm.qinglong import (
    ATTEMPT_SPEC,
    GUARDS,
    LEGACY_EDGE_TRIGGERS,
    LEGACY_GUARD_ROWS,
    QINGLONG_RULES,
    RUN_SPEC,
)
from fsm.qinglong._guards import LEGACY_EDGE_GUARDS, LEGACY_ROW_GUARDS

# spec 05's writing rows and their guards (spec 07's names), typed here from the record.
ROW_GUARD = {
    "2": "unique_terminal_attempt",
    "6": "stopped_with_finished",
    "7": "unique_finished_evidence",
    "9": "no_spawn_evidence",
    "10": "no_terminal_evidence",
}
# spec 01's legal pairs (transcribed independently of fsm/qinglong/_tables.py, in
# test_fsm_tables), from the Run states a legacy write may leave: row 1 skips a terminal or
# lost Run.
RUN_LEGAL = {source: dests for source, dests in RUN_ALLOWED.items() if source != "lost"}
ACTIVE = ("claimed", "starting", "running")
# (machine, source, trigger, dest, row): every edge the writes may fire.
EXPECTED: set[tuple[str, str, str, str, str]] = {
    # Row 2: the Run to its latest Attempt's terminal status, from each Run state that is not
    # terminal or lost (row 1 skips those) with a legal pair to it.
    *(
        ("run", source, trigger, dest, "2")
        for trigger, dest in (
            ("succeed_by_repair", "succeeded"),
            ("fail_by_repair", "failed"),
            ("cancel_by_repair", "cancelled"),
            ("time_out_by_repair", "timed_out"),
            ("lose_by_repair", "lost"),
        )
        for source, dests in RUN_LEGAL.items()
        if dest in dests
    ),
    # Row 6: Attempt and Run to cancelled.
    *(("attempt", s, "cancel_by_instance", "cancelled", "6") for s in ACTIVE),
    *(
        ("run", s, "cancel_by_instance", "cancelled", "6")
        for s, dests in RUN_LEGAL.items()
        if "cancelled" in dests
    ),
    # Row 7: the shadow writer's chain.
    ("run", "created", "queue_by_instance", "queued", "7"),
    ("run", "queued", "dispatch_by_instance", "dispatching", "7"),
    ("run", "dispatching", "start_by_instance", "running", "7"),
    ("run", "running", "succeed_by_instance", "succeeded", "7"),
    ("run", "running", "fail_by_instance", "failed", "7"),
    ("attempt", "claimed", "start_by_instance", "starting", "7"),
    ("attempt", "starting", "run_by_instance", "running", "7"),
    ("attempt", "running", "succeed_by_instance", "succeeded", "7"),
    ("attempt", "running", "fail_by_instance", "failed", "7"),
    # Rows 9 and 10: the Attempt's commit (the Run's is row 2's repair).
    ("attempt", "claimed", "abandon_acceptance", "cancelled", "9"),
    *(("attempt", s, "lose_legacy_owner", "lost", "10") for s in ACTIVE),
}


def legacy_edges() -> list[tuple[str, Edge]]:
    return [
        (name, e)
        for name, spec in (("run", RUN_SPEC), ("attempt", ATTEMPT_SPEC))
        for e in spec.edges
        if e.cites.startswith("ADR-0448 ")
    ]


def test_the_writes_have_exactly_the_38_edges_of_their_rows() -> None:
    got = {
        (m, e.source, e.trigger, e.dest, e.cites.removeprefix("ADR-0448 row "))
        for m, e in legacy_edges()
    }
    assert len(legacy_edges()) == len(got) == 38
    assert got == EXPECTED


def test_each_legacy_edge_is_guarded_by_its_rows_guard_and_is_a_legal_pair() -> None:
    for machine, e in legacy_edges():
        row = e.cites.removeprefix("ADR-0448 row ")
        assert e.guard == ROW_GUARD[row], (machine, e)
        assert LEGACY_GUARD_ROWS[e.guard] == row
        spec = RUN_SPEC if machine == "run" else ATTEMPT_SPEC
        assert any(
            p.guard is None and (p.source, p.dest) == (e.source, e.dest) for p in spec.edges
        ), (machine, e)
        assert LEGACY_EDGE_TRIGGERS[(machine, row, e.source, e.dest)] == e.trigger
    validate_spec(RUN_SPEC, GUARDS, QINGLONG_RULES)
    validate_spec(ATTEMPT_SPEC, GUARDS, QINGLONG_RULES)


def test_one_name_is_one_predicate_on_the_lifecycles_and_on_the_legacy_shadow_diagram() -> None:
    assert set(LEGACY_EDGE_GUARDS) == set(ROW_GUARD.values())
    for name, guard in LEGACY_EDGE_GUARDS.items():
        assert LEGACY_ROW_GUARDS[name] is guard
        assert GUARDS[name] is guard
        assert guard.__name__ == name


def _with(spec: MachineSpec, *edges: Edge, without: Edge | None = None) -> MachineSpec:
    kept = tuple(e for e in spec.edges if e != without)
    return dataclasses.replace(spec, name="bad", edges=(*kept, *edges))


def test_a_legacy_edge_without_its_guard_is_refused() -> None:
    guarded = next(e for _, e in legacy_edges() if e.trigger == "cancel_by_instance")
    plain = dataclasses.replace(guarded, guard=None)
    # Every legal pair has its lifecycle edge already: an unguarded legacy edge is a second one,
    # beside its guarded edge or instead of it.
    for bad in (_with(RUN_SPEC, plain), _with(RUN_SPEC, plain, without=guarded)):
        with pytest.raises(MachineDefinitionError, match="duplicate unguarded edges"):
            Lifecycle(bad, GUARDS, rules=QINGLONG_RULES)


def test_an_illegal_legacy_edge_is_refused() -> None:
    # ADR-0001 has no dispatching -> succeeded: the writer's chain goes through running.
    jump = Edge(
        "succeed_by_instance",
        "dispatching",
        "succeeded",
        "unique_finished_evidence",
        "ADR-0448 row 7",
    )
    with pytest.raises(MachineDefinitionError, match="is not a legal lifecycle pair"):
        Lifecycle(_with(RUN_SPEC, jump), GUARDS, rules=QINGLONG_RULES)
    claimed = Edge("succeed_by_instance", "claimed", "succeeded", "unique_finished_evidence")
    with pytest.raises(MachineDefinitionError, match="is not a legal lifecycle pair"):
        Lifecycle(_with(ATTEMPT_SPEC, claimed), GUARDS, rules=QINGLONG_RULES)
