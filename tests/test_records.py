"""The records of storage and the node are standard dataclasses: constructed, compared, hashed,
frozen and slotted as dataclasses are, so `dataclasses.replace`/`asdict` apply to them; a row
read from a table by position is a NamedTuple (`_replace`/`_asdict`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reconciler.node import Evidence, FakeProcessTable, Missing, Unusable
from storage import (
    Actor,
    AttemptChange,
    AttemptRow,
    EventRow,
    JournalRow,
    PendingRow,
    QuarantinedRow,
    RunChange,
    RunRow,
)


def test_a_default_factory_makes_a_new_value_for_each_record() -> None:
    assert RunChange("x").set is not RunChange("x").set
    assert AttemptChange("a", "x").payload is not AttemptChange("a", "x").payload
    assert FakeProcessTable().processes is not FakeProcessTable().processes


def test_records_compare_by_class_and_fields() -> None:
    assert Evidence("running", "identity_matches", 4) == Evidence("running", "identity_matches", 4)
    assert Evidence("running", "identity_matches", 4) != Evidence("running", "identity_matches", 5)
    unusable: object = Unusable("a", "b")
    change: object = RunChange("system")
    assert Missing() == Missing() and Missing() != unusable
    assert Actor("system") != change
    assert len({Actor("system"), Actor("system"), Actor("system", "x")}) == 2


def test_a_frozen_record_refuses_assignment_and_a_mutable_one_is_unhashable() -> None:
    evidence: Any = Evidence("unknown", "invalid_handle")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'verdict'"):
        evidence.verdict = "running"
    with pytest.raises(AttributeError):
        del evidence.reason
    table = FakeProcessTable()
    table.stat_reads += 1
    assert table.stat_reads == 1
    with pytest.raises(TypeError, match="unhashable"):
        hash(table)


def test_a_slots_record_has_slots_and_no_instance_dict() -> None:
    assert Evidence.__slots__ == ("verdict", "reason", "pid")
    assert not hasattr(Evidence("running", "identity_matches"), "__dict__")
    assert not hasattr(Actor("system"), "__dict__")
    assert Evidence.__match_args__ == ("verdict", "reason", "pid")


def test_a_record_is_a_dataclass_that_replace_and_asdict_take() -> None:
    for cls in (Actor, RunChange, Evidence):
        assert dataclasses.is_dataclass(cls)
    assert dataclasses.replace(Actor("system"), id="node-1") == Actor("system", "node-1")
    assert dataclasses.asdict(Actor("system", "node-1")) == {"type": "system", "id": "node-1"}


def test_a_row_read_by_position_is_a_frozen_named_tuple_that_replace_and_asdict_take() -> None:
    for cls in (RunRow, AttemptRow, EventRow, JournalRow, PendingRow, QuarantinedRow):
        assert issubclass(cls, tuple) and not dataclasses.is_dataclass(cls)
    row: Any = JournalRow("at-1", "run-1", "pending", None, None, 5, 6)
    with pytest.raises(AttributeError):
        row.state = "quarantined"
    assert row._replace(state="quarantined") == JournalRow(
        "at-1", "run-1", "quarantined", None, None, 5, 6
    )
    assert list(row._asdict()) == [
        "attempt_id",
        "run_id",
        "state",
        "quarantine_ref",
        "purge_after_ms",
        "registered_at_ms",
        "updated_at_ms",
    ]
