"""Writers of ADR-0068 recovery edges that carry the `decision` key (no tests here).

The ADR-0068 pass records, on every Run/Attempt event it writes, one allow-listed payload key
``decision``: ``{"record": "ADR-0068", "row": "13", "reason": "...", "evidence": {"receipt",
"reread", "process", "probe_reason", "pid_matches", "grace_paid", "verifier"}}`` (spec 02's
payload rule: no path, token or command). These helpers write such edges through the real
repository, with the same triggers, guards' facts, actors and error codes as the pass, so the
`explain` tests do not depend on which version of the pass wrote the database.
"""

from __future__ import annotations

from typing import Any

from _support import T0

from fsm.qinglong import PrimaryFacts
from storage import Actor, AttemptChange, Repository, RunChange

RECONCILER = Actor("reconciler", "local-startup")
RECEIPT = Actor("executor", "completion-receipt")


def evidence(**kw: Any) -> dict[str, Any]:
    """The contract's evidence object: every field present, None where the step did not run."""
    base: dict[str, Any] = {
        "receipt": None,
        "reread": None,
        "process": None,
        "probe_reason": None,
        "pid_matches": None,
        "grace_paid": False,
        "verifier": None,
    }
    base.update(kw)
    return base


def decision(row: str, reason: str, **ev: Any) -> dict[str, Any]:
    return {"record": "ADR-0068", "row": row, "reason": reason, "evidence": evidence(**ev)}


def lose_after_grace(
    repo: Repository, run_id: str, attempt_id: str, *, probe_reason: str = "pid_absent"
) -> dict[str, Any]:
    """Row 13: Attempt and Run `running -> lost`, as the pass writes them; the decision."""
    run = repo.get_run(run_id)
    assert run is not None
    facts = PrimaryFacts(
        run_status=run.status,
        attempt_status="running",
        active_attempts=1,
        first_receipt="missing",
        process="not_running",
        handle_pid_matches=True,
        grace_paid=True,
        second_receipt="missing",
        unchanged_on_recheck=True,
    )
    made = decision(
        "13",
        f"process_not_running:{probe_reason}",
        receipt="missing",
        reread="missing",
        process="not_running",
        probe_reason=probe_reason,
        pid_matches=True,
        grace_paid=True,
    )
    errors = {
        "error_code": "RECOVERY_PROCESS_NOT_RUNNING",
        "error_summary": "Durable process identity proves the execution is not running",
    }
    repo.advance(
        run_id,
        run.version,
        [
            AttemptChange(
                attempt_id, "lose_after_grace", facts, set=errors, payload={"decision": made}
            ),
            RunChange(
                "lose_after_grace",
                facts,
                set=errors,
                payload={"error_code": errors["error_code"], "decision": made},
            ),
        ],
        actor=RECONCILER,
        at_ms=T0 + 1000,
    )
    return made


def lose_unstarted_claim(repo: Repository, run_id: str, attempt_id: str) -> dict[str, Any]:
    """Row 7: a `claimed` Attempt and its `dispatching` Run to `lost`, no probe."""
    run = repo.get_run(run_id)
    assert run is not None
    facts = PrimaryFacts(
        run_status=run.status,
        attempt_status="claimed",
        active_attempts=1,
        first_receipt="missing",
    )
    made = decision("7", "unstarted_claim", receipt="missing")
    errors = {
        "error_code": "RECOVERY_UNSTARTED_CLAIM",
        "error_summary": "Claimed Attempt never crossed the start barrier",
    }
    repo.advance(
        run_id,
        run.version,
        [
            AttemptChange(
                attempt_id, "lose_unstarted_claim", facts, set=errors, payload={"decision": made}
            ),
            RunChange(
                "lose_unstarted_claim",
                facts,
                set=errors,
                payload={"error_code": errors["error_code"], "decision": made},
            ),
        ],
        actor=RECONCILER,
        at_ms=T0 + 1000,
    )
    return made


def succeed_by_receipt(repo: Repository, run_id: str, attempt_id: str) -> dict[str, Any]:
    """Row 5: a trusted receipt (exit 0) for a `running` Attempt of a `running` Run."""
    run = repo.get_run(run_id)
    assert run is not None
    facts = PrimaryFacts(
        run_status=run.status, attempt_status="running", active_attempts=1, first_receipt="trusted"
    )
    made = decision("5", "receipt_succeeded", receipt="trusted")
    repo.advance(
        run_id,
        run.version,
        [
            AttemptChange(
                attempt_id,
                "succeed_by_receipt",
                facts,
                set={"callback_sequence": 1, "exit_code": 0, "finished_at_ms": T0 + 1000},
                payload={"decision": made},
            ),
            RunChange(
                "succeed_by_receipt",
                facts,
                set={"finished_at_ms": T0 + 1000},
                payload={"decision": made},
            ),
        ],
        actor=RECEIPT,
        at_ms=T0 + 1000,
    )
    return made
