"""The source's keyset paging, the supervisor's budgets, stop reasons and resume cursor
(spec 05 "Candidates" and "Supervisor"; ADR-0448 §3, §7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _shadow_support import T0_MS, LegacyDb, bulk_runs

from reconciler import run_shadow
from reconciler.node import FakeClock
from reconciler.shadow import PassPorts
from storage import candidates_sql, legacy_candidates


def shadow(db: LegacyDb, profile: str, resume: Any = None, ports: PassPorts | None = None) -> Any:
    return run_shadow(
        db.path,
        profile=profile,
        origins="manual",
        environ={},
        resume_cursor=resume,
        clock=FakeClock(T0_MS + 10**6),
        ports=ports,
    )


def coverage(result: Any) -> dict[str, Any]:
    return dict(result.audit["report"]["coverage"])


# --- the source -----------------------------------------------------------------------------


def test_keyset_pages_cover_every_candidate_once_in_order_even_with_equal_times(
    db: LegacyDb,
) -> None:
    keys = bulk_runs(db.conn, 23, step_ms=0)  # all created in the same millisecond
    keys += bulk_runs(db.conn, 5, start_ms=T0_MS - 5, prefix="0199eeee")
    seen: list[tuple[int, str]] = []
    cursor = None
    while True:
        page, more = legacy_candidates(db.conn, ["manual"], cursor, 4)
        seen += [c.key for c in page]
        if not more:
            break
        cursor = page[-1].key
    assert seen == sorted(keys)


def test_a_page_reads_limit_plus_one_to_know_whether_more_exist(db: LegacyDb) -> None:
    bulk_runs(db.conn, 8)
    page, more = legacy_candidates(db.conn, ["manual"], None, 8)
    assert len(page) == 8 and more is False
    bulk_runs(db.conn, 1, prefix="0199ffff", start_ms=T0_MS + 100)
    page, more = legacy_candidates(db.conn, ["manual"], None, 8)
    assert len(page) == 8 and more is True


def test_the_source_keeps_only_legacy_active_runs_of_enabled_origins(db: LegacyDb) -> None:
    bulk_runs(db.conn, 2, origin="manual")
    bulk_runs(db.conn, 2, origin="boot", prefix="0199ab00")
    bulk_runs(db.conn, 2, status="succeeded", prefix="0199ab01")
    bulk_runs(db.conn, 2, status="created", prefix="0199ab02")
    db.conn.execute("UPDATE \"Runs\" SET execution_owner = 'runtime' WHERE id LIKE '0199ab00%'")
    page, _ = legacy_candidates(db.conn, ["manual", "boot"], None, 64)
    assert len(page) == 2 and {c.origin for c in page} == {"manual"}


def test_a_page_larger_than_sixty_four_is_refused(db: LegacyDb) -> None:
    with pytest.raises(ValueError):
        legacy_candidates(db.conn, ["manual"], None, 65)


def test_the_candidate_query_range_seeks_the_keyset_index_without_a_sort(db: LegacyDb) -> None:
    bulk_runs(db.conn, 50)
    db.conn.execute("ANALYZE")
    plan = [
        str(r[3])
        for r in db.conn.execute(
            "EXPLAIN QUERY PLAN " + candidates_sql(3),
            (T0_MS, "x", "manual", "boot", "system", 33),
        )
    ]
    text = "\n".join(plan)
    assert "SEARCH r USING INDEX qlfsm_runs_legacy_keyset_idx" in text
    assert "(created_at_ms,id)>(?,?)" in text
    assert "SCAN" not in text and "TEMP B-TREE" not in text


# --- the supervisor: budgets --------------------------------------------------------------------


def test_edge_scans_at_most_eight_candidates_in_one_page(db: LegacyDb) -> None:
    bulk_runs(db.conn, 20)
    result = shadow(db, "edge")
    assert result.audit["report"]["budget"] == {"pageSize": 8, "maxPages": 1, "maxCandidates": 8}
    assert coverage(result) == {
        "pages": 1,
        "scanned": 8,
        "stopReason": "page_limit",
        "remaining": True,
        "resumeAvailable": True,
    }


def test_edge_with_exactly_eight_candidates_is_complete(db: LegacyDb) -> None:
    bulk_runs(db.conn, 8)
    assert coverage(shadow(db, "edge"))["stopReason"] == "complete"


def test_standalone_scans_at_most_four_pages_of_thirty_two(db: LegacyDb) -> None:
    bulk_runs(db.conn, 200)
    result = shadow(db, "standalone")
    assert result.audit["report"]["budget"] == {
        "pageSize": 32,
        "maxPages": 4,
        "maxCandidates": 128,
    }
    cov = coverage(result)
    assert (cov["pages"], cov["scanned"], cov["stopReason"]) == (4, 128, "page_limit")
    assert result.audit["report"]["assessment"] == "attention_required"  # 2b: ambiguous


def test_standalone_with_exactly_one_hundred_twenty_eight_is_complete(db: LegacyDb) -> None:
    bulk_runs(db.conn, 128)
    cov = coverage(shadow(db, "standalone"))
    assert (cov["pages"], cov["scanned"], cov["stopReason"]) == (4, 128, "complete")


def test_zero_candidates_is_one_page_complete_and_converged(db: LegacyDb) -> None:
    result = shadow(db, "edge")
    assert coverage(result)["pages"] == 1 and coverage(result)["scanned"] == 0
    assert result.audit["state"] == "reconciled"
    assert result.cursor is None


# --- the supervisor: cursor ---------------------------------------------------------------------


def test_the_resume_cursor_is_the_last_scanned_key_and_resumes_exactly_after_it(
    db: LegacyDb,
) -> None:
    keys = bulk_runs(db.conn, 20, attempt="claimed")  # abandoned: they leave the index
    first = shadow(db, "edge")
    assert first.cursor == keys[7]
    assert first.audit["report"]["assessment"] == "incomplete"
    assert "cursor" not in json.dumps(first.audit).lower()
    second = shadow(db, "edge", first.cursor)
    assert second.cursor == keys[15]
    third = shadow(db, "edge", second.cursor)
    assert third.cursor is None and coverage(third)["stopReason"] == "complete"
    assert third.audit["report"]["outcomes"]["abandoned"] == 4
    assert third.audit["state"] == "reconciled"


def test_writes_during_the_pass_do_not_shift_later_pages(db: LegacyDb) -> None:
    bulk_runs(db.conn, 100, status="running", attempt="running")  # all become markedLost
    result = shadow(db, "standalone")
    cov = coverage(result)
    assert (cov["scanned"], cov["stopReason"]) == (100, "complete")
    assert result.audit["report"]["outcomes"]["markedLost"] == 100
    left = db.conn.execute("SELECT COUNT(*) FROM \"Runs\" WHERE status = 'running'").fetchone()
    assert left[0] == 0


def test_a_cursor_that_does_not_advance_stops_the_pass_as_cursor_stalled(
    db: LegacyDb,
) -> None:
    bulk_runs(db.conn, 40)
    real = legacy_candidates

    def same_page(conn: Any, origins: Any, after: Any, page: int) -> Any:
        return real(conn, origins, None, page)

    result = shadow(db, "standalone", ports=PassPorts(candidates=same_page))
    cov = coverage(result)
    assert (cov["pages"], cov["stopReason"], cov["remaining"]) == (2, "cursor_stalled", True)
    assert cov["resumeAvailable"] is False and result.cursor is None


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_the_cursor_file_carries_the_pass_across_restarts_and_is_removed_when_done(
    db: LegacyDb, tmp_path: Path
) -> None:
    bulk_runs(db.conn, 20)  # ambiguous: they stay in the index, only the cursor moves on
    cursor_file = tmp_path / "shadow.cursor"
    scanned = []
    for _ in range(3):
        proc = run_cli(
            "shadow", "--db", db.path, "--profile", "edge", "--origins", "manual",
            "--resume-cursor", str(cursor_file), "--json",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        scanned.append(json.loads(proc.stdout)["report"]["coverage"]["scanned"])
        if len(scanned) < 3:
            assert cursor_file.exists() and (cursor_file.stat().st_mode & 0o777) == 0o600
    assert scanned == [8, 8, 4]
    assert not cursor_file.exists()
    proc = run_cli(
        "shadow", "--db", db.path, "--profile", "edge", "--origins", "manual",
        "--resume-cursor", str(cursor_file), "--json",
    )  # fmt: skip
    assert json.loads(proc.stdout)["report"]["coverage"]["scanned"] == 8  # from the start


def test_a_damaged_cursor_file_fails_open(db: LegacyDb, tmp_path: Path) -> None:
    bad = tmp_path / "bad.cursor"
    bad.write_text("{not json")
    proc = run_cli(
        "shadow", "--db", db.path, "--origins", "manual", "--resume-cursor", str(bad), "--json"
    )
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "InvalidResumeCursor"}
