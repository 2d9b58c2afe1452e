"""ADR-0001's lifecycle tables: Run (spec 01 "Run") and Attempt (spec 01 "Attempt
(RunAttempt)"), with the ADR-0380 amendment ``lost -> retry_wait`` and the ``RUN_TRANSITIONS``
amendment ``dispatching -> timed_out`` (spec 01 (*) and (**)).

Transcribed by hand from the record, never imported from ``fsm`` (see ``_records.py``).
"""

from __future__ import annotations

from reconciler.diagrams._record_rows import LifecycleRow

# --- ADR-0001: Run (spec 01 "Run") --------------------------------------------------------

ADR_0001_RUN_CITE = "ADR-0001 Run table"  # spec 01 §Run

# spec 01: "lost is NOT terminal: it awaits a decision (requeue, fail or cancel)".
_RUN_ENDS: tuple[str, ...] = ("succeeded", "failed", "cancelled", "timed_out")
RUN_TERMINAL: frozenset[str] = frozenset(_RUN_ENDS)
RUN_STATES: tuple[str, ...] = (
    "created",
    "queued",
    "dispatching",
    "running",
    "waiting_approval",
    "retry_wait",
    *_RUN_ENDS,
    "lost",
)

ADR_0001_RUN_TABLE: tuple[LifecycleRow, ...] = (
    LifecycleRow("created", ("queued", "cancelled")),
    LifecycleRow("queued", ("dispatching", "cancelled", "timed_out")),
    # spec 01 (**): `dispatching -> timed_out` is NOT in ADR-0001's table either; QingLong 3.0's
    # Run machine allows it (`RUN_TRANSITIONS`, runStateMachine.ts). Marked as an amendment.
    LifecycleRow(
        "dispatching",
        ("running", "retry_wait", "failed", "cancelled", "lost"),
        amended=(("timed_out", "RUN_TRANSITIONS"),),
    ),
    LifecycleRow(
        "running",
        ("waiting_approval", "retry_wait", "succeeded", "failed", "cancelled", "timed_out", "lost"),
    ),
    LifecycleRow("waiting_approval", ("running", "cancelled", "timed_out")),
    LifecycleRow("retry_wait", ("queued", "cancelled", "timed_out")),
    # spec 01 (*): `lost -> retry_wait` is NOT in ADR-0001's table; the QingLong 3.0
    # implementation added it for lost-run retry (ADR-0380). Marked as an amendment.
    LifecycleRow("lost", ("queued", "failed", "cancelled"), amended=(("retry_wait", "ADR-0380"),)),
    LifecycleRow("succeeded", ()),
    LifecycleRow("failed", ()),
    LifecycleRow("cancelled", ()),
    LifecycleRow("timed_out", ()),
)

# The trigger of each Run edge above, one ``source -> dest : trigger`` line per edge (the
# compact form of ``fsm.draw.check``), typed from spec 01 "Run" and QingLong 3.0's
# ``RUN_TRANSITIONS`` verbs; ``qlfsm diagrams check`` compares each drawn trigger with it.
ADR_0001_RUN_TRIGGERS = """
created -> queued : queue
created -> cancelled : cancel
queued -> dispatching : dispatch
queued -> cancelled : cancel
queued -> timed_out : time_out
dispatching -> running : start
dispatching -> retry_wait : schedule_retry
dispatching -> failed : fail
dispatching -> cancelled : cancel
dispatching -> lost : mark_lost
dispatching -> timed_out : time_out
running -> waiting_approval : await_approval
running -> retry_wait : schedule_retry
running -> succeeded : succeed
running -> failed : fail
running -> cancelled : cancel
running -> timed_out : time_out
running -> lost : mark_lost
waiting_approval -> running : start
waiting_approval -> cancelled : cancel
waiting_approval -> timed_out : time_out
retry_wait -> queued : queue
retry_wait -> cancelled : cancel
retry_wait -> timed_out : time_out
lost -> queued : queue
lost -> failed : fail
lost -> cancelled : cancel
lost -> retry_wait : schedule_retry
"""

# --- ADR-0001: Attempt (spec 01 "Attempt (RunAttempt)") -----------------------------------

ADR_0001_ATTEMPT_CITE = "ADR-0001 Attempt table"  # spec 01 §Attempt (RunAttempt)

# spec 01: "Terminal (immutable): succeeded, failed, cancelled, timed_out, lost" -- unlike a
# Run, a lost Attempt is final (a retry makes a new Attempt).
_ATTEMPT_ENDS: tuple[str, ...] = ("succeeded", "failed", "cancelled", "timed_out", "lost")
ATTEMPT_TERMINAL: frozenset[str] = frozenset(_ATTEMPT_ENDS)
ATTEMPT_STATES: tuple[str, ...] = ("claimed", "starting", "running", *_ATTEMPT_ENDS)

ADR_0001_ATTEMPT_TABLE: tuple[LifecycleRow, ...] = (
    LifecycleRow("claimed", ("starting", "cancelled", "lost")),
    LifecycleRow("starting", ("running", "failed", "cancelled", "timed_out", "lost")),
    LifecycleRow("running", ("succeeded", "failed", "cancelled", "timed_out", "lost")),
)

# The trigger of each Attempt edge above, in the same form (spec 01 "Attempt (RunAttempt)").
ADR_0001_ATTEMPT_TRIGGERS = """
claimed -> starting : start
claimed -> cancelled : cancel
claimed -> lost : mark_lost
starting -> running : run
starting -> failed : fail
starting -> cancelled : cancel
starting -> timed_out : time_out
starting -> lost : mark_lost
running -> succeeded : succeed
running -> failed : fail
running -> cancelled : cancel
running -> timed_out : time_out
running -> lost : mark_lost
"""
