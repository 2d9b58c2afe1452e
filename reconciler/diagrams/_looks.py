"""How each machine's diagram looks (spec 07): groups, titles, marks and legends' words (the
font and colours are `_render.py`'s)."""

from __future__ import annotations

from dataclasses import dataclass

from fsm.qinglong import LEGACY_EVIDENCE, PRIMARY_EVIDENCE


@dataclass(frozen=True)
class _Group:
    """A cluster of states drawn together (presentation only: the check ignores clusters)."""

    key: str
    label: str
    states: tuple[str, ...]
    same_rank: bool = False


@dataclass(frozen=True)
class _Look:
    title: str
    groups: tuple[_Group, ...] = ()
    # States drawn with a dashed border: not terminal, but waiting for someone's decision.
    awaiting: frozenset[str] = frozenset()
    # The main path, drawn as straight as dot allows so the eye finds it first.
    spine: tuple[str, ...] = ()
    # Lifecycle edges into these states are drawn light: ADR-0001 allows them from nearly
    # every state, and at full weight they hide the main path.
    muted_into: frozenset[str] = frozenset()
    ranksep: str = "0.6"
    # The record whose decision table the guarded edges come from.
    decisions: str = "ADR-0068"
    # A decision machine (spec 07): boxes are the evidence it waits for, edges are its rows.
    decision_machine: bool = False
    # A second line under a state's name (a decision's summary outcome).
    notes: tuple[tuple[str, str], ...] = ()
    # Guarded edges drawn light: the exception row, which leaves every evidence state.
    muted_guards: frozenset[str] = frozenset()
    # How the legend explains a double border.
    terminal_mark: str = "double border: terminal"


# ADR-0448's outcomes, by whether they write (the per-candidate lifecycle and the decision).
_LEGACY_GROUPS = (
    _Group(
        "writes",
        "writes Attempt/Run",
        ("completed", "cancelled", "abandoned", "marked_lost", "repaired"),
    ),
    # spec 05: "Ambiguous, skipped and failed never write anything"; pending neither.
    _Group("no_write", "no write", ("pending", "ambiguous", "skipped", "failed")),
)

_LOOKS: dict[str, _Look] = {
    "run": _Look(
        title="Run (ADR-0001 lifecycle + ADR-0068 decisions)",
        groups=(
            _Group(
                "terminal",
                "terminal (ADR-0001)",
                ("succeeded", "failed", "cancelled", "timed_out"),
                same_rank=True,
            ),
        ),
        # spec 01: lost is NOT terminal, it awaits a retry-policy decision.
        awaiting=frozenset({"lost"}),
        spine=("created", "queued", "dispatching", "running", "succeeded"),
        muted_into=frozenset({"cancelled", "timed_out"}),
    ),
    "attempt": _Look(
        title="Attempt (ADR-0001 lifecycle + ADR-0068 decisions)",
        groups=(
            _Group(
                "terminal",
                "terminal, immutable (ADR-0001)",
                ("succeeded", "failed", "cancelled", "timed_out", "lost"),
                same_rank=True,
            ),
        ),
        spine=("claimed", "starting", "running", "succeeded"),
        muted_into=frozenset({"cancelled", "timed_out"}),
    ),
    "legacy_shadow": _Look(
        title="Legacy-shadow candidate (ADR-0448 decisions)",
        groups=_LEGACY_GROUPS,
        ranksep="1.4",
        decisions="ADR-0448",
    ),
    "primary_decision": _Look(
        title="ADR-0068 decision (spec 04: the evidence order, every row an edge)",
        # spec 04 "Summary": the outcome each decision counts as (unresolved and failed block
        # the start). Written under the name rather than drawn as clusters: a cluster's title
        # collides with the labels of the short row-14 edges.
        notes=(
            ("completed", "recovered"),
            ("lost", "recovered"),
            ("retained", "remaining"),
            ("quarantined", "unresolved"),
        ),
        spine=(*PRIMARY_EVIDENCE, "lost"),  # ADR-0068 §2: the evidence order, then row 13
        # Room for the labels of the evidence steps with a wider font than dot measured.
        ranksep="1.0",
        decision_machine=True,
        muted_guards=frozenset({"error_raised"}),
        terminal_mark="double border: the decision (in brackets: the summary outcome)",
    ),
    "legacy_decision": _Look(
        title="ADR-0448 decision (spec 05: the evidence order, every row an edge)",
        groups=_LEGACY_GROUPS,
        spine=(*LEGACY_EVIDENCE, "marked_lost"),  # spec 05 "Candidates", then row 10
        ranksep="1.2",
        decisions="ADR-0448",
        decision_machine=True,
        muted_guards=frozenset({"error_raised"}),
        terminal_mark="double border: the decision, a counter of the report",
    ),
}


def _look(name: str) -> _Look:
    return _LOOKS.get(name, _Look(title=name))
