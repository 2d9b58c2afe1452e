"""The data-level half of `qlfsm diagrams check` (spec 07 "The tables"): ``fsm``'s decision
tables, and the lifecycle edges and error codes their writes name, against the records'
transcription (``_record_adr0068.py``, ``_record_adr0448.py``), column by column.

The diagram check reads the drawn files back; this one reads the data the pass decides with.
A row changed on either side is named (``ADR-0068 row 9: ...``): the record and the table
cannot drift apart unseen, so no test keeps a third copy of either table.

Compared, per record: the machine's name, its evidence order and its decisions (with the
summary outcome each counts as); the rows and evidence steps in their order (first matching row
wins, ADR-0068 §2, spec 05 "Candidates"); for each row its citation, whether it is the
exception row, its facts (word for word), every case (evidence state, guard, what follows,
reason code, write, trigger), the lifecycle edges that cite it, and the error code its write
stores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import zip_longest

from fsm import DecisionTable, MachineSpec
from fsm.qinglong import ATTEMPT_SPEC, LEGACY_SPEC, LEGACY_TABLE, PRIMARY_TABLE, RUN_SPEC
from reconciler.diagrams._record_adr0068 import ADR_0068
from reconciler.diagrams._record_adr0448 import ADR_0448
from reconciler.diagrams._record_rows import DecisionRow, EvidenceStep, RecordTable

# One lifecycle edge as compared: machine, source, dest, guard.
_Edge = tuple[str, str, str, str | None]


def primary_error_codes() -> dict[str, str]:
    """The error code each ADR-0068 `lost` trigger stores (spec 04 rows 3, 4b, 7, 13), from
    the registry the pass writes with."""
    from reconciler.primary import EFFECTS

    return {
        trigger: error.code
        for write in ("lose", "lose_missing_attempt")
        for trigger, error in EFFECTS[write].errors.items()
    }


def _ordered(record: RecordTable) -> list[str]:
    # The record's rows with each evidence step after the row it follows (first, those that
    # follow no row).
    order = [s.step for s in record.steps if s.after == ""]
    for row in record.rows:
        order.append(row.row)
        order.extend(s.step for s in record.steps if s.after == row.row)
    return order


def compare_table(
    record: RecordTable,
    table: DecisionTable,
    lifecycles: Sequence[MachineSpec],
    error_codes: Mapping[str, str] | None = None,
) -> list[str]:
    """Every difference between one record's transcription and ``fsm``'s table, each naming
    the row (``ADR-0068 row 9: ...``) or the table-wide column it is in."""
    out: list[str] = []
    cite = record.cite
    if table.name != record.machine:
        out.append(f"{cite}: the table is named {table.name!r}, the record {record.machine!r}")
    order = [r.row for r in table.rows]
    table_wide = (
        ("evidence order", list(table.evidence), list(record.evidence)),
        ("decisions", dict(table.decisions), dict(record.decisions)),
        ("rows in the order", order, _ordered(record)),
    )
    for what, in_fsm, in_record in table_wide:
        if in_fsm != in_record:
            out.append(f"{cite}: {what} {in_fsm} in fsm, {in_record} in the record")

    entries: dict[str, DecisionRow | EvidenceStep] = {s.step: s for s in record.steps}
    entries.update((r.row, r) for r in record.rows)
    edges_of: dict[str, set[_Edge]] = {}
    triggers: dict[str, set[str]] = {}  # lifecycle trigger -> the rows its edges cite
    for spec in lifecycles:
        for e in spec.edges:
            if e.cites.startswith(f"{cite} "):
                edges_of.setdefault(e.cites, set()).add((spec.name, e.source, e.dest, e.guard))
                triggers.setdefault(e.trigger, set()).add(e.cites)

    for fsm_row in table.rows:
        entry = entries.get(fsm_row.row)
        if entry is None:
            out.append(f"{fsm_row.cites or cite}: row {fsm_row.row!r} is in no record")
            continue
        row = entry if isinstance(entry, DecisionRow) else None
        name = f"{cite} row {fsm_row.row}" if row is not None else f"{cite} {fsm_row.row}"
        expected_cite = entry.cites if isinstance(entry, EvidenceStep) else name
        if fsm_row.cites != expected_cite:
            out.append(f"{name}: cites {fsm_row.cites!r}, the record {expected_cite!r}")
        if not fsm_row.facts:
            out.append(f"{name}: no facts in fsm")
        elif fsm_row.row not in record.paraphrased and fsm_row.facts != entry.facts:
            out.append(f"{name}: facts {fsm_row.facts!r} in fsm, {entry.facts!r} in the record")
        on_exception = row is not None and row.on_exception
        if fsm_row.on_exception != on_exception:
            out.append(
                f"{name}: {'is' if fsm_row.on_exception else 'is not'} the exception row in "
                f"fsm, {'is' if on_exception else 'is not'} in the record"
            )
        # One case: evidence state, guard, what follows, reason code, write, trigger.
        cases = [tuple(c) for c in fsm_row.cases]
        edges = entry.decides if isinstance(entry, DecisionRow) else (entry.edge,)
        wanted = [(e.source, e.guard, e.dest, e.reason, e.write, e.trigger) for e in edges]
        for i, (got, want) in enumerate(zip_longest(cases, wanted), 1):
            if got != want:
                out.append(f"{name}: case {i} is {got} in fsm, {want} in the record")
        if row is None:
            continue
        # The lifecycle edges the row moves: those citing it, each named by the row's trigger.
        drawn = edges_of.get(name, set())
        moved: set[_Edge] = {(e.machine, e.source, e.dest, e.guard) for e in row.edges}
        for edge in sorted(moved - drawn, key=str):
            out.append(f"{name}: the record's edge {edge} is not in fsm's lifecycles")
        for edge in sorted(drawn - moved, key=str):
            out.append(f"{name}: fsm's edge {edge} is not in the record")
        row_triggers = [c.trigger for c in fsm_row.cases if c.trigger is not None]
        for trigger in row_triggers:
            if name not in triggers.get(trigger, set()):
                out.append(f"{name}: trigger {trigger!r} fires no edge citing the row")
        if error_codes is not None:
            codes = {error_codes[t] for t in row_triggers if t in error_codes}
            want_codes = {row.error_code} if row.error_code is not None else set()
            if codes != want_codes:
                out.append(
                    f"{name}: error code {sorted(codes)} by the pass, {sorted(want_codes)} "
                    "in the record"
                )
    for missing in [r for r in _ordered(record) if r not in order]:
        out.append(f"{cite} {'row ' if missing[:1].isdigit() else ''}{missing}: not in fsm")
    return out


def check_tables(
    primary: DecisionTable = PRIMARY_TABLE,
    legacy: DecisionTable = LEGACY_TABLE,
    *,
    run: MachineSpec = RUN_SPEC,
    attempt: MachineSpec = ATTEMPT_SPEC,
    legacy_shadow: MachineSpec = LEGACY_SPEC,
    error_codes: Mapping[str, str] | None = None,
    records: tuple[RecordTable, RecordTable] = (ADR_0068, ADR_0448),
) -> list[str]:
    """All differences between ``fsm``'s two decision tables and the records' transcription."""
    codes = primary_error_codes() if error_codes is None else error_codes
    adr_0068, adr_0448 = records
    return [
        *compare_table(adr_0068, primary, (run, attempt), codes),
        *compare_table(adr_0448, legacy, (legacy_shadow, run, attempt)),
    ]
