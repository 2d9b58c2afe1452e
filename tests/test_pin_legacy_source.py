"""`storage.normalize_legacy` in process, on a real 2.x database file read back through a second
connection: what 2.x `initData` does at start-up (spec 02 "Legacy 2.x tables"), row by row,
with the time it stamps on each row it changes and on no other."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime

from _shadow_support import T0_MS, LegacyDb

from storage import normalize_legacy

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
