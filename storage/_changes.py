"""What a Repository write is made of (spec 01): the actors, the changes a caller hands over,
the expectations re-checked inside the transaction, and the checks on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._errors import Conflict, CounterExhausted, InvalidField

if TYPE_CHECKING:
    from fsm import Step  # annotations only: the machines load with the first write (D-33)

ACTORS = frozenset(
    {
        "user",
        "api_app",
        "trigger",
        "agent",
        "mcp_client",
        "worker",
        "executor",
        "system",
        "legacy_shell",
        "scheduler",
        "reconciler",
        "compatibility",
    }
)
# spec 01 "Events": the names that record something without moving a state. Every other name
# of the spec's list is `run.<status>` / `attempt.<status>`, written only along an edge.
NON_MOVING_EVENTS = frozenset(
    {"attempt.late_callback_ignored", "run.reconciled", "run.cancel_requested"}
)
# JavaScript's Number.MAX_SAFE_INTEGER: QingLong 3.0 reads `Runs.version`, `Runs.event_sequence`
# and `RunAttempts.callback_sequence` as JavaScript numbers and rejects a row whose value is not
# a safe integer ("invalid version"), after which it can neither show nor advance that Run
# (issue 27 item 7, docs/decisions.md D-29).
MAX_COUNTER = 2**53 - 1


def next_counter(what: str, ident: str, counter: str, value: int) -> int:
    """``value + 1``: the next value of a counter QingLong reads (a Run's version or event
    sequence, an Attempt's callback sequence), or CounterExhausted past :data:`MAX_COUNTER`.
    Every write computes its next values here, so the bound holds on every path."""
    if value >= MAX_COUNTER:
        raise CounterExhausted(what, ident, counter, value)
    return value + 1


# spec 01 "Field rules": error fields only on these targets.
_ERROR_TARGETS = frozenset({"failed", "cancelled", "timed_out", "lost", "retry_wait"})
_RUN_SETTABLE = frozenset(
    {
        "queued_at_ms",
        "started_at_ms",
        "finished_at_ms",
        "cancel_requested_at_ms",
        "cancel_reason",
        "error_code",
        "error_summary",
    }
)
_ATTEMPT_SETTABLE = frozenset(
    {
        "executor_handle",
        "pid",
        "callback_token_hash",
        "callback_sequence",
        "started_at_ms",
        "finished_at_ms",
        "exit_code",
        "error_code",
        "error_summary",
        "log_artifact_id",
    }
)


@dataclass(frozen=True, slots=True)
class Actor:
    type: str
    id: str | None = None


@dataclass(frozen=True, slots=True)
class RunChange:
    """One Run edge: ``trigger`` of the Run machine, with the evidence its guard reads."""

    trigger: str
    evidence: object = None
    set: Mapping[str, object] = field(default_factory=dict)
    payload: Mapping[str, object] = field(default_factory=dict)
    dedupe_key: str | None = None
    # The Attempt the Run edge is about, stored in the event's `RunEvents.attempt_id` (QingLong
    # sets it on every Run event its coordinator writes for an Attempt). It must be one of the
    # Run's Attempts read in the transaction; None: a Run event of no Attempt.
    attempt_id: str | None = None


# The fields of an Attempt edge an event's payload may repeat (after `attempt_id`,
# `from_status`, `to_status`, `version`): `attempt` is the Attempt's number; the others are
# repeated when the edge sets them.
ATTEMPT_EVENT_FIELDS = frozenset({"attempt", "exit_code", "callback_sequence", "error_code"})
DEFAULT_ATTEMPT_EVENT_FIELDS: tuple[str, ...] = ("exit_code", "callback_sequence", "error_code")


@dataclass(frozen=True, slots=True)
class AttemptChange:
    """One Attempt edge of the Run's Attempt ``attempt_id``."""

    attempt_id: str
    trigger: str
    evidence: object = None
    set: Mapping[str, object] = field(default_factory=dict)
    payload: Mapping[str, object] = field(default_factory=dict)
    dedupe_key: str | None = None
    # Which of ATTEMPT_EVENT_FIELDS the event's payload repeats. Writers differ in QingLong:
    # its domain transition adds the Attempt's number and the error code, its completion
    # processor neither (docs/decisions.md D-18).
    event_fields: tuple[str, ...] = DEFAULT_ATTEMPT_EVENT_FIELDS


Change = RunChange | AttemptChange


@dataclass(frozen=True, slots=True)
class Expect:
    """Fields the caller's decision used, re-checked inside the transaction (ADR-0068 §4)."""

    run: Mapping[str, object] = field(default_factory=dict)
    attempts: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Advanced:
    run_id: str
    version: int
    steps: tuple[Step, ...]
    events: tuple[str, ...]


def _check_actor(actor: Actor) -> None:
    if actor.type not in ACTORS:
        raise InvalidField(
            f"unknown actor type {actor.type!r}; use one of spec 01's actors: "
            + ", ".join(sorted(ACTORS))
        )


_UNREAD = object()  # what a row has not for a field it does not read


def _check_expected(what: str, ident: str, row: object, fields: Mapping[str, object]) -> None:
    for name, value in fields.items():
        now = getattr(row, name, _UNREAD)
        if now is _UNREAD:
            raise InvalidField(f"cannot expect {what} field {name!r}: qlfsm does not read it")
        if now != value:
            raise Conflict(what, ident, f"{name}={value!r} (now {now!r})")


def _check_fields(
    what: str, dest: str, sets: Mapping[str, object], allowed: frozenset[str]
) -> None:
    if not allowed.issuperset(sets):
        unknown = sorted(set(sets) - allowed)
        raise InvalidField(f"{what} columns {unknown} cannot be set along an edge")
    if ("error_code" in sets or "error_summary" in sets) and dest not in _ERROR_TARGETS:
        raise InvalidField(f"error fields are only set on {sorted(_ERROR_TARGETS)}, not {dest}")
    code = sets.get("error_code")
    if code is not None and (not isinstance(code, str) or len(code) > 128):
        raise InvalidField("error_code must be a string of at most 128 characters")
    summary = sets.get("error_summary")
    if summary is not None and (not isinstance(summary, str) or len(summary) > 1024):
        raise InvalidField("error_summary must be a string of at most 1024 characters")


def _check_time(at_ms: int, created: int, started: int | None, what: str) -> None:
    if at_ms < created or (started is not None and at_ms < started):
        raise InvalidField(f"at_ms {at_ms} is earlier than the {what}'s created/started time")
