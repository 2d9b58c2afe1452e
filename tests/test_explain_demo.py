"""`qlfsm explain` on every run of the real demo (real processes, receipts, /proc, SQLite).

The ADR-0068 pass records on each edge it writes a `decision` key (row, reason, evidence). A
database written by a pass without that key is explained from what its events do record (the
row only, inferred). This test asserts what every pass writes, and the recorded row and
evidence whenever the key is present: it holds for both.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _primary_support import linux_only, qlfsm
from test_explain import expected_edges, taken_edges

from reconciler.cli._demo import ORIGINS

# The legacy writes' guarded edges (ADR-0448 rows 7 and 6; the Run commit of rows 10 and 9 is
# row 2's repair edge).
LEGACY = {
    "legacy sign-in": ("succeeded", "7", "succeed_by_instance"),
    "legacy stopped": ("cancelled", "6", "cancel_by_instance"),
    "legacy cron job": ("lost", "10", "lose_by_repair"),
    "legacy accepted": ("cancelled", "9", "cancel_by_repair"),
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    """The demo, run once: its database, each run id by label, and its output."""
    base = tmp_path_factory.mktemp("demo") / "d"
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "demo", "--dir", str(base)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    db = base / "ql.db"
    conn = sqlite3.connect(db)
    try:
        labels: dict[str, str] = {}
        for run_id, cron_name in conn.execute(
            'SELECT r.id, c.name FROM "Runs" r JOIN "Crontabs" c ON c.id = r.legacy_cron_id'
        ):
            labels[cron_name] = run_id
        runtime = conn.execute(
            "SELECT id, status, error_code FROM \"Runs\" WHERE execution_owner = 'runtime'"
        ).fetchall()
    finally:
        conn.close()
    by_outcome = {
        ("running", None): "backup (sleep 30)",
        ("succeeded", None): "export (exit 0)",
        ("lost", "RECOVERY_PROCESS_NOT_RUNNING"): "rotate (SIGKILLed)",
        ("lost", "RECOVERY_UNSTARTED_CLAIM"): "warmup (claimed only)",
    }
    for run_id, status, code in runtime:
        labels[by_outcome[(status, code)]] = run_id
    assert len(labels) == 9
    return db, labels, proc.stdout


def explain(db: Path, run_id: str, *extra: str) -> dict[str, Any]:
    out = qlfsm("explain", "--db", str(db), "--run", run_id, "--json", *extra)
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def decided(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in data["steps"] if s["row"] is not None]


@linux_only
def test_the_demo_ends_by_explaining_the_run_it_marked_lost(
    demo: tuple[Path, dict[str, str], str],
) -> None:
    _db, labels, out = demo
    rotate = labels["rotate (SIGKILLed)"]
    tail = out[out.index("5. why was 'rotate (SIGKILLed)' marked lost?") :]
    assert f"--run {rotate}" in tail
    assert "running -> lost" in tail and "lose_after_grace" in tail
    assert "ADR-0068 row 13" in tail


@linux_only
def test_the_killed_job_is_explained_by_row_13_and_its_evidence_when_recorded(
    demo: tuple[Path, dict[str, str], str],
) -> None:
    db, labels, _ = demo
    data = explain(db, labels["rotate (SIGKILLed)"])
    steps = decided(data)
    assert [(s["machine"], s["from"], s["to"], s["trigger"]) for s in steps] == [
        ("attempt", "running", "lost", "lose_after_grace"),
        ("run", "running", "lost", "lose_after_grace"),
    ]
    for s in steps:
        assert (s["record"], s["row"]) == ("ADR-0068", "13")
        assert (s["actor_type"], s["actor_id"]) == ("reconciler", "local-startup")
        if s["decision"] is None:  # a pass that records no evidence: only the row is named
            assert s["row_recorded"] is False
            continue
        d = s["decision"]
        assert s["row_recorded"] is True and d["record"] == "ADR-0068" and d["row"] == "13"
        assert d["reason"].startswith("process_not_running:")
        ev = d["evidence"]
        # ADR-0068 §2 step 6: receipt, probe, one grace, the receipt again; never less.
        assert ev["receipt"] == "missing" and ev["reread"] == "missing"
        assert ev["process"] == "not_running" and ev["pid_matches"] is True
        assert ev["grace_paid"] is True
        assert ev["probe_reason"] in ("pid_absent", "zombie_or_dead")
        assert d["reason"] == f"process_not_running:{ev['probe_reason']}"


@linux_only
def test_every_demo_run_is_explained_by_the_row_that_decided_it(
    demo: tuple[Path, dict[str, str], str],
) -> None:
    db, labels, _ = demo
    # A claimed Attempt that never started: row 7, no probe.
    warmup = decided(explain(db, labels["warmup (claimed only)"]))
    assert [(s["from"], s["to"], s["trigger"], s["row"]) for s in warmup] == [
        ("claimed", "lost", "lose_unstarted_claim", "7"),
        ("dispatching", "lost", "lose_unstarted_claim", "7"),
    ]
    for s in warmup:
        if s["decision"] is not None:
            assert s["decision"]["reason"] == "unstarted_claim"
            assert s["decision"]["evidence"]["process"] is None  # no process was probed
    # A trusted receipt: row 5, the receipt's edges, written by the receipt's actor.
    export = decided(explain(db, labels["export (exit 0)"]))
    assert [(s["machine"], s["to"], s["trigger"], s["row"]) for s in export] == [
        ("attempt", "succeeded", "succeed_by_receipt", "5"),
        ("run", "succeeded", "succeed_by_receipt", "5"),
    ]
    assert {s["actor_id"] for s in export} == {"completion-receipt"}
    for s in export:
        if s["decision"] is not None:
            assert s["decision"]["evidence"]["receipt"] == "trusted"
    # The live process (row 12) needed no edge: the launcher's path is all there is.
    backup = explain(db, labels["backup (sleep 30)"])
    assert decided(backup) == [] or {s["row"] for s in decided(backup)} == {"12"}
    assert backup["steps"][-1]["to"] == "running"
    assert {s["actor_id"] for s in backup["steps"][3:]} <= {"local-launcher", "local-startup"}
    # The legacy shadow's decisions (ADR-0448), named from what its writer records.
    for label, (status, row, trigger) in LEGACY.items():
        data = explain(db, labels[label])
        assert data["run"]["status"] == status
        last = data["steps"][-1]
        assert (last["machine"], last["to"], last["trigger"]) == ("run", status, trigger), label
        assert (last["record"], last["row"]) == ("ADR-0448", row), label
    # system crond outlives the server: pending (ADR-0448 row 8) writes nothing; explain
    # names the row from the same reads and table, with the origins the demo enabled.
    crond = explain(db, labels["legacy system crond"], "--origins", ORIGINS)
    assert decided(crond) == [] and crond["run"]["status"] == "running"
    now = crond["now"]
    assert (now["record"], now["row"], now["outcome"]) == ("ADR-0448", "8", "pending")
    assert now["evidence"]["origin"] == "scheduled_system"
    assert now["evidence"]["attempt_status"] == "running"


@linux_only
def test_the_demo_asks_explain_about_the_job_start_up_kept_running_while_it_runs(
    demo: tuple[Path, dict[str, str], str],
) -> None:
    # Keeping a live process (row 12) writes no event: the demo's step 6 asks a dry run, while
    # the job still runs, what start-up decides for it.
    _db, labels, out = demo
    backup = labels["backup (sleep 30)"]
    tail = out[out.index("6. and 'backup (sleep 30)', which start-up kept running?") :]
    assert f"--run {backup} --receipt-root " in tail
    assert "start-up now (ADR-0068, nothing written): row 12 -> remaining (process_running)" in (
        tail
    )


@linux_only
def test_the_svg_of_the_killed_job_highlights_exactly_its_edges(
    demo: tuple[Path, dict[str, str], str], tmp_path: Path
) -> None:
    db, labels, _ = demo
    run_id = labels["rotate (SIGKILLed)"]
    svg = tmp_path / "rotate.svg"
    out = qlfsm("explain", "--db", str(db), "--run", run_id, "--svg", str(svg))
    assert out.returncode == 0, out.stderr
    assert taken_edges(svg.read_text()) == expected_edges(explain(db, run_id))
