"""The harness itself (tests/_sim.py): its crash really discards, its gates really stop the
real reconcilers where docs/orderings.md says, and its torn-write bookkeeping sees a tear."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _sim import World

import reconciler.primary._pass as primary_mod
import reconciler.shadow._pass as shadow_mod

pytestmark = pytest.mark.orderings


@pytest.fixture
def node() -> Iterator[World]:
    w = World(runtime=1, legacy=("lost",))
    try:
        yield w
    finally:
        w.close()


def _launch(w: World) -> None:
    w.launch_prepare(0)
    w.launch_spawn(0)
    w.launch_record(0)


def test_a_crash_at_the_commit_gate_discards_the_open_transaction(node: World) -> None:
    _launch(node)
    node.process_killed(0)
    node.reconciler_start("primary")
    while node.pending_label() != "commit":
        node.reconciler_step()
    before = node.snapshot()
    node.reconciler_crash()
    node.check()
    assert node.snapshot() == before
    run = node.repo.get_run("run-0")
    assert run is not None and run.status == "running"


def test_a_primary_pass_meets_its_gates_in_the_order_of_spec_04(node: World) -> None:
    _launch(node)
    node.process_killed(0)
    labels: list[str] = []
    node.run_pass("primary", before=labels.append)
    assert labels == [
        "read_candidates",
        "first_receipt_read",
        "probe",
        "grace",
        "second_receipt_read",
        "commit",
        "verify_candidates",
    ]


def test_a_crash_between_the_two_legacy_commits_is_seen_as_torn_and_repaired_next(
    node: World,
) -> None:
    node.reconciler_start("shadow")
    while node.pending_label() != "shadow_between_commits":
        node.reconciler_step()
    node.reconciler_crash()
    node.check()
    assert node.torn == {"leg-0"}
    node.run_pass("shadow")
    assert node.torn == set()
    assert ("leg-0", "repaired") in [(rid, state) for _, rid, state in node.decisions]


def test_the_harness_restores_the_real_functions_when_a_world_closes() -> None:
    real = shadow_mod.decide
    probe = primary_mod.inspect_handle
    World(runtime=0).close()
    assert shadow_mod.decide is real
    assert primary_mod.inspect_handle is probe


def test_the_harness_plugs_the_shadow_fakes_in_through_the_ports_not_by_patching() -> None:
    before = dict(vars(shadow_mod))
    node = World(runtime=0, legacy=("lost",))
    try:
        assert dict(vars(shadow_mod)) == before  # nothing of the pass's module replaced
        node.run_pass("shadow")
        assert ("leg-0", "marked_lost") in [(rid, st) for _, rid, st in node.decisions]
    finally:
        node.close()
