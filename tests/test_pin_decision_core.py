"""A decision core (`fsm/_decision.py`'s `DecisionCore`, here as `fsm.qinglong.PrimaryCore`) is an
immutable value: each observation returns a new core (ADR-0068 §2, one core per candidate
step), nothing is set or deleted on one in place, and it shows where it stands."""

from __future__ import annotations

import dataclasses

import pytest

from fsm.qinglong import PrimaryCore

# spec 04 step 2.1/2.2: a running Run whose one Attempt is claimed, nothing cancelled.
RUN = {
    "run_present": True,
    "run_status": "running",
    "run_owner": "runtime",
    "attempt_count": 1,
    "active_attempts": 1,
    "attempt_status": "claimed",
    "cancel_requested": False,
}


def test_an_attribute_of_a_core_can_neither_be_set_nor_deleted_and_the_error_names_the_field() -> (
    None
):
    core = PrimaryCore("running")
    # A frozen dataclass: the error (an AttributeError) names the field.
    with pytest.raises(dataclasses.FrozenInstanceError) as deleted:
        del core.facts
    assert str(deleted.value) == "cannot delete field 'facts'"
    with pytest.raises(dataclasses.FrozenInstanceError) as set_:
        core.facts = core.facts  # type: ignore[misc]
    assert str(set_.value) == "cannot assign to field 'facts'"
    assert repr(core) == "PrimaryCore('read_run', path=())"  # unchanged by either


def test_a_core_shows_its_kind_the_evidence_it_waits_for_and_the_rows_it_passed() -> None:
    fresh = PrimaryCore("running")
    assert repr(fresh) == "PrimaryCore('read_run', path=())"
    # The Run read, one claimed Attempt: spec 04 step 2.2 asks for its receipt next.
    read = fresh.observe("read_run", **RUN)
    assert repr(read) == "PrimaryCore('read_receipt', path=('step 2.2',))"
    assert repr(fresh) == "PrimaryCore('read_run', path=())"  # observe made a new one
