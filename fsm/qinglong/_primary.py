"""The ADR-0068 decision core, sans I/O (like h11's connection object): what to gather next,
or the decision (spec 04 "Per candidate").

The table is :data:`fsm.qinglong.PRIMARY_TABLE` (``fsm/qinglong/_primary_table.py``); the
machine built from it chooses the row, and :class:`PrimaryCore` is the immutable
:class:`fsm.DecisionCore`
over :class:`PrimaryFacts` whose decisions are :class:`PrimaryDecision`. The caller gathers
only what the core asks for and feeds back only what it saw:

    core = PrimaryCore(page_status)
    while isinstance(step := core.next(), Need):
        core = core.observe(step.evidence, **what_the_pass_saw(step.evidence))
    # step is a PrimaryDecision: commit its write, or core.fail(describe(exc)).next()

``decide_primary(facts)`` is the same answer for facts gathered all at once: it drives a core
through them in the evidence order, so a later observation never decides an earlier row.

A decision never moves the core: if its write fails, ``fail()`` still decides row 14 from the
evidence state the decision was taken in. The one grace per pass fits the loop: a candidate
whose probe said `not_running` answers ``Need("pay_grace")``; the pass sets it aside, sleeps
once for all of them, then observes ``grace_paid`` for each and goes on (spec 04 "The grace").
The re-checks inside a write transaction (spec 04 row 13's re-read; the re-read every edge's
decision is taken again on) observe on a core kept from before: a transaction that is retried
computes a new core again, nothing it computed the first time is left behind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from fsm import (
    DecisionCore,
    DecisionEngine,
    DecisionTable,
    EvidenceError,
    MachineDefinitionError,
    MachineSpec,
    Need,
    Taken,
    drawn_spec,
    rebuilt_on_listen,
)

from ._guards import PRIMARY_GUARDS, PrimaryFacts
from ._primary_table import PRIMARY_TABLE
from ._tables import RECEIPT_TRIGGERS

# The ADR-0068 decision machine as drawn (spec 07): every row an edge, `row 13 [guard]`.
PRIMARY_DECISION_SPEC: MachineSpec = drawn_spec(PRIMARY_TABLE)


def paths_to(table: DecisionTable, dest: str) -> Iterator[tuple[Taken, ...]]:
    """Every path of cases from the initial state to ``dest`` (the machine is acyclic)."""

    def walk(state: str, path: tuple[Taken, ...]) -> Iterator[tuple[Taken, ...]]:
        for row in table.rows:
            for case in row.cases:
                if case.state != state:
                    continue
                taken = (*path, Taken(row, case))
                if case.then == dest:
                    yield taken
                elif case.then in table.evidence:
                    yield from walk(case.then, taken)

    yield from walk(table.evidence[0], ())


def check_lost_needs_grace(table: DecisionTable) -> None:
    """ADR-0068 §2 step 6 / spec 04: "A not_running verdict without the grace and the second
    receipt read must never produce lost." Refuse a table in which any path does."""
    for path in paths_to(table, "lost"):
        states = [t.case.state for t in path]
        if "probe" not in states:
            continue  # rows 3 and 7: decided before any probe
        if not ({"pay_grace", "reread_receipt", "recheck_run"} <= set(states)) or (
            path[-1].case.guard != "not_running_after_grace"
        ):
            shown = " -> ".join(f"{t.case.state}[{t.case.guard}]" for t in path)
            raise MachineDefinitionError(
                table.name, f"lost after a probe without the grace and re-reads: {shown}"
            )


@rebuilt_on_listen
def primary_engine() -> DecisionEngine:
    """The ADR-0068 decision machine (validated when built); it owns the memo of choices."""
    engine = DecisionEngine(PRIMARY_TABLE, PRIMARY_GUARDS, evolve=observed_facts)
    check_lost_needs_grace(PRIMARY_TABLE)
    return engine


class PrimaryDecision(NamedTuple):
    """What one candidate comes to (spec 04): the row, the summary outcome and reason, and
    the write with its Run/Attempt trigger. ``facts`` are the observed facts it was decided
    on: the evidence to hand to the guarded Run/Attempt edges of that write."""

    row: str  # spec 04 row id ("13")
    state: str  # decision state (completed, lost, retained, quarantined, unresolved, failed)
    outcome: str  # recovered | remaining | unresolved | failed
    reason: str
    guard: str
    write: str | None  # complete | quarantine | lose_missing_attempt | lose | adopt_running
    trigger: str | None  # the guarded Run/Attempt trigger the write fires
    terminal: str | None  # the status the write moves the Run to (None: no move)
    facts: PrimaryFacts
    path: tuple[str, ...]  # rows and steps taken, the deciding row last


def receipt_terminal(facts: PrimaryFacts) -> str:
    """spec 04 "Terminal mapping from a trusted receipt": a requested cancel wins (timeout ->
    timed_out, else cancelled); otherwise exit code 0 -> succeeded, non-zero -> failed."""
    if facts.cancel_requested is None or (
        not facts.cancel_requested and facts.receipt_exit_code is None
    ):
        raise EvidenceError(
            PRIMARY_TABLE.name,
            "read_receipt",
            "the terminal mapping needs the Run's cancel request (read_run) and the "
            "receipt's exit code (read_receipt)",
        )
    if facts.cancel_requested:
        return "timed_out" if facts.cancel_reason == "timeout" else "cancelled"
    return "succeeded" if facts.receipt_exit_code == 0 else "failed"


def _decision(taken: Taken, facts: PrimaryFacts, path: tuple[str, ...]) -> PrimaryDecision:
    row, case = taken
    trigger = case.trigger
    terminal: str | None = None
    if case.write == "complete":
        terminal = receipt_terminal(facts)
        trigger = RECEIPT_TRIGGERS[terminal]
    elif case.then == "lost":
        terminal = "lost"
    elif case.write == "adopt_running":
        terminal = "running"
    reason = case.reason
    for name, value in (
        ("terminal", terminal),
        ("receipt_problem", facts.receipt_problem),
        ("probe_reason", facts.probe_reason),
        ("error", facts.error),
    ):
        key = "{" + name + "}"
        if key in reason:
            if value is None:
                raise EvidenceError(
                    PRIMARY_TABLE.name, case.state, f"row {row.row} names {name}, never observed"
                )
            reason = reason.replace(key, value)
    return PrimaryDecision(
        row=row.row,
        state=case.then,
        # The engine's table: a core decides by the table its machine was built from.
        outcome=primary_engine().table.decisions[case.then],
        reason=reason,
        guard=case.guard,
        write=case.write,
        trigger=trigger,
        terminal=terminal,
        facts=facts,
        path=path,
    )


# Which fact says that an evidence step was observed (decide_primary: facts gathered at once).
_OBSERVED_BY: dict[str, str] = {
    "read_run": "run_present",
    "read_receipt": "first_receipt",
    "probe": "process",
    "pay_grace": "grace_paid",
    "reread_receipt": "second_receipt",
    "recheck_run": "unchanged_on_recheck",
}
_UNOBSERVED: dict[str, object] = {"grace_paid": False}


def decide_primary(facts: PrimaryFacts) -> Need | PrimaryDecision:
    """spec 04 for one candidate, as a pure function of the facts observed so far: the next
    evidence to gather, or the decision. A core is driven through ``facts`` in the evidence
    order, each step observing what it fills (a fact two steps fill, at the first), so the
    rows are tried as a pass tries them: a receipt found on the second read decides row 13,
    never row 5. The decision carries ``facts`` as given."""
    if facts.page_status is None:
        raise EvidenceError(
            PRIMARY_TABLE.name,
            PRIMARY_TABLE.evidence[0],
            "page_status is missing: every candidate comes with its status on the page "
            "(spec 04 row 2 compares it)",
        )
    core = PrimaryCore(facts.page_status)
    if facts.error is not None:
        core = core.fail(facts.error)
    given: set[str] = set()
    while core.taken is None:
        need = core.next()
        assert isinstance(need, Need)
        mark = _OBSERVED_BY[need.evidence]
        if getattr(facts, mark) == _UNOBSERVED.get(mark):
            return need
        fills = core.engine.table.observes[need.evidence] - given
        given |= fills
        core = core.observe(need.evidence, **{f: getattr(facts, f) for f in fills})
    return _decision(core.taken, facts, core.path)


def observed_facts(facts: PrimaryFacts, fields: Mapping[str, object]) -> PrimaryFacts:
    """``facts`` with ``fields`` observed (the caller passes only fields the evidence fills,
    :data:`fsm.qinglong.PRIMARY_EVIDENCE_FIELDS`)."""
    return dataclasses.replace(facts, **fields)  # type: ignore[arg-type]


class PrimaryCore(DecisionCore[PrimaryFacts, PrimaryDecision]):
    """One candidate's walk through the ADR-0068 decision machine (see the module docstring):
    a :class:`fsm.DecisionCore` started on the page's status of the Run,
    ``PrimaryCore(page_status)``."""

    __slots__ = ()

    def __init__(self, page_status: str | None = None, /, **fields: Any) -> None:
        # ``fields``: every field of a core, as dataclasses.replace passes them for each step.
        if page_status is not None:
            start = primary_engine().start(PrimaryFacts(page_status=page_status), _decision)
            fields = {f.name: getattr(start, f.name) for f in dataclasses.fields(start)}
        super().__init__(**fields)
