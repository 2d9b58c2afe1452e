"""The ADR-0068 per-candidate evidence sequence as a machine built from a table (spec 04).

Evidence order is fixed (ADR-0068 §2): receipt, then process identity, then ONE grace, then the
receipt again, and only then `lost`. Here that order is the machine's shape, not a convention of
the caller: the only edge into ``lost_not_running`` leaves ``reread_missing``, which is reached
only from ``grace_paid``, which is reached only from ``probed_not_running``. A caller that tries
to record `lost` any earlier gets :class:`IllegalTransition` before it can commit anything.

The two other ways to `lost` need no probe at all and say so in their own terminal states:
``lost_missing_attempt`` (spec 04 row 3) leaves ``start`` and ``lost_unstarted_claim`` (row 7)
leaves ``receipt_missing`` (the first read, before any probe).

Pure: no I/O, no callbacks. The reconciler fires a trigger only after the step it names
happened (a read, a probe, the grace, a commit).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from transitions.core import Machine, MachineError

from ._errors import IllegalTransition
from ._machine import Lifecycle, transitions_config, validate_spec
from ._tables import Edge, MachineSpec

# Terminal state -> the summary outcome of spec 04 ("Summary").
EVIDENCE_OUTCOMES: dict[str, str] = {
    "completed": "recovered",  # row 5 (or 13 after the grace): receipt -> terminal
    "lost_missing_attempt": "recovered",  # row 3
    "lost_unstarted_claim": "recovered",  # row 7
    "lost_not_running": "recovered",  # row 13
    "retained": "remaining",  # row 12 (proven again by the final verifier)
    "quarantined": "unresolved",  # row 6
    # rows 1, 2, 3b, 4, 8, 10, 11, a changed re-read in 13, an unusable receipt root (D-3c)
    "unresolved": "unresolved",
    "failed": "failed",  # rows 9 and 14
}

EVIDENCE_STATES: tuple[str, ...] = (
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
    *EVIDENCE_OUTCOMES,
)

_NON_TERMINAL = EVIDENCE_STATES[: EVIDENCE_STATES.index("reread_missing") + 1]

EVIDENCE_EDGES: tuple[Edge, ...] = (
    # Rows 1-4 need only the database.
    Edge("hold", "start", "unresolved", None, "ADR-0068 rows 1, 2, 3b, 4"),
    Edge("lose_missing_attempt", "start", "lost_missing_attempt", None, "ADR-0068 row 3"),
    # ADR-0068 §2 step 2: exactly one receipt path is read, before any process evidence.
    Edge("read_receipt", "start", "receipt_read", None, "ADR-0068 §2 step 2"),
    Edge("trust", "receipt_read", "receipt_trusted", None, "ADR-0068 row 5"),
    Edge("reject", "receipt_read", "receipt_invalid", None, "ADR-0068 row 6"),
    Edge("find_none", "receipt_read", "receipt_missing", None, "ADR-0068 §2 step 5"),
    # A root or shard that is not a real directory is configuration, not a receipt: nothing to
    # quarantine, no probe, the candidate blocks (docs/decisions.md D-3c).
    Edge("hold", "receipt_read", "unresolved", None, "ADR-0068 §3 receipt root unusable"),
    Edge("commit_completion", "receipt_trusted", "completed", None, "ADR-0068 row 5"),
    Edge("quarantine", "receipt_invalid", "quarantined", None, "ADR-0068 row 6"),
    # ADR-0068 §2 step 5: `claimed` is lost without probing any process.
    Edge("lose_unstarted_claim", "receipt_missing", "lost_unstarted_claim", None, "ADR-0068 row 7"),
    Edge("hold", "receipt_missing", "unresolved", None, "ADR-0068 rows 8, 10, 11"),
    Edge("probe_running", "receipt_missing", "probed_running", None, "ADR-0068 §2 step 6"),
    Edge("probe_not_running", "receipt_missing", "probed_not_running", None, "ADR-0068 §2 step 6"),
    Edge("retain", "probed_running", "retained", None, "ADR-0068 row 12"),
    # ADR-0068 §2 step 6: trusted negative evidence leads only to the grace.
    Edge("pay_grace", "probed_not_running", "grace_paid", None, "ADR-0068 row 13"),
    Edge("reread_receipt", "grace_paid", "receipt_reread", None, "ADR-0068 row 13"),
    Edge("trust", "receipt_reread", "receipt_trusted", None, "ADR-0068 row 13 -> 5"),
    Edge("reject", "receipt_reread", "receipt_invalid", None, "ADR-0068 row 13 -> 6"),
    Edge("find_none", "receipt_reread", "reread_missing", None, "ADR-0068 row 13"),
    Edge("hold", "receipt_reread", "unresolved", None, "ADR-0068 §3 receipt root unusable"),
    Edge("lose_not_running", "reread_missing", "lost_not_running", None, "ADR-0068 row 13"),
    Edge("hold", "reread_missing", "unresolved", None, "ADR-0068 row 13 (changed on re-read)"),
    # Row 9 (provider unavailable) and row 14 (any exception) end the sequence anywhere.
    *(Edge("fail", s, "failed", None, "ADR-0068 rows 9, 14") for s in _NON_TERMINAL),
)

EVIDENCE_SPEC = MachineSpec(
    name="primary_evidence",
    states=EVIDENCE_STATES,
    initial="start",
    terminal=frozenset(EVIDENCE_OUTCOMES),
    edges=EVIDENCE_EDGES,
)


@cache
def evidence_machine() -> Lifecycle:
    """The validated evidence machine as a :class:`Lifecycle` (for diagrams and planning)."""
    return Lifecycle(EVIDENCE_SPEC)


@cache
def _engine() -> tuple[Any, dict[tuple[str, str], str]]:
    """The `transitions` machine the sequences fire on, and its (trigger, source) -> dest table.

    Both come from the same validated table. A sequence is the machine's model without being
    registered on it (``Machine(model=None)``): registering a model costs ~200 us (transitions
    adds a method per state and trigger), firing on it ~8 us, and the reconciler runs one
    sequence per candidate, up to 256 per pass (benchmarks/README.md).
    """
    validate_spec(EVIDENCE_SPEC)
    machine = Machine(
        model=None,
        states=list(EVIDENCE_SPEC.states),
        initial=EVIDENCE_SPEC.initial,
        transitions=transitions_config(EVIDENCE_SPEC),
        auto_transitions=False,
        ignore_invalid_triggers=False,
        send_event=True,
    )
    table = {(e.trigger, e.source): e.dest for e in EVIDENCE_SPEC.edges}
    return machine, table


class EvidenceSequence:
    """One candidate's walk through the evidence machine; ``trail`` lists the states visited.

    ``require`` asks whether a trigger is allowed now without moving (a commit happens between
    the question and :meth:`fire`); ``fire`` moves through `transitions`, raising
    IllegalTransition when no such edge leaves the current state.
    """

    def __init__(self) -> None:
        self.state: str = EVIDENCE_SPEC.initial
        self.trail: list[str] = [self.state]

    def require(self, trigger: str) -> str:
        """The state ``trigger`` would lead to; IllegalTransition if it may not fire now."""
        dest = _engine()[1].get((trigger, self.state))
        if dest is None:
            raise IllegalTransition(EVIDENCE_SPEC.name, self.state, trigger)
        return dest

    def fire(self, trigger: str) -> str:
        machine = _engine()[0]
        event = machine.events.get(trigger)
        try:
            moved = event is not None and bool(event.trigger(self))
        except MachineError:
            moved = False
        if not moved:
            raise IllegalTransition(EVIDENCE_SPEC.name, self.state, trigger)
        self.trail.append(self.state)
        return self.state

    @property
    def done(self) -> bool:
        return self.state in EVIDENCE_SPEC.terminal

    @property
    def outcome(self) -> str:
        if not self.done:
            raise IllegalTransition(EVIDENCE_SPEC.name, self.state, "<outcome>")
        return EVIDENCE_OUTCOMES[self.state]


@dataclass(frozen=True)
class EvidencePath:
    states: tuple[str, ...]
    triggers: tuple[str, ...]


def evidence_paths() -> Iterator[EvidencePath]:
    """Every path from ``start`` to a terminal state (the machine is acyclic): for tests and
    for the diagram reviewer, so "no path reaches lost without the grace" is checkable."""
    validate_spec(EVIDENCE_SPEC)

    def walk(
        state: str, states: tuple[str, ...], triggers: tuple[str, ...]
    ) -> Iterator[EvidencePath]:
        if state in EVIDENCE_SPEC.terminal:
            yield EvidencePath(states, triggers)
            return
        for e in EVIDENCE_SPEC.edges:
            if e.source == state and e.dest not in states:
                yield from walk(e.dest, (*states, e.dest), (*triggers, e.trigger))

    yield from walk(EVIDENCE_SPEC.initial, (EVIDENCE_SPEC.initial,), ())
