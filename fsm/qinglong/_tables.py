"""The lifecycles as plain data (like h11's ``_state.py``): the machines are built from this.

This is what the code DOES. What the design records SAY is transcribed separately, in
``reconciler/diagrams/_records.py``; ``qlfsm diagrams check`` compares the two.

An :class:`Edge` is one transition of one machine. ``guard is None`` marks a lifecycle edge
(ADR-0001's table); a named guard marks a reconciler decision edge whose guard is a pure
predicate over the evidence (``fsm/qinglong/_guards.py``).

The legacy shadow's writes fire guarded edges of their own (``RUN_LEGACY_EDGES``,
``ATTEMPT_LEGACY_EDGES``: ADR-0448 rows 2, 6, 7, 9, 10), guarded by the rows' guard names.

The reconcilers' decision tables are data too, in their own modules: ADR-0068's in
``fsm/qinglong/_primary_table.py``, ADR-0448's (and the legacy_shadow lifecycle built from it) in
``fsm/qinglong/_legacy.py``.
"""

from __future__ import annotations

from fsm import Edge, MachineSpec

# --- Run (ADR-0001, spec 01) ---------------------------------------------------------------

RUN_STATES: tuple[str, ...] = (
    "created",
    "queued",
    "dispatching",
    "running",
    "waiting_approval",
    "retry_wait",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
    "lost",
)
# spec 01: lost is NOT terminal, it awaits a retry-policy decision.
RUN_TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "timed_out"})

# The trigger that enters a state along a plain lifecycle edge.
RUN_TRIGGER_INTO: dict[str, str] = {
    "queued": "queue",
    "dispatching": "dispatch",
    "running": "start",
    "waiting_approval": "await_approval",
    "retry_wait": "schedule_retry",
    "succeeded": "succeed",
    "failed": "fail",
    "cancelled": "cancel",
    "timed_out": "time_out",
    "lost": "mark_lost",
}

_RUN_ALLOWED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("created", ("queued", "cancelled")),
    ("queued", ("dispatching", "cancelled", "timed_out")),
    ("dispatching", ("running", "retry_wait", "failed", "cancelled", "lost")),
    (
        "running",
        ("waiting_approval", "retry_wait", "succeeded", "failed", "cancelled", "timed_out", "lost"),
    ),
    ("waiting_approval", ("running", "cancelled", "timed_out")),
    ("retry_wait", ("queued", "cancelled", "timed_out")),
    ("lost", ("queued", "failed", "cancelled")),
)

RUN_LIFECYCLE_EDGES: tuple[Edge, ...] = (
    *(
        Edge(RUN_TRIGGER_INTO[dest], source, dest, None, "ADR-0001")
        for source, dests in _RUN_ALLOWED
        for dest in dests
    ),
    # Not in ADR-0001's table: QingLong 3.0 added it for lost-run retry (ADR-0380).
    Edge("schedule_retry", "lost", "retry_wait", None, "ADR-0380 amendment"),
    # Not in ADR-0001's table either: QingLong 3.0's own Run machine allows it (spec 01 (**),
    # `RUN_TRANSITIONS` in back/runtime/domain/runStateMachine.ts), so ADR-0448 row 2 repairs a
    # `dispatching` Run whose unique Attempt timed out (docs/decisions.md D-28).
    Edge("time_out", "dispatching", "timed_out", None, "RUN_TRANSITIONS amendment"),
)

# --- Attempt (ADR-0001, spec 01) -----------------------------------------------------------

ATTEMPT_STATES: tuple[str, ...] = (
    "claimed",
    "starting",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "timed_out",
    "lost",
)
ATTEMPT_TERMINAL: frozenset[str] = frozenset(
    {"succeeded", "failed", "cancelled", "timed_out", "lost"}
)
ATTEMPT_ACTIVE: frozenset[str] = frozenset({"claimed", "starting", "running"})

ATTEMPT_TRIGGER_INTO: dict[str, str] = {
    "starting": "start",
    "running": "run",
    "succeeded": "succeed",
    "failed": "fail",
    "cancelled": "cancel",
    "timed_out": "time_out",
    "lost": "mark_lost",
}

_ATTEMPT_ALLOWED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("claimed", ("starting", "cancelled", "lost")),
    ("starting", ("running", "failed", "cancelled", "timed_out", "lost")),
    ("running", ("succeeded", "failed", "cancelled", "timed_out", "lost")),
)

ATTEMPT_LIFECYCLE_EDGES: tuple[Edge, ...] = tuple(
    Edge(ATTEMPT_TRIGGER_INTO[dest], source, dest, None, "ADR-0001")
    for source, dests in _ATTEMPT_ALLOWED
    for dest in dests
)

# --- Reconciler decision edges on Run and Attempt (ADR-0068, spec 04) -----------------------
# Guarded edges: the same (source, dest) pairs as lifecycle edges, entered through their own
# trigger so that the only way along them is with evidence that satisfies the guard. Every
# guarded edge must also be a legal ADR-0001 pair: the machine builder checks that.

# spec 04 "Terminal mapping": the terminal status a trusted receipt leads to -> its trigger.
RECEIPT_TRIGGERS: dict[str, str] = {
    "succeeded": "succeed_by_receipt",
    "failed": "fail_by_receipt",
    "cancelled": "cancel_by_receipt",
    "timed_out": "time_out_by_receipt",
}

RUN_RECONCILER_EDGES: tuple[Edge, ...] = (
    # ADR-0068 §2 step 4: a receipt proves the process started and ended. A Run still
    # `dispatching` goes through `running` (each edge one event) because ADR-0001 has no
    # dispatching -> succeeded edge. (QingLong's coordinator writes the direct edge; we keep
    # the table legal. docs/decisions.md D-3.)
    Edge("start_by_receipt", "dispatching", "running", "trusted_receipt", "ADR-0068 row 5"),
    *(
        Edge(trigger, "running", dest, "trusted_receipt", "ADR-0068 row 5")
        for dest, trigger in RECEIPT_TRIGGERS.items()
    ),
    Edge(
        "lose_missing_attempt",
        "dispatching",
        "lost",
        "attempt_missing_before_start",
        "ADR-0068 row 3",
    ),
    Edge("lose_unstarted_claim", "dispatching", "lost", "unstarted_claim", "ADR-0068 row 7"),
    Edge("lose_unstarted_claim", "running", "lost", "unstarted_claim", "ADR-0068 row 7"),
    # Row 4b: a claim of another executor, lost on the claim alone, its receipt never read.
    Edge(
        "lose_nonlocal_claim", "dispatching", "lost", "claimed_not_local_process", "ADR-0068 row 4b"
    ),
    Edge("lose_nonlocal_claim", "running", "lost", "claimed_not_local_process", "ADR-0068 row 4b"),
    Edge("adopt_running", "dispatching", "running", "exact_process_running", "ADR-0068 row 12"),
    Edge("lose_after_grace", "dispatching", "lost", "not_running_after_grace", "ADR-0068 row 13"),
    Edge("lose_after_grace", "running", "lost", "not_running_after_grace", "ADR-0068 row 13"),
)

ATTEMPT_RECONCILER_EDGES: tuple[Edge, ...] = (
    # A trusted receipt for an Attempt not yet `running` walks the legal path (D-3).
    Edge("start_by_receipt", "claimed", "starting", "trusted_receipt", "ADR-0068 row 5"),
    Edge("run_by_receipt", "starting", "running", "trusted_receipt", "ADR-0068 row 5"),
    *(
        Edge(trigger, "running", dest, "trusted_receipt", "ADR-0068 row 5")
        for dest, trigger in RECEIPT_TRIGGERS.items()
    ),
    Edge("lose_unstarted_claim", "claimed", "lost", "unstarted_claim", "ADR-0068 row 7"),
    Edge("lose_nonlocal_claim", "claimed", "lost", "claimed_not_local_process", "ADR-0068 row 4b"),
    Edge("adopt_running", "starting", "running", "exact_process_running", "ADR-0068 row 12"),
    Edge("lose_after_grace", "starting", "lost", "not_running_after_grace", "ADR-0068 row 13"),
    Edge("lose_after_grace", "running", "lost", "not_running_after_grace", "ADR-0068 row 13"),
)

# --- ADR-0448 write edges on Run and Attempt (spec 05 rows 2, 6, 7, 9, 10) -------------------
# The legacy shadow's writes walk guarded edges too: each is taken only with the facts re-read
# inside its write transaction, on which its guard (the row's guard on the legacy_shadow
# lifecycle: "this row is the first that matches", ``_guards.py``) holds. Each edge is a
# legal ADR-0001 pair: the sources below are generated from the lifecycle tables.

_RUN_LIFECYCLE_PAIRS = frozenset((e.source, e.dest) for e in RUN_LIFECYCLE_EDGES)
# Row 1 skips a Run already terminal or lost: no legacy edge leaves one.
_RUN_LEGACY_SOURCES = tuple(s for s in RUN_STATES if s not in RUN_TERMINAL and s != "lost")

# Row 2 (response-loss repair): the Run takes its latest Attempt's terminal status.
_REPAIR_TRIGGERS: tuple[tuple[str, str], ...] = (
    ("succeed_by_repair", "succeeded"),
    ("fail_by_repair", "failed"),
    ("cancel_by_repair", "cancelled"),
    ("time_out_by_repair", "timed_out"),
    ("lose_by_repair", "lost"),
)
_ROW_7 = "unique_finished_evidence"

RUN_LEGACY_EDGES: tuple[Edge, ...] = (
    *(
        Edge(trigger, source, dest, "unique_terminal_attempt", "ADR-0448 row 2")
        for trigger, dest in _REPAIR_TRIGGERS
        for source in _RUN_LEGACY_SOURCES
        if (source, dest) in _RUN_LIFECYCLE_PAIRS
    ),
    *(
        Edge("cancel_by_instance", source, "cancelled", "stopped_with_finished", "ADR-0448 row 6")
        for source in _RUN_LEGACY_SOURCES
        if (source, "cancelled") in _RUN_LIFECYCLE_PAIRS
    ),
    # Row 7: the chain QingLong's shadow writer writes, each edge one event.
    Edge("queue_by_instance", "created", "queued", _ROW_7, "ADR-0448 row 7"),
    Edge("dispatch_by_instance", "queued", "dispatching", _ROW_7, "ADR-0448 row 7"),
    Edge("start_by_instance", "dispatching", "running", _ROW_7, "ADR-0448 row 7"),
    Edge("succeed_by_instance", "running", "succeeded", _ROW_7, "ADR-0448 row 7"),
    Edge("fail_by_instance", "running", "failed", _ROW_7, "ADR-0448 row 7"),
)

ATTEMPT_LEGACY_EDGES: tuple[Edge, ...] = (
    *(
        Edge("cancel_by_instance", source, "cancelled", "stopped_with_finished", "ADR-0448 row 6")
        for source in ("claimed", "starting", "running")
    ),
    Edge("start_by_instance", "claimed", "starting", _ROW_7, "ADR-0448 row 7"),
    Edge("run_by_instance", "starting", "running", _ROW_7, "ADR-0448 row 7"),
    Edge("succeed_by_instance", "running", "succeeded", _ROW_7, "ADR-0448 row 7"),
    Edge("fail_by_instance", "running", "failed", _ROW_7, "ADR-0448 row 7"),
    Edge("abandon_acceptance", "claimed", "cancelled", "no_spawn_evidence", "ADR-0448 row 9"),
    *(
        Edge("lose_legacy_owner", source, "lost", "no_terminal_evidence", "ADR-0448 row 10")
        for source in ("claimed", "starting", "running")
    ),
)

# (machine, ADR-0448 row, source, dest) -> the trigger of that legacy edge: what the writes fire.
LEGACY_EDGE_TRIGGERS: dict[tuple[str, str, str, str], str] = {
    (machine, e.cites.removeprefix("ADR-0448 row "), e.source, e.dest): e.trigger
    for machine, edges in (("run", RUN_LEGACY_EDGES), ("attempt", ATTEMPT_LEGACY_EDGES))
    for e in edges
}

RUN_SPEC = MachineSpec(
    name="run",
    states=RUN_STATES,
    initial="created",
    terminal=RUN_TERMINAL,
    edges=(*RUN_LIFECYCLE_EDGES, *RUN_RECONCILER_EDGES, *RUN_LEGACY_EDGES),
)

ATTEMPT_SPEC = MachineSpec(
    name="attempt",
    states=ATTEMPT_STATES,
    initial="claimed",
    terminal=ATTEMPT_TERMINAL,
    edges=(*ATTEMPT_LIFECYCLE_EDGES, *ATTEMPT_RECONCILER_EDGES, *ATTEMPT_LEGACY_EDGES),
)
