"""`qlfsm explain` on a run that is still active: the decision start-up would take NOW.

A pass writes no event for a run it keeps running (spec 04 row 12), leaves pending (spec 05
row 8) or unresolved, so no stored event can say why the run is where it is. `explain` asks the
same reads and the same tables instead: ADR-0448's for a legacy run, a dry run of the ADR-0068
pass for a runtime run (``--receipt-root``). Real SQLite files, real processes and /proc; each
prediction is checked against what the real pass then does, and nothing is written by it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _primary_support import (
    dead_handle,
    linux_only,
    make_candidate,
    make_run,
    qlfsm,
    sleepers,
)
from _shadow_support import T0_MS, LegacyDb
from _support import tree_digest as digests
from test_cli_schemas import validate

from reconciler import run_shadow
from storage import Repository

FINISHED_S = T0_MS // 1000 + 90
LOG = "/ql/data/log/job_a/2026-01-01-00-00-00.log"


def explain(db: Path | str, run_id: str, *extra: str) -> dict[str, Any]:
    """`explain --json`, checked against the shipped schema (``now`` included)."""
    out = qlfsm("explain", "--db", str(db), "--run", run_id, "--json", *extra)
    assert out.returncode == 0, out.stderr
    return validate("explain", out.stdout)


def tree_digest(db: Path, *roots: Path) -> dict[str, str | None]:
    """The shared digest; explain's read-only connection may leave an empty log behind, which
    writes nothing."""
    return digests(db, *roots, empty_log_is_none=True)


# --- ADR-0448: a legacy run -----------------------------------------------------------------


def test_a_legacy_run_is_given_the_row_the_shadow_pass_then_takes(db: LegacyDb) -> None:
    made = db.run(pid=41005, log_path=LOG)
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=41005, log_path=LOG, status=2, finished_s=FINISHED_S)
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = tree_digest(Path(db.path))
    now = explain(db.path, made.run_id, "--origins", "manual")["now"]
    assert (now["record"], now["row"], now["outcome"]) == ("ADR-0448", "6", "cancelled")
    ev = now["evidence"]
    assert ev["selection"] == "matched" and ev["matched_status"] == "stopped"
    assert ev["matched_finished"] is True and ev["origin_enabled"] is True
    # No id, pid, path or command in what it shows (spec 05 privacy).
    assert "41005" not in json.dumps(now) and LOG not in json.dumps(now)
    assert tree_digest(Path(db.path)) == before
    # The real pass takes the row explain named.
    result = run_shadow(db.path, origins="manual", environ={})
    assert result.audit["report"]["outcomes"]["cancelled"] == 1
    assert db.status(made) == ("cancelled", ["cancelled"])
    # Terminal now: nothing left to decide.
    assert explain(db.path, made.run_id, "--origins", "manual")["now"] is None


def test_a_legacy_run_whose_origin_is_not_enabled_is_row_1_and_the_human_output_says_so(
    db: LegacyDb,
) -> None:
    made = db.run(origin="scheduled_system", pid=41006, log_path=LOG)
    now = explain(db.path, made.run_id)["now"]  # no --origins and no $QL3_SHADOW_ORIGINS
    assert (now["row"], now["outcome"], now["evidence"]["origin_enabled"]) == (
        "1",
        "skipped",
        False,
    )
    enabled = explain(db.path, made.run_id, "--origins", "scheduled_system")["now"]
    assert (enabled["row"], enabled["outcome"]) == ("8", "pending")
    human = qlfsm("explain", "--db", db.path, "--run", made.run_id)
    assert human.returncode == 0, human.stderr
    assert "start-up now (ADR-0448, nothing written): row 1 -> skipped" in human.stdout
    assert "origin is not enabled" in human.stdout


# --- ADR-0068: a runtime run, from a dry run ------------------------------------------------


@linux_only
def test_a_live_process_is_row_12_remaining_and_explain_writes_nothing(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    with sleepers() as [live]:
        make_candidate(repo, "run-live", "at-live", handle=live.handle, pid=live.pid)
        repo.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = tree_digest(db_path, root)
        now = explain(db_path, "run-live", "--receipt-root", str(root))["now"]
        assert now == {
            "record": "ADR-0068",
            "row": "12",
            "outcome": "remaining",
            "reason": "process_running",
            "row_facts": "probe: `running`",
        }
        human = qlfsm("explain", "--db", str(db_path), "--run", "run-live", "--receipt-root",
                      str(root))  # fmt: skip
        assert "start-up now (ADR-0068, nothing written): row 12 -> remaining" in human.stdout
        assert tree_digest(db_path, root) == before
        # The real pass agrees: remaining, nothing moved.
        out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json")
        entry = json.loads(out.stdout)["candidates"][0]
        assert (entry["row"], entry["outcome"]) == ("12", "remaining")


@linux_only
def test_a_dead_process_is_row_13_lost_and_the_real_pass_then_marks_it_lost(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "receipts"
    root.mkdir()
    handle, pid = dead_handle()
    make_candidate(repo, "run-dead", "at-dead", handle=handle, pid=pid)
    now = explain(db_path, "run-dead", "--receipt-root", str(root))["now"]
    assert (now["row"], now["outcome"]) == ("13", "recovered")
    assert now["reason"].startswith("process_not_running:")
    assert repo.get_run("run-dead").status == "running"  # type: ignore[union-attr]
    out = qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert out.returncode == 0, out.stderr
    assert repo.get_run("run-dead").status == "lost"  # type: ignore[union-attr]
    # Now the decision is in the events, and nothing is left to decide.
    data = explain(db_path, "run-dead", "--receipt-root", str(root))
    assert data["now"] is None
    assert {s["row"] for s in data["steps"] if s["row"]} == {"13"}


def test_a_runtime_run_without_a_receipt_root_gets_the_hint_and_no_prediction(
    repo: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.bad", pid=3)
    assert explain(db_path, "run-1")["now"] is None
    human = qlfsm("explain", "--db", str(db_path), "--run", "run-1")
    assert "add --receipt-root DIR" in human.stdout


def test_a_runtime_run_that_is_not_a_start_up_candidate_says_why(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_run(repo, "run-q", "queued")
    root = tmp_path / "receipts"
    root.mkdir()
    now = explain(db_path, "run-q", "--receipt-root", str(root))["now"]
    assert now["row"] is None and "not a start-up candidate" in now["reason"]


def test_a_bad_receipt_root_is_one_line_exit_2(repo: Repository, db_path: Path) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.bad", pid=3)
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-1", "--receipt-root", "rel/dir")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "relative" in out.stderr
