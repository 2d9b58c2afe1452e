"""The ADR-0068 evidence machine, edge by edge: what it allows, what it refuses, what it reports.

The table below is spec 04's evidence order written out independently of fsm/_evidence.py:
every (state, trigger) pair in it moves to the state named, and every other pair, including
`to_<state>` triggers and unknown names, is refused with IllegalTransition.
"""

from __future__ import annotations

import pytest

from fsm import (
    EVIDENCE_SPEC,
    EvidenceSequence,
    IllegalTransition,
    evidence_machine,
    evidence_paths,
)

NON_TERMINAL = (
    "start",
    "receipt_read",
    "receipt_trusted",
    "receipt_invalid",
    "receipt_missing",
    "probed_running",
    "probed_not_running",
    "grace_paid",
    "receipt_reread",
    "reread_missing",
)
OUTCOME = {
    "completed": "recovered",
    "lost_missing_attempt": "recovered",
    "lost_unstarted_claim": "recovered",
    "lost_not_running": "recovered",
    "retained": "remaining",
    "quarantined": "unresolved",
    "unresolved": "unresolved",
    "failed": "failed",
}
ALLOWED: dict[tuple[str, str], str] = {
    ("start", "hold"): "unresolved",  # rows 1, 2, 3b, 4
    ("start", "lose_missing_attempt"): "lost_missing_attempt",  # row 3
    ("start", "read_receipt"): "receipt_read",
    ("receipt_read", "trust"): "receipt_trusted",  # row 5
    ("receipt_read", "reject"): "receipt_invalid",  # row 6
    ("receipt_read", "find_none"): "receipt_missing",
    ("receipt_read", "hold"): "unresolved",  # the receipt root or shard is unusable (D-3c)
    ("receipt_trusted", "commit_completion"): "completed",
    ("receipt_invalid", "quarantine"): "quarantined",
    ("receipt_missing", "lose_unstarted_claim"): "lost_unstarted_claim",  # row 7
    ("receipt_missing", "hold"): "unresolved",  # rows 8, 10, 11
    ("receipt_missing", "probe_running"): "probed_running",
    ("receipt_missing", "probe_not_running"): "probed_not_running",
    ("probed_running", "retain"): "retained",  # row 12
    ("probed_not_running", "pay_grace"): "grace_paid",  # row 13
    ("grace_paid", "reread_receipt"): "receipt_reread",
    ("receipt_reread", "trust"): "receipt_trusted",  # row 13 -> 5
    ("receipt_reread", "reject"): "receipt_invalid",  # row 13 -> 6
    ("receipt_reread", "find_none"): "reread_missing",
    ("receipt_reread", "hold"): "unresolved",  # the root went wrong before the re-read (D-3c)
    ("reread_missing", "lose_not_running"): "lost_not_running",
    ("reread_missing", "hold"): "unresolved",  # changed on the re-read
    **{(s, "fail"): "failed" for s in NON_TERMINAL},  # rows 9, 14
}
STATES = (*NON_TERMINAL, *OUTCOME)
TRIGGERS = sorted(
    {t for _, t in ALLOWED}
    | {f"to_{s}" for s in STATES}
    | {"no_such_trigger", "lose_after_grace", "<outcome>", ""}
)


def walk_to(state: str) -> EvidenceSequence:
    """A sequence brought to ``state`` along the first path that visits it."""
    for path in evidence_paths():
        if state in path.states:
            seq = EvidenceSequence()
            for trigger in path.triggers[: path.states.index(state)]:
                seq.fire(trigger)
            assert seq.state == state
            return seq
    raise AssertionError(f"{state} is on no path")


def test_the_machine_has_exactly_the_states_and_terminals_of_spec_04() -> None:
    assert set(EVIDENCE_SPEC.states) == set(STATES)
    assert EVIDENCE_SPEC.terminal == frozenset(OUTCOME)
    assert EVIDENCE_SPEC.initial == "start"
    assert {(e.source, e.trigger): e.dest for e in EVIDENCE_SPEC.edges} == ALLOWED
    assert evidence_machine().spec is EVIDENCE_SPEC


@pytest.mark.parametrize("state", STATES)
def test_from_each_state_exactly_the_table_s_triggers_move_and_every_other_is_refused(
    state: str,
) -> None:
    for trigger in TRIGGERS:
        seq = walk_to(state)
        trail = list(seq.trail)
        dest = ALLOWED.get((state, trigger))
        if dest is None:
            with pytest.raises(IllegalTransition) as asked:
                seq.require(trigger)
            assert (asked.value.machine, asked.value.state, asked.value.event) == (
                "primary_evidence",
                state,
                trigger,
            )
            with pytest.raises(IllegalTransition) as fired:
                seq.fire(trigger)
            assert (fired.value.state, fired.value.event) == (state, trigger)
            assert fired.value.machine == "primary_evidence"
            assert (seq.state, seq.trail) == (state, trail)  # nothing moved
        else:
            assert seq.require(trigger) == dest
            assert seq.state == state  # asking does not move
            assert seq.fire(trigger) == dest
            assert (seq.state, seq.trail) == (dest, [*trail, dest])


@pytest.mark.parametrize("state", STATES)
def test_no_to_state_trigger_exists_so_lost_cannot_skip_the_grace(state: str) -> None:
    # With auto_transitions=True the machine would offer `to_lost_not_running` from anywhere.
    for target in STATES:
        seq = walk_to(state)
        with pytest.raises(IllegalTransition):
            seq.fire(f"to_{target}")
        assert seq.state == state


@pytest.mark.parametrize("trigger", ["no_such_trigger", "to_lost_not_running", "LOSE_NOT_RUNNING"])
def test_an_unknown_trigger_raises_illegal_transition_naming_state_and_event(
    trigger: str,
) -> None:
    seq = EvidenceSequence()
    with pytest.raises(IllegalTransition) as raised:
        seq.fire(trigger)
    assert (raised.value.state, raised.value.event) == ("start", trigger)
    assert trigger in str(raised.value)


def test_a_receipt_rejected_after_the_grace_is_quarantined_and_unresolved() -> None:
    # spec 04 row 13: "invalid -> as row 6".
    seq = EvidenceSequence()
    for trigger in ("read_receipt", "find_none", "probe_not_running", "pay_grace"):
        seq.fire(trigger)
    assert seq.fire("reread_receipt") == "receipt_reread"
    assert seq.fire("reject") == "receipt_invalid"
    assert not seq.done
    with pytest.raises(IllegalTransition):
        seq.fire("lose_not_running")
    assert seq.fire("quarantine") == "quarantined"
    assert seq.done and seq.outcome == "unresolved"
    assert seq.trail == [
        "start",
        "receipt_read",
        "receipt_missing",
        "probed_not_running",
        "grace_paid",
        "receipt_reread",
        "receipt_invalid",
        "quarantined",
    ]


def test_a_receipt_trusted_after_the_grace_completes_the_candidate() -> None:
    seq = walk_to("receipt_reread")
    seq.fire("trust")
    assert seq.fire("commit_completion") == "completed"
    assert (seq.done, seq.outcome) == (True, "recovered")


@pytest.mark.parametrize("state", STATES)
def test_done_and_outcome_follow_the_terminal_states_and_the_summary_mapping(state: str) -> None:
    seq = walk_to(state)
    if state in OUTCOME:
        assert seq.done
        assert seq.outcome == OUTCOME[state]
    else:
        assert not seq.done
        with pytest.raises(IllegalTransition) as raised:
            _ = seq.outcome
        assert (raised.value.state, raised.value.event) == (state, "<outcome>")


def test_every_path_is_listed_once_and_ends_in_a_terminal_state() -> None:
    paths = list(evidence_paths())
    assert len({(p.states, p.triggers) for p in paths}) == len(paths)
    for p in paths:
        assert p.states[0] == "start" and p.states[-1] in OUTCOME
        assert len(p.states) == len(p.triggers) + 1
        for source, trigger, dest in zip(p.states[:-1], p.triggers, p.states[1:], strict=True):
            assert ALLOWED[(source, trigger)] == dest
    # every edge lies on some path (the machine has no unreachable edge)
    walked = {(s, t) for p in paths for s, t in zip(p.states[:-1], p.triggers, strict=True)}
    assert walked == set(ALLOWED)


def test_sequences_are_independent_of_each_other() -> None:
    a, b = EvidenceSequence(), EvidenceSequence()
    a.fire("read_receipt")
    assert (a.state, b.state) == ("receipt_read", "start")
    assert b.trail == ["start"]
