"""The bootstrap (switches, profile, disabled, cluster refusal), fail-open, and the ADR-0449
report / metric batch with their conservation checks (spec 05)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _shadow_support import T0_MS, LegacyDb, bulk_runs

from reconciler import Origins, audit_record, parse_origins, run_shadow
from reconciler.node import FakeClock
from reconciler.shadow import (
    BUDGETS,
    ConservationViolation,
    PassCounts,
    build_metrics,
    build_report,
    check_conservation,
)

FINISHED_S = T0_MS // 1000 + 90


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


# --- switches -------------------------------------------------------------------------------


def test_origins_are_trimmed_deduplicated_and_kept_in_configured_order() -> None:
    got = parse_origins("  scheduled_system , manual,,manual ,boot  ")
    assert got == Origins(("scheduled_system", "manual", "boot"), 0, 0)


def test_once_and_grpc_are_refused_and_unknown_items_only_counted() -> None:
    assert parse_origins("once, grpc,manual,Manual,hunter2") == Origins(("manual",), 2, 2)


def test_no_value_or_only_refused_origins_means_disabled() -> None:
    assert parse_origins(None).enabled == ()
    assert parse_origins(" ").enabled == ()
    assert run_shadow("/nonexistent/ql.db", origins="once,grpc", environ={}).audit == {
        "state": "disabled",
        "refusedOriginCount": 2,
        "ignoredOriginCount": 0,
    }


def test_the_environment_gives_origins_and_profile_and_the_flags_override_it(
    db: LegacyDb,
) -> None:
    env = {"QL3_SHADOW_ORIGINS": "manual", "QL_DEPLOYMENT_PROFILE": "edge"}
    assert run_shadow(db.path, environ=env).audit["report"]["profile"] == "edge"
    got = run_shadow(db.path, environ=env, profile="standalone", origins="boot,script")
    assert got.audit["report"]["profile"] == "standalone"
    assert [e["origin"] for e in got.audit["report"]["byOrigin"]] == ["boot", "script"]


def test_an_unset_or_empty_profile_is_standalone(db: LegacyDb) -> None:
    for env in ({}, {"QL_DEPLOYMENT_PROFILE": ""}):
        got = run_shadow(db.path, origins="manual", environ=env)
        assert got.audit["report"]["profile"] == "standalone"


def test_a_profile_is_matched_exactly_and_anything_else_fails_open(db: LegacyDb) -> None:
    for value in (" edge", "Edge", "cluster"):
        got = run_shadow(db.path, origins="manual", environ={"QL_DEPLOYMENT_PROFILE": value})
        assert got.audit == {"state": "failed", "errorType": "ProfileError"}


@pytest.mark.parametrize("profile", ["cluster-control", "worker"])
def test_cluster_profiles_refuse_without_opening_storage(profile: str, tmp_path: Path) -> None:
    missing = tmp_path / "never.db"
    code = (
        "import sys, json\n"
        "from reconciler._shadow_entry import run_shadow\n"
        f"r = run_shadow({str(missing)!r}, origins='manual', environ={{}}, profile={profile!r})\n"
        "print(json.dumps({'audit': r.audit}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout)
    assert out["audit"]["state"] == "profile_rejected" and out["audit"]["profile"] == profile
    assert not missing.exists()


def test_disabled_never_opens_the_database(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    code = (
        "import sys\n"
        "from reconciler.cli._main import main\n"
        f"rc = main(['shadow', '--db', {str(missing)!r}, '--json'])\n"
        "print(rc, file=sys.stderr)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "QL3_SHADOW_ORIGINS": " once , not-an-origin "}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(proc.stdout) == {
        "state": "disabled",
        "refusedOriginCount": 1,
        "ignoredOriginCount": 1,
    }
    # The unknown item is placed for the operator (D-23), never echoed.
    assert proc.stderr.splitlines() == [
        "qlfsm: warning: $QL3_SHADOW_ORIGINS item 2 ignored, not a reviewed origin (text not "
        "shown); --help lists the reviewed ones",
        "0",
    ]
    assert not missing.exists()


def test_an_invalid_origin_is_never_echoed(db: LegacyDb) -> None:
    secret = "ghp_S3cr3tT0kenPastedByMistake"
    for args in (["--json"], []):
        proc = cli("shadow", "--db", db.path, "--origins", f"manual,{secret}", *args)
        assert proc.returncode == 0
        assert secret not in proc.stdout + proc.stderr
        assert "1 unknown" in proc.stdout or '"ignoredOriginCount": 1' in proc.stdout
    proc = cli("shadow", "--db", db.path, "--json", env={"QL3_SHADOW_ORIGINS": secret})
    assert secret not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["state"] == "disabled"


# --- fail-open ----------------------------------------------------------------------------------


def test_a_missing_database_fails_open_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "gone.db"
    proc = cli("shadow", "--db", str(missing), "--origins", "manual", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "DatabaseMissing"}
    assert not missing.exists()


def test_a_file_that_is_not_sqlite_fails_open(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, just text\n" * 200)
    proc = cli("shadow", "--db", str(junk), "--origins", "manual", "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "DatabaseError"}


def test_a_database_missing_the_runs_table_fails_open(tmp_path: Path) -> None:
    path = tmp_path / "bare.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    proc = cli("shadow", "--db", str(path), "--origins", "manual")
    assert proc.returncode == 0
    assert "failed (OperationalError)" in proc.stdout and "Runs" not in proc.stdout


@contextlib.contextmanager
def exclusively_locked(path: str) -> Iterator[None]:
    """Another connection holding ``path`` in an exclusive transaction for the block."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_locked_database_fails_open(db: LegacyDb) -> None:
    bulk_runs(db.conn, 3)
    db.conn.execute("PRAGMA journal_mode=DELETE")
    with exclusively_locked(db.path):
        got = run_shadow(db.path, origins="manual", environ={}, busy_timeout_s=0.05)
    assert got.audit == {"state": "failed", "errorType": "OperationalError"}


def test_a_locked_database_fails_open_through_the_command_with_exit_zero(db: LegacyDb) -> None:
    bulk_runs(db.conn, 3)
    db.conn.execute("PRAGMA journal_mode=DELETE")
    with exclusively_locked(db.path):
        proc = cli("shadow", "--db", db.path, "--origins", "manual", "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "OperationalError"}


def test_a_bad_argument_is_the_only_nonzero_exit_of_shadow(db: LegacyDb) -> None:
    assert cli("shadow", "--db", db.path, "--profile", "galaxy").returncode == 2
    assert cli("shadow").returncode == 2
    assert cli("shadow", "--db", db.path, "--origins", "manual").returncode == 0


# --- report, metric batch, assessments ------------------------------------------------------------


def shadow(db: LegacyDb, profile: str = "standalone") -> Any:
    return run_shadow(
        db.path, profile=profile, origins="manual,scheduled_system", environ={},
        clock=FakeClock(T0_MS + 10**6),
    )  # fmt: skip


def test_all_terminal_evidence_is_converged_and_reconciled(db: LegacyDb) -> None:
    made = db.run(pid=45001, log_path="/l/a.log")
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=45001, log_path="/l/a.log", status=1, finished_s=FINISHED_S)
    audit = shadow(db).audit
    assert audit["report"]["assessment"] == "converged" and audit["state"] == "reconciled"


def test_a_pending_system_crond_waits_for_an_external_callback(db: LegacyDb) -> None:
    db.run(origin="scheduled_system")
    audit = shadow(db).audit
    assert audit["report"]["assessment"] == "waiting_external_callback"
    assert audit["state"] == "incomplete"


def test_a_spent_budget_without_doubt_is_incomplete(db: LegacyDb) -> None:
    bulk_runs(db.conn, 9, status="running", attempt="running")
    audit = shadow(db, "edge").audit
    assert audit["report"]["assessment"] == "incomplete" and audit["state"] == "incomplete"


def test_any_ambiguous_outcome_requires_attention_before_anything_else(db: LegacyDb) -> None:
    bulk_runs(db.conn, 9, status="running", attempt="running")
    db.run(origin="scheduled_system", created_at_ms=T0_MS - 1)
    db.run(attempts=("running", "running"), created_at_ms=T0_MS - 2)
    assert shadow(db, "edge").audit["report"]["assessment"] == "attention_required"


def test_the_report_and_metric_batch_have_exactly_the_adr_0449_shape(db: LegacyDb) -> None:
    db.run(origin="scheduled_system")
    audit = shadow(db).audit
    report, metrics = audit["report"], audit["metrics"]
    assert list(report) == [
        "schemaVersion", "schema", "profile", "assessment", "configuredOriginCount", "budget",
        "coverage", "outcomes", "byOrigin",
    ]  # fmt: skip
    assert report["schema"] == "qinglong/legacy-shadow-startup-difference-report@v1"
    assert [e["origin"] for e in report["byOrigin"]] == ["manual", "scheduled_system"]
    assert report["byOrigin"][1]["pending"] == 1 and report["byOrigin"][1]["scanned"] == 1
    assert metrics["schema"] == "qinglong/legacy-shadow-startup-metric-batch@v1"
    assert metrics["dimensions"] == {
        "profile": "standalone",
        "assessment": "waiting_external_callback",
        "stopReason": "complete",
    }
    assert metrics["values"]["remaining"] == 0 and metrics["values"]["pending"] == 1
    assert all(isinstance(v, int) for v in metrics["values"].values())


def test_the_audit_record_carries_qinglongs_profile_origins_and_summary(db: LegacyDb) -> None:
    # QingLong's bootstrap record (LegacyShadowStartupAudit): state, profile, origins (a
    # count), summary (the supervisor's totals, no cursor, no byOrigin, + resumeAvailable),
    # report, metrics. qlfsm's dropped-item counts stay beside them.
    bulk_runs(db.conn, 9, status="running", attempt="running")  # edge: 8 scanned, one more left
    audit = run_shadow(db.path, profile="edge", origins=" manual, once, manual ", environ={}).audit
    assert list(audit) == [
        "state", "refusedOriginCount", "ignoredOriginCount", "profile", "origins", "summary",
        "report", "metrics",
    ]  # fmt: skip
    assert (audit["state"], audit["profile"], audit["origins"]) == ("incomplete", "edge", 1)
    assert audit["summary"] == {
        "pages": 1, "scanned": 8, "completed": 0, "cancelled": 0, "abandoned": 0,
        "markedLost": 8, "repaired": 0, "pending": 0, "ambiguous": 0, "skipped": 0, "failed": 0,
        "stopReason": "page_limit", "remaining": True, "resumeAvailable": True,
    }  # fmt: skip
    # The summary is the report's numbers, and the resume cursor is in neither.
    cov = audit["report"]["coverage"]
    assert {k: audit["summary"][k] for k in cov} == cov
    assert "nextCursor" not in json.dumps(audit) and "0199cccc" not in json.dumps(audit)


def test_a_reconciled_record_has_the_same_fields_and_no_resume(db: LegacyDb) -> None:
    made = db.run(pid=45002, log_path="/l/b.log")
    assert made.cron_id is not None
    db.instance(made.cron_id, pid=45002, log_path="/l/b.log", status=1, finished_s=FINISHED_S)
    audit = shadow(db).audit
    assert audit["state"] == "reconciled"
    assert (audit["profile"], audit["origins"]) == ("standalone", 2)
    assert audit["summary"]["completed"] == 1 and audit["summary"]["scanned"] == 1
    assert audit["summary"]["stopReason"] == "complete"
    assert audit["summary"]["remaining"] is False and audit["summary"]["resumeAvailable"] is False


def counts(**by_origin: dict[str, int]) -> PassCounts:
    return PassCounts(1, "complete", False, by_origin)


def test_conservation_holds_for_a_consistent_report() -> None:
    report = build_report("edge", ["manual"], BUDGETS["edge"], counts(manual={"completed": 3}))
    check_conservation(report, build_metrics(report), profile="edge", origins=["manual"])


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: r["outcomes"].update(completed=4),
        lambda r: r["coverage"].update(scanned=2),
        lambda r: r["coverage"].update(remaining=True),
        lambda r: r["budget"].update(pageSize=64),
        lambda r: r["byOrigin"][0].update(completed=2),
        lambda r: r.update(assessment="converged_enough"),
        lambda r: r["coverage"].update(pages=0),
    ],
)
def test_conservation_refuses_a_report_that_does_not_add_up(tamper: Any) -> None:
    report = build_report("edge", ["manual"], BUDGETS["edge"], counts(manual={"completed": 3}))
    metrics = build_metrics(report)
    tamper(report)
    with pytest.raises(ConservationViolation):
        check_conservation(report, metrics, profile="edge", origins=["manual"])


def test_a_conservation_violation_is_a_failed_audit_not_a_wrong_report() -> None:
    bad = PassCounts(1, "complete", False, {"manual": {"completed": 9}})  # 9 > edge's 8
    audit = audit_record("edge", ["manual"], BUDGETS["edge"], bad, {})
    assert audit == {"state": "failed", "errorType": "ConservationViolation"}


def test_the_human_output_of_a_pass_shows_counts_not_rows(db: LegacyDb) -> None:
    db.run(origin="scheduled_system")
    proc = cli("shadow", "--db", db.path, "--origins", "manual,scheduled_system")
    assert proc.returncode == 0 and proc.stderr == ""
    assert "legacy shadow: incomplete (assessment waiting_external_callback)" in proc.stdout
    assert "scheduled_system" in proc.stdout and "total" in proc.stdout
    assert os.path.exists(db.path)
