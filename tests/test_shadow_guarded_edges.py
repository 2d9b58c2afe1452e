"""The ADR-0448 writes move the Run and the Attempt only along guarded edges (spec 05 rows 2, 6,
7, 9, 10; ``RUN_LEGACY_EDGES`` / ``ATTEMPT_LEGACY_EDGES``), their guards evaluated by storage on
the facts re-read inside each write transaction; on real SQLite files made by `db init`.

What the machines did is read through ``fsm.listen`` (the orderings suite's recorder): every
edge storage planned, with its guard, and every guard outcome. What was written is read back
through a second connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from _coverage_record import Recording, recording
from _shadow_support import AfterRead, LegacyDb, Made
from test_shadow_writes import DONE, WRITES, another_origin, counts, run

from reconciler.shadow import PassHooks, PassPorts

# The row that makes each write kind and its guard (spec 05, spec 07's names).
ROW_GUARD = {
    "repair": ("2", "unique_terminal_attempt"),
    "cancel": ("6", "stopped_with_finished"),
    "complete": ("7", "unique_finished_evidence"),
    "abandon": ("9", "no_spawn_evidence"),
    "mark_lost": ("10", "no_terminal_evidence"),
}
# Each fixture's edges, in the order storage planned them: (machine, source, trigger, dest, guard).
EDGES: dict[str, list[tuple[str, str, str, str, str]]] = {
    "repair": [("run", "running", "fail_by_repair", "failed", "unique_terminal_attempt")],
    "cancel": [
        ("attempt", "running", "cancel_by_instance", "cancelled", "stopped_with_finished"),
        ("run", "running", "cancel_by_instance", "cancelled", "stopped_with_finished"),
    ],
    "complete": [
        ("attempt", "running", "fail_by_instance", "failed", "unique_finished_evidence"),
        ("run", "running", "fail_by_instance", "failed", "unique_finished_evidence"),
    ],
    "abandon": [
        ("attempt", "claimed", "abandon_acceptance", "cancelled", "no_spawn_evidence"),
        ("run", "queued", "cancel_by_repair", "cancelled", "unique_terminal_attempt"),
    ],
    "mark_lost": [
        ("attempt", "running", "lose_legacy_owner", "lost", "no_terminal_evidence"),
        ("run", "running", "lose_by_repair", "lost", "unique_terminal_attempt"),
    ],
}


def lifecycle_edges(rec: Recording) -> set[tuple[str, str, str, str, str | None]]:
    return {k for k in rec.edges if k[0] in ("run", "attempt")}


def stored(path: str, made: Made) -> tuple[object, ...]:
    """Statuses, versions and event count, read through a connection of its own."""
    conn = sqlite3.connect(path)
    try:
        run = conn.execute(
            'SELECT status, version, event_sequence FROM "Runs" WHERE id = ?', (made.run_id,)
        ).fetchone()
        attempts = conn.execute(
            'SELECT id, status, callback_sequence, finished_at_ms FROM "RunAttempts" '
            "WHERE run_id = ? ORDER BY id",
            (made.run_id,),
        ).fetchall()
        events = conn.execute(
            'SELECT count(*) FROM "RunEvents" WHERE run_id = ?', (made.run_id,)
        ).fetchone()
    finally:
        conn.close()
    return (tuple(run), tuple(map(tuple, attempts)), events[0])


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_each_legacy_write_moves_the_run_and_attempt_only_along_its_rows_guarded_edges(
    db: LegacyDb, kind: str
) -> None:
    made = WRITES[kind](db)
    with recording() as rec:
        outcome = run(db)
    assert db.status(made) == DONE[kind]
    assert sum(counts(outcome).values()) == 1
    moved = lifecycle_edges(rec)
    assert moved == set(EDGES[kind])
    assert all(guard is not None for *_, guard in moved)
    # Every guard a Run or Attempt edge evaluated held: the guarded edges are what moved them.
    held = {(m, name, ok) for (m, name, ok) in rec.guards if m in ("run", "attempt")}
    assert {ok for *_, ok in held} == {True}
    assert [e.split(".")[0] for e in db.events(made)] == [m for m, *_ in EDGES[kind]]


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_a_fact_changed_before_the_write_makes_its_guarded_edge_refuse_and_writes_nothing(
    db: LegacyDb, kind: str
) -> None:
    # Another writer moves the Run to an origin that is not enabled after the pass decided and
    # before its write transaction: no compare-and-set field sees it, row 1 matches on the facts
    # re-read in the transaction, so the row's guard on the first Run/Attempt edge refuses.
    made = WRITES[kind](db)
    before: list[tuple[object, ...]] = []

    def someone_else_wrote() -> None:
        another_origin(db, made)
        before.append(stored(db.path, made))

    hooks = AfterRead(someone_else_wrote)
    with recording() as rec:
        outcome = run(db, hooks=hooks)
    assert counts(outcome) == {"failed": 1} and hooks.seen == ["failed"]  # row 12
    assert stored(db.path, made) == before[0]
    _row, guard = ROW_GUARD[kind]
    first = EDGES[kind][0][0]
    assert rec.guards[(first, guard, False)] >= 1
    assert not lifecycle_edges(rec)  # no Run or Attempt edge was taken


class MovesTheOriginBetweenCommits(PassHooks):
    def __init__(self, db: LegacyDb, made: Made, seen: list[tuple[object, ...]]) -> None:
        self.db, self.made, self.seen = db, made, seen

    def between_commits(self) -> None:
        another_origin(self.db, self.made)
        self.seen.append(stored(self.db.path, self.made))


@pytest.mark.parametrize("kind", ["abandon", "mark_lost"])
def test_the_run_commit_of_a_two_step_write_is_refused_by_row_2s_guarded_run_edge(
    db: LegacyDb, kind: str
) -> None:
    made = WRITES[kind](db)
    seen: list[tuple[object, ...]] = []
    with recording() as rec:
        outcome = run(db, hooks=MovesTheOriginBetweenCommits(db, made, seen))
    assert counts(outcome) == {"failed": 1}
    assert stored(db.path, made) == seen[0]  # the Attempt's commit stays, nothing more
    attempt_edge, run_edge = EDGES[kind]
    assert lifecycle_edges(rec) == {attempt_edge}
    assert rec.guards[("run", run_edge[-1], False)] >= 1


# The reread seam: the facts the write transaction re-reads, replaced by facts on which the
# decided row is no longer the first to match, without touching the database.
NOT_ELIGIBLE: Callable[[Any], Any] = lambda facts: facts.__class__(run_present=False)  # noqa: E731


@pytest.mark.parametrize("kind", sorted(WRITES))
def test_facts_re_read_in_the_transaction_that_no_longer_match_the_row_refuse_every_write(
    db: LegacyDb, kind: str
) -> None:
    made = WRITES[kind](db)
    before = stored(db.path, made)
    real_write = PassPorts().write

    def write_on_other_facts(repo: Any, decision: Any, ctx: Any, clock: Any, hooks: Any,
                             reread: Any) -> None:  # fmt: skip
        real_write(repo, decision, ctx, clock, hooks, lambda c: NOT_ELIGIBLE(reread(c)))

    with recording() as rec:
        outcome = run(db, write=write_on_other_facts)
    assert counts(outcome) == {"failed": 1}
    assert stored(db.path, made) == before
    assert not lifecycle_edges(rec)
    assert rec.guards[(EDGES[kind][0][0], ROW_GUARD[kind][1], False)] >= 1
