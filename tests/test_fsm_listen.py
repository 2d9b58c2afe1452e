"""fsm.listen: the machines report through transitions' own callbacks, only while listened to."""

from __future__ import annotations

from _coverage_record import recording

from fsm._observe import LISTENERS
from fsm.qinglong import PrimaryFacts, attempt_machine, decide_primary, run_machine


def _dead_facts() -> PrimaryFacts:
    return PrimaryFacts(
        page_status="running",
        run_status="running",
        attempt_status="running",
        active_attempts=1,
        run_present=True,
        run_owner="runtime",
        attempt_count=1,
        executor_type="local_process",
        handle_present=True,
        pid_valid=True,
        cancel_requested=False,
        first_receipt="missing",
        process="not_running",
        probe_reason="pid_absent",
        handle_pid_matches=True,
        grace_paid=True,
        second_receipt="missing",
        unchanged_on_recheck=True,
    )


def test_a_listened_machine_reports_each_edge_case_and_guard_outcome_every_time() -> None:
    facts = _dead_facts()
    with recording() as rec:
        for _ in range(2):  # the memos would answer the second time without the machine
            decision = decide_primary(facts)
            run_machine().plan("running", "lose_after_grace", facts)
    assert decision.row == "13"  # type: ignore[union-attr]
    key = ("run", "running", "lose_after_grace", "lost", "not_running_after_grace")
    assert rec.edges[key] == 2
    assert rec.cases[("primary_decision", "13", "recheck_run", "lost", "not_running_after_grace")]
    assert (
        rec.cases[("primary_decision", "13", "recheck_run", "lost", "not_running_after_grace")] == 2
    )
    assert rec.guards[("run", "not_running_after_grace", True)] == 2
    # Row 13's changed_on_recheck is tried before it in recheck_run, and failed.
    assert rec.guards[("primary_decision", "changed_on_recheck", False)] == 2


def test_a_machine_built_with_nobody_listening_has_no_reporting_callback() -> None:
    with recording():
        pass
    assert LISTENERS == []
    for lifecycle in (run_machine(), attempt_machine()):
        for event in lifecycle._machine.events.values():
            for ts in event.transitions.values():
                for t in ts:
                    assert t.after == []
    with recording() as rec:
        pass
    run_machine().plan("running", "lose_after_grace", _dead_facts())
    assert not rec.edges and not rec.guards
