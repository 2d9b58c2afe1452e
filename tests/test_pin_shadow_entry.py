"""The hints `qlfsm shadow` gives for an origin it does not know (``reconciler``
``unknown_origin_hints``, spec 05 "Switches"), in process: each unknown item by its position
and the reviewed origin it is close to, never its text (it may be a secret pasted by mistake).
The command's tests run it in a subprocess, which a mutation run cannot see (issue 28). And
``run_shadow`` in process: the clock, busy timeout, lock budget and resume cursor it was given
reach the pass, the environment (the process's when none is given) supplies what was not given,
a cluster profile is rejected without opening storage, a complete pass returns no cursor."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _shadow_support import T0_MS, LegacyDb

from reconciler import ALLOWED_ORIGINS, ORIGINS_ENV, run_shadow, unknown_origin_hints
from reconciler.node import FakeClock
from reconciler.shadow import PassPorts
from storage import LOCK_BUDGET_ENV, LockBudget, connect

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


# --- what run_shadow hands the pass ---------------------------------------------------------------


def test_the_clock_and_busy_timeout_given_to_run_shadow_reach_the_pass(db: LegacyDb) -> None:
    made = db.run(pid=42001)  # row 10: no instance row, marked lost
    opened: list[tuple[str, float | None]] = []

    def opener(path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        opened.append((path, busy_timeout_s))
        return connect(path)

    got = run_shadow(
        db.path,
        origins="manual",
        environ={},
        clock=FakeClock(T0_MS + 10_123),
        busy_timeout_s=2.5,
        ports=PassPorts(open=opener),
    )
    assert got.audit["state"] == "reconciled"
    assert opened == [(db.path, 2.5)]
    assert db.status(made) == ("lost", ["lost"])
    assert [r["created_at_ms"] for r in db.event_rows(made)] == [T0_MS + 10_123] * 2


def test_a_lock_budget_given_to_run_shadow_is_the_one_the_pass_writes_under(db: LegacyDb) -> None:
    made = db.run(pid=42001)
    spent = LockBudget(5)
    spent.blocked = True  # an earlier write of the same start-up found the lock held past it
    got = run_shadow(db.path, origins="manual", environ={}, lock=spent)
    assert got.audit == {"state": "failed", "errorType": "Busy"}
    assert db.status(made)[0] == "running"


def test_a_lock_budget_given_to_run_shadow_leaves_the_environments_unread(db: LegacyDb) -> None:
    db.run(pid=42001)
    got = run_shadow(db.path, origins="manual", environ={LOCK_BUDGET_ENV: "nan"}, lock=LockBudget())
    assert got.audit["state"] == "reconciled"


def test_without_a_lock_budget_run_shadow_reads_the_one_its_environment_names(
    db: LegacyDb,
) -> None:
    db.run(pid=42001)
    got = run_shadow(db.path, origins="manual", environ={LOCK_BUDGET_ENV: "nan"})
    assert got.audit == {"state": "failed", "errorType": "ValueError"}


def test_a_complete_pass_of_run_shadow_returns_no_resume_cursor(
    db: LegacyDb,
) -> None:
    for n in range(3):
        db.run(pid=42001 + n)
    whole = run_shadow(db.path, origins="manual", environ={})
    assert (whole.audit["summary"]["resumeAvailable"], whole.cursor) == (False, None)


def test_without_an_environment_run_shadow_reads_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ORIGINS_ENV, " once , not-an-origin ")
    missing = tmp_path / "missing.db"
    got = run_shadow(str(missing))
    assert got.audit == {"state": "disabled", "refusedOriginCount": 1, "ignoredOriginCount": 1}
    assert not missing.exists()


def test_a_cluster_profile_is_rejected_by_name_without_opening_storage(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    got = run_shadow(str(missing), origins="manual", profile="cluster-control", environ={})
    assert got.audit == {
        "state": "profile_rejected",
        "profile": "cluster-control",
        "refusedOriginCount": 0,
        "ignoredOriginCount": 0,
    }
    assert not missing.exists()


def test_run_shadow_resumes_after_the_cursor_it_was_given(db: LegacyDb) -> None:
    made = db.run(pid=42001)
    got = run_shadow(db.path, origins="manual", environ={}, resume_cursor=(T0_MS + 10**9, ""))
    assert got.audit["summary"]["scanned"] == 0
    assert db.status(made)[0] == "running"
