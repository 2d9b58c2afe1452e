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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from fsm.qinglong import PrimaryDecision, PrimaryFacts
from reconciler.node import Receipt
from storage import Actor, AttemptChange, AttemptRow, Change, Expect, RunChange, RunRow

# spec 04 "Writes": who writes what.
RECONCILER = Actor("reconciler", "local-startup")
RECEIPT_EXECUTOR = Actor("executor", "completion-receipt")


@dataclass(frozen=True, slots=True)
class Error:
    """An error code and summary an edge sets, and the dedupe key's reason word (lost)."""

    code: str
    summary: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Effect:
    """What one write of the table (``Case.write``) commits, as QingLong writes it.

    ``errors``: by the trigger (a `lost` edge) or the receipt's terminal (a completion);
    ``dedupe``: the prefix of its dedupe keys; ``evidence``: the word its chain edges carry;
    ``read_as``: the row an event of it that predates the ``decision`` key is read as
    (``qlfsm explain``), by its error code or evidence word."""

    actor: Actor
    dedupe: str
    errors: Mapping[str, Error] = field(default_factory=dict)
    evidence: str | None = field(default=None, kw_only=True)
    read_as: Mapping[str, str] = field(default_factory=dict, kw_only=True)


_UNSTARTED = Error(
    "RECOVERY_UNSTARTED_CLAIM", "Claimed Attempt never crossed the start barrier", "unstarted_claim"
)
# The one registry of ADR-0068's effects, by the write the table names
# (fsm/qinglong/_primary_table.py).
EFFECTS: Mapping[str, Effect] = {
    "complete": Effect(
        RECEIPT_EXECUTOR,
        "local-completion:",
        # spec 04 "Terminal mapping from a trusted receipt".
        {
            "timed_out": Error("EXECUTION_TIMED_OUT", "Execution exceeded its configured timeout"),
            "cancelled": Error("EXECUTION_CANCELLED", "Execution was cancelled"),
            "failed": Error("EXECUTION_FAILED", "Execution completed without success"),
        },
        evidence="completion_receipt",  # docs/decisions.md D-3
        read_as={"completion_receipt": "5"},
    ),
    "lose": Effect(
        RECONCILER,
        "local-recovery:",
        {
            "lose_unstarted_claim": _UNSTARTED,
            # Row 4b: the same unstarted claim, of an Attempt that is not a local process.
            "lose_nonlocal_claim": _UNSTARTED,
            "lose_after_grace": Error(
                "RECOVERY_PROCESS_NOT_RUNNING",
                "Durable process identity proves the execution is not running",
                "process_not_running",
            ),
        },
        # Row 4b writes row 7's code: an event without its decision key is read as row 7.
        read_as={"RECOVERY_UNSTARTED_CLAIM": "7", "RECOVERY_PROCESS_NOT_RUNNING": "13"},
    ),
    "lose_missing_attempt": Effect(
        RECONCILER,
        "local-recovery:",
        {
            "lose_missing_attempt": Error(
                "RECOVERY_ATTEMPT_MISSING_BEFORE_START", "Dispatching Run has no durable Attempt"
            )
        },
        read_as={"RECOVERY_ATTEMPT_MISSING_BEFORE_START": "3"},
    ),
    "adopt_running": Effect(
        RECONCILER,
        "local-recovery:",
        evidence="durable_process_identity",  # spec 04 row 12
        read_as={"durable_process_identity": "12"},
    ),
    # spec 03: the journal intent, then the move; no Run/Attempt edge.
    "quarantine": Effect(RECONCILER, ""),
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


class Given(NamedTuple):
    """What every plan builder is given: the Run and latest Attempt decided on, the trusted
    receipt (a completion), the decision, the facts its edges' guards see (with the re-read
    inside the transaction), the time and the decision's note."""

    run: RunRow
    attempt: AttemptRow | None
    receipt: Receipt | None
    decision: PrimaryDecision
    facts: PrimaryFacts
    now_ms: int
    note: Note


def at_or_after(now_ms: int, run: RunRow, attempt: AttemptRow | None, *floor: int) -> int:
    """QingLong's ``atOrAfter``: never earlier than any created/started time (spec 01)."""
    if attempt is None:
        return max(now_ms, run.created_at_ms, run.started_at_ms or 0, *floor)
    return max(
        now_ms,
        run.created_at_ms,
        run.started_at_ms or 0,
        attempt.created_at_ms,
        attempt.started_at_ms or 0,
        *floor,
    )


def expect_for(run: RunRow, attempt: AttemptRow | None) -> Expect:
    """ADR-0068 §4: every field the decision used, re-checked inside the transaction."""
    run_fields: dict[str, object] = {
        "status": run.status,
        "version": run.version,
        "execution_owner": run.execution_owner,
    }
    if attempt is None:
        return Expect(run_fields, {})
    attempt_fields: dict[str, object] = {
        "status": attempt.status,
        "callback_sequence": attempt.callback_sequence,
        "callback_token_hash": attempt.callback_token_hash,
        "executor_handle": attempt.executor_handle,
        "pid": attempt.pid,
    }
    return Expect(run_fields, {attempt.id: attempt_fields})


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


def completion(given: Given) -> Plan:
    """Row 5: Attempt and Run to the receipt's terminal status, Attempt event first.

    D-3: an Attempt still `claimed`/`starting` goes claimed -> starting -> running and a Run
    still `dispatching` goes to `running` first, each edge its own event, all in this one
    transaction (QingLong writes the direct, ADR-0001-illegal edge).
    """
    run, attempt, receipt, decision, facts, now_ms, note = given
    assert attempt is not None and receipt is not None
    at = at_or_after(now_ms, run, attempt, receipt.finished_at_ms)
    # spec 04 "Terminal mapping": the decision's terminal and its trigger
    # (fsm.qinglong.receipt_terminal).
    terminal, trigger = decision.terminal, decision.trigger
    assert terminal is not None and trigger is not None
    effect = EFFECTS["complete"]
    base = f"{effect.dedupe}{attempt.id}:{receipt.callback_sequence}"
    chain = {"evidence": effect.evidence, **note}
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
    error = effect.errors.get(terminal)
    errors = {"error_code": error.code, "error_summary": error.summary} if error else {}
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
    return Plan(tuple(changes), effect.actor, at, expect_for(run, attempt), terminal)


def receipt_start(receipt: Receipt, attempt: AttemptRow) -> int:
    return max(receipt.started_at_ms, attempt.created_at_ms)


def lose_attempt(given: Given) -> Plan:
    """Rows 4b (``lose_nonlocal_claim``), 7 (``lose_unstarted_claim``) and 13
    (``lose_after_grace``): Attempt and Run to `lost` (the Run gets no finished time: not
    terminal)."""
    run, attempt, _, decision, facts, now_ms, note = given
    trigger = decision.trigger
    assert attempt is not None and trigger is not None
    effect = EFFECTS["lose"]
    error = effect.errors[trigger]
    code, summary, reason = error.code, error.summary, error.reason
    at = at_or_after(now_ms, run, attempt)
    errors = {"error_code": code, "error_summary": summary}
    changes: tuple[Change, ...] = (
        AttemptChange(
            attempt.id,
            trigger,
            facts,
            set=errors,
            payload=note,
            dedupe_key=f"{effect.dedupe}attempt:{attempt.id}:{attempt.callback_sequence}:{reason}",
        ),
        RunChange(
            trigger,
            facts,
            set=errors,
            payload={"error_code": code, **note},
            dedupe_key=f"{effect.dedupe}run:{run.id}:{attempt.id}:{run.version}:{reason}",
            attempt_id=attempt.id,
        ),
    )
    return Plan(changes, effect.actor, at, expect_for(run, attempt), "lost")


def lose_missing_attempt(given: Given) -> Plan:
    """Row 3: a dispatching Run without any Attempt; one `run.lost` event."""
    run, _, _, decision, facts, now_ms, note = given
    trigger = decision.trigger
    assert trigger is not None
    effect = EFFECTS["lose_missing_attempt"]
    code, summary = effect.errors[trigger].code, effect.errors[trigger].summary
    change = RunChange(
        trigger,
        facts,
        set={"error_code": code, "error_summary": summary},
        payload={"error_code": code, **note},
        dedupe_key=f"{effect.dedupe}run:{run.id}:{run.version}:missing-attempt",
    )
    return Plan(
        (change,), effect.actor, at_or_after(now_ms, run, None), expect_for(run, None), "lost"
    )


def adopt_running(given: Given) -> Plan | None:
    """Row 12: `starting -> running` and/or `dispatching -> running`; None when both run."""
    run, attempt, _, decision, facts, now_ms, note = given
    trigger = decision.trigger
    assert attempt is not None and trigger is not None
    effect = EFFECTS["adopt_running"]
    at = at_or_after(now_ms, run, attempt)
    evidence = {"evidence": effect.evidence, **note}
    changes: list[Change] = []
    version = run.version
    if attempt.status == "starting":
        started = {} if attempt.started_at_ms is not None else {"started_at_ms": at}
        changes.append(
            AttemptChange(
                attempt.id,
                trigger,
                facts,
                set=started,
                payload=evidence,
                dedupe_key=(
                    f"{effect.dedupe}attempt:{attempt.id}:{attempt.callback_sequence}:running"
                ),
            )
        )
        version += 1
    if run.status == "dispatching":
        started = {} if run.started_at_ms is not None else {"started_at_ms": at}
        # QingLong keys the Run edge on the version AFTER the Attempt edge.
        changes.append(
            RunChange(
                trigger,
                facts,
                set=started,
                payload=evidence,
                dedupe_key=f"{effect.dedupe}run:{run.id}:{attempt.id}:{version}:running",
                attempt_id=attempt.id,
            )
        )
    if not changes:
        return None
    return Plan(tuple(changes), effect.actor, at, expect_for(run, attempt), "running")


# The plan builder of each write (each is given a :class:`Given`).
Builder = Callable[[Given], Plan | None]


PLANS: dict[str, Builder] = {
    "complete": completion,
    "lose": lose_attempt,
    "lose_missing_attempt": lose_missing_attempt,
    "adopt_running": adopt_running,
}
