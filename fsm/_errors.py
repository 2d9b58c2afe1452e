"""The fsm exception family: every refusal names the state and the event."""

from __future__ import annotations


class FsmError(Exception):
    """Base of every error raised by :mod:`fsm`."""


class MachineDefinitionError(FsmError):
    """A transition table is not a valid machine (found when the machine is built)."""

    def __init__(self, machine: str, problem: str) -> None:
        # Names the machine and the edge, never a file of qlfsm: the table is the caller's.
        super().__init__(
            f"machine {machine!r} is invalid: {problem}; fix that machine's declaration"
        )
        self.machine = machine
        self.problem = problem


class IllegalTransition(FsmError):
    """No edge with this trigger leaves this state (wraps ``transitions.MachineError``)."""

    def __init__(self, machine: str, state: str, event: str) -> None:
        super().__init__(f"{machine}: event {event!r} is not allowed from state {state!r}")
        self.machine = machine
        self.state = state
        self.event = event


class GuardRefused(FsmError):
    """The edge exists but its guard did not hold on the evidence given."""

    def __init__(self, machine: str, state: str, event: str, guard: str | None) -> None:
        super().__init__(
            f"{machine}: event {event!r} from state {state!r} refused by guard {guard!r}"
        )
        self.machine = machine
        self.state = state
        self.event = event
        self.guard = guard


class EvidenceError(FsmError):
    """Facts handed to a decision machine are not what its state can take (an unknown field,
    or a fact the decision needs was never observed)."""

    def __init__(self, machine: str, state: str, problem: str) -> None:
        super().__init__(f"{machine}: in state {state!r}: {problem}")
        self.machine = machine
        self.state = state
        self.problem = problem
