"""The shapes of the records' rows (spec 07 "The tables"): what ``_records.py`` and the
per-record modules are made of."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LifecycleRow:
    """One line of an ADR-0001 "from | allowed to" table."""

    source: str
    allowed: tuple[str, ...]
    # Destinations added after ADR-0001 by a later record, with that record's id.
    amended: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EdgeRef:
    """A state move that a decision row produces on one machine."""

    machine: str  # "run" | "attempt" | "legacy_shadow" | "primary_decision" | "legacy_decision"
    source: str
    dest: str
    guard: str
    # On a decision machine, what a decision reached by this edge carries (spec 04 "Summary",
    # spec 05 "Per candidate"): the reason code (``{field}`` filled from the facts), what the
    # pass writes, and the lifecycle trigger of that write. Never part of a diagram's label.
    reason: str = field(default="", compare=False)
    write: str | None = field(default=None, compare=False)
    trigger: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DecisionRow:
    """One row of a reconciler's decision table: facts, outcome, and the edges it moves."""

    row: str
    facts: str
    outcome: str
    edges: tuple[EdgeRef, ...] = ()
    # Why the row's edges are these ones, when the record alone does not make it obvious.
    note: str = ""
    # The row on its record's decision machine (spec 07): one edge per place the row decides,
    # from the evidence state it is tried in to what follows (more evidence or the decision).
    decides: tuple[EdgeRef, ...] = ()
    # The error code the row's write stores on the Run and Attempt (spec 04's outcome column).
    error_code: str | None = None
    # The exception row (spec 04 row 14, spec 05 row 12): it fails the candidate in every
    # evidence state, wherever handling it raised.
    on_exception: bool = False


@dataclass(frozen=True)
class EvidenceStep:
    """A step of a record's evidence order that is not a row of its table (spec 07: the
    decision machine shows "the evidence order"): where it leads, and on which facts."""

    step: str  # the record's section, e.g. "step 2.2" for ADR-0068 §2 step 2
    facts: str
    cites: str
    edge: EdgeRef
    # The row after which the step is tried (first matching row wins): the rows before it
    # did not decide.
    after: str = ""


@dataclass(frozen=True)
class RecordTable:
    """One record's decision table as transcribed: what its decision machine must show and
    what ``fsm``'s table must be."""

    cite: str  # "ADR-0068"
    machine: str  # the decision machine's name
    states_cite: str  # where the record gives the machine's states
    evidence: tuple[str, ...]
    decisions: Mapping[str, str]  # decision state -> summary outcome
    rows: tuple[DecisionRow, ...]
    steps: tuple[EvidenceStep, ...]
    # Rows whose facts ``fsm`` words differently from the record (a paraphrase of the same
    # condition): compared for presence only, until the table takes the record's words.
    paraphrased: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Arrow:
    """An arrow of a diagram: its states and its guard (None on a lifecycle edge)."""

    source: str
    dest: str
    guard: str | None

    def show(self) -> str:
        guard = f" [{self.guard}]" if self.guard is not None else ""
        return f"{self.source} -> {self.dest}{guard}"


@dataclass(frozen=True)
class ExpectedEdge(Arrow):
    """An edge the diagram of one machine must show, and the record row it comes from."""

    cites: str
    # On a decision machine the label must also name the row (``row 13``) or step (``step 2.2``).
    label: str | None = None
    # On a lifecycle machine, the trigger the record names for the edge (ADR-0001's edges):
    # the drawn label's trigger must be it.
    trigger: str | None = None


@dataclass(frozen=True)
class MachineRecord:
    """Everything the records say one machine's diagram must show."""

    machine: str
    states: tuple[str, ...]
    initial: str
    terminal: frozenset[str]
    states_cite: str
    edges: tuple[ExpectedEdge, ...]
    # A decision machine: each edge's label must carry its row id, checked like its guard.
    labelled: bool = False
