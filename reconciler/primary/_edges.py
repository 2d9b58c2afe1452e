"""The writes of the ADR-0068 reconciler: which edges, fields, events and dedupe keys.

Each function returns the changes for ONE ``Repository.advance`` (one ``BEGIN IMMEDIATE``
transaction) plus the fields that transaction must find unchanged (``Expect``). Event types,
actors, dedupe keys, error codes and summaries follow QingLong 3.0's coordinator and completion
processor (as its public TypeScript source writes them), and so does every Run event's
`attempt_id` (the Attempt's, except row 3's, which has none). The differences are in
docs/decisions.md D-18 (e.g. D-3: a receipt for a not-yet-running Attempt walks the legal
edges through `running`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fsm import RECEIPT_TRIGGERS, PrimaryDecision, PrimaryFacts, receipt_terminal
from reconciler.node._receipt import Receipt
from storage import Actor, AttemptChange, AttemptRow, Change, Expect, RunChange, RunRow

# spec 04 "Writes": who writes what.
RECONCILER = Actor("reconciler", "local-startup")
RECEIPT_EXECUTOR = Actor("executor", "completion-receipt")

LOST_REASONS: dict[str, tuple[str, str, str]] = {
    # The decision's trigger -> (dedupe reason, error code, error summary), as QingLong's
    # coordinator writes them.
    "lose_unstarted_claim": (
        "unstarted_claim",
        "RECOVERY_UNSTARTED_CLAIM",
        "Claimed Attempt never crossed the start barrier",
    ),
    # Row 4b: the same unstarted claim, of an Attempt that is not a local process.
    "lose_nonlocal_claim": (
        "unstarted_claim",
        "RECOVERY_UNSTARTED_CLAIM",
        "Claimed Attempt never crossed the start barrier",
    ),
    "lose_after_grace": (
        "process_not_running",
        "RECOVERY_PROCESS_NOT_RUNNING",
        "Durable process identity proves the execution is not running",
    ),
}
MISSING_ATTEMPT = (
    "RECOVERY_ATTEMPT_MISSING_BEFORE_START",
    "Dispatching Run has no durable Attempt",
)

# spec 04 "Terminal mapping from a trusted receipt".
_TERMINAL_ERRORS: dict[str, tuple[str, str]] = {
    "timed_out": ("EXECUTION_TIMED_OUT", "Execution exceeded its configured timeout"),
    "cancelled": ("EXECUTION_CANCELLED", "Execution was cancelled"),
    "failed": ("EXECUTION_FAILED", "Execution completed without success"),
}
Note = Mapping[str, object]  # the "decision" key every event of the pass carries


@dataclass(frozen=True)
class Plan:
    """One advance: its changes, the actor, the time, and the fields re-checked inside it."""

    changes: tuple[Change, ...]
    actor: Actor
    at_ms: int
    expect: Expect
    terminal: str | None = None


def at_or_after(now_ms: int, run: RunRow, attempt: AttemptRow | None, *floor: int) -> int:
    """QingLong's ``atOrAfter``: never earlier than any created/started time (spec 01)."""
    times = [now_ms, run.created_at_ms, run.started_at_ms or 0, *floor]
    if attempt is not None:
        times += [attempt.created_at_ms, attempt.started_at_ms or 0]
    return max(times)


def expect_for(run: RunRow, attempt: AttemptRow | None) -> Expect:
    """ADR-0068 §4: every field the decision used, re-checked inside the transaction."""
    run_fields: dict[str, object] = {
        "status": run.status,
        "version": run.version,
        "execution_owner": run.execution_owner,
    }
    if attempt is None:
        return Expect(run=run_fields)
    return Expect(
        run=run_fields,
        attempts={
            attempt.id: {
                "status": attempt.status,
                "callback_sequence": attempt.callback_sequence,
                "callback_token_hash": attempt.callback_token_hash,
                "executor_handle": attempt.executor_handle,
                "pid": attempt.pid,
            }
        },
    )


def decision_payload(decision: PrimaryDecision) -> Note:
    """The "decision" key of every Run/Attempt event the pass writes (spec 02: the payload is
    a JSON object; this key is qlfsm's, read by ``qlfsm explain``): the spec 04 row, its
    reason code and the evidence it rested on. Verdicts and reason codes only: never a path,
    a token, a handle or a command."""
    f = decision.facts
    return {
        "decision": {
            "record": "ADR-0068",
            "row": decision.row,
            "reason": decision.reason,
            "evidence": {
                "receipt": f.first_receipt,
                "reread": f.second_receipt,
                "process": f.process,
                "probe_reason": f.probe_reason,
                "pid_matches": f.handle_pid_matches if f.process is not None else None,
                "grace_paid": f.grace_paid,
                # A retained run is proven again by the final verifier after this edge.
                "verifier": "pending" if decision.write == "adopt_running" else None,
            },
        }
    }


def completion(
    run: RunRow,
    attempt: AttemptRow,
    receipt: Receipt,
    facts: PrimaryFacts,
    now_ms: int,
    note: Note | None = None,
) -> Plan:
    """Row 5: Attempt and Run to the receipt's terminal status, Attempt event first.

    D-3: an Attempt still `claimed`/`starting` goes claimed -> starting -> running and a Run
    still `dispatching` goes to `running` first, each edge its own event, all in this one
    transaction (QingLong writes the direct, ADR-0001-illegal edge).
    """
    at = at_or_after(now_ms, run, attempt, receipt.finished_at_ms)
    # spec 04 "Terminal mapping", decided from the observed facts (fsm.receipt_terminal).
    terminal = receipt_terminal(facts)
    note = note or {}
    base = f"local-completion:{attempt.id}:{receipt.callback_sequence}"
    chain = {"evidence": "completion_receipt", **note}
    changes: list[Change] = []
    if attempt.status == "claimed":
        changes.append(
            AttemptChange(
                attempt.id, "start_by_receipt", facts, payload=chain, dedupe_key=f"{base}:starting"
            )
        )
    if attempt.status in ("claimed", "starting"):
        started = (
            {}
            if attempt.started_at_ms is not None
            else {"started_at_ms": receipt_start(receipt, attempt)}
        )
        changes.append(
            AttemptChange(
                attempt.id,
                "run_by_receipt",
                facts,
                set=started,
                payload=chain,
                dedupe_key=f"{base}:attempt-running",
            )
        )
    if run.status == "dispatching":
        started = (
            {}
            if run.started_at_ms is not None
            else {"started_at_ms": max(receipt.started_at_ms, run.created_at_ms)}
        )
        changes.append(
            RunChange(
                "start_by_receipt",
                facts,
                set=started,
                payload=chain,
                dedupe_key=f"{base}:run-running",
                attempt_id=attempt.id,
            )
        )
    error = _TERMINAL_ERRORS.get(terminal)
    errors = {"error_code": error[0], "error_summary": error[1]} if error else {}
    trigger = RECEIPT_TRIGGERS[terminal]
    changes.append(
        AttemptChange(
            attempt.id,
            trigger,
            facts,
            set={
                "callback_sequence": receipt.callback_sequence,
                "exit_code": receipt.exit_code,
                "finished_at_ms": at,
                **errors,
            },
            payload=note,
            dedupe_key=f"{base}:attempt",
            # QingLong's completion processor: the receipt's sequence and exit code, and no
            # error code in the payload (the columns carry it; docs/decisions.md D-18).
            event_fields=("callback_sequence", "exit_code"),
        )
    )
    changes.append(
        RunChange(
            trigger,
            facts,
            set={"finished_at_ms": at, **errors},
            payload=note,
            dedupe_key=f"{base}:run",
            attempt_id=attempt.id,
        )
    )
    return Plan(tuple(changes), RECEIPT_EXECUTOR, at, expect_for(run, attempt), terminal)


def receipt_start(receipt: Receipt, attempt: AttemptRow) -> int:
    return max(receipt.started_at_ms, attempt.created_at_ms)


def lose_attempt(
    run: RunRow,
    attempt: AttemptRow,
    trigger: str,
    facts: PrimaryFacts,
    now_ms: int,
    note: Note | None = None,
) -> Plan:
    """Rows 4b (``lose_nonlocal_claim``), 7 (``lose_unstarted_claim``) and 13
    (``lose_after_grace``): Attempt and Run to `lost` (the Run gets no finished time: not
    terminal)."""
    reason, code, summary = LOST_REASONS[trigger]
    note = note or {}
    at = at_or_after(now_ms, run, attempt)
    errors = {"error_code": code, "error_summary": summary}
    changes: tuple[Change, ...] = (
        AttemptChange(
            attempt.id,
            trigger,
            facts,
            set=errors,
            payload=note,
            dedupe_key=f"local-recovery:attempt:{attempt.id}:{attempt.callback_sequence}:{reason}",
        ),
        RunChange(
            trigger,
            facts,
            set=errors,
            payload={"error_code": code, **note},
            dedupe_key=f"local-recovery:run:{run.id}:{attempt.id}:{run.version}:{reason}",
            attempt_id=attempt.id,
        ),
    )
    return Plan(changes, RECONCILER, at, expect_for(run, attempt), "lost")


def lose_missing_attempt(
    run: RunRow, facts: PrimaryFacts, now_ms: int, note: Note | None = None
) -> Plan:
    """Row 3: a dispatching Run without any Attempt; one `run.lost` event."""
    code, summary = MISSING_ATTEMPT
    note = note or {}
    change = RunChange(
        "lose_missing_attempt",
        facts,
        set={"error_code": code, "error_summary": summary},
        payload={"error_code": code, **note},
        dedupe_key=f"local-recovery:run:{run.id}:{run.version}:missing-attempt",
    )
    return Plan(
        (change,), RECONCILER, at_or_after(now_ms, run, None), expect_for(run, None), "lost"
    )


def adopt_running(
    run: RunRow,
    attempt: AttemptRow,
    facts: PrimaryFacts,
    now_ms: int,
    note: Note | None = None,
) -> Plan | None:
    """Row 12: `starting -> running` and/or `dispatching -> running`; None when both run."""
    at = at_or_after(now_ms, run, attempt)
    evidence = {"evidence": "durable_process_identity", **(note or {})}
    changes: list[Change] = []
    version = run.version
    if attempt.status == "starting":
        started = {} if attempt.started_at_ms is not None else {"started_at_ms": at}
        changes.append(
            AttemptChange(
                attempt.id,
                "adopt_running",
                facts,
                set=started,
                payload=evidence,
                dedupe_key=(
                    f"local-recovery:attempt:{attempt.id}:{attempt.callback_sequence}:running"
                ),
            )
        )
        version += 1
    if run.status == "dispatching":
        started = {} if run.started_at_ms is not None else {"started_at_ms": at}
        # QingLong keys the Run edge on the version AFTER the Attempt edge.
        changes.append(
            RunChange(
                "adopt_running",
                facts,
                set=started,
                payload=evidence,
                dedupe_key=f"local-recovery:run:{run.id}:{attempt.id}:{version}:running",
                attempt_id=attempt.id,
            )
        )
    if not changes:
        return None
    return Plan(tuple(changes), RECONCILER, at, expect_for(run, attempt), "running")
