"""ADR-0068 §2: "nothing less gives lost" — every primary guard, one fact at a time.

Each guard of the Run and Attempt decision edges holds exactly when every fact spec 04 requires
for its row is established. Dropping any ONE of them refuses the edge, whatever else is true.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from _support import built_again
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm import (
    GuardRefused,
)
from fsm.qinglong import (
    ATTEMPT_ACTIVE,
    ATTEMPT_SPEC,
    ATTEMPT_STATES,
    GUARDS,
    RUN_SPEC,
    RUN_STATES,
    LegacyFacts,
    PrimaryFacts,
    attempt_machine,
    run_machine,
)
from fsm.qinglong._guards import LEGACY_EDGE_GUARDS

# Every value each fact can take (None: that step did not happen).
DOMAIN: dict[str, tuple[Any, ...]] = {
    "run_status": RUN_STATES,
    "attempt_status": (*ATTEMPT_STATES, None),
    "active_attempts": (0, 1, 2, 3),
    "first_receipt": (None, "missing", "trusted", "invalid"),
    "process": (None, "running", "not_running", "unknown"),
    "handle_pid_matches": (False, True),
    "grace_paid": (False, True),
    "second_receipt": (None, "missing", "trusted", "invalid"),
    "unchanged_on_recheck": (False, True),
    "executor_type": (None, "local_process", "remote_worker"),
}

# What spec 04 requires, row by row, for each guard (all of it, and nothing else).
REQUIRED: dict[str, dict[str, Any]] = {
    # row 13: trusted negative evidence, ONE grace, the receipt read again and absent, the
    # database re-read unchanged (ADR-0068 §2 step 6).
    "not_running_after_grace": {
        "first_receipt": "missing",
        "process": "not_running",
        "handle_pid_matches": True,
        "grace_paid": True,
        "second_receipt": "missing",
        "unchanged_on_recheck": True,
    },
    # row 7: no receipt, the one active Attempt `claimed`, and no process probed.
    "unstarted_claim": {
        "first_receipt": "missing",
        "attempt_status": "claimed",
        "active_attempts": 1,
        "process": None,
    },
    # row 4b: the one active Attempt `claimed` by another executor than a local process, its
    # receipt never read and no process probed (ADR-0068 §2 step 1, §6).
    "claimed_not_local_process": {
        "executor_type": "remote_worker",
        "attempt_status": "claimed",
        "active_attempts": 1,
        "first_receipt": None,
        "process": None,
    },
    # row 3: a dispatching Run with no Attempt at all.
    "attempt_missing_before_start": {
        "run_status": "dispatching",
        "attempt_status": None,
        "active_attempts": 0,
    },
    # row 12: no receipt, the exact identity running, and the handle's pid is the Attempt's.
    "exact_process_running": {
        "first_receipt": "missing",
        "process": "running",
        "handle_pid_matches": True,
    },
}
PRIMARY_GUARDS = sorted({*REQUIRED, "trusted_receipt"})

# Neutral values for the facts a guard does not look at.
NEUTRAL = PrimaryFacts(run_status="running", attempt_status="running", active_attempts=1)


def satisfying(guard: str) -> PrimaryFacts:
    return dataclasses.replace(NEUTRAL, **REQUIRED[guard])


def holds(guard: str, facts: PrimaryFacts) -> bool:
    if guard == "trusted_receipt":
        # rows 5 and 13 -> 5: either read found a receipt that authenticated.
        return "trusted" in (facts.first_receipt, facts.second_receipt)
    return all(getattr(facts, k) == v for k, v in REQUIRED[guard].items())


GUARDED_EDGES = [
    (name, e)
    for name, spec in (("run", RUN_SPEC), ("attempt", ATTEMPT_SPEC))
    for e in spec.edges
    if e.guard is not None and e.cites.startswith("ADR-0068 ")
]
# The legacy shadow's write edges (ADR-0448 rows 2, 6, 7, 9, 10): guarded by legacy row guards.
LEGACY_GUARDED_EDGES = [
    (name, e)
    for name, spec in (("run", RUN_SPEC), ("attempt", ATTEMPT_SPEC))
    for e in spec.edges
    if e.guard is not None and not e.cites.startswith("ADR-0068 ")
]


def test_every_primary_guarded_edge_uses_a_guard_pinned_here() -> None:
    assert {e.guard for _, e in GUARDED_EDGES} == set(PRIMARY_GUARDS)
    assert set(PRIMARY_GUARDS) <= set(GUARDS)
    # Every other guarded Run/Attempt edge is a legacy write's, guarded by its row's guard.
    assert {e.guard for _, e in LEGACY_GUARDED_EDGES} == set(LEGACY_EDGE_GUARDS)
    assert all(e.cites.startswith("ADR-0448 row ") for _, e in LEGACY_GUARDED_EDGES)


DROP_ONE = [
    (guard, fact, value)
    for guard, required in REQUIRED.items()
    for fact, wanted in required.items()
    for value in DOMAIN[fact]
    if value != wanted
]


@pytest.mark.parametrize(
    ("guard", "fact", "value"), DROP_ONE, ids=[f"{g}-{f}={v}" for g, f, v in DROP_ONE]
)
def test_removing_any_one_required_fact_refuses_the_guard_and_every_edge_it_guards(
    guard: str, fact: str, value: Any
) -> None:
    full = satisfying(guard)
    assert GUARDS[guard](full)
    less = dataclasses.replace(full, **{fact: value})
    assert not GUARDS[guard](less)
    edges = [(m, e) for m, e in GUARDED_EDGES if e.guard == guard]
    assert edges
    for machine_name, e in edges:
        machine = run_machine() if machine_name == "run" else attempt_machine()
        assert machine.plan(e.source, e.trigger, full).dest == e.dest
        with pytest.raises(GuardRefused) as refused:
            machine.plan(e.source, e.trigger, less)
        assert (refused.value.state, refused.value.event) == (e.source, e.trigger)
        assert refused.value.guard == guard


@pytest.mark.parametrize(
    ("first", "second"),
    [(f, s) for f in DOMAIN["first_receipt"] for s in DOMAIN["second_receipt"]],
)
def test_a_trusted_receipt_from_either_read_and_only_that_holds_trusted_receipt(
    first: Any, second: Any
) -> None:
    facts = dataclasses.replace(NEUTRAL, first_receipt=first, second_receipt=second)
    assert GUARDS["trusted_receipt"](facts) == ("trusted" in (first, second))


primary_facts = st.builds(
    PrimaryFacts, **{name: st.sampled_from(values) for name, values in DOMAIN.items()}
)
# Near misses: start from a guard's full evidence and change a few facts at random.
near_misses = st.builds(
    lambda guard, changes: dataclasses.replace(satisfying(guard), **changes),
    st.sampled_from(sorted(REQUIRED)),
    st.dictionaries(st.sampled_from(sorted(DOMAIN)), st.integers(0, 10), max_size=2).map(
        lambda d: {k: DOMAIN[k][i % len(DOMAIN[k])] for k, i in d.items()}
    ),
)


@settings(max_examples=300)
@given(facts=st.one_of(primary_facts, near_misses))
def test_each_guard_holds_exactly_when_all_its_required_facts_do(facts: PrimaryFacts) -> None:
    for guard in PRIMARY_GUARDS:
        assert GUARDS[guard](facts) == holds(guard, facts), guard


@settings(max_examples=100)
@given(facts=st.one_of(primary_facts, near_misses))
def test_a_guarded_edge_is_taken_exactly_when_its_guard_holds(facts: PrimaryFacts) -> None:
    for machine_name, e in GUARDED_EDGES:
        machine = run_machine() if machine_name == "run" else attempt_machine()
        assert e.guard is not None
        if holds(e.guard, facts):
            step = machine.plan(e.source, e.trigger, facts)
            assert (step.dest, step.guard) == (e.dest, e.guard)
        else:
            with pytest.raises(GuardRefused):
                machine.plan(e.source, e.trigger, facts)
    # No legacy write's edge is ever taken on the ADR-0068 pass's facts.
    for machine_name, e in LEGACY_GUARDED_EDGES:
        machine = run_machine() if machine_name == "run" else attempt_machine()
        with pytest.raises(GuardRefused):
            machine.plan(e.source, e.trigger, facts)


@pytest.mark.parametrize("evidence", [None, "trusted", {"first_receipt": "trusted"}])
def test_no_primary_guard_holds_on_evidence_that_is_not_primary_facts(evidence: object) -> None:
    for guard in PRIMARY_GUARDS:
        assert not GUARDS[guard](evidence)


def test_no_primary_guard_holds_on_legacy_facts_even_when_they_would_fit() -> None:
    legacy = LegacyFacts(run_present=True, run_owner="legacy", run_status="dispatching")
    for guard in PRIMARY_GUARDS:
        assert not GUARDS[guard](legacy)


# --- The guards of the ADR-0068 decision machine's rows and steps ------------------------------
# In the table a guard is tried only after the rows above it refused, which hides a guard that
# asks for less than its row says; here each is a predicate on its own. Every value each fact
# can take (None: not observed), and the values each guard's row allows, spec 04 row by row.

STEP_DOMAIN: dict[str, tuple[Any, ...]] = {
    "run_present": (None, False, True),
    "run_owner": (None, "runtime", "legacy"),
    "page_status": (None, "queued", "dispatching", "running"),
    "run_status": (None, "queued", "dispatching", "running", "succeeded"),
    "active_attempts": (0, 1, 2),
    "attempt_status": (None, *ATTEMPT_STATES),
    "first_receipt": (None, "missing", "trusted", "invalid", "quarantined"),
    "executor_type": (None, "local_process", "docker"),
    "handle_present": (None, False, True),
    "pid_valid": (None, False, True),
    "process": (None, "running", "not_running", "unknown"),
    "probe_reason": (None, "provider_unavailable", "invalid_handle", "unsupported_platform"),
    "grace_paid": (False, True),
    "second_receipt": (None, "missing", "trusted", "invalid"),
}

STEP_ALLOWED: dict[str, dict[str, frozenset[Any]]] = {
    # ADR-0068 §2 step 2: a runtime Run, unchanged since the page (its status as the page
    # showed it, `running` below), whose one active Attempt is its latest: read the receipt.
    "one_active_latest_attempt": {
        "run_present": frozenset({True}),
        "run_owner": frozenset({"runtime"}),
        "page_status": frozenset({"running"}),
        "run_status": frozenset({"running"}),
        "active_attempts": frozenset({1}),
        "attempt_status": frozenset(ATTEMPT_ACTIVE),
    },
    # §2 step 5: no receipt, and the exact durable identity stored for a starting/running
    # local process: probe it.
    "durable_identity_stored": {
        "first_receipt": frozenset({"missing"}),
        "attempt_status": frozenset({"starting", "running"}),
        "executor_type": frozenset({"local_process"}),
        "handle_present": frozenset({True}),
        "pid_valid": frozenset({True}),
    },
    # row 10: the identity cannot be judged (invalid handle, unsupported platform); row 9
    # (the provider itself unavailable) is not this row.
    "identity_unknown": {
        "process": frozenset({"unknown"}),
        "probe_reason": frozenset(STEP_DOMAIN["probe_reason"]) - {"provider_unavailable"},
    },
    "provider_unavailable": {
        "process": frozenset({"unknown"}),
        "probe_reason": frozenset({"provider_unavailable"}),
    },
    # row 13: trusted negative evidence, then at least one full grace: read the receipt again.
    "grace_elapsed": {
        "process": frozenset({"not_running"}),
        "grace_paid": frozenset({True}),
    },
    # row 13: after the grace, the second read found nothing either: re-check the database.
    "receipt_still_missing": {
        "grace_paid": frozenset({True}),
        "second_receipt": frozenset({"missing"}),
    },
}

# A candidate page showing `running` for a Run with one running Attempt, nothing else observed.
STEP_NEUTRAL = PrimaryFacts(page_status="running", run_status="running", attempt_status="running")


def step_satisfying(guard: str) -> PrimaryFacts:
    first = {fact: min(allowed, key=repr) for fact, allowed in STEP_ALLOWED[guard].items()}
    return dataclasses.replace(STEP_NEUTRAL, **first)


def step_holds(guard: str, facts: PrimaryFacts) -> bool:
    return all(getattr(facts, f) in allowed for f, allowed in STEP_ALLOWED[guard].items())


STEP_DROP_ONE = [
    (guard, fact, value)
    for guard, allowed in STEP_ALLOWED.items()
    for fact, values in allowed.items()
    for value in STEP_DOMAIN[fact]
    if value not in values
]


@pytest.mark.parametrize(
    ("guard", "fact", "value"),
    STEP_DROP_ONE,
    ids=[f"{g}-{f}={v}" for g, f, v in STEP_DROP_ONE],
)
def test_a_decision_step_guard_refuses_when_any_one_of_its_facts_is_not_what_its_row_says(
    guard: str, fact: str, value: Any
) -> None:
    full = step_satisfying(guard)
    assert GUARDS[guard](full)
    assert not GUARDS[guard](dataclasses.replace(full, **{fact: value}))


@pytest.mark.parametrize("guard", sorted(STEP_ALLOWED))
def test_a_decision_step_guard_holds_with_every_value_its_row_allows(guard: str) -> None:
    for fact, allowed in STEP_ALLOWED[guard].items():
        for value in allowed:
            assert GUARDS[guard](dataclasses.replace(step_satisfying(guard), **{fact: value}))


step_facts = st.builds(
    lambda base, changes: dataclasses.replace(base, **changes),
    st.sampled_from([step_satisfying(g) for g in sorted(STEP_ALLOWED)] + [STEP_NEUTRAL]),
    st.dictionaries(st.sampled_from(sorted(STEP_DOMAIN)), st.integers(0, 10), max_size=3).map(
        lambda d: {k: STEP_DOMAIN[k][i % len(STEP_DOMAIN[k])] for k, i in d.items()}
    ),
)


@settings(max_examples=300)
@given(facts=step_facts)
def test_each_decision_step_guard_holds_exactly_when_all_its_facts_do(facts: PrimaryFacts) -> None:
    for guard in STEP_ALLOWED:
        assert GUARDS[guard](facts) == step_holds(guard, facts), guard


def test_the_step_guards_need_the_page_status_equal_to_the_run_status_not_just_both_known() -> None:
    # spec 04 row 2: the status changed since the page is not read further.
    full = step_satisfying("one_active_latest_attempt")
    for page in ("queued", "dispatching", "running"):
        for run in ("queued", "dispatching", "running"):
            moved = dataclasses.replace(full, page_status=page, run_status=run)
            assert GUARDS["one_active_latest_attempt"](moved) == (page == run)


def test_every_guard_carries_its_own_name_when_the_guards_module_is_built_again() -> None:
    # transitions labels a diagram's condition by the callable's __name__: each guard is named
    # once, when fsm is imported, and the module built again names them the same way.
    for guards in (GUARDS, built_again("fsm.qinglong._guards").GUARDS):
        assert [(g.__name__, g.__qualname__) for g in guards.values()] == [(k, k) for k in guards]


def test_the_guards_module_built_again_shares_the_legacy_edge_guards_with_its_row_guards() -> None:
    # One name, one predicate: the legacy_shadow lifecycle's row guards of rows 2, 6, 7, 9 and
    # 10 are the very functions that guard the legacy writes' Run and Attempt edges.
    module = built_again("fsm.qinglong._guards")
    shared = module.LEGACY_EDGE_GUARDS
    assert len(shared) == 5
    assert all(module.LEGACY_ROW_GUARDS[name] is fn for name, fn in shared.items())
    assert all(module.GUARDS[name] is fn for name, fn in shared.items())
