"""The decision a start-up pass would take NOW for a run still active (``reconciler.ops``
``explain_run`` / ``legacy_now``), in process: each member of `explain`'s ``now`` object, the
record's row facts, and ADR-0448's evidence (statuses, counts and verdicts only, spec 05
privacy). The command's tests (tests/test_explain_now.py) run `qlfsm explain` in a subprocess,
which a mutation run cannot see (issue 28, docs/mutation.md)."""

from __future__ import annotations

import json
from pathlib import Path

from _primary_support import linux_only, make_candidate, sleepers
from _shadow_support import T0_MS, LegacyDb

from reconciler.ops import explain_run, legacy_now
from storage import Repository

LOG = "/ql/data/log/job_a/2026-01-01-00-00-00.log"
FINISHED_S = T0_MS // 1000 + 90


def test_a_stopped_legacy_job_is_adr_0448_row_6_with_its_facts_and_evidence(
    db: LegacyDb,
) -> None:
    made = db.run(pid=41005, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41005, log_path=LOG, status=2, finished_s=FINISHED_S)
    now = explain_run(db.conn, db.path, made.run_id, origins="manual").now
    assert now == {
        "record": "ADR-0448",
        "row": "6",
        "outcome": "cancelled",
        "reason": "stopped_with_finished",
        "row_facts": "matched row has `finished_at` and status stopped",
        "evidence": {
            "origin": "manual",
            "origin_enabled": True,
            "run_status": "running",
            "active_attempts": 1,
            "attempt_status": "running",
            "latest_attempt_status": None,
            "evidence_truncated": False,
            "selection": "matched",
            "matched_status": "stopped",
            "matched_finished": True,
        },
    }
    assert "41005" not in json.dumps(now) and LOG not in json.dumps(now)


def test_a_legacy_run_of_an_origin_not_enabled_is_row_1_read_from_the_run_alone(
    db: LegacyDb,
) -> None:
    made = db.run(origin="scheduled_system", pid=41006, log_path=LOG)
    run = db.repo.get_run(made.run_id)
    assert run is not None
    now = legacy_now(db.conn, run, frozenset({"manual"}))
    assert now == {
        "record": "ADR-0448",
        "row": "1",
        "outcome": "skipped",
        "reason": "not_eligible",
        "row_facts": "Run gone, not legacy-owned, origin not enabled, or Run already terminal/lost",
        "evidence": {
            "origin": "scheduled_system",
            "origin_enabled": False,
            "run_status": "running",
            "active_attempts": 0,
            "attempt_status": None,
            "latest_attempt_status": None,
            "evidence_truncated": False,
            "selection": "none",
            "matched_status": None,
            "matched_finished": False,
        },
    }
    assert explain_run(db.conn, db.path, made.run_id, origins="manual").now == now


@linux_only
def test_a_runtime_job_still_running_is_adr_0068_row_12_with_its_facts(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    with sleepers() as [live]:
        make_candidate(repo, "run-1", "at-1", handle=live.handle, pid=live.pid)
        found = explain_run(repo.conn, str(db_path), "run-1", receipt_root=str(root),
                            profile="edge")  # fmt: skip
    assert found.now == {
        "record": "ADR-0068",
        "row": "12",
        "outcome": "remaining",
        "reason": "process_running",
        "row_facts": "probe: `running`",
    }
