"""The field rules of a Repository write (spec 01 "Field rules", ``storage._changes``) refuse a
change with the exact one-line message a caller sees, on a real SQLite file, and move nothing
(issue 28)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _support import SYSTEM, T0, attempt_in, run_in

from storage import Actor, AttemptChange, Expect, InvalidField, Repository, RunChange

RUN = "019f70c0-0000-7000-8000-0000000000a1"
ATT = "019f70c0-0000-7000-8000-0000000000a2"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            RunChange("fail", set={"status": "succeeded", "version": 9}),
            "run columns ['status', 'version'] cannot be set along an edge",
        ),
        (
            RunChange("fail", set={"error_code": "E" * 129}),
            "error_code must be a string of at most 128 characters",
        ),
        (
            RunChange("fail", set={"error_summary": "s" * 1025}),
            "error_summary must be a string of at most 1024 characters",
        ),
    ],
    ids=["unknown columns", "error_code too long", "error_summary too long"],
)
def test_a_run_change_that_breaks_a_field_rule_is_refused_with_its_exact_message(
    repo: Repository, snapshot: Callable[[], object], change: RunChange, message: str
) -> None:
    version = run_in(repo, RUN, "running")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.advance(RUN, version, [change], actor=SYSTEM, at_ms=T0 + 1)
    assert str(raised.value) == message
    assert snapshot() == before


def test_an_edge_earlier_than_the_run_was_created_names_at_ms_and_the_aggregate(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "running")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.advance(RUN, version, [RunChange("mark_lost")], actor=SYSTEM, at_ms=T0 - 1)
    assert str(raised.value) == f"at_ms {T0 - 1} is earlier than the run's created/started time"
    assert snapshot() == before
    version = attempt_in(repo, ATT, ATT + "-a", "running")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.advance(ATT, version, [AttemptChange(ATT + "-a", "fail")], actor=SYSTEM, at_ms=T0 - 1)
    assert str(raised.value) == (
        f"at_ms {T0 - 1} is earlier than the attempt's created/started time"
    )
    assert snapshot() == before


def test_expecting_a_field_qlfsm_does_not_read_is_refused_naming_it(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "running")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.advance(
            RUN,
            version,
            [RunChange("mark_lost")],
            actor=SYSTEM,
            at_ms=T0 + 1,
            expect=Expect(run={"shoe_size": 42}),
        )
    assert str(raised.value) == "cannot expect run field 'shoe_size': qlfsm does not read it"
    assert snapshot() == before


def test_an_unknown_actor_is_refused_listing_spec_01s_actors(
    repo: Repository, snapshot: Callable[[], object]
) -> None:
    version = run_in(repo, RUN, "running")
    before = snapshot()
    with pytest.raises(InvalidField) as raised:
        repo.advance(RUN, version, [RunChange("mark_lost")], actor=Actor("robot"), at_ms=T0 + 1)
    assert str(raised.value) == (
        "unknown actor type 'robot'; use one of spec 01's actors: agent, api_app, "
        "compatibility, executor, legacy_shell, mcp_client, reconciler, scheduler, system, "
        "trigger, user, worker"
    )
    assert snapshot() == before
