"""The ADR-0068 evidence sequence is a machine whose shape forbids `lost` without the grace."""

from __future__ import annotations

import pytest

from fsm import (
    EVIDENCE_OUTCOMES,
    EVIDENCE_SPEC,
    EvidenceSequence,
    IllegalTransition,
    evidence_machine,
    evidence_paths,
    validate_spec,
)

LOST_STATES = {s for s in EVIDENCE_OUTCOMES if s.startswith("lost_")}


def test_the_evidence_table_is_a_valid_machine() -> None:
    validate_spec(EVIDENCE_SPEC)
    assert evidence_machine().name == "primary_evidence"


def test_every_path_to_lost_after_a_probe_passes_the_grace_and_the_second_read() -> None:
    paths = list(evidence_paths())
    probed_to_lost = [
        p for p in paths if p.states[-1] in LOST_STATES and "probed_not_running" in p.states
    ]
    assert probed_to_lost  # the row-13 path exists
    for path in probed_to_lost:
        s = path.states
        assert s.index("probed_not_running") < s.index("grace_paid") < s.index("receipt_reread")
        assert s[-1] == "lost_not_running"


def test_no_path_reaches_lost_from_a_probe_other_than_not_running() -> None:
    for path in evidence_paths():
        if path.states[-1] in LOST_STATES:
            assert "probed_running" not in path.states
            if path.states[-1] != "lost_not_running":
                # rows 3 and 7: decided before any probe was made
                assert not any(s.startswith("probed_") for s in path.states)


def test_the_receipt_is_always_read_before_the_process_is_probed() -> None:
    for path in evidence_paths():
        probes = [i for i, s in enumerate(path.states) if s.startswith("probed_")]
        if probes:
            assert path.states.index("receipt_read") < probes[0]


@pytest.mark.parametrize(
    "prefix",
    [
        [],
        ["read_receipt", "find_none"],
        ["read_receipt", "find_none", "probe_not_running"],
        ["read_receipt", "find_none", "probe_not_running", "pay_grace"],
    ],
)
def test_lost_not_running_is_refused_before_the_second_read_found_nothing(
    prefix: list[str],
) -> None:
    seq = EvidenceSequence()
    for trigger in prefix:
        seq.fire(trigger)
    with pytest.raises(IllegalTransition):
        seq.require("lose_not_running")
    with pytest.raises(IllegalTransition):
        seq.fire("lose_not_running")


def test_a_full_row_13_walk_ends_recovered_and_records_its_trail() -> None:
    seq = EvidenceSequence()
    for trigger in (
        "read_receipt",
        "find_none",
        "probe_not_running",
        "pay_grace",
        "reread_receipt",
        "find_none",
        "lose_not_running",
    ):
        seq.fire(trigger)
    assert seq.done and seq.outcome == "recovered"
    assert seq.trail[-3:] == ["receipt_reread", "reread_missing", "lost_not_running"]


def test_an_unfinished_sequence_has_no_outcome() -> None:
    with pytest.raises(IllegalTransition):
        _ = EvidenceSequence().outcome


def test_a_claim_may_be_lost_only_after_the_first_receipt_read() -> None:
    seq = EvidenceSequence()
    with pytest.raises(IllegalTransition):
        seq.require("lose_unstarted_claim")
    seq.fire("read_receipt")
    seq.fire("find_none")
    assert seq.fire("lose_unstarted_claim") == "lost_unstarted_claim"


def test_any_unfinished_state_can_fail_and_no_finished_one_can() -> None:
    for state in EVIDENCE_SPEC.states:
        allowed = any(e.source == state and e.trigger == "fail" for e in EVIDENCE_SPEC.edges)
        assert allowed == (state not in EVIDENCE_SPEC.terminal)


def test_an_unusable_receipt_root_holds_the_candidate_without_a_probe_or_lost() -> None:
    # D-3c: configuration, not a receipt -- from either read, the only way on is `unresolved`.
    for prefix in (
        ["read_receipt"],
        ["read_receipt", "find_none", "probe_not_running", "pay_grace", "reread_receipt"],
    ):
        seq = EvidenceSequence()
        for trigger in prefix:
            seq.fire(trigger)
        assert seq.fire("hold") == "unresolved" and seq.outcome == "unresolved"
