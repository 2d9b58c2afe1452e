"""Issue 6 §3: every ordering of the harness's steps within small scopes, exhaustively.

Each scope starts from a quiet node and tries EVERY enabled action at every step (reconciler
gates, a reconciler crash or start, wrapper publish/exit/kill, PID reuse, reboot, /proc outage,
launcher steps, late legacy callbacks), breadth-first, skipping orderings that reach a state
already explored. `World.check` runs after every step of every ordering; every state at the
depth bound is then quiesced and must converge (a further pass writes nothing).

The counts are printed (run with `-s` to see them) and bounded below, so a change that makes
the search explore nothing fails instead of passing vacuously. docs/orderings.md records them.
"""

from __future__ import annotations

import pytest
from _sim_search import Scope, Stats, explore

WORLD = ("step", "start_primary", "crash", "publish", "exit", "kill", "reboot")

SCOPES = {
    # One runtime Run, launched; 12 steps reach every gate of a pass, its crash and restart.
    "one_run_12_steps": (
        Scope(
            "one_run_12_steps",
            runtime=1,
            launched=1,
            depth=12,
            actions=(*WORLD, "reuse", "outage", "crash_publish"),
        ),
        700,
    ),
    # Two launched runtime Runs, 9 steps: the shared grace, interleaved with both processes.
    "two_runs_9_steps": (Scope("two_runs_9_steps", depth=9, actions=WORLD), 850),
    # Two prepared runtime Runs: the launcher's transactions and spawn race the reconciler.
    "two_launches_8_steps": (
        Scope(
            "two_launches_8_steps",
            launched=0,
            depth=8,
            actions=("launch", "step", "start_primary", "crash", "publish", "kill"),
        ),
        450,
    ),
    # Three legacy Runs (rows 10, 7, 9): every crash point of the shadow pass, late callbacks.
    "three_legacy_runs_10_steps": (
        Scope(
            "three_legacy_runs_10_steps",
            runtime=0,
            legacy=("lost", "complete", "abandon"),
            launched=0,
            depth=10,
            actions=("start_shadow", "step", "crash", "finish"),
        ),
        30,
    ),
}


def _report(stats: Stats, name: str) -> str:
    labels = ", ".join(f"{k}={v}" for k, v in sorted(stats.labels.items()))
    return (
        f"{name}: {stats.states} distinct states, {stats.orderings} orderings, "
        f"{stats.leaves} leaves converged, {stats.seconds:.1f}s; gates: {labels}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCOPES))
def test_every_ordering_in_a_small_scope_keeps_the_invariants_and_converges(name: str) -> None:
    scope, at_least = SCOPES[name]
    stats = explore(scope)
    print(_report(stats, name))
    assert stats.states >= at_least, _report(stats, name)
    assert stats.max_depth == scope.depth
    assert stats.converged == stats.leaves > 0


def test_the_one_run_scope_reaches_every_gate_of_the_primary_pass() -> None:
    # Cheaper than the full scope: the depth that first reaches the final verifier's probe.
    stats = explore(
        Scope(
            "gates",
            runtime=1,
            launched=1,
            depth=11,
            actions=("step", "start_primary", "crash", "publish", "kill"),
            converge_leaves=False,
        )
    )
    reached = set(stats.labels)
    expected = {
        "read_candidates",
        "first_receipt_read",
        "probe",
        "grace",
        "second_receipt_read",
        "commit",
        "delete_receipt",
        "verify_candidates",
        "verify_receipt_read",
        "verify_probe",
    }
    assert expected <= reached, sorted(expected - reached)
