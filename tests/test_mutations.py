"""Proof that the suite bites. Five deliberate bugs, each enabled by a monkeypatch
of the real reconciler (no switch in the product code), and each must be caught:

1. ``swap_evidence_order``: the process is probed before the receipt is read, and a running
   process is retained without reading the receipt at all;
2. ``skip_second_read``: after the grace, the receipt is not read again (taken as missing);
3. ``delete_before_commit``: a trusted receipt is deleted before its terminal commit;
4. ``unknown_as_not_running``: a probe answering `unknown` (e.g. /proc unreadable) is taken as
   `not_running`;
5. ``attempt_without_run``: the `lost`/terminal Attempt is committed without its Run's edge.

For each bug three nets are cast: a named scenario on the harness (a few fixed steps), the
exhaustive search of a small scope, and the hypothesis state machine. Each net must report an
InvariantViolation naming the invariant that caught it; the same scenario without the bug must
pass (so the catch is the bug's, not the scenario's). docs/orderings.md has the table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from _sim import InvariantViolation, World
from _sim_search import Scope, explore
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from test_orderings_stateful import NodeOrderings

import reconciler.primary._gather as gather_mod
import reconciler.primary._pass as primary_mod
import reconciler.primary._writes as writes_mod
from reconciler.node import Evidence
from reconciler.primary import EFFECTS, RECEIPT_EXECUTOR
from storage import AttemptChange

pytestmark = pytest.mark.orderings

Mutation = Callable[[pytest.MonkeyPatch], None]


def swap_evidence_order(mp: pytest.MonkeyPatch) -> None:
    original = gather_mod.gather_receipt

    def gather(ctx: Any, cand: Any, *, first: bool) -> Any:
        if first:
            att = cand.attempt
            # The bug: process identity first; a live process needs no receipt read.
            probe = primary_mod.inspect_handle(
                att.executor_handle, ctx.provider, platform=ctx.platform
            )
            if probe.verdict == "running":
                seen = cand.core.observe("read_receipt", first_receipt="missing")
                return cand._replace(core=seen)
        return original(ctx, cand, first=first)

    mp.setattr(gather_mod, "gather_receipt", gather)


def skip_second_read(mp: pytest.MonkeyPatch) -> None:
    original = gather_mod.gather_receipt

    def gather(ctx: Any, cand: Any, *, first: bool) -> Any:
        if not first:
            # The bug: "nothing there", without looking.
            seen = cand.core.observe("reread_receipt", second_receipt="missing")
            return cand._replace(core=seen)
        return original(ctx, cand, first=first)

    mp.setattr(gather_mod, "gather_receipt", gather)


def delete_before_commit(mp: pytest.MonkeyPatch) -> None:
    original = writes_mod.write_edge

    def commit(ctx: Any, cand: Any, decision: Any) -> Any:
        if EFFECTS[decision.write].actor == RECEIPT_EXECUTOR:
            ctx.store.delete(cand.attempt.id)  # the bug: the file goes first
        return original(ctx, cand, decision)

    mp.setattr(writes_mod, "write_edge", commit)


def unknown_as_not_running(mp: pytest.MonkeyPatch) -> None:
    original = primary_mod.inspect_handle

    def probe(handle_text: object, provider: Any, *, platform: str = "linux") -> Evidence:
        evidence = original(handle_text, provider, platform=platform)
        if evidence.verdict == "unknown" and evidence.pid is not None:
            return Evidence("not_running", evidence.reason, evidence.pid)  # the bug
        return evidence

    mp.setattr(primary_mod, "inspect_handle", probe)


def attempt_without_run(mp: pytest.MonkeyPatch) -> None:
    def attempt_only(make: Callable[..., Any]) -> Callable[..., Any]:
        def plan(*args: Any, **kw: Any) -> Any:
            full = make(*args, **kw)
            only = tuple(c for c in full.changes if isinstance(c, AttemptChange))
            return dataclasses.replace(full, changes=only)  # the bug: the Run edge is dropped

        return plan

    for write in ("lose", "complete"):
        mp.setitem(writes_mod.PLANS, write, attempt_only(writes_mod.PLANS[write]))


# --- the named scenarios: a few fixed steps on a fresh world, then start-up passes -----------


def launched(w: World, n: int = 1) -> World:
    for i in range(n):
        w.launch_prepare(i)
        w.launch_spawn(i)
        w.launch_record(i)
    return w


def published_while_alive(w: World) -> None:
    # The wrapper published and has not exited yet: the receipt must be read first.
    launched(w).publish(0)
    w.run_pass("primary")


def published_during_the_grace(w: World) -> None:
    # The wrapper's receipt lands while the reconciler waits out the grace.
    launched(w).process_exit(0)

    def at(label: str) -> None:
        if label == "grace":
            w.publish(0)

    w.run_pass("primary", before=at)


def published_then_exited(w: World) -> None:
    launched(w).publish(0)
    w.process_exit(0)
    w.run_pass("primary")


def proc_unreadable(w: World) -> None:
    launched(w).outage(True)
    w.run_pass("primary")


def killed_wrapper(w: World) -> None:
    launched(w).process_killed(0)
    w.run_pass("primary")


CASES: dict[str, tuple[Mutation, Callable[[World], None], str]] = {
    "swap_evidence_order": (swap_evidence_order, published_while_alive, "evidence-order"),
    "skip_second_read": (skip_second_read, published_during_the_grace, "terminal-needs-evidence"),
    "delete_before_commit": (delete_before_commit, published_then_exited, "delete-after-commit"),
    "unknown_as_not_running": (unknown_as_not_running, proc_unreadable, "never-lost-while-alive"),
    "attempt_without_run": (attempt_without_run, killed_wrapper, "attempt-terminal-iff-run-moved"),
}


def _scenario(play: Callable[[World], None]) -> None:
    w = World(runtime=1)
    try:
        play(w)
        w.converge()
    finally:
        w.close()


@pytest.mark.parametrize("bug", list(CASES))
def test_each_scenario_passes_on_the_real_reconciler(bug: str) -> None:
    _scenario(CASES[bug][1])


@pytest.fixture(params=list(CASES))
def planted(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[Callable[[World], None], str]:
    """Each deliberate bug in turn, planted in the real reconciler: its scenario, and the
    invariant that must catch it."""
    mutate, play, invariant = CASES[request.param]
    mutate(monkeypatch)
    return play, invariant


def test_the_named_scenario_catches_the_deliberate_bug(
    planted: tuple[Callable[[World], None], str],
) -> None:
    play, invariant = planted
    with pytest.raises(InvariantViolation, match=f"^{invariant}:"):
        _scenario(play)


# The smallest exhaustive scope that holds each bug's bad ordering (so the net is cheap).
SEARCH = Scope(
    "mutations",
    runtime=1,
    launched=1,
    depth=9,
    actions=("step", "start_primary", "crash", "publish", "exit", "kill", "outage"),
    converge_leaves=False,
)


def test_the_exhaustive_search_catches_the_deliberate_bug(
    planted: tuple[Callable[[World], None], str],
) -> None:
    _, invariant = planted
    with pytest.raises(AssertionError, match=f"^{invariant}:"):
        explore(SEARCH)


def test_the_hypothesis_state_machine_catches_the_deliberate_bug(
    planted: tuple[Callable[[World], None], str],
) -> None:
    _, invariant = planted
    with pytest.raises(AssertionError, match=f"{invariant}:"):
        run_state_machine_as_test(
            NodeOrderings,
            settings=settings(
                settings.default,
                max_examples=2000,
                stateful_step_count=60,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                # Shrinking is not needed to prove the catch, and it is the slow part.
                phases=[p for p in settings.default.phases if p.name != "shrink"],
                print_blob=False,
            ),
        )
