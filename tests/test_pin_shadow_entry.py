"""The hints `qlfsm shadow` gives for an origin it does not know (``reconciler``
``unknown_origin_hints``, spec 05 "Switches"), in process: each unknown item by its position
and the reviewed origin it is close to, never its text (it may be a secret pasted by mistake).
The command's tests run it in a subprocess, which a mutation run cannot see (issue 28)."""

from __future__ import annotations

import pytest

from reconciler import ALLOWED_ORIGINS, unknown_origin_hints

SHOWN = "ignored, not a reviewed origin (text not shown)"


def test_each_unknown_item_is_named_by_its_position_with_the_closest_reviewed_origin() -> None:
    value = " manual , manaul,once, ,hunter2-secret-token, scheduled_nod ,grpc,sytem"
    assert unknown_origin_hints(value) == [
        f"item 2 {SHOWN}; did you mean manual?",
        f"item 4 {SHOWN}; --help lists the reviewed ones",
        f"item 5 {SHOWN}; did you mean scheduled_node?",
        f"item 7 {SHOWN}; did you mean system?",
    ]


def test_an_unknown_first_item_is_item_1() -> None:
    assert unknown_origin_hints("bot") == [f"item 1 {SHOWN}; did you mean boot?"]


@pytest.mark.parametrize("value", [None, "", " , ", ",".join(ALLOWED_ORIGINS), "once,grpc"])
def test_reviewed_refused_and_empty_items_get_no_hint(value: str | None) -> None:
    assert unknown_origin_hints(value) == []


def test_an_item_far_from_every_reviewed_origin_gets_no_guess() -> None:
    # `manu` is 0.8 like `manual` (above the 0.6 cutoff); `xyz` shares nothing.
    assert unknown_origin_hints("manu,xyz") == [
        f"item 1 {SHOWN}; did you mean manual?",
        f"item 2 {SHOWN}; --help lists the reviewed ones",
    ]
