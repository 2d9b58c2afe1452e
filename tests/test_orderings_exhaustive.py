"""Every ordering of the harness's steps within small scopes, exhaustively.

Each scope starts from a quiet node and tries EVERY enabled action at every step (reconciler
gates, a reconciler crash or start, wrapper publish/exit/kill, PID reuse, reboot, /proc outage,
launcher steps, late legacy callbacks), breadth-first, skipping orderings that reach a state
already explored. `World.check` runs after every step of every ordering; every state at the
depth bound is then quiesced and must converge (a further pass writes nothing).

The counts are printed (run with `-s` to see them) and bounded below, so a change that makes
the search explore nothing fails instead of passing vacuously. docs/orderings.md records them.
"""

from __future__ import annotations

import os

import pytest
from _sim import PRIMARY_LABELS
from _sim_odd import FOREIGN_AND_DAMAGED
from _sim_search import Scope, Stats, explore

pytestmark = pytest.mark.orderings

WORLD = ("step", "start_primary", "crash", "publish", "exit", "kill", "reboot")

# The `thorough` profile (docs/orderings.md) searches two steps deeper: minutes, not seconds.
DEEPER = 2 if os.environ.get("QLFSM_HYPOTHESIS_PROFILE") == "thorough" else 0

SCOPES = {
    # One runtime Run, launched; 11 steps reach every gate of a pass, its crash and restart.
    "one_run": (
        Scope(
            "one_run",
            runtime=1,
            launched=1,
            depth=11 + DEEPER,
            actions=(*WORLD, "reuse", "outage", "crash_publish", "forge"),
        ),
        900,
    ),
    # One launched runtime Run whose cancel (reason `timeout`) is requested at any moment:
    # the receipt must map to `timed_out`, and a request racing a decision must not be lost.
    "one_run_cancelled": (
        Scope(
            "one_run_cancelled",
            runtime=1,
            launched=1,
            depth=10 + DEEPER,
            actions=(
                "step",
                "start_primary",
                "crash",
                "publish",
                "exit",
                "kill",
                "cancel",
                "fault",
            ),
        ),
        250,
    ),
    # Two launched runtime Runs, 9 steps: the shared grace, interleaved with both processes.
    "two_runs": (Scope("two_runs", depth=9 + DEEPER, actions=WORLD), 850),
    # Two prepared runtime Runs: the launcher's transactions and spawn race the reconciler.
    "two_launches": (
        Scope(
            "two_launches",
            launched=0,
            depth=7 + DEEPER,
            actions=("launch", "step", "start_primary", "crash", "publish", "kill"),
        ),
        300,
    ),
    # One prepared runtime Run launched while /proc may be unreadable: the handle capture
    # fails, the launcher kills the group and marks the launch failed (`dispatching -> failed`,
    # `starting -> failed`), racing the reconciler.
    "one_launch_proc_unreadable": (
        Scope(
            "one_launch_proc_unreadable",
            runtime=1,
            launched=0,
            depth=8 + DEEPER,
            actions=("launch", "outage", "step", "start_primary", "crash"),
        ),
        40,
    ),
    # One prepared runtime Run, one QingLong made but has not queued yet, and an operator's
    # `qlfsm resolve` (to `lost`, `failed` or `cancelled`) at any moment of the launch and
    # recovery: ADR-0001's operator edges out of `created`, `dispatching`, `claimed`,
    # `starting` and `lost`, and a pass that meets the decision.
    "one_launch_resolved": (
        Scope(
            "one_launch_resolved",
            runtime=1,
            odd=("created",),
            launched=0,
            depth=9 + DEEPER,
            actions=("launch", "step", "start_primary", "crash", "kill", "resolve"),
        ),
        60,
    ),
    # Eleven runtime Runs the harness's launcher never leaves (tests/_sim_odd.py: spec 04 rows
    # 1, 3, 3b, 4, 4b claimed and running, 7 under a running Run, 8, 10, 11), two passes, a
    # crash at any gate, a reboot: the held rows are never written, the lost ones only go to
    # `lost`. 17 steps is as deep as two passes get here.
    "foreign_and_damaged_runs": (
        Scope(
            "foreign_and_damaged_runs",
            runtime=0,
            odd=FOREIGN_AND_DAMAGED,
            launched=0,
            depth=17,
            actions=("step", "start_primary", "crash", "reboot"),
        ),
        130,
    ),
    # Five legacy Runs (rows 10, 7, 9, 8 pending, 3 ambiguous), three shadow starts: every
    # crash point of the pass, late 2.x callbacks; the silent rows must never write.
    "five_legacy_runs": (
        Scope(
            "five_legacy_runs",
            runtime=0,
            legacy=("lost", "complete", "abandon", "pending", "ambiguous"),
            launched=0,
            depth=16 + DEEPER,
            max_passes=3,
            actions=("start_shadow", "step", "crash", "finish"),
        ),
        90,
    ),
    # Two held runtime Runs (row 4b) behind one whose receipt is read and process probed
    # (row 11): QingLong deletes one or hands the other to the legacy owner at any moment, so
    # between the pass's page and its read of the Run (row 2 `run_gone`, `not_runtime_owned`).
    # Two passes end within 8 steps here (74 states), so `thorough` goes no deeper.
    "runs_taken_away": (
        Scope(
            "runs_taken_away",
            runtime=0,
            odd=("pid_mismatch", "deleted_meanwhile", "handed_over_meanwhile"),
            launched=0,
            depth=8,
            actions=("step", "start_primary", "crash", "take_away"),
        ),
        30,
    ),
    # The legacy Runs no engine step makes: rows 2b (no Attempt), 4 (truncated evidence), 5
    # (two instances with the pid), 11 (an illegal combination), beside a row-10 Run; an
    # operator's `qlfsm resolve` at any moment, so a Run can end between the shadow pass's
    # page and its decision (row 1 skipped). The silent rows must never write.
    "silent_legacy_runs": (
        Scope(
            "silent_legacy_runs",
            runtime=0,
            legacy=("no_attempt", "truncated", "two_matches", "illegal", "lost"),
            launched=0,
            depth=14 + DEEPER,
            actions=("start_shadow", "step", "crash", "resolve"),
        ),
        40,
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
    print(f"depth {scope.depth}: " + _report(stats, name))
    assert stats.states >= at_least, _report(stats, name)
    assert stats.max_depth == scope.depth
    assert stats.converged == stats.leaves > 0
    if name == "one_run":
        # The one-run scope is deep enough to release every gate of an ADR-0068 pass.
        assert set(PRIMARY_LABELS) <= set(stats.labels), sorted(
            set(PRIMARY_LABELS) - set(stats.labels)
        )
