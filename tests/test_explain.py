"""`qlfsm explain`: one run's path through the Run and Attempt machines, with the row, reason
and evidence of each recovery decision (spec 06), on real SQLite files and real processes."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from _decisions import lose_after_grace, lose_unstarted_claim, succeed_by_receipt
from _primary_support import (
    dead_handle,
    linux_only,
    make_candidate,
    qlfsm,
    run_pass,
)

from fsm.qinglong import ATTEMPT_SPEC, RUN_SPEC
from reconciler.cli._explain import describe_evidence
from reconciler.node import FileReceiptStore
from reconciler.ops._explain import edge_trigger
from storage import Repository

SVG = "{http://www.w3.org/2000/svg}"


def explain_json(db: Path, run_id: str) -> dict[str, Any]:
    out = qlfsm("explain", "--db", str(db), "--run", run_id, "--json")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1  # exactly one JSON object
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def moving(data: dict[str, Any]) -> list[tuple[str, str | None, str, str]]:
    return [(s["machine"], s["from"], s["to"], s["trigger"]) for s in data["steps"] if s["machine"]]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the decision key (the contract with the ADR-0068 pass) -----------------------------------


def test_a_recorded_decision_is_shown_with_its_row_reason_and_evidence(
    repo: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    made = lose_after_grace(repo, "run-1", "at-1", probe_reason="zombie_or_dead")
    data = explain_json(db_path, "run-1")
    last = data["steps"][-2:]
    assert [(s["machine"], s["from"], s["to"], s["trigger"]) for s in last] == [
        ("attempt", "running", "lost", "lose_after_grace"),
        ("run", "running", "lost", "lose_after_grace"),
    ]
    for step in last:
        assert step["row"] == "13" and step["row_recorded"] is True
        assert step["decision"] == made
        assert step["actor_type"] == "reconciler" and step["actor_id"] == "local-startup"
        assert step["row_facts"].startswith("probe: `not_running`")
    human = qlfsm("explain", "--db", str(db_path), "--run", "run-1")
    assert human.returncode == 0, human.stderr
    assert "decision: ADR-0068 row 13: process_not_running:zombie_or_dead" in human.stdout
    assert (
        "evidence: receipt missing, process not_running (zombie_or_dead), handle pid matches, "
        "grace paid, receipt again missing"
    ) in human.stdout


def test_each_written_row_names_its_own_trigger_and_decision(
    repo: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-7", "at-7", attempt="claimed", run="dispatching")
    lose_unstarted_claim(repo, "run-7", "at-7")
    make_candidate(repo, "run-5", "at-5", handle="ql3lp1.x", pid=7)
    succeed_by_receipt(repo, "run-5", "at-5")
    seven = explain_json(db_path, "run-7")
    assert moving(seven)[-2:] == [
        ("attempt", "claimed", "lost", "lose_unstarted_claim"),
        ("run", "dispatching", "lost", "lose_unstarted_claim"),
    ]
    assert {s["decision"]["reason"] for s in seven["steps"][-2:]} == {"unstarted_claim"}
    five = explain_json(db_path, "run-5")
    assert moving(five)[-2:] == [
        ("attempt", "running", "succeeded", "succeed_by_receipt"),
        ("run", "running", "succeeded", "succeed_by_receipt"),
    ]
    assert five["steps"][-1]["decision"]["evidence"]["receipt"] == "trusted"
    assert five["steps"][-1]["actor_id"] == "completion-receipt"


@linux_only
def test_events_written_without_the_decision_key_are_shown_as_they_are(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # A lost run as any pass writes it (with or without the key): what is recorded is shown,
    # and only what the event itself says is used to name the row.
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    summary = run_pass(conn, store)
    assert summary["candidates"][0]["row"] == "13"
    with sqlite3.connect(db_path) as raw:
        raw.execute("UPDATE RunEvents SET payload = json_remove(payload, '$.decision')")
    data = explain_json(db_path, "run-1")
    lost = [s for s in data["steps"] if s["to"] == "lost"]
    assert len(lost) == 2
    for step in lost:
        assert step["decision"] is None and step["row"] == "13" and step["row_recorded"] is False
        assert step["payload"]["error_code"] == "RECOVERY_PROCESS_NOT_RUNNING"
        assert step["trigger"] == "lose_after_grace"  # row 13's edge, named by the error code
    human = qlfsm("explain", "--db", str(db_path), "--run", "run-1").stdout
    assert "row 13 (inferred from what the event records" in human
    assert "evidence:" not in human


def test_a_run_no_start_up_pass_moved_says_that_passes_record_only_moves(
    repo: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.bad", pid=3)
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-1")
    assert out.returncode == 0 and "no start-up decision moved this run" in out.stdout


# --- triggers from the tables ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "source", "dest", "adr0068", "receipt", "row", "expected"),
    [
        ("run", "created", "queued", False, False, None, "queue"),
        ("run", "running", "lost", False, False, None, "mark_lost"),
        ("run", "running", "succeeded", False, False, None, "succeed"),
        # The ADR-0068 pass walks only decision edges; which one is the row's.
        ("run", "running", "lost", True, False, "13", "lose_after_grace"),
        ("run", "dispatching", "lost", True, False, "3", "lose_missing_attempt"),
        ("run", "dispatching", "lost", True, False, "7", "lose_unstarted_claim"),
        ("run", "dispatching", "running", True, False, "12", "adopt_running"),
        ("run", "running", "succeeded", True, True, "5", "succeed_by_receipt"),
        ("run", "running", "failed", True, True, "13", "fail_by_receipt"),
        ("attempt", "claimed", "starting", True, True, "5", "start_by_receipt"),
        ("attempt", "starting", "running", True, True, None, "run_by_receipt"),
        # Several decision edges and no row to choose: the event type stands in.
        ("run", "running", "lost", True, False, None, None),
        # Not an edge of the machine at all (QingLong's direct receipt edge, D-3).
        ("run", "dispatching", "succeeded", False, False, None, None),
        ("attempt", "starting", "succeeded", True, True, "5", None),
    ],
)
def test_the_trigger_is_the_one_the_tables_and_the_events_facts_name(
    machine: str,
    source: str,
    dest: str,
    adr0068: bool,
    receipt: bool,
    row: str | None,
    expected: str | None,
) -> None:
    spec = RUN_SPEC if machine == "run" else ATTEMPT_SPEC
    got = edge_trigger(spec, source, dest, adr0068=adr0068, receipt=receipt, row=row)
    assert got == expected


def test_evidence_is_described_in_the_order_it_is_gathered_and_unknown_keys_are_kept() -> None:
    text = describe_evidence(
        {"grace_paid": True, "receipt": "missing", "novel": 3, "process": "not_running"}
    )
    assert text == "receipt missing, process not_running, grace paid, novel=3"


# --- errors, read-only, hostile content -------------------------------------------------------


def test_an_unknown_run_is_one_line_and_exit_2(db_path: Path) -> None:
    out = qlfsm("explain", "--db", str(db_path), "--run", "nope")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "'nope' is not in" in out.stderr
    assert "qlfsm inspect" in out.stderr


def test_a_missing_database_is_fatal_and_not_created(tmp_path: Path) -> None:
    out = qlfsm("explain", "--db", str(tmp_path / "none.db"), "--run", "x")
    assert out.returncode == 1 and "does not exist" in out.stderr
    assert not (tmp_path / "none.db").exists()


def test_explain_writes_nothing(
    repo: Repository, db_path: Path, tmp_path: Path, snapshot: Any
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    lose_after_grace(repo, "run-1", "at-1")
    repo.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rows, main = snapshot(), file_digest(db_path)
    assert qlfsm("explain", "--db", str(db_path), "--run", "run-1").returncode == 0
    assert qlfsm("explain", "--db", str(db_path), "--run", "run-1", "--json").returncode == 0
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-1", "--svg", str(tmp_path / "p.svg"))
    assert out.returncode == 0, out.stderr
    wal = Path(f"{db_path}-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # no write went to the log either
    assert file_digest(db_path) == main and snapshot() == rows


def test_control_characters_stored_in_the_database_never_reach_the_terminal(
    repo: Repository, db_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            "UPDATE RunEvents SET actor_id = ?, payload = json_set(payload, '$.note', ?) "
            "WHERE sequence = 2",
            ("evil\x1b]0;owned\x07", "\x1b[2Jgone"),
        )
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-1")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    assert "\\x1b[2Jgone" in out.stdout


# --- --svg ------------------------------------------------------------------------------------


def taken_edges(svg_text: str) -> dict[tuple[str, str, str], list[int]]:
    """(machine, source, dest) -> the numbers drawn on each highlighted edge."""
    root = ElementTree.fromstring(svg_text)
    found: dict[tuple[str, str, str], list[int]] = {}
    for drawing in root.findall(f"{SVG}svg"):
        machine = (drawing.get("id") or "").removesuffix("-machine")
        for g in drawing.iter(f"{SVG}g"):
            classes = (g.get("class") or "").split()
            if "edge" not in classes or "taken" not in classes:
                continue
            source, _, dest = (g.findtext(f"{SVG}title") or "").partition("->")
            texts = [t.text or "" for t in g.iter(f"{SVG}text")]
            found[(machine, source, dest)] = [int(n.lstrip("#")) for n in texts[0].split()]
    return found


def expected_edges(data: dict[str, Any]) -> dict[tuple[str, str, str], list[int]]:
    out: dict[tuple[str, str, str], list[int]] = {}
    for s in data["steps"]:
        if s["machine"] and s["from"] is not None:
            out.setdefault((s["machine"], s["from"], s["to"]), []).append(s["sequence"])
    return out


def test_svg_highlights_exactly_the_runs_edges_numbered_by_event_sequence(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    lose_after_grace(repo, "run-1", "at-1")
    svg = tmp_path / "path.svg"
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-1", "--svg", str(svg))
    assert out.returncode == 0, out.stderr
    drawn = taken_edges(svg.read_text())
    data = explain_json(db_path, "run-1")
    assert drawn == expected_edges(data)
    assert drawn[("run", "running", "lost")] == [9]
    assert drawn[("attempt", "running", "lost")] == [8]
    # Both machines are drawn whole: the highlighted edges are a few of many.
    root = ElementTree.fromstring(svg.read_text())
    edges = [g for g in root.iter(f"{SVG}g") if "edge" in (g.get("class") or "").split()]
    assert len(edges) > 2 * len(drawn)


def test_svg_without_dot_is_one_line_exit_2_and_writes_no_file(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    svg = tmp_path / "path.svg"
    env = {**os.environ, "QLFSM_DOT": str(tmp_path / "no-such-dot")}
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-1", "--svg", str(svg), env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "dot" in out.stderr
    assert not svg.exists() and list(tmp_path.glob("path.svg*")) == []
    out = qlfsm("explain", "--db", str(db_path), "--run", "run-1", "--svg", "/no/such/dir/p.svg")
    assert out.returncode == 2 and "does not exist" in out.stderr
