"""`storage.normalize_legacy` in process, on a real 2.x database file read back through a second
connection: what 2.x `initData` does at start-up (spec 02 "Legacy 2.x tables"), row by row,
with the time it stamps on each row it changes and on no other. And what the legacy source
hands the pass (spec 05 "Candidates"): each candidate of a page with its active Attempt count
and, when exactly one, that Attempt; a cron's RunningInstances as evidence, hostile values too."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from _shadow_support import T0_MS, LegacyDb, bulk_runs

from fsm.qinglong import InstanceEvidence
from storage import (
    ActiveAttempt,
    LegacyCandidate,
    candidates_sql,
    instance_evidence,
    legacy_candidates,
    legacy_log_id,
    normalize_legacy,
)

STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} \+00:00")
OLD = "2026-01-01"  # the updatedAt every fixture row is written with


def read(db: LegacyDb, table: str) -> dict[int, tuple[object, ...]]:
    """id -> (status, updatedAt, finished_at or None) of every row, through a second
    connection."""
    conn = sqlite3.connect(f"file:{db.path}?mode=ro", uri=True)
    try:
        finished = "finished_at" if table == "RunningInstances" else "NULL"
        cur = conn.execute(f"SELECT id, status, updatedAt, {finished} FROM `{table}`")
        return {r[0]: tuple(r[1:]) for r in cur}
    finally:
        conn.close()


def stamped_now(value: object, before: datetime, after: datetime) -> bool:
    """``value`` is a 2.x `updatedAt` stamp (UTC, milliseconds) taken between the two times."""
    assert isinstance(value, str) and STAMP.fullmatch(value), value
    at = datetime.strptime(value, "%Y-%m-%d %H:%M:%S.%f +00:00").replace(tzinfo=UTC)
    return before.replace(microsecond=0) <= at <= after


def test_normalization_stops_every_running_instance_and_idles_every_running_or_queued_cron(
    db: LegacyDb,
) -> None:
    crons = {status: db.cron() for status in ("null", 0, 1, 2, 3)}
    db.conn.execute("UPDATE `Crontabs` SET status = NULL WHERE id = ?", (crons["null"],))
    for status in (1, 2, 3):
        db.conn.execute("UPDATE `Crontabs` SET status = ? WHERE id = ?", (status, crons[status]))
    cron = crons[0]
    for pid, status in enumerate((0, 1, 2, 3, 0), start=101):
        finished = None if status == 0 else T0_MS // 1000
        db.instance(cron, pid=pid, log_path=f"/l{pid}", status=status, finished_s=finished)
    instances_before = read(db, "RunningInstances")
    before = datetime.now(UTC)
    done = normalize_legacy(db.conn)
    after = datetime.now(UTC)
    assert (done.running_instances, done.crontabs) == (2, 3)

    instances = read(db, "RunningInstances")
    running = [i for i, row in instances_before.items() if row[0] == 0]
    assert len(running) == 2
    for ident, (status, updated, finished) in instances.items():
        if ident in running:
            # Stopped WITHOUT a finish time, stamped now.
            assert (status, finished) == (2, None)
            assert stamped_now(updated, before, after)
        else:
            assert (status, updated, finished) == instances_before[ident]

    tabs = read(db, "Crontabs")
    assert {key: tabs[ident][0] for key, ident in crons.items()} == {
        "null": 1,
        0: 1,
        1: 1,
        2: 2,
        3: 1,
    }
    for key in ("null", 0, 3):
        assert stamped_now(tabs[crons[key]][1], before, after)
    assert [tabs[crons[key]][1] for key in (1, 2)] == [OLD, OLD]


def test_normalizing_a_database_with_nothing_running_changes_nothing(db: LegacyDb) -> None:
    cron = db.cron()
    db.conn.execute("UPDATE `Crontabs` SET status = 1 WHERE id = ?", (cron,))
    db.instance(cron, pid=7, log_path="/l", status=1, finished_s=T0_MS // 1000)
    before = (read(db, "Crontabs"), read(db, "RunningInstances"))
    done = normalize_legacy(db.conn)
    assert (done.running_instances, done.crontabs) == (0, 0)
    assert (read(db, "Crontabs"), read(db, "RunningInstances")) == before


# --- the candidate page (spec 05 "Candidates") ---------------------------------------------------


def test_a_candidate_carries_its_active_attempt_count_and_its_one_active_attempt(
    db: LegacyDb,
) -> None:
    one = db.run(attempts=("failed", "running"), pid=42001, log_path="/ql/log/a.log")
    two = db.run(attempts=("starting", "running"))
    none = db.run(status="dispatching", attempts=("failed",), cron=False)
    page, more = legacy_candidates(db.conn, ["manual"], None, 8)
    created = [T0_MS + n for n in range(3)]
    assert (page, more) == (
        [
            LegacyCandidate(
                one.run_id, "running", 5, "manual", one.cron_id, created[0], 1,
                ActiveAttempt(
                    one.attempt_ids[1], "running", 42001, legacy_log_id("/ql/log/a.log"),
                    created[0], created[0] + 1, 0,
                ),
            ),
            LegacyCandidate(two.run_id, "running", 5, "manual", two.cron_id, created[1], 2, None),
            LegacyCandidate(none.run_id, "dispatching", 4, "manual", None, created[2], 0, None),
        ],
        False,
    )  # fmt: skip


def test_without_the_keyset_index_the_pages_are_the_same_merged_across_statuses(
    db: LegacyDb,
) -> None:
    # `db init` never ran on this node: every status's candidates, interleaved in time.
    keys = bulk_runs(db.conn, 3, status="queued", step_ms=3)
    keys += bulk_runs(db.conn, 3, status="dispatching", start_ms=T0_MS + 1, step_ms=3, prefix="d")
    keys += bulk_runs(db.conn, 3, status="running", start_ms=T0_MS + 2, step_ms=3, prefix="r")

    def pages() -> list[tuple[list[tuple[int, str]], bool]]:
        first, more = legacy_candidates(db.conn, ["manual"], None, 4)
        rest, last = legacy_candidates(db.conn, ["manual"], first[-1].key, 8)
        return [([c.key for c in first], more), ([c.key for c in rest], last)]

    indexed = pages()
    db.conn.execute("DROP INDEX qlfsm_runs_legacy_keyset_idx")
    assert pages() == indexed == [(sorted(keys)[:4], True), (sorted(keys)[4:], False)]


def test_a_database_error_other_than_the_missing_index_is_raised(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "empty.db")
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            legacy_candidates(conn, ["manual"], None, 4)
    finally:
        conn.close()


def test_a_page_holds_1_to_64_candidates_of_1_to_16_origins(db: LegacyDb) -> None:
    for size in (0, 65):
        with pytest.raises(ValueError, match=r"^a page holds 1\.\.64 candidates$"):
            legacy_candidates(db.conn, ["manual"], None, size)
    assert candidates_sql(16).endswith("LIMIT ?19")
    assert " INDEXED BY qlfsm_runs_legacy_keyset_idx " in candidates_sql(1)  # by default
    for count in (0, 17):
        with pytest.raises(ValueError, match=r"^between 1 and 16 origins$"):
            candidates_sql(count)


# A value QingLong never writes, planted past the schema's checks (a hand-edited or damaged
# file): the table, the column, the SQL value, and the candidate's problem.
UNREADABLE = [
    ("Runs", "id", "CAST(X'FF' AS TEXT)", "Runs.id is not valid UTF-8 text"),
    ("Runs", "version", "'v5'", "Runs.version is text, not an integer"),
    ("Runs", "created_at_ms", "1.5", "Runs.created_at_ms is a real number, not an integer"),
    ("RunAttempts", "id", "CAST(X'FE' AS TEXT)", "RunAttempts.id is not valid UTF-8 text"),
    ("RunAttempts", "log_artifact_id", "X'00'", "RunAttempts.log_artifact_id is a blob, not text"),
    ("RunAttempts", "created_at_ms", "'t0'", "RunAttempts.created_at_ms is text, not an integer"),
    (
        "RunAttempts",
        "callback_sequence",
        "'c'",
        "RunAttempts.callback_sequence is text, not an integer",
    ),
]


@pytest.mark.parametrize(("table", "column", "value", "problem"), UNREADABLE)
def test_an_unreadable_candidate_names_its_column_and_keeps_what_can_be_shown(
    db: LegacyDb, table: str, column: str, value: str, problem: str
) -> None:
    made = db.run(pid=42001)
    db.conn.execute("PRAGMA ignore_check_constraints = ON")
    db.conn.execute("PRAGMA foreign_keys = OFF")
    db.conn.execute(f'UPDATE "{table}" SET {column} = {value}')
    [got], more = legacy_candidates(db.conn, ["manual"], None, 8)
    run_id = "\\xff" if (table, column) == ("Runs", "id") else made.run_id
    created = -1 if (table, column) == ("Runs", "created_at_ms") else T0_MS
    assert (got, more) == (
        LegacyCandidate(run_id, "running", -1, "manual", None, created, 0, None, problem),
        False,
    )


# --- the RunningInstances evidence adapter -------------------------------------------------------


def test_a_log_path_becomes_legacy_log_and_the_first_25_hex_digits_of_its_sha_256() -> None:
    # spec 05: 36 characters, the raw path never leaves the adapter.
    path = "/ql/data/log/任务/x.log"
    digest = hashlib.sha256(path.encode()).hexdigest()
    assert legacy_log_id(path) == "legacy-log:" + digest[:25]
    assert len(legacy_log_id(path)) == 36


def test_an_instance_is_evidence_with_an_opaque_log_id_and_its_2x_status_read(
    db: LegacyDb,
) -> None:
    cron = db.cron()
    db.instance(cron, pid=7, log_path="/ql/log/x.log", status=3, finished_s=100, exit_code=2)
    assert instance_evidence(db.conn, cron) == (
        [InstanceEvidence(7, legacy_log_id("/ql/log/x.log"), "failed", 100_000, 2)],
        False,
    )


def test_an_unknown_2x_status_is_read_as_running_never_as_terminal(db: LegacyDb) -> None:
    cron = db.cron()
    db.instance(cron, pid=7, log_path="/ql/log/x.log", status=9, finished_s=100)
    [got], _ = instance_evidence(db.conn, cron)
    assert got.status == "running"


def test_an_empty_or_non_text_log_path_gives_no_log_id(db: LegacyDb) -> None:
    cron = db.cron()
    db.instance(cron, pid=1, log_path="", status=1, started_s=3)
    db.conn.execute(
        "INSERT INTO `RunningInstances` (cron_id, pid, log_path, started_at, status, createdAt, "
        "updatedAt) VALUES (?, 2, X'2F716C', 2, 1, '2026-01-01', '2026-01-01')",  # a blob
        (cron,),
    )
    db.instance(cron, pid=3, log_path="/ql/log/x.log", status=0, started_s=1)
    evidence, _ = instance_evidence(db.conn, cron)
    assert [(e.pid, e.log_id) for e in evidence] == [
        (1, None),
        (2, None),
        (3, legacy_log_id("/ql/log/x.log")),
    ]
