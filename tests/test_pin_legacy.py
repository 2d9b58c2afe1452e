"""Spec 05's evidence selection and per-candidate table, pinned through the public `fsm` API.

Evidence selection is checked against a brute-force reference written from the spec's wording
(over every row set of up to three rows from a small universe, and by hypothesis beyond), and
the classification row by row, with each row's facts moved one at a time across its border.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import pytest
from _support import built_again
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm import (
    GuardRefused,
)
from fsm.qinglong import (
    ATTEMPT_STATES,
    LEGACY_GUARD_ROWS,
    LEGACY_SPEC,
    LEGACY_TABLE,
    RUN_STATES,
    InstanceEvidence,
    LegacyEngine,
    LegacyFacts,
    classify_legacy,
    legacy_engine,
    legacy_machine,
    legacy_views,
    select_evidence,
)
from fsm.qinglong._guards import LEGACY_ROW_GUARDS

# --- evidence selection ----------------------------------------------------------------------

PIDS: tuple[int | None, ...] = (None, 101, 202)
LOGS: tuple[str | None, ...] = (None, "legacy-log:aaa", "legacy-log:bbb")


def row(pid: int | None, log: str | None, n: int = 0) -> InstanceEvidence:
    # exit_code makes every row distinct, so "which row was matched" is observable.
    return InstanceEvidence(pid=pid, log_id=log, status="running", finished_at_ms=None, exit_code=n)


def reference(
    pid: int | None, log: str | None, rows: Sequence[InstanceEvidence]
) -> tuple[str, InstanceEvidence | None]:
    """spec 05 "Evidence selection", read as: which rows are candidates, then count them.

    With both keys known, the rows matching both are the candidates when there are any;
    otherwise every row matching either key is (a log match and a pid match on different rows
    are then two candidates: ambiguous). With one key known, the rows matching it; with none,
    every row. One candidate is matched, more are ambiguous, none is none.
    """
    keys = [(name, value) for name, value in (("pid", pid), ("log_id", log)) if value is not None]
    candidates: list[InstanceEvidence] = list(rows)
    if keys:
        candidates = [r for r in rows if any(getattr(r, k) == v for k, v in keys)]
    if len(keys) == 2:
        both = [r for r in rows if r.pid == pid and r.log_id == log]
        if both:
            candidates = both
    if len(candidates) == 1:
        return "matched", candidates[0]
    return ("ambiguous", None) if candidates else ("none", None)


UNIVERSE = [(p, log) for p in PIDS for log in LOGS]


def test_selection_agrees_with_the_reference_on_every_row_set_of_up_to_three_rows() -> None:
    checked = 0
    for size in range(4):
        for kinds in itertools.product(UNIVERSE, repeat=size):
            rows = [row(p, log, n) for n, (p, log) in enumerate(kinds)]
            for pid in PIDS:
                for log in LOGS:
                    got = select_evidence(pid, log, rows)
                    want = reference(pid, log, rows)
                    assert got[0] == want[0], (pid, log, kinds)
                    assert got[1] is want[1], (pid, log, kinds)
                    checked += 1
    assert checked == 9 * (1 + 9 + 81 + 729)


@settings(max_examples=300)
@given(
    pid=st.sampled_from(PIDS),
    log=st.sampled_from(LOGS),
    kinds=st.lists(st.sampled_from(UNIVERSE), max_size=9),
)
def test_selection_agrees_with_the_reference_on_up_to_nine_rows(
    pid: int | None, log: str | None, kinds: list[tuple[int | None, str | None]]
) -> None:
    rows = [row(p, lg, n) for n, (p, lg) in enumerate(kinds)]
    got = select_evidence(pid, log, rows)
    want = reference(pid, log, rows)
    assert got[0] == want[0]
    assert got[1] is want[1]


A, B = "legacy-log:aaa", "legacy-log:bbb"


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        # exactly one row matching both -> matched, whatever else matches one key
        ([row(101, A, 0)], 0),
        ([row(101, A, 0), row(101, B, 1)], 0),
        ([row(202, A, 0), row(101, A, 1)], 1),
        ([row(101, None, 0), row(101, A, 1), row(None, A, 2)], 1),
        # more than one matching both
        ([row(101, A, 0), row(101, A, 1)], "ambiguous"),
        # none matching both: more than one by log, more than one by pid
        ([row(202, A, 0), row(None, A, 1)], "ambiguous"),
        ([row(101, B, 0), row(101, None, 1)], "ambiguous"),
        # a log match and a pid match on different rows
        ([row(202, A, 0), row(101, B, 1)], "ambiguous"),
        # exactly one log match, or exactly one pid match
        ([row(202, A, 0), row(202, B, 1)], 0),
        ([row(None, B, 0), row(101, None, 1)], 1),
        # both known, nothing matches
        ([row(202, B, 0), row(None, None, 1)], "none"),
        ([], "none"),
    ],
)
def test_with_pid_and_log_known_the_spec_sentences_hold(
    rows: list[InstanceEvidence], want: int | str
) -> None:
    selection, matched = select_evidence(101, A, rows)
    if isinstance(want, int):
        assert selection == "matched" and matched is rows[want]
    else:
        assert (selection, matched) == (want, None)


@pytest.mark.parametrize(
    ("pid", "log", "rows", "want"),
    [
        # only the pid known: a row without a log id is no log match
        (101, None, [row(101, None, 0), row(202, None, 1)], 0),
        (101, None, [row(202, None, 0), row(101, A, 1)], 1),
        (101, None, [row(101, None, 0), row(101, A, 1)], "ambiguous"),
        (101, None, [row(202, None, 0), row(None, None, 1)], "none"),
        # only the log known: a row without a pid is no pid match
        (None, A, [row(None, None, 0), row(None, A, 1)], 1),
        (None, A, [row(202, A, 0), row(None, B, 1)], 0),
        (None, A, [row(None, A, 0), row(202, A, 1)], "ambiguous"),
        (None, A, [row(None, None, 0), row(101, B, 1)], "none"),
        # neither known: the rows themselves
        (None, None, [row(101, A, 0)], 0),
        (None, None, [row(None, None, 0)], 0),
        (None, None, [row(101, A, 0), row(202, B, 1)], "ambiguous"),
        (None, None, [], "none"),
    ],
)
def test_with_one_key_or_none_known_one_match_is_matched_and_more_are_ambiguous(
    pid: int | None, log: str | None, rows: list[InstanceEvidence], want: int | str
) -> None:
    selection, matched = select_evidence(pid, log, rows)
    if isinstance(want, int):
        assert selection == "matched" and matched is rows[want]
    else:
        assert (selection, matched) == (want, None)


# --- classification ---------------------------------------------------------------------------

ACTIVE = ("claimed", "starting", "running")
TERMINAL_ATTEMPT = ("succeeded", "failed", "cancelled", "timed_out", "lost")
# spec 01's Run table, for row 2's "Run -> that status is legal".
RUN_TO: dict[str, set[str]] = {
    "created": {"queued", "cancelled"},
    "queued": {"dispatching", "cancelled", "timed_out"},
    "dispatching": {"running", "retry_wait", "failed", "cancelled", "lost", "timed_out"},  # (**)
    "running": {"waiting_approval", "retry_wait", "succeeded", "failed", "cancelled"}
    | {"timed_out", "lost"},
    "waiting_approval": {"running", "cancelled", "timed_out"},
    "retry_wait": {"queued", "cancelled", "timed_out"},
    "lost": {"queued", "failed", "cancelled", "retry_wait"},
}
RUN_FINISHED = {"succeeded", "failed", "cancelled", "timed_out", "lost"}


def spec05_row(f: LegacyFacts) -> str:
    """Spec 05 "Per candidate", transcribed as a list of (row, facts) tried in order."""
    rows: list[tuple[str, bool]] = [
        ("12", f.error),
        (
            "1",
            not f.run_present
            or f.run_owner != "legacy"
            or not f.origin_enabled
            or f.run_status is None
            or f.run_status in RUN_FINISHED,
        ),
        (
            "2",
            f.active_attempts == 0
            and f.latest_attempt_status in TERMINAL_ATTEMPT
            and f.latest_attempt_status in RUN_TO.get(f.run_status or "", set()),
        ),
        ("2b", f.active_attempts == 0),
        ("3", f.active_attempts > 1),
        ("4", f.evidence_truncated),
        ("5", f.selection == "ambiguous"),
        (
            "6",
            f.selection == "matched" and f.matched_finished and f.matched_status == "stopped",
        ),
        (
            "7",
            f.selection == "matched"
            and f.matched_finished
            and f.matched_status in ("succeeded", "failed"),
        ),
        ("8", f.origin == "scheduled_system"),
        ("9", f.run_status == "queued" and f.attempt_status == "claimed"),
        ("10", f.run_status in ("dispatching", "running") and f.attempt_status in ACTIVE),
    ]
    return next((r for r, holds in rows if holds), "11")


OUTCOME_OF_ROW = {
    "1": "skipped",
    "2": "repaired",
    "2b": "ambiguous",
    "3": "ambiguous",
    "4": "ambiguous",
    "5": "ambiguous",
    "6": "cancelled",
    "7": "completed",
    "8": "pending",
    "9": "abandoned",
    "10": "marked_lost",
    "11": "ambiguous",
    "12": "failed",
}
GUARD_OF_ROW = {r: g for g, r in LEGACY_GUARD_ROWS.items()}
TRIGGER_OF_GUARD = {e.guard: e.trigger for e in LEGACY_SPEC.edges}

# One candidate that reaches row 10 (markedLost): every fact of an eligible, active candidate.
BASE = LegacyFacts(
    run_present=True,
    run_owner="legacy",
    origin="manual",
    origin_enabled=True,
    run_status="running",
    active_attempts=1,
    attempt_status="running",
    selection="none",
)


def facts(**changes: object) -> LegacyFacts:
    return dataclasses.replace(BASE, **changes)  # type: ignore[arg-type]


def assert_decides(f: LegacyFacts, row_: str) -> None:
    """The decision names the row, its outcome and its guard, and the legacy machine takes
    exactly that guarded edge on these facts (what the shadow pass fires)."""
    decision = classify_legacy(f)
    assert (decision.row, decision.outcome, decision.guard) == (
        row_,
        OUTCOME_OF_ROW[row_],
        GUARD_OF_ROW[row_],
    )
    step = legacy_machine().plan("candidate", TRIGGER_OF_GUARD[decision.guard], f)
    assert (step.dest, step.guard) == (decision.outcome, decision.guard)


ROW_CASES: list[tuple[str, LegacyFacts, str]] = [
    ("error wins over everything", facts(error=True), "12"),
    ("error on a gone run", LegacyFacts(run_present=False, error=True), "12"),
    ("run gone", facts(run_present=False), "1"),
    ("runtime-owned", facts(run_owner="runtime"), "1"),
    ("owner unknown", facts(run_owner=None), "1"),
    ("origin not enabled", facts(origin_enabled=False), "1"),
    ("no run status", facts(run_status=None), "1"),
    *((f"run {s}", facts(run_status=s), "1") for s in sorted(RUN_FINISHED)),
    (
        "repair running -> succeeded",
        facts(active_attempts=0, attempt_status=None, latest_attempt_status="succeeded"),
        "2",
    ),
    (
        "repair dispatching -> lost",
        facts(
            run_status="dispatching",
            active_attempts=0,
            attempt_status=None,
            latest_attempt_status="lost",
        ),
        "2",
    ),
    (
        "no repair queued -> succeeded (illegal)",
        facts(
            run_status="queued",
            active_attempts=0,
            attempt_status=None,
            latest_attempt_status="succeeded",
        ),
        "2b",
    ),
    (
        "no repair dispatching -> succeeded (illegal)",
        facts(
            run_status="dispatching",
            active_attempts=0,
            attempt_status=None,
            latest_attempt_status="succeeded",
        ),
        "2b",
    ),
    ("no attempt at all", facts(active_attempts=0, attempt_status=None), "2b"),
    (
        "latest attempt active yet counted 0",
        facts(active_attempts=0, attempt_status=None, latest_attempt_status="running"),
        "2b",
    ),
    ("two active", facts(active_attempts=2), "3"),
    ("three active", facts(active_attempts=3), "3"),
    (
        "two active on scheduled_system",
        facts(origin="scheduled_system", active_attempts=2),
        "3",
    ),
    (
        "two active on a queued run with a claim",
        facts(run_status="queued", attempt_status="claimed", active_attempts=2),
        "3",
    ),
    ("truncated", facts(evidence_truncated=True), "4"),
    (
        "truncated beats a finished match",
        facts(
            evidence_truncated=True,
            selection="matched",
            matched_status="succeeded",
            matched_finished=True,
        ),
        "4",
    ),
    ("ambiguous selection", facts(selection="ambiguous"), "5"),
    (
        "ambiguous selection on scheduled_system",
        facts(origin="scheduled_system", selection="ambiguous"),
        "5",
    ),
    (
        "stopped and finished",
        facts(selection="matched", matched_status="stopped", matched_finished=True),
        "6",
    ),
    (
        "stopped and finished on scheduled_system",
        facts(
            origin="scheduled_system",
            selection="matched",
            matched_status="stopped",
            matched_finished=True,
        ),
        "6",
    ),
    (
        "succeeded and finished",
        facts(selection="matched", matched_status="succeeded", matched_finished=True),
        "7",
    ),
    (
        "failed and finished on a queued claim",
        facts(
            run_status="queued",
            attempt_status="claimed",
            selection="matched",
            matched_status="failed",
            matched_finished=True,
        ),
        "7",
    ),
    (
        "stopped but not finished is no evidence",
        facts(selection="matched", matched_status="stopped", matched_finished=False),
        "10",
    ),
    (
        "succeeded but not finished is no evidence",
        facts(selection="matched", matched_status="succeeded", matched_finished=False),
        "10",
    ),
    (
        "finished while still running is no evidence",
        facts(selection="matched", matched_status="running", matched_finished=True),
        "10",
    ),
    (
        "finished but not matched is no evidence",
        facts(selection="none", matched_status="succeeded", matched_finished=True),
        "10",
    ),
    ("scheduled_system waits", facts(origin="scheduled_system"), "8"),
    (
        "scheduled_system waits even for a queued claim",
        facts(origin="scheduled_system", run_status="queued", attempt_status="claimed"),
        "8",
    ),
    ("queued claim abandoned", facts(run_status="queued", attempt_status="claimed"), "9"),
    *(
        (f"{r} run, {a} attempt lost", facts(run_status=r, attempt_status=a), "10")
        for r in ("dispatching", "running")
        for a in ACTIVE
    ),
    ("queued run, starting attempt", facts(run_status="queued", attempt_status="starting"), "11"),
    ("queued run, running attempt", facts(run_status="queued", attempt_status="running"), "11"),
    ("created run, claimed attempt", facts(run_status="created", attempt_status="claimed"), "11"),
    (
        "retry_wait run, running attempt",
        facts(run_status="retry_wait", attempt_status="running"),
        "11",
    ),
    ("running run, no attempt status", facts(attempt_status=None), "11"),
]


@pytest.mark.parametrize(("_name", "f", "want"), ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_each_row_of_spec_05_decides_its_own_candidates(
    _name: str, f: LegacyFacts, want: str
) -> None:
    assert spec05_row(f) == want  # the case is what its name says
    assert_decides(f, want)


def test_row_10_takes_a_claimed_attempt_of_a_dispatching_or_running_run() -> None:
    # A claim on a Run that left `queued` was spawned or not: no evidence says which, so it is
    # marked lost (row 10), not abandoned (row 9, queued Runs only) and not ambiguous.
    for status in ("dispatching", "running"):
        decision = classify_legacy(facts(run_status=status, attempt_status="claimed"))
        assert (decision.row, decision.outcome) == ("10", "marked_lost")


def test_row_3_is_decided_before_the_scheduled_system_wait() -> None:
    decision = classify_legacy(facts(origin="scheduled_system", active_attempts=2))
    assert (decision.row, decision.outcome, decision.guard) == (
        "3",
        "ambiguous",
        "multiple_active_attempts",
    )


legacy_facts = st.builds(
    LegacyFacts,
    run_present=st.booleans(),
    run_owner=st.sampled_from(["legacy", "runtime", None]),
    origin=st.sampled_from(["manual", "scheduled_system", "scheduled_node", None]),
    origin_enabled=st.booleans(),
    run_status=st.sampled_from([*RUN_STATES, None]),
    active_attempts=st.integers(0, 3),
    attempt_status=st.sampled_from([*ATTEMPT_STATES, None]),
    latest_attempt_status=st.sampled_from([*ATTEMPT_STATES, None]),
    evidence_truncated=st.booleans(),
    selection=st.sampled_from(["matched", "ambiguous", "none"]),
    matched_status=st.sampled_from(["running", "succeeded", "stopped", "failed", None]),
    matched_finished=st.booleans(),
    error=st.booleans(),
)
# Mostly eligible candidates: rows 2..11 are only reached past row 1.
eligible_facts = st.builds(
    LegacyFacts,
    run_present=st.just(True),
    run_owner=st.just("legacy"),
    origin=st.sampled_from(["manual", "scheduled_system"]),
    origin_enabled=st.just(True),
    run_status=st.sampled_from(["queued", "dispatching", "running", "created", "retry_wait"]),
    active_attempts=st.integers(0, 2),
    attempt_status=st.sampled_from([*ACTIVE, None]),
    latest_attempt_status=st.sampled_from([*ATTEMPT_STATES, None]),
    evidence_truncated=st.booleans(),
    selection=st.sampled_from(["matched", "ambiguous", "none"]),
    matched_status=st.sampled_from(["running", "succeeded", "stopped", "failed", None]),
    matched_finished=st.booleans(),
    error=st.just(False),
)


@settings(max_examples=400)
@given(f=st.one_of(legacy_facts, eligible_facts))
def test_the_first_matching_row_of_spec_05_decides_every_candidate(f: LegacyFacts) -> None:
    assert_decides(f, spec05_row(f))


@settings(max_examples=200)
@given(f=st.one_of(legacy_facts, eligible_facts))
def test_exactly_the_deciding_rows_guard_holds_and_every_other_refuses(f: LegacyFacts) -> None:
    decided = spec05_row(f)
    machine = legacy_machine()
    for guard, row_ in LEGACY_GUARD_ROWS.items():
        trigger = TRIGGER_OF_GUARD[guard]
        if row_ == decided:
            assert machine.plan("candidate", trigger, f).guard == guard
        elif not any(
            e.trigger == trigger and LEGACY_GUARD_ROWS[str(e.guard)] == decided
            for e in LEGACY_SPEC.edges
        ):
            with pytest.raises(GuardRefused):
                machine.plan("candidate", trigger, f)


def test_no_legacy_edge_is_taken_on_evidence_that_is_not_legacy_facts() -> None:
    for e in LEGACY_SPEC.edges:
        with pytest.raises(GuardRefused):
            legacy_machine().plan("candidate", e.trigger, None)


@pytest.mark.parametrize("built", ["imported", "built again"])
def test_the_legacy_row_guards_are_named_and_hold_exactly_for_their_row(built: str) -> None:
    # spec 07: the legacy_shadow edge of a row is taken only when that row decides. The guards
    # are made once, when fsm is imported; the module built again runs the same makers.
    guards = (
        LEGACY_ROW_GUARDS
        if built == "imported"
        else built_again("fsm.qinglong._guards").LEGACY_ROW_GUARDS
    )
    # row 12's guard is the shared `error_raised`, not one of these.
    assert set(guards) == set(LEGACY_GUARD_ROWS) - {"error_raised"}
    assert {spec05_row(f) for _name, f, _want in ROW_CASES} == set(LEGACY_GUARD_ROWS.values())
    for name, guard in guards.items():
        # transitions labels the diagram's condition by the callable's name.
        assert (guard.__name__, guard.__qualname__) == (name, name)
        assert guard(None) is False
        assert guard(object()) is False
        for case, f, want in ROW_CASES:
            assert guard(f) is (LEGACY_GUARD_ROWS[name] == want), (name, case)


def test_a_deciding_row_without_a_trigger_has_the_empty_trigger_in_the_views_and_on_its_edge() -> (
    None
):
    # A copy of the table whose row 1 names no legacy_shadow trigger: the views say "" (no
    # trigger), as a LegacyDecision does, never a made-up one.
    rows = tuple(
        r._replace(cases=(r.cases[0]._replace(trigger=None),)) if r.row == "1" else r
        for r in LEGACY_TABLE.rows
    )
    views = legacy_views(LEGACY_TABLE._replace(rows=rows))
    assert views.triggers["skipped"] == ""
    assert [e.trigger for e in views.spec.edges if e.dest == "skipped"] == [""]
    assert views.triggers["repaired"] == "repair"  # the other rows keep theirs
    # The engine built from those views keeps them, and decides row 1 with that empty trigger.
    engine = LegacyEngine(views)
    assert engine.views is views
    decided = engine.classify(LegacyFacts(run_present=False))
    assert (decided.row, decided.outcome, decided.trigger) == ("1", "skipped", "")


def test_a_fresh_legacy_core_has_observed_nothing_not_even_a_run() -> None:
    # Before read_run: no Run is known to be there (what row 12's failure is decided from).
    core = legacy_engine().start()
    assert core.facts == LegacyFacts(run_present=False)
    assert core.fail(True).facts == LegacyFacts(run_present=False, error=True)
