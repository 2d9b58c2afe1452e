"""The design records' tables, transcribed by hand as data (spec 07 "The tables").

This is what the records SAY. What the code DOES is ``fsm/qinglong/_tables.py``; ``qlfsm diagrams
check`` compares the rendered diagrams of the code against these tables. So that the check
compares two independent things, nothing here is imported from, generated from, or copied
programmatically out of ``fsm``: every row below was typed from the record it cites.

Sources:
- ADR-0001 (QingLong 3.0, "Run state model and transaction boundaries"), restated in spec
  01 "Run" and "Attempt (RunAttempt)", with the ADR-0380 amendment ``lost -> retry_wait``.
- ADR-0068 decision table: spec 04 "Per candidate", rows 1..14 (and the record's §2, §4),
  with each row's edges on the ADR-0068 decision machine (spec 07) and the evidence steps
  of ADR-0068 §2 between the rows.
- ADR-0448 decision table: spec 05 "Per candidate", rows 1..12 (and the record's §5, §6),
  with each row's edge on the ADR-0448 decision machine over spec 05's evidence order
  ("Candidates": Run, Attempts, the cron's RunningInstances), and the guarded Run and Attempt
  edges each writing row (2, 6, 7, 9, 10) moves.

Guard names: spec 07 fixes eight (``trusted_receipt``, ``not_running_after_grace``,
``unstarted_claim``, ``stopped_with_finished``, ``unique_finished_evidence``,
``no_spawn_evidence``, ``no_terminal_evidence``, ``unique_terminal_attempt``) and allows more.
The others used below are the project's agreed vocabulary for the remaining rows (one name
per row, or per variant of a row the summary tells apart: the facts in a few words); the
records fix which row leads where.

The row shapes are in ``_record_rows.py``, each record's table in its own module
(``_record_adr0001.py``, ``_record_adr0068.py``, ``_record_adr0448.py``); this module puts
them together into what each machine's diagram must show.
"""

from __future__ import annotations

from reconciler.diagrams import _record_adr0001 as adr0001
from reconciler.diagrams._record_adr0068 import ADR_0068
from reconciler.diagrams._record_adr0448 import ADR_0448, LEGACY_OUTCOMES
from reconciler.diagrams._record_rows import ExpectedEdge, LifecycleRow, MachineRecord, RecordTable

# --- What each machine's diagram must show ------------------------------------------------


def trigger_lines(text: str) -> dict[tuple[str, str], str]:
    """A record's ``source -> dest : trigger`` lines, by (source, dest); a line of another
    form, or a pair named twice, is refused naming the line."""
    out: dict[tuple[str, str], str] = {}
    for line in filter(None, map(str.strip, text.splitlines())):
        pair, sep, trigger = line.partition(" : ")
        source, arrow, dest = pair.partition(" -> ")
        if not (sep and arrow and source and dest and trigger.isidentifier()):
            raise ValueError(f"record line {line!r} is not 'source -> dest : trigger'")
        if (source, dest) in out:
            raise ValueError(f"record line {line!r} names {source} -> {dest} twice")
        out[(source, dest)] = trigger
    return out


def _decision_edges(machine: str, record: RecordTable) -> list[ExpectedEdge]:
    out: list[ExpectedEdge] = []
    seen: set[tuple[str, str, str]] = set()
    for row in record.rows:
        for e in row.edges:
            if e.machine != machine or (e.source, e.dest, e.guard) in seen:
                continue
            seen.add((e.source, e.dest, e.guard))
            out.append(ExpectedEdge(e.source, e.dest, e.guard, f"{record.cite} row {row.row}"))
    return out


def lifecycle_edges(
    table: tuple[LifecycleRow, ...], cite: str, triggers: str
) -> list[ExpectedEdge]:
    """The edges of an ADR-0001 "from | allowed to" table, each with the trigger its record's
    ``triggers`` lines name. Both are typed from the record by hand: an edge without a trigger
    line, or a line naming no edge of the table, is refused naming the pairs (else the check
    would compare that edge without its trigger, or never read the line)."""
    named = trigger_lines(triggers)
    lifecycle: list[ExpectedEdge] = []
    for line in table:
        where = f"{cite}, row {line.source}"
        dests = [(dest, where) for dest in line.allowed]
        dests += [(dest, f"{record} amendment to {where}") for dest, record in line.amended]
        lifecycle.extend(
            ExpectedEdge(line.source, dest, None, cites, trigger=named.get((line.source, dest)))
            for dest, cites in dests
        )
    pairs = {(e.source, e.dest) for e in lifecycle}
    if pairs != named.keys():
        unnamed = sorted(f"{a} -> {b}" for a, b in pairs - named.keys())
        stray = sorted(f"{a} -> {b}" for a, b in named.keys() - pairs)
        raise ValueError(
            f"{cite}: edges without a trigger line {unnamed}, trigger lines naming no edge {stray}"
        )
    return lifecycle


def _aggregate_edges(
    machine: str, table: tuple[LifecycleRow, ...], cite: str, triggers: str
) -> tuple[ExpectedEdge, ...]:
    """A Run's or an Attempt's edges: its ADR-0001 lifecycle (each with the trigger the
    record's ``triggers`` lines name), then the edges the rows of the ADR-0068 and ADR-0448
    decision tables take on it."""
    return (
        *lifecycle_edges(table, cite, triggers),
        *_decision_edges(machine, ADR_0068),
        *_decision_edges(machine, ADR_0448),
    )


RUN_RECORD = MachineRecord(
    machine="run",
    states=adr0001.RUN_STATES,
    initial="created",
    terminal=adr0001.RUN_TERMINAL,
    states_cite="ADR-0001 Run states (spec 01 §Run)",
    edges=_aggregate_edges(
        "run", adr0001.ADR_0001_RUN_TABLE, adr0001.ADR_0001_RUN_CITE, adr0001.ADR_0001_RUN_TRIGGERS
    ),
)

ATTEMPT_RECORD = MachineRecord(
    machine="attempt",
    states=adr0001.ATTEMPT_STATES,
    initial="claimed",
    terminal=adr0001.ATTEMPT_TERMINAL,
    states_cite="ADR-0001 Attempt states (spec 01 §Attempt)",
    edges=_aggregate_edges(
        "attempt",
        adr0001.ADR_0001_ATTEMPT_TABLE,
        adr0001.ADR_0001_ATTEMPT_CITE,
        adr0001.ADR_0001_ATTEMPT_TRIGGERS,
    ),
)

LEGACY_RECORD = MachineRecord(
    machine="legacy_shadow",
    states=("candidate", *LEGACY_OUTCOMES),
    initial="candidate",
    terminal=frozenset(LEGACY_OUTCOMES),
    states_cite="ADR-0448 outcomes (spec 05 §Per candidate)",
    edges=tuple(_decision_edges("legacy_shadow", ADR_0448)),
)


def _decision_record(record: RecordTable) -> MachineRecord:
    """A decision machine: from ``read_run`` through the record's evidence states to one of
    its decisions. Its edges are every row of the record's table where it decides and every
    evidence step of the order; each labelled ``row <id>`` (or the step's section) beside its
    guard."""
    edges = [
        ExpectedEdge(e.source, e.dest, e.guard, f"{record.cite} row {row.row}", f"row {row.row}")
        for row in record.rows
        for e in row.decides
    ]
    edges += [
        ExpectedEdge(s.edge.source, s.edge.dest, s.edge.guard, s.cites, s.step)
        for s in record.steps
    ]
    return MachineRecord(
        machine=record.machine,
        states=(*record.evidence, *record.decisions),
        initial="read_run",
        terminal=frozenset(record.decisions),
        states_cite=record.states_cite,
        edges=tuple(edges),
        labelled=True,
    )


PRIMARY_DECISION_RECORD = _decision_record(ADR_0068)
LEGACY_DECISION_RECORD = _decision_record(ADR_0448)

RECORDS: tuple[MachineRecord, ...] = (
    RUN_RECORD,
    ATTEMPT_RECORD,
    LEGACY_RECORD,
    PRIMARY_DECISION_RECORD,
    LEGACY_DECISION_RECORD,
)
RECORDS_BY_MACHINE: dict[str, MachineRecord] = {r.machine: r for r in RECORDS}
