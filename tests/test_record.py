"""storage._record: the light records behave as the dataclasses they replace on the start-up
path (constructor, equality, hash, repr, immutability, slots), without compiling anything."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reconciler.node._identity import Evidence, FakeProcessTable
from reconciler.node._receipt_layout import Missing, Unusable
from storage import Actor, RunChange
from storage._record import FrozenRecordError, field, record


@dataclasses.dataclass(frozen=True)
class AsDataclass:
    a: int
    b: str = "x"
    c: list[int] = dataclasses.field(default_factory=list)


@record
class PlainRecord:
    run_id: str
    attempt_id: str | None
    row: str
    outcome: str
    reason: str


@record(frozen=True)
class AsRecord:
    a: int
    b: str = "x"
    c: list[int] = field(default_factory=list)


def test_a_record_is_built_equal_to_the_dataclass_it_replaces() -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}),
        ((1, "y"), {}),
        ((), {"a": 2, "c": [3]}),
        ((1,), {"b": "z"}),
        ((1,), {"b": "z", "c": [4]}),
        ((), {"c": [5], "b": "q", "a": 3}),
    ]
    for args, kwargs in calls:
        d, r = AsDataclass(*args, **kwargs), AsRecord(*args, **kwargs)
        assert (r.a, r.b, r.c) == (d.a, d.b, d.c)
        assert repr(r) == repr(d).replace("AsDataclass", "AsRecord")
        assert r == AsRecord(*args, **kwargs) and r != AsRecord(r.a + 1, r.b, r.c)
    # A frozen record hashes as a frozen dataclass: the tuple of its fields.
    assert hash(Actor("system", "x")) == hash(("system", "x"))


def test_a_default_factory_makes_a_new_value_for_each_record() -> None:
    assert AsRecord(1).c is not AsRecord(1).c
    assert "c" not in vars(AsRecord)  # never shared through the class
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
        ((), {}, "missing 1 required positional argument: 'a'"),
        ((1, "y", [], 4), {}, "positional arguments but 5 were given"),
        ((1,), {"a": 2}, "got multiple values for argument 'a'"),
        ((1,), {"zz": 2}, "got an unexpected keyword argument 'zz'"),
        ((1,), {"b": "y", "zz": 2}, "got an unexpected keyword argument 'zz'"),
    ],
)
def test_a_wrong_call_is_refused_as_a_dataclass_refuses_it(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        AsDataclass(*args, **kwargs)
    with pytest.raises(TypeError, match=message):
        AsRecord(*args, **kwargs)


def test_a_frozen_record_refuses_assignment_and_a_plain_one_is_unhashable() -> None:
    evidence: Any = Evidence("unknown", "invalid_handle")
    with pytest.raises(FrozenRecordError, match="cannot assign to field 'verdict'"):
        evidence.verdict = "running"
    with pytest.raises(AttributeError):
        del evidence.reason
    result = PlainRecord("run-1", None, "14", "failed", "x")
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


def test_the_type_checker_reads_the_record_decorator_itself() -> None:
    # PEP 681: `record` is declared a dataclass transform with its own `field`, so mypy checks
    # each record's constructor and frozen fields against this decorator (no stand-in).
    marker: dict[str, Any] = getattr(record, "__dataclass_transform__", {})
    assert marker.get("field_specifiers") == (field,)
    import storage

    assert storage.record is record and storage.record_field is field
