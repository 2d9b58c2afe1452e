"""Blind spots are findings: every lifecycle edge, decision case and guard outcome of the five
machines is taken by the orderings search, or listed in ``tests/orderings_unreachable.json``
with the reason the search cannot take it (docs/orderings.md "Coverage").

The search is the state machine of ``tests/test_orderings_stateful.py`` and the scopes of
``tests/test_orderings_exhaustive.py``. When both ran and passed earlier in this session (the
plugin puts this file last), their recordings are used; otherwise this file runs them itself,
in-process, with recording on (about a minute with the `ci` profile).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from _coverage_plugin import coverage_of
from _coverage_record import (
    Recording,
    blind_spots,
    coverage_doc,
    edge_what,
    load_unreachable,
    merged,
    recording,
)
from _sim_search import explore
from hypothesis.stateful import run_state_machine_as_test
from test_orderings_exhaustive import SCOPES
from test_orderings_stateful import NodeOrderings

pytestmark = [pytest.mark.orderings, pytest.mark.slow]


def _stateful(without: str | None) -> Recording:
    machine: Any = NodeOrderings
    if without is not None:
        # The model with one rule fewer: a plain method in place of the rule hides it.
        machine = type("NodeOrderingsWithout", (NodeOrderings,), {without: lambda self: None})
    with recording() as rec:
        run_state_machine_as_test(machine, settings=NodeOrderings.TestCase.settings)
    return rec


def _scope(name: str, without: str | None) -> Recording:
    scope = SCOPES[name][0]
    if without is not None:
        scope = dataclasses.replace(scope, actions=tuple(a for a in scope.actions if a != without))
    with recording() as rec:
        explore(scope)
    return rec


def _parts(config: pytest.Config) -> dict[str, Recording]:
    found = coverage_of(config).search_parts()
    if found is not None:
        return found
    return {"stateful": _stateful(None), **{name: _scope(name, None) for name in SCOPES}}


def test_the_search_takes_every_edge_case_and_guard_outcome_not_listed_unreachable(
    request: pytest.FixtureRequest,
) -> None:
    doc = coverage_doc(merged(_parts(request.config).values()), load_unreachable())
    spots = blind_spots(doc)
    assert not spots, "\n".join(spots)


# The cancel request (a user's, or the timeout policy's): one rule of the state machine and
# one action of the exhaustive search. Without it no receipt maps to `timed_out`.
CANCEL_RULE = "a_user_or_the_timeout_asks_to_cancel"
CANCEL_ACTION = "cancel"


def test_a_search_without_the_cancel_request_fails_the_check_naming_the_edge_it_lost(
    request: pytest.FixtureRequest,
) -> None:
    assert callable(getattr(NodeOrderings, CANCEL_RULE))
    parts = dict(_parts(request.config))
    parts["stateful"] = _stateful(CANCEL_RULE)
    for name, (scope, _) in SCOPES.items():
        if CANCEL_ACTION in scope.actions:
            parts[name] = _scope(name, CANCEL_ACTION)
    spots = blind_spots(coverage_doc(merged(parts.values()), load_unreachable()))
    lost = edge_what("running", "time_out_by_receipt", "timed_out", "trusted_receipt")
    assert f"run: {lost} is never taken by the search" in spots, spots
    assert f"attempt: {lost} is never taken by the search" in spots, spots


# QingLong taking a runtime Run away (deleting it, or handing it to the legacy owner) between a
# pass's page and its read: one action of the exhaustive search, in one scope. Without it
# spec 04 row 2's `run_gone` and `not_runtime_owned` are never found true.
TAKE_AWAY_ACTION = "take_away"


def test_a_search_without_qinglong_taking_runs_away_fails_the_check_naming_the_guards_it_lost(
    request: pytest.FixtureRequest,
) -> None:
    parts = dict(_parts(request.config))
    scopes = [name for name, (scope, _) in SCOPES.items() if TAKE_AWAY_ACTION in scope.actions]
    assert scopes, "no scope of the exhaustive search takes Runs away"
    for name in scopes:
        parts[name] = _scope(name, TAKE_AWAY_ACTION)
    spots = blind_spots(coverage_doc(merged(parts.values()), load_unreachable()))
    # Row 2's case itself is still taken (`status_changed`: a launcher step after the page);
    # its two other guards are what the search no longer finds true.
    for guard in ("run_gone", "not_runtime_owned"):
        assert f"primary_decision: guard {guard} true is never taken by the search" in spots, spots
