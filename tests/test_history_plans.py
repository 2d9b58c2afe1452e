"""A long history costs nothing the zero-candidate start-up or an `inspect` page pays for
(issue 27 items 4 and 5): on a database QingLong made (its DDL only, none of qlfsm's indexes),
fresh and after ANALYZE, with many terminal Runs of both owners and few or no candidates,
every statement is an index SEARCH, never a SCAN of Runs nor a sort of the history."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from _support import T0

from storage import (
    PRIMARY_CANDIDATES_SQL,
    candidates_sql,
    legacy_candidates,
    primary_candidates,
    runs_page,
)
from storage._ddl import LEGACY_TABLES, QL3_HISTORY_DDL, QL3_MIGRATIONS
from storage._schema import QL3_STREAM, checksum

HISTORY = 6000
ENDED = ("succeeded",) * 14 + ("failed",) * 4 + ("cancelled", "timed_out")
# Candidates: runtime `dispatching`/`running` (ADR-0068) and legacy `queued`/`running`
# (ADR-0448), created after the history (new ids, new times) and between it.
CANDIDATES = (
    ("runtime", "dispatching", 10),
    ("runtime", "running", 2500),
    ("legacy", "queued", 40),
    ("legacy", "running", 5999),
)
HISTORY_TABLES = {"Runs", "RunAttempts", "RunEvents", "r", "a", "c", "f"}


def run_id(i: int) -> str:
    return f"{T0 + i * 1000:012x}-7000-8000-{i:012x}"


def qinglong_made(path: Path, *, candidates: bool, analyzed: bool) -> Path:
    """QingLong's DDL only (spec 02; no qlfsm index, as on a node `db init` never touched),
    ``HISTORY`` ended Runs of both owners with one ended Attempt each, optionally the
    CANDIDATES, optionally planner statistics."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute(QL3_HISTORY_DDL)
    for mig_id, stmts in QL3_MIGRATIONS:
        for s in stmts:
            conn.execute(s)
        conn.execute(
            'INSERT INTO "QingLong3SchemaMigrations" VALUES (?, ?, ?, ?, ?)',
            (mig_id, QL3_STREAM, "sqlite", checksum(stmts), T0),
        )
    for s in LEGACY_TABLES:
        if "qlfsm_" not in s:
            conn.execute(s)
    status_of = {i: ENDED[i % len(ENDED)] for i in range(HISTORY)}
    owner_of = {i: "legacy" if i % 3 else "runtime" for i in range(HISTORY)}
    if candidates:
        for owner, status, i in CANDIDATES:
            status_of[i], owner_of[i] = status, owner
    conn.executemany(
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
        "execution_origin, execution_owner, status, version, created_at_ms) "
        "VALUES (?, 'p1', 't', 'r1', 'system', ?, ?, ?, 4, ?)",
        [
            (run_id(i), "manual" if owner_of[i] == "runtime" else "scheduled_node",
             owner_of[i], status_of[i], T0 + i * 1000)
            for i in range(HISTORY)
        ],
    )  # fmt: skip
    conn.executemany(
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, created_at_ms) '
        "VALUES (?, ?, 1, ?, 'local_process', ?)",
        [
            (f"a{run_id(i)}", run_id(i), ENDED[i % len(ENDED)], T0 + i * 1000)
            for i in range(HISTORY)
        ],
    )
    conn.execute("COMMIT")
    if analyzed:
        conn.execute("ANALYZE")
    conn.close()
    return path


def plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> list[str]:
    return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def history_scans(details: list[str]) -> list[str]:
    """Plan lines that walk a history table (or its alias) instead of searching it."""
    return [d for d in details if d.startswith("SCAN") and d.split()[1] in HISTORY_TABLES]


def runs_accesses(details: list[str]) -> list[str]:
    return [d for d in details if d.split()[1:2] == ["r"] or d.split()[1:2] == ["Runs"]]


STATES = [(c, a) for c in (False, True) for a in (False, True)]
IDS = [f"{'few' if c else 'zero'}-{'after-ANALYZE' if a else 'fresh'}" for c, a in STATES]


@pytest.mark.parametrize(("candidates", "analyzed"), STATES, ids=IDS)
def test_on_qinglongs_indexes_alone_the_primary_candidate_query_searches_its_status_index(
    tmp_path: Path, candidates: bool, analyzed: bool
) -> None:
    db = qinglong_made(tmp_path / "ql.db", candidates=candidates, analyzed=analyzed)
    conn = sqlite3.connect(db)
    try:
        details = plan(conn, PRIMARY_CANDIDATES_SQL, (257,))
        found, truncated = primary_candidates(conn, limit=1)
        everything, more = primary_candidates(conn)
    finally:
        conn.close()
    # Every read of Runs is an equality SEARCH of QingLong's (execution_owner, status, id),
    # which hands each status's Runs over in id order: no scan, no sort of the history.
    assert not history_scans(details) and not [d for d in details if "TEMP B-TREE" in d], details
    assert (
        runs_accesses(details)
        == ["SEARCH r USING INDEX ql3_local_runs_lost_retry_idx (execution_owner=? AND status=?)"]
        * 2
    ), details
    # ... and it answers what the data holds: the runtime candidates in id order.
    expected = [run_id(10), run_id(2500)] if candidates else []
    assert [c.run_id for c in everything] == expected and not more
    assert [c.run_id for c in found] == expected[:1] and truncated is candidates


@pytest.mark.parametrize(("candidates", "analyzed"), STATES, ids=IDS)
def test_on_qinglongs_indexes_alone_the_legacy_keyset_searches_its_status_index_per_status(
    tmp_path: Path, candidates: bool, analyzed: bool
) -> None:
    db = qinglong_made(tmp_path / "ql.db", candidates=candidates, analyzed=analyzed)
    conn = sqlite3.connect(db)
    try:
        # The form legacy_candidates falls back to where qlfsm's keyset index is missing.
        plain = candidates_sql(2, keyset_index=False)
        details = plan(conn, plain, (-1, "", "manual", "scheduled_node", 65))
        first, more = legacy_candidates(conn, ["manual", "scheduled_node"], None, 1)
        rest, after_more = (
            legacy_candidates(conn, ["manual", "scheduled_node"], first[0].key, 1)
            if first
            else ([], False)
        )
    finally:
        conn.close()
    # One SEARCH per status; a sort, if any, holds that status's legacy Runs, never the
    # history (the skip-scan of (project_id, created_at_ms, id) over every Run is gone).
    assert not history_scans(details), details
    assert (
        runs_accesses(details)
        == ["SEARCH r USING INDEX ql3_local_runs_lost_retry_idx (execution_owner=? AND status=?)"]
        * 3
    ), details
    # The keyset still pages in (created_at_ms, id) order across the statuses.
    assert [c.run_id for c in first + rest] == ([run_id(40), run_id(5999)] if candidates else [])
    assert (more, after_more) == ((True, False) if candidates else (False, False))


def trace_startup(db: Path, root: Path, out: Path) -> list[str]:
    """The statements a real `qlfsm startup` process runs (its connections traced)."""
    script = (
        "import json, sqlite3, sys\n"
        "seen = []\n"
        "real = sqlite3.connect\n"
        "def traced(*a, **k):\n"
        "    c = real(*a, **k)\n"
        "    c.set_trace_callback(seen.append)\n"
        "    return c\n"
        "sqlite3.connect = traced\n"
        "from reconciler.cli._main import main\n"
        "code = main(sys.argv[2:])\n"
        "open(sys.argv[1], 'w').write(json.dumps(seen))\n"
        "raise SystemExit(code)\n"
    )
    argv = ["startup", "--db", str(db), "--receipt-root", str(root), "--json"]
    argv += ["--origins", "manual,scheduled_node"]  # the shadow pass runs its keyset too
    done = subprocess.run(
        [sys.executable, "-c", script, str(out), *argv], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["primary"]["scanned"] == 0 and report["shadow"]["state"] == "reconciled", report
    statements: list[str] = json.loads(out.read_text())
    return statements


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh", "after-ANALYZE"])
def test_every_statement_of_a_zero_candidate_startup_on_a_qinglong_made_database_is_indexed(
    tmp_path: Path, analyzed: bool
) -> None:
    db = qinglong_made(tmp_path / "ql.db", candidates=False, analyzed=analyzed)
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    statements = trace_startup(db, root, tmp_path / "statements.json")
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    # Both candidate queries ran (the trace shows statements with their values bound).
    assert PRIMARY_CANDIDATES_SQL.replace("?", "257") in reads
    assert any("r.execution_owner = 'legacy'" in s for s in reads)
    conn = sqlite3.connect(db)
    try:
        plans = {s: plan(conn, s) for s in reads}
    finally:
        conn.close()
    for sql, details in plans.items():
        assert not history_scans(details), (sql, details)
        for d in runs_accesses(details):
            assert d.startswith("SEARCH") and "ql3_local_runs_lost_retry_idx" in d, (sql, d)
    # The statements that walk a table are the schema check's (sqlite_master) and the sweep's
    # list of the receipt journal's shard names (rows the sweep itself keeps few), no other.
    walked = {d.split()[1] for details in plans.values() for d in details if d.startswith("SCAN")}
    assert walked <= {"sqlite_master", "LocalCompletionReceiptJournal"}, walked


# --- `qlfsm inspect`: a page is a range of a QingLong index ------------------------------------


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh", "after-ANALYZE"])
@pytest.mark.parametrize(
    ("status", "after"),
    [(None, None), (None, run_id(3000)), ("failed", None), ("failed", run_id(3000))],
    ids=["first-page", "after", "status", "status-after"],
)
def test_an_inspect_page_is_an_index_range_of_qinglongs_own_indexes(
    tmp_path: Path, analyzed: bool, status: str | None, after: str | None
) -> None:
    db = qinglong_made(tmp_path / "ql.db", candidates=True, analyzed=analyzed)
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row  # as storage.connect
    seen: list[str] = []
    try:
        conn.set_trace_callback(seen.append)
        page, more = runs_page(conn, limit=5, after=after, status=status)
        conn.set_trace_callback(None)
        (sql,) = seen
        details = plan(conn, sql)
    finally:
        conn.close()
    assert not history_scans(details) and not [d for d in details if "TEMP B-TREE" in d], details
    index = "sqlite_autoindex_Runs_1" if status is None else "ql3_local_runs_lost_retry_idx"
    assert runs_accesses(details) and all(
        d.startswith(f"SEARCH r USING INDEX {index} (") for d in runs_accesses(details)
    ), details
    # The page is what id order and the filter say it is.
    wanted = [
        run_id(i)
        for i in range(HISTORY)
        if (status is None or (ENDED[i % len(ENDED)] == status and i not in {10, 40, 2500, 5999}))
        and (after is None or run_id(i) > after)
    ]
    assert [r.id for r in page] == wanted[:5] and more


def qlfsm(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("qlfsm")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, check=False)


def test_paging_inspect_with_after_visits_every_run_once_in_id_order(tmp_path: Path) -> None:
    db = qinglong_made(tmp_path / "ql.db", candidates=True, analyzed=True)
    pages: list[list[str]] = []
    for status in (None, "running"):
        after: str | None = None
        listed: list[str] = []
        while True:
            argv = ["inspect", "--db", str(db), "--json", "--limit", "2000"]
            argv += ["--status", status] if status else []
            argv += ["--after", after] if after else []
            done = qlfsm(*argv)
            assert done.returncode == 0, done.stderr
            data = json.loads(done.stdout)
            listed += [r["run"]["id"] for r in data["runs"]]
            after = data["next_after"]
            if not data["truncated"]:
                break
        pages.append(listed)
    assert pages[0] == sorted(run_id(i) for i in range(HISTORY))
    assert pages[1] == [run_id(2500), run_id(5999)]  # both owners, merged in id order
