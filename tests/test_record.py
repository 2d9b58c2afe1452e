"""The start-up path's data classes are standard dataclasses: the constructor, equality, hash,
repr, immutability and slots they had as light records, and what the callers rely on (a row's
``__dict__`` for the database dump, a fresh default for every record)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reconciler.node import Evidence, FakeProcessTable, Missing, Unusable
from reconciler.primary._summary import CandidateResult
from storage import (
    Actor,
    Advanced,
    AttemptChange,
    AttemptRow,
    EventRow,
    Expect,
    JournalRow,
    RunChange,
    RunRow,
)

RECORDS: tuple[type, ...] = (
    Actor,
    Advanced,
    AttemptChange,
    AttemptRow,
    CandidateResult,
    EventRow,
    Evidence,
    Expect,
    JournalRow,
    Missing,
    RunChange,
    RunRow,
    Unusable,
)


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_every_record_of_the_start_up_path_is_a_standard_dataclass(cls: type) -> None:
    # The type checker and the run time see the same class: `dataclasses` applies to each.
    assert dataclasses.is_dataclass(cls)
    assert tuple(f.name for f in dataclasses.fields(cls)) == cls.__match_args__


def test_a_record_is_built_by_position_or_keyword_with_its_defaults() -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (("running", "identity_matches"), {}),
        (("running", "identity_matches", 4), {}),
        ((), {"verdict": "unknown", "reason": "x", "pid": 3}),
        (("running",), {"reason": "y"}),
    ]
    for args, kwargs in calls:
        e = Evidence(*args, **kwargs)
        bound = dict(zip(("verdict", "reason", "pid"), args, strict=False)) | kwargs
        assert (e.verdict, e.reason, e.pid) == (
            bound["verdict"],
            bound["reason"],
            bound.get("pid"),
        )
        assert repr(e) == f"Evidence(verdict={e.verdict!r}, reason={e.reason!r}, pid={e.pid!r})"
    # A frozen record hashes as a frozen dataclass: the tuple of its fields.
    assert hash(Actor("system", "x")) == hash(("system", "x"))


def test_a_default_factory_makes_a_new_value_for_each_record() -> None:
    assert RunChange("x").set is not RunChange("x").set
    assert "set" not in vars(RunChange)  # never shared through the class
    assert FakeProcessTable().processes is not FakeProcessTable().processes


def test_records_compare_by_class_and_fields() -> None:
    assert Evidence("running", "identity_matches", 4) == Evidence("running", "identity_matches", 4)
    assert Evidence("running", "identity_matches", 4) != Evidence("running", "identity_matches", 5)
    unusable: object = Unusable("a", "b")
    change: object = RunChange("system")
    assert Missing() == Missing() and Missing() != unusable
    assert Actor("system") != change
    assert len({Actor("system"), Actor("system"), Actor("system", "x")}) == 2


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("a",), {}, "missing 1 required positional argument: 'reason'"),
        (("a", "b", 1, 4), {}, "positional arguments but 5 were given"),
        (("a",), {"verdict": "b"}, "got multiple values for argument 'verdict'"),
        (("a",), {"zz": 2}, "got an unexpected keyword argument 'zz'"),
    ],
)
def test_a_wrong_call_is_refused(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Evidence(*args, **kwargs)


def test_a_frozen_record_refuses_assignment_and_a_plain_one_is_unhashable() -> None:
    evidence: Any = Evidence("unknown", "invalid_handle")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'verdict'"):
        evidence.verdict = "running"
    with pytest.raises(AttributeError):
        del evidence.reason
    result = CandidateResult("run-1", None, "14", "failed", "x")
    result.reason += ";more"
    assert result.reason == "x;more"
    with pytest.raises(TypeError, match="unhashable"):
        hash(result)


def test_a_slots_record_has_slots_and_no_instance_dict() -> None:
    assert Evidence.__slots__ == ("verdict", "reason", "pid")
    assert not hasattr(Evidence("running", "identity_matches"), "__dict__")
    assert Evidence.__match_args__ == ("verdict", "reason", "pid")
    assert Evidence.__qualname__ == "Evidence" and Evidence.__init__.__qualname__ == (
        "Evidence.__init__"
    )


def test_the_rows_keep_the_instance_dict_the_database_dump_reads() -> None:
    # `qlfsm db dump` writes `row.__dict__`: the rows stay dataclasses without slots.
    journal = JournalRow("at-1", "run-1", "pending", None, None, 1, 2)
    assert journal.__dict__ == {
        "attempt_id": "at-1",
        "run_id": "run-1",
        "state": "pending",
        "quarantine_ref": None,
        "purge_after_ms": None,
        "registered_at_ms": 1,
        "updated_at_ms": 2,
    }
    assert all("__slots__" not in vars(cls) for cls in (RunRow, AttemptRow, EventRow))
