"""The candidate queries stay index-driven: EXPLAIN QUERY PLAN never scans Runs (spec 02)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _support import T0

from storage import PRIMARY_CANDIDATES_SQL, Repository, RunChange, connect, primary_candidates
from storage._ddl import QLFSM_INDEXES


def plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> list[str]:
    return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def scans_runs(details: list[str]) -> list[str]:
    return [d for d in details if d.startswith("SCAN") and d.split()[1] in {"r", "Runs"}]


def populate(conn: sqlite3.Connection, n: int = 60) -> None:
    repo = Repository(conn)
    from storage import Actor

    for i in range(n):
        run_id = f"run-{i:03d}"
        owner = "runtime" if i % 2 else "legacy"
        repo.create_run(run_id=run_id, at_ms=T0 + i, execution_owner=owner)
        if i % 3 == 0:
            repo.advance(run_id, 1, [RunChange("queue")], actor=Actor("system"), at_ms=T0 + i)


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh", "after-ANALYZE"])
def test_the_primary_candidate_query_uses_an_index_on_runs(db_path: Path, analyzed: bool) -> None:
    conn = connect(str(db_path))
    try:
        populate(conn)
        if analyzed:
            conn.execute("ANALYZE")
        details = plan(conn, PRIMARY_CANDIDATES_SQL, (257,))
    finally:
        conn.close()
    assert not scans_runs(details), details
    assert any(
        d.startswith("SEARCH r USING INDEX qlfsm_runs_primary_candidates_idx") for d in details
    ), details
    # The per-Run count of active Attempts is an index search too, never a scan; the page
    # comes out of the index in id order, never through a sort of all candidates.
    assert not [d for d in details if d.startswith("SCAN") or "TEMP B-TREE" in d], details


def test_without_qlfsm_indexes_the_primary_query_still_searches_qinglongs_status_index(
    db_path: Path,
) -> None:
    conn = connect(str(db_path))
    try:
        populate(conn)
        conn.execute("DROP INDEX qlfsm_runs_primary_candidates_idx")
        details = plan(conn, PRIMARY_CANDIDATES_SQL, (257,))
    finally:
        conn.close()
    assert not scans_runs(details), details
    assert any("ql3_local_runs_lost_retry_idx" in d for d in details), details


def test_the_primary_candidate_query_pages_in_id_order_and_flags_truncation(
    db_path: Path,
) -> None:
    from storage import Actor

    conn = connect(str(db_path))
    try:
        repo = Repository(conn)
        for i in (5, 1, 4, 2, 3):
            run_id = f"run-{i}"
            repo.create_run(run_id=run_id, at_ms=T0)
            repo.advance(
                run_id,
                1,
                [RunChange("queue"), RunChange("dispatch")],
                actor=Actor("system"),
                at_ms=T0,
            )
        repo.create_attempt(run_id="run-2", attempt_id="a-2", expected_version=3, at_ms=T0)
        repo.create_run(run_id="run-0", at_ms=T0, execution_owner="legacy")
        found, truncated = primary_candidates(conn, limit=3)
        assert [c.run_id for c in found] == ["run-1", "run-2", "run-3"] and truncated
        assert [c.active_attempts for c in found] == [0, 1, 0]
        found, truncated = primary_candidates(conn, limit=5)
        assert len(found) == 5 and not truncated
    finally:
        conn.close()


def test_the_legacy_candidate_query_uses_the_qlfsm_keyset_index(db_path: Path) -> None:
    from storage import candidates_sql

    assert any("qlfsm_runs_legacy_keyset_idx" in s for s in QLFSM_INDEXES)
    conn = connect(str(db_path))
    try:
        populate(conn)
        for analyzed in (False, True):
            if analyzed:
                conn.execute("ANALYZE")
            details = plan(conn, candidates_sql(2), (-1, "", "manual", "boot", 65))
            assert not scans_runs(details), details
            assert any("qlfsm_runs_legacy_keyset_idx" in d for d in details), details
    finally:
        conn.close()
