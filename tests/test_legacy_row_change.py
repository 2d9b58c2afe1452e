"""One row of ADR-0448's table changed in a COPY of the table: every consumer of the table
follows the change or refuses it loudly, none keeps doing what the original row said.

The copy sends spec 05 row 9 (a claim never spawned) to row 6's outcome, trigger and write
(`cancelled`, `cancel`): a change the table's own check accepts. Its consumers are the views
(the legacy_shadow lifecycle and the drawn decision machine), the decision engine, the shadow
pass on a real SQLite file (it decides by the copy; its write, whose Run and Attempt edges are
still each row's own, refuses), ``qlfsm explain``'s inverse maps and its decision now (the
pass's own), and the diagram check.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _shadow_support import LegacyDb

from fsm import (
    DecisionTable,
    Lifecycle,
    MachineDefinitionError,
    validate_spec,
)
from fsm.qinglong import (
    ALL_SPECS,
    GUARDS,
    LEGACY_TABLE,
    QINGLONG_RULES,
    LegacyDecision,
    LegacyEngine,
    LegacyFacts,
    _legacy,
    legacy_views,
)
from reconciler.cli._diagrams import diagrams_command
from reconciler.diagrams import PINNED_RENDERER, DiagramsError, find_dot, render
from reconciler.ops import legacy_now
from reconciler.ops._explain import LEGACY_ROW_MAPS, legacy_row_maps
from reconciler.shadow import WRITES, Budget, PassHooks, PassPorts, gather, run_pass
from reconciler.shadow import _writes as shadow_writes
from storage import LegacyCandidate, Repository

ORIGINS = ("manual", "scheduled_node", "scheduled_system")


def _row_9_cancels(table: DecisionTable) -> DecisionTable:
    rows = tuple(
        r._replace(cases=(r.cases[0]._replace(then="cancelled", trigger="cancel", write="cancel"),))
        if r.row == "9"
        else r
        for r in table.rows
    )
    return table._replace(rows=rows)


CHANGED = _row_9_cancels(LEGACY_TABLE)
# spec 05 row 9's facts: Run queued, Attempt claimed, no evidence.
ROW_9 = LegacyFacts(
    run_present=True,
    run_owner="legacy",
    origin="manual",
    origin_enabled=True,
    run_status="queued",
    active_attempts=1,
    attempt_status="claimed",
)


def test_the_changed_copy_passes_the_tables_check_and_the_original_is_untouched() -> None:
    assert CHANGED != LEGACY_TABLE
    assert _legacy.LEGACY_ROWS["9"].cases[0].then == "abandoned"
    views = legacy_views(CHANGED)  # the check runs where the views are built
    assert views.rows["9"].cases[0].then == "cancelled"


def test_the_views_of_the_copy_follow_the_changed_row() -> None:
    views = legacy_views(CHANGED)
    row_9 = [e for e in views.spec.edges if e.cites == "ADR-0448 row 9"]
    assert [(e.trigger, e.source, e.dest, e.guard) for e in row_9] == [
        ("cancel", "candidate", "cancelled", "no_spawn_evidence")
    ]
    assert "abandoned" not in views.triggers and "abandoned" not in views.writes
    # `abandoned` is still a state of the machine, but nothing leads there any more: the
    # lifecycle built from the copy refuses it loudly.
    with pytest.raises(Exception, match="unreachable states \\['abandoned'\\]"):
        validate_spec(views.spec, GUARDS, QINGLONG_RULES)
    drawn = [e for e in views.decision_spec.edges if e.trigger == "row 9"]
    assert [(e.source, e.dest) for e in drawn] == [("read_evidence", "cancelled")]


def _without_abandoned(table: DecisionTable) -> DecisionTable:
    # The outcome no row reaches any more, gone from the copy too: the lifecycle then builds.
    decisions = {k: v for k, v in table.decisions.items() if k != "abandoned"}
    return table._replace(decisions=decisions)


def test_the_engine_built_from_the_copy_decides_row_9_by_the_changed_row() -> None:
    engine = LegacyEngine(legacy_views(_without_abandoned(CHANGED)))
    decided = engine.classify(ROW_9)
    assert (decided.row, decided.outcome, decided.trigger, decided.write) == (
        "9",
        "cancelled",
        "cancel",
        "cancel",
    )
    original = _legacy.classify_legacy(ROW_9)
    assert (original.outcome, original.write) == ("abandoned", "abandon")


class Decisions(PassHooks):
    """What the pass decides for each candidate, read as the pass reads it before deciding
    (with the engine the pass is given)."""

    def __init__(self, engine: LegacyEngine) -> None:
        self.engine = engine
        self.decided: list[LegacyDecision] = []

    def before_decide(self, conn: sqlite3.Connection, cand: LegacyCandidate) -> None:
        ctx = gather(conn, Repository(conn), cand, frozenset(ORIGINS), self.engine)[1]
        assert ctx.decision is not None
        self.decided.append(ctx.decision)


def test_the_shadow_pass_follows_the_copy_but_its_write_refuses_row_6s_edges_for_row_9(
    db: LegacyDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The copy changes the decision table only: the Run and Attempt edges a write fires are
    # still each row's own guarded edges (fsm/qinglong/_tables.py), and row 9 has no Run edge to
    # `cancelled` (its Run commit is row 2's repair). The pass decides row 9 by the copy, then
    # its write refuses loudly: nothing written, the candidate failed (row 12).
    made = db.run(status="queued", attempts=("claimed",))
    views = legacy_views(_without_abandoned(CHANGED))
    engine = LegacyEngine(views)
    machine = Lifecycle(views.spec, GUARDS, rules=QINGLONG_RULES)
    # The pass is given the copy's engine and legacy_shadow machine through its ports; the row
    # guards of that machine ask fsm's engine for the first matching row (no port there).
    monkeypatch.setattr(_legacy, "legacy_engine", lambda: engine)
    seen = Decisions(engine)
    outcome = run_pass(
        db.path, origins=ORIGINS, budget=Budget(page_size=50, max_pages=2),
        ports=PassPorts(hooks=seen, engine=engine, machine=machine),
    )  # fmt: skip
    assert [(d.row, d.outcome, d.write) for d in seen.decided] == [("9", "cancelled", "cancel")]
    counted = {k: v for by in outcome.counts.by_origin.values() for k, v in by.items() if v}
    assert counted == {"failed": 1}
    assert db.status(made) == ("queued", ["claimed"])
    assert db.event_rows(made) == []


def test_explains_decision_now_is_the_shadow_passs_own_and_follows_the_copy_with_it(
    db: LegacyDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = db.run(status="queued", attempts=("claimed",))
    views = legacy_views(_without_abandoned(CHANGED))
    engine = LegacyEngine(views)
    machine = Lifecycle(views.spec, GUARDS, rules=QINGLONG_RULES)
    # Only the engine the pass's reads are given is the copy's: a view that decided on its own
    # (any other engine, or the original table) would still say row 9 abandons.
    run = db.repo.get_run(made.run_id)
    assert run is not None
    now = legacy_now(db.conn, run, frozenset(ORIGINS), engine)
    assert (now["row"], now["outcome"], now["reason"]) == ("9", "cancelled", "no_spawn_evidence")
    assert legacy_now(db.conn, run, frozenset(ORIGINS))["outcome"] == "abandoned"
    assert db.status(made) == ("queued", ["claimed"])  # the view reads only
    monkeypatch.setattr(_legacy, "legacy_engine", lambda: engine)
    # The pass decides what explain says it would, then (the copy's write firing row 6's Run
    # edge for row 9) its write refuses: the candidate ends failed, nothing written.
    seen = Decisions(engine)
    outcome = run_pass(
        db.path, origins=ORIGINS, budget=Budget(page_size=50, max_pages=2),
        ports=PassPorts(hooks=seen, engine=engine, machine=machine),
    )  # fmt: skip
    assert [d.outcome for d in seen.decided] == [now["outcome"]]
    counted = {k: v for by in outcome.counts.by_origin.values() for k, v in by.items() if v}
    assert counted == {"failed": 1}
    assert db.status(made) == ("queued", ["claimed"])


def test_explain_refuses_a_table_in_which_two_rows_make_one_write() -> None:
    # Row 6's events could no longer name their row: explain's inverse maps refuse the copy.
    with pytest.raises(ValueError, match=r"'cancel': \['6', '9'\]"):
        legacy_row_maps(CHANGED, WRITES)
    # And on the table itself they name row 9 by its own write's error code.
    abandoned = WRITES["abandon"].error
    assert abandoned is not None
    assert LEGACY_ROW_MAPS.by_error_code[abandoned[0]] == "9"


def test_the_pass_refuses_to_name_the_row_of_a_write_two_rows_make() -> None:
    # The Run commit of rows 9/10 is guarded by the row of the `repair` write: a table in which
    # that is no longer one row is refused where the pass reads it.
    with pytest.raises(MachineDefinitionError) as refused:
        shadow_writes._rows_of_writes(CHANGED)
    assert str(refused.value) == (
        "machine 'legacy_decision' is invalid: write 'cancel' made by rows 6 and 9; "
        "fix that machine's declaration"
    )
    assert shadow_writes._rows_of_writes(LEGACY_TABLE)["repair"] == ("2", "repair")


def _dot() -> str:
    try:
        return find_dot(PINNED_RENDERER)
    except DiagramsError:
        pytest.fail(f"{PINNED_RENDERER} is missing: pip install -e '.[diagrams]'")


def test_the_diagram_check_fails_on_the_copy_naming_row_9s_edge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    views = legacy_views(_without_abandoned(CHANGED))
    changed = {views.spec.name: views.spec, views.decision_spec.name: views.decision_spec}
    render(tmp_path, tuple(changed.get(s.name, s) for s in ALL_SPECS), dot=_dot())
    capsys.readouterr()
    code = diagrams_command(["check", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "candidate -> cancelled [no_spawn_evidence]" in out
    assert "read_evidence -> cancelled" in out
