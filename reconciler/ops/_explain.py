"""`qlfsm explain`: one run's path through the Run and Attempt machines, from its RunEvents.

Read-only. Each event that moves a state is one edge of the Run or the Attempt machine
(spec 01 "Events"); its trigger is taken from the tables in ``fsm/qinglong/_tables.py`` by
``(machine, from, to)`` where that names one trigger, narrowed by what the event itself
records (docs/decisions.md "Operator commands: explain"):

- the ADR-0068 pass walks its guarded (decision) edges, and it writes as the actors of spec 04
  "Writes" (`reconciler`/`local-startup`, `executor`/`completion-receipt`) or with a
  ``decision`` key; among them, the row decides: the ``decision`` key's row when recorded, else
  the row the event's own facts name (spec 04 fixes the error code of each `lost` row and the
  evidence word of the receipt and adoption edges), else a receipt actor means row 5;
- the legacy shadow's writes walk ADR-0448's guarded edges, those of the row the event names
  (its error code, dedupe key or shadow-writer mark); the Run commit of rows 9/10 is row 2's
  repair edge. A legacy event whose pair is no edge of that row walks the plain lifecycle edge;
- every other writer (the launcher, a scheduler, an operator's `resolve`) walks the plain
  ADR-0001 lifecycle edges.

When several triggers remain, the event type stands in for the trigger.

A recovery decision is the allow-listed payload key ``decision`` the ADR-0068 pass writes on
each of its edges: ``{"record", "row", "reason", "evidence": {...}}``. Events written before
that key existed are shown as they are; for them the row is *inferred* from what the event
records (spec 04's error codes and evidence words; for the legacy shadow, ADR-0448's error
codes and QingLong's shadow-writer marks) and no evidence is claimed. An operator's decision
(``qlfsm resolve``) is the key ``resolution``.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fsm import DecisionTable, MachineSpec
from fsm.qinglong import ATTEMPT_SPEC, LEGACY_TABLE, PRIMARY_TABLE, RUN_SPEC
from reconciler.primary import EFFECTS
from reconciler.shadow import COMPATIBILITY as LEGACY_COMPATIBILITY
from reconciler.shadow import RECONCILER as LEGACY_RECONCILER
from reconciler.shadow import WRITES as LEGACY_WRITE_EFFECTS
from reconciler.shadow import Effect
from storage import (
    AttemptRow,
    EventColumns,
    EventRow,
    JournalRow,
    Repository,
    RunRow,
    journal_get,
)

DECISION_KEY = "decision"
RESOLUTION_KEY = "resolution"
# spec 04 "Writes": the actors of the ADR-0068 pass, and the row an event of it that predates
# the `decision` key is read as, by the error code each `lost` row writes or the evidence word
# the chain edges carry (docs/decisions.md D-3: `completion_receipt`; spec 04 row 12:
# `durable_process_identity`): all from the pass's registry of effects.
RECONCILER_ACTOR = (EFFECTS["lose"].actor.type, EFFECTS["lose"].actor.id)
RECEIPT_ACTOR = (EFFECTS["complete"].actor.type, EFFECTS["complete"].actor.id)
ROW_BY_ERROR_CODE: Mapping[str, str] = {
    code: row
    for effect in EFFECTS.values()
    for code, row in effect.read_as.items()
    if code in {e.code for e in effect.errors.values()}
}
ROW_BY_EVIDENCE: Mapping[str, str] = {
    word: row
    for effect in EFFECTS.values()
    for word, row in effect.read_as.items()
    if word == effect.evidence
}
# A receipt's edge without its evidence word: the completion's own row (spec 04 row 5).
RECEIPT_ROW = ROW_BY_EVIDENCE[EFFECTS["complete"].evidence or ""]
# ADR-0448 (spec 05, docs/decisions.md D-6): the legacy shadow's writes, read back through the
# pass's own registry (``reconciler.shadow.WRITES``: actor, error code, dedupe template and
# payload of each write kind) and the table's row of each write kind. Rows 9/10 are the
# `reconciler` actor's (no id) with their error codes; rows 6/7 are the shadow writer's
# (`compatibility`, `shadow: true` in every payload; row 6 carries its own payload key); row 2's
# repair edge has its own dedupe key.


@dataclass(frozen=True)
class LegacyRowMaps:
    """How an event of the legacy shadow names its ADR-0448 row when it records none."""

    by_error_code: Mapping[str, str]  # the reconciler's writes with an error code of their own
    by_dedupe: Mapping[str, str]  # the reconciler's other writes, by their dedupe key's prefix
    by_payload_key: Mapping[str, str]  # the shadow writer's write whose events carry a key
    plain_shadow_row: str  # the shadow writer's write whose events carry none
    # A write of two commits (rows 9/10) -> the row whose edge its Run commit takes (row 2).
    run_commit_row: Mapping[str, str] = field(default_factory=dict)


def legacy_row_maps(table: DecisionTable, writes: Mapping[str, Effect]) -> LegacyRowMaps:
    """The inverse maps of ``table`` and the pass's registry ``writes``; ValueError when a write
    kind is made by more than one row or by none (an event could not name its row)."""
    rows_of: dict[str, list[str]] = {}
    for r in table.rows:
        for c in r.cases:
            if c.write is not None:
                rows_of.setdefault(c.write, []).append(r.row)
    unclear = {kind: rows_of.get(kind, []) for kind in writes if len(rows_of.get(kind, [])) != 1}
    if unclear:
        raise ValueError(f"{table.name}: write kinds not made by exactly one row: {unclear}")
    effects = [(rows_of[kind][0], e) for kind, e in writes.items()]
    reconciler = [(row, e) for row, e in effects if e.actor == LEGACY_RECONCILER]
    shadow = [(row, e) for row, e in effects if e.actor == LEGACY_COMPATIBILITY]
    plain = [row for row, e in shadow if not e.payload]
    if len(plain) != 1:
        raise ValueError(f"{table.name}: shadow-writer rows without a payload key: {plain}")
    return LegacyRowMaps(
        by_error_code={e.error[0]: row for row, e in reconciler if e.error is not None},
        by_dedupe={e.dedupe.partition("{")[0]: row for row, e in reconciler if e.error is None},
        by_payload_key={key: row for row, e in shadow for key in e.payload},
        plain_shadow_row=plain[0],
        run_commit_row={
            rows_of[kind][0]: rows_of[e.run_commit_as][0]
            for kind, e in writes.items()
            if e.run_commit_as is not None and e.run_commit_as in rows_of
        },
    )


LEGACY_ROW_MAPS = legacy_row_maps(LEGACY_TABLE, LEGACY_WRITE_EFFECTS)
LEGACY_RECONCILER_ACTOR = (LEGACY_RECONCILER.type, LEGACY_RECONCILER.id)
LEGACY_SHADOW_ACTOR = (LEGACY_COMPATIBILITY.type, LEGACY_COMPATIBILITY.id)
ADR0068 = "ADR-0068"
ADR0448 = "ADR-0448"
# Payload keys every edge event carries (spec 02); the rest is shown as the event's details.
_EDGE_KEYS = frozenset({"from_status", "to_status", "version", "attempt_id"})

SPECS: Mapping[str, MachineSpec] = {"run": RUN_SPEC, "attempt": ATTEMPT_SPEC}
ROW_FACTS: Mapping[tuple[str | None, str | None], str] = {
    **{(ADR0068, r.row): r.facts for r in PRIMARY_TABLE.rows},
    **{(ADR0448, r.row): r.facts for r in LEGACY_TABLE.rows},
}


class UnknownRun(LookupError):
    """The run is not in the database (its id is the one argument)."""


@dataclass(frozen=True)
class Step:
    """One event of the run, placed on its machine."""

    sequence: int
    at_ms: int
    type: str
    actor_type: str
    actor_id: str | None
    attempt_id: str | None
    payload: Mapping[str, Any]
    trigger: str  # from the tables, or the event type when they do not name one
    machine: str | None = None  # "run" | "attempt" | None (an event that moves nothing)
    source: str | None = None
    dest: str | None = None
    trigger_from_tables: bool = False
    record: str | None = None  # whose table decided: "ADR-0068" | "ADR-0448" | None
    row: str | None = None  # that table's row
    row_recorded: bool = False  # True: from the event's `decision` key; False: inferred or none
    decision: Mapping[str, Any] | None = None
    resolution: Mapping[str, Any] | None = None

    @property
    def details(self) -> dict[str, Any]:
        """The payload's keys beyond the edge, the decision and the resolution."""
        skip = _EDGE_KEYS | {DECISION_KEY, RESOLUTION_KEY}
        return {k: v for k, v in self.payload.items() if k not in skip}

    def as_dict(self) -> dict[str, Any]:
        """The step as the `explain --json` schema's step object, its members in their order."""
        return {
            "sequence": self.sequence,
            "at_ms": self.at_ms,
            "at": iso_time(self.at_ms),
            "type": self.type,
            "actor_type": self.actor_type,
            "actor_id": self.actor_id,
            "attempt_id": self.attempt_id,
            "machine": self.machine,
            "from": self.source,
            "to": self.dest,
            "trigger": self.trigger,
            "trigger_from_tables": self.trigger_from_tables,
            "record": self.record,
            "row": self.row,
            "row_recorded": self.row_recorded,
            "row_facts": ROW_FACTS.get((self.record, self.row)),
            "decision": dict(self.decision) if self.decision is not None else None,
            "resolution": dict(self.resolution) if self.resolution is not None else None,
            "payload": dict(self.payload),
        }


class Quiet(Step):
    """An event that moves no state and records no decision, resolution or row: what the human
    page folds (issue 29). It is built without placing the event, which a long storm of such
    events makes the common case; its members are what its placed Step's would be."""


# Events read per keyset page (issue 29): memory holds one page, whatever the history's length.
EVENT_PAGE = 1000


class Steps:
    """The run's events placed on their machines, in sequence order: a re-iterable streaming
    source. Each iteration reads the events again in keyset pages through the connection
    (open while it is iterated) and places them one at a time; nothing is held between pages
    but the machines' current states."""

    def __init__(
        self, conn: sqlite3.Connection, run_id: str, owner: str, *, page: int = EVENT_PAGE
    ) -> None:
        self._repo = Repository(conn)
        self._run_id = run_id
        self._owner = owner
        self._page = page

    def __iter__(self) -> Iterator[Step]:
        return map(_Placer(self._owner), self._repo.iter_events(self._run_id, page=self._page))

    def outline(self) -> Iterator[Step]:
        """Every event in order: a :class:`Quiet` for one that moves no state and records no
        decision, a :class:`Step` for every other. The same events as iterating, each once."""
        placer = _Placer(self._owner)
        for columns in self._repo.iter_event_columns(self._run_id, page=self._page):
            payload = json.loads(columns[8])
            quiet = placer.quiet(columns, payload)
            yield quiet if quiet is not None else placer(EventRow.of_columns(columns, payload))

    def skipping(self, skip: Mapping[int, int]) -> Iterator[Step]:
        """The steps without the events from each key of ``skip`` to its value (sequences,
        inclusive), which are not read: the next page starts after the value. Only events that
        move no state may be skipped (the human page's folds, issue 29): the machines' states
        after them are those before."""
        place = _Placer(self._owner)
        after = 0
        while rows := self._repo.events_page(self._run_id, after=after, limit=self._page):
            after = rows[-1].sequence
            for e in rows:
                if e.sequence in skip:
                    after = skip[e.sequence]  # the rest of this page is read again from there
                    break
                yield place(e)
            else:
                if len(rows) < self._page:
                    return


@dataclass(frozen=True)
class Explanation:
    run: RunRow
    attempts: list[AttemptRow]
    steps: Iterable[Step]  # a streaming source (``Steps``) from ``explain``: iterate, never hold
    journal: list[JournalRow] = field(default_factory=list)
    # The decision a start-up pass would take NOW for a run that is still active (``decide_now``
    # for a legacy run, a dry run of the primary pass for a runtime one): a pass writes nothing
    # for a run it keeps, leaves pending or unresolved, so no event can hold that decision.
    now: Mapping[str, Any] | None = None
    # For an active runtime run: what `/proc` says now about each active Attempt's process
    # (``reconciler.ops._process``), and the decision left to the operator (D-23).
    processes: list[dict[str, Any]] = field(default_factory=list)
    decide: Mapping[str, Any] | None = None

    def taken(self) -> dict[str, dict[tuple[str, str], list[int]]]:
        """The edges of each machine this run took, each with the sequences that took it, in one
        pass: the state-moving events only (an event that moves nothing is no edge)."""
        out: dict[str, dict[tuple[str, str], list[int]]] = {"run": {}, "attempt": {}}
        for s in self.steps:
            if s.machine is not None and s.source is not None and s.dest is not None:
                out[s.machine].setdefault((s.source, s.dest), []).append(s.sequence)
        return out

    def head(self) -> dict[str, Any]:
        """The JSON object's members before ``steps``, in their order."""
        return {
            "run": _members(self.run, _RUN_MEMBERS),
            "attempts": [_members(a, _ATTEMPT_MEMBERS) for a in self.attempts],
            "journal": journal_entries(self.journal),
        }

    def tail(self) -> dict[str, Any]:
        """The JSON object's members after ``steps``, in their order."""
        return {
            "now": dict(self.now) if self.now is not None else None,
            "processes": [dict(p) for p in self.processes],
            "decide": dict(self.decide) if self.decide is not None else None,
        }

    def as_dict(self) -> dict[str, Any]:
        """The whole object at once (the Python API; the command writes it a step at a time)."""
        return {**self.head(), "steps": [s.as_dict() for s in self.steps], **self.tail()}


def journal_of(conn: sqlite3.Connection, attempts: Sequence[AttemptRow]) -> list[JournalRow]:
    """The receipt-journal rows of ``attempts`` (those that have one), in their order."""
    return [row for a in attempts if (row := journal_get(conn, a.id)) is not None]


def journal_entries(journal: Sequence[JournalRow]) -> list[dict[str, Any]]:
    """The journal rows as `explain` and `resolve` print them (``--json``)."""
    return [_members(j, _JOURNAL_MEMBERS) for j in journal]


# The members of each row in the `--json` output, in their order (the schemas pin them).
_RUN_MEMBERS = (
    "id",
    "status",
    "version",
    "execution_owner",
    "execution_origin",
    "error_code",
    "created_at_ms",
)
_ATTEMPT_MEMBERS = ("id", "attempt", "status", "executor_type", "pid", "exit_code", "error_code")
_JOURNAL_MEMBERS = ("attempt_id", "state", "quarantine_ref", "purge_after_ms")


def _members(row: object, names: Sequence[str]) -> dict[str, Any]:
    return {name: getattr(row, name) for name in names}


def iso_time(at_ms: int) -> str:
    second = _second_of(at_ms // 1000)
    return str(at_ms) if second is None else second + f"{at_ms % 1000:03d}Z"


@functools.lru_cache(maxsize=64)
def _second_of(second: int) -> str | None:
    # Cached: a storm's events share their seconds (issue 29); the cache is bounded.
    try:
        moment = datetime.fromtimestamp(second, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.")


def explain(conn: sqlite3.Connection, run_id: str) -> Explanation:
    """The run's path from its events; UnknownRun when there is no such run. Reads only. The
    steps are read from ``conn`` each time they are iterated: keep it open until then."""
    run, attempts = run_of(Repository(conn), run_id)
    steps = Steps(conn, run_id, run.execution_owner)
    return Explanation(run, attempts, steps, journal_of(conn, attempts))


def run_of(repo: Repository, run_id: str) -> tuple[RunRow, list[AttemptRow]]:
    """The run and its Attempts (`explain`, `resolve`); UnknownRun when there is no such run."""
    run = repo.get_run(run_id)
    if run is None:
        raise UnknownRun(run_id)
    return run, repo.attempts_of(run_id)


class _Placer:
    """Places one event after another on the Run and Attempt machines of a run whose owner is
    ``owner``: it holds only the machines' current states."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.states: dict[str | None, str | None] = {}  # the Run's (key None) and each Attempt's

    def row_of(
        self,
        decision: Mapping[str, Any] | None,
        payload: Mapping[str, Any],
        actor: tuple[str, str | None],
        dedupe_key: str | None,
    ) -> Row:
        """The event's row: recorded in its `decision` key, else inferred, else none."""
        legacy = self.owner == "legacy"
        if decision is not None and isinstance(decision.get("row"), str):
            record = decision.get("record")
            default = ADR0448 if legacy else ADR0068
            return (record if isinstance(record, str) else default), str(decision["row"]), True
        return _legacy_row(payload, actor, dedupe_key) if legacy else _row(payload, actor)

    def quiet(self, columns: EventColumns, payload: Any) -> Quiet | None:
        """The event as a :class:`Quiet` when it moves no state and records no decision, no
        resolution and no row (what its Step would say); None otherwise."""
        if not isinstance(payload, dict) or _moves(columns[3])[0] is not None:
            return None
        if any(isinstance(payload.get(k), dict) for k in (DECISION_KEY, RESOLUTION_KEY)):
            return None
        actor = (columns[5], columns[6])
        if self.row_of(None, payload, actor, columns[4])[1] is not None:
            return None
        attempt_id = columns[7] or _text(payload.get("attempt_id"))
        event_type = columns[3]
        # What the Step of an event that moves and records nothing would say.
        return Quiet(columns[2], columns[9], event_type, *actor, attempt_id, payload, event_type)

    def __call__(self, e: EventRow) -> Step:
        payload: dict[str, Any] = e.payload if isinstance(e.payload, dict) else {}
        machine, to_state = _moves(e.type)
        attempt_id = e.attempt_id or _text(payload.get("attempt_id"))
        source: str | None = None
        dest: str | None = None
        if machine is not None:
            spec = SPECS[machine]
            key = None if machine == "run" else attempt_id or ""
            recorded_from = payload.get("from_status")
            source = recorded_from if recorded_from in spec.states else self.states.get(key)
            recorded_to = payload.get("to_status")
            dest = recorded_to if recorded_to in spec.states else to_state
            if machine == "run" or attempt_id is not None:
                self.states[key] = dest
        decision = _object(payload.get(DECISION_KEY))
        resolution = _object(payload.get(RESOLUTION_KEY))
        actor = (e.actor_type, e.actor_id)
        record, row, recorded = self.row_of(decision, payload, actor, e.dedupe_key)
        trigger: str | None = None
        if machine is not None and source is not None and dest is not None:
            adr0068 = (
                self.owner == "runtime"
                and resolution is None
                and (actor in (RECONCILER_ACTOR, RECEIPT_ACTOR) or decision is not None)
            )
            legacy = self.owner == "legacy" and resolution is None and record == ADR0448
            edge_row = row
            if legacy and machine == "run" and row is not None:
                edge_row = LEGACY_ROW_MAPS.run_commit_row.get(row, row)
            receipt = actor == RECEIPT_ACTOR
            trigger = _trigger(machine, source, dest, adr0068, receipt, edge_row, legacy)
        return Step(
            sequence=e.sequence,
            at_ms=e.created_at_ms,
            type=e.type,
            actor_type=e.actor_type,
            actor_id=e.actor_id,
            attempt_id=attempt_id,
            machine=machine,
            source=source,
            dest=dest,
            trigger=trigger or e.type,
            trigger_from_tables=trigger is not None,
            record=record,
            row=row,
            row_recorded=recorded,
            decision=decision,
            resolution=resolution,
            # The event's own parsed payload, not a copy: nothing else holds it (issue 29).
            payload=payload,
        )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


# A run's events repeat a few types, so each type's machine is looked up once (issue 29); the
# cache is bounded.
@functools.lru_cache(maxsize=256)
def _moves(event_type: str) -> tuple[str | None, str | None]:
    """``run.lost`` -> ("run", "lost"); an event that names no state -> (None, None)."""
    machine, _, state = event_type.partition(".")
    spec = SPECS.get(machine)
    if spec is None or state not in spec.states:
        return None, None
    return machine, state


Row = tuple[str | None, str | None, bool]  # (record, row, recorded in a `decision` key)


def _row(payload: Mapping[str, Any], actor: tuple[str, str | None]) -> Row:
    """The ADR-0068 row a runtime run's event that records none is inferred as, or none."""
    code = payload.get("error_code")
    if isinstance(code, str) and code in ROW_BY_ERROR_CODE and actor == RECONCILER_ACTOR:
        return ADR0068, ROW_BY_ERROR_CODE[code], False
    evidence = payload.get("evidence")
    ours = actor in (RECONCILER_ACTOR, RECEIPT_ACTOR)
    if isinstance(evidence, str) and evidence in ROW_BY_EVIDENCE and ours:
        return ADR0068, ROW_BY_EVIDENCE[evidence], False
    if actor == RECEIPT_ACTOR:
        return ADR0068, RECEIPT_ROW, False
    return None, None, False


def _legacy_row(
    payload: Mapping[str, Any], actor: tuple[str, str | None], dedupe_key: str | None
) -> Row:
    """The ADR-0448 row a legacy run's event that records none is inferred as, or none."""
    code = payload.get("error_code")
    if actor == LEGACY_RECONCILER_ACTOR:
        if isinstance(code, str) and code in LEGACY_ROW_MAPS.by_error_code:
            return ADR0448, LEGACY_ROW_MAPS.by_error_code[code], False
        for prefix, row in LEGACY_ROW_MAPS.by_dedupe.items():
            if dedupe_key is not None and dedupe_key.startswith(prefix):
                return ADR0448, row, False
    if actor == LEGACY_SHADOW_ACTOR and payload.get("shadow") is True:
        for key, row in LEGACY_ROW_MAPS.by_payload_key.items():
            if key in payload:
                return ADR0448, row, False
        return ADR0448, LEGACY_ROW_MAPS.plain_shadow_row, False
    return None, None, False


# A run's events repeat a few edges, so each edge's trigger is looked up once (issue 29); the
# cache is bounded, and keyed by the machine's name: hashing its spec costs more than the lookup.
@functools.lru_cache(maxsize=256)
def _trigger(
    machine: str,
    source: str,
    dest: str,
    adr0068: bool,
    receipt: bool,
    row: str | None,
    legacy: bool,
) -> str | None:
    return edge_trigger(
        SPECS[machine], source, dest, adr0068=adr0068, receipt=receipt, row=row, legacy=legacy
    )


def edge_trigger(
    spec: MachineSpec,
    source: str,
    dest: str,
    *,
    adr0068: bool,
    receipt: bool,
    row: str | None,
    legacy: bool = False,
) -> str | None:
    """The trigger of ``source -> dest`` on ``spec`` when the tables and the event's facts name
    exactly one; None otherwise (the caller shows the event type). ``legacy``: an event of the
    legacy shadow's write of ADR-0448 row ``row``."""
    edges = [e for e in spec.edges if e.source == source and e.dest == dest]
    if legacy and row is not None:
        of_row = [e for e in edges if e.guard is not None and e.cites == f"ADR-0448 row {row}"]
        if of_row:
            return of_row[0].trigger if len({e.trigger for e in of_row}) == 1 else None
    edges = [e for e in edges if (e.guard is not None) == adr0068]
    if adr0068:
        if receipt:
            # spec 04 "Writes": the receipt's edges, whether found on the first read (row 5)
            # or the second (reported as row 13, D-3a).
            edges = [e for e in edges if e.guard == "trusted_receipt"]
        elif row is not None:
            edges = [e for e in edges if e.cites == f"ADR-0068 row {row}"]
        edges = [e for e in edges if not e.cites.startswith("ADR-0448 ")]
    triggers = {e.trigger for e in edges}
    return triggers.pop() if len(triggers) == 1 else None
