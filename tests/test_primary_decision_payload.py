"""Every Run/Attempt event the ADR-0068 pass writes says which decision wrote it: the payload's
"decision" key holds the spec 04 row, the reason code and the evidence it rested on, and
nothing sensitive (no path, token, handle or command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _primary_support import (
    TOKEN,
    TOKEN_HASH,
    dead_handle,
    last_sequence,
    linux_only,
    make_candidate,
    sleepers,
)
from test_primary_dry_run import every_row

from reconciler.node import FakeClock, FileReceiptStore, ProcProvider
from reconciler.primary import reconcile_connection
from storage import Repository

EVIDENCE_KEYS = {
    "receipt",
    "reread",
    "process",
    "probe_reason",
    "pid_matches",
    "grace_paid",
    "verifier",
}
PASS_ACTORS = {("reconciler", "local-startup"), ("executor", "completion-receipt")}


@linux_only
def test_every_event_of_the_pass_carries_its_decision_and_nothing_sensitive(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    with sleepers() as [live]:
        every_row(repo, db_path, store, live)
        ids = [f"run-{n}" for n in ("01", "03", "03b", "04", "05", "06", "07", "08", "10", "11")]
        ids += ["run-12", "run-13"]  # (run-14's id is not UTF-8: it fails, writing nothing)
        marks = {i: last_sequence(repo, i) for i in ids}
        summary = reconcile_connection(conn, store, ProcProvider(), FakeClock())
        handle = live.handle
    rows = {c["run_id"]: c for c in summary["candidates"]}
    written = 0
    for run_id, mark in marks.items():
        for event in repo.events_of(run_id):
            if event.sequence <= mark:
                continue
            assert (event.actor_type, event.actor_id) in PASS_ACTORS
            decision = event.payload["decision"]
            entry = rows[run_id]
            assert decision["record"] == "ADR-0068"
            assert (decision["row"], decision["reason"]) == (entry["row"], entry["reason"])
            assert set(decision["evidence"]) == EVIDENCE_KEYS
            text = json.dumps(event.payload)
            for secret in (TOKEN, TOKEN_HASH, handle, store.root, str(db_path)):
                assert secret not in text
            written += 1
    # rows 3, 5 (Attempt + Run), 7, 12 (adopt: Attempt + Run), 13: every one wrote
    assert written == 1 + 2 + 2 + 2 + 2


@linux_only
def test_the_lost_run_says_row_13_its_probe_reason_and_the_grace(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    before = last_sequence(repo, "run-1")
    reconcile_connection(conn, store, ProcProvider(), FakeClock())
    att_event, run_event = repo.events_of("run-1")[before:]
    expected = {
        "record": "ADR-0068",
        "row": "13",
        "reason": "process_not_running:pid_absent",
        "evidence": {
            "receipt": "missing",
            "reread": "missing",
            "process": "not_running",
            "probe_reason": "pid_absent",
            "pid_matches": True,
            "grace_paid": True,
            "verifier": None,
        },
    }
    assert att_event.payload["decision"] == expected
    assert run_event.payload == {
        "from_status": "running",
        "to_status": "lost",
        "version": before + 2,
        "error_code": "RECOVERY_PROCESS_NOT_RUNNING",
        "decision": expected,
    }


@linux_only
def test_an_adopted_run_says_row_12_and_that_the_verifier_is_pending(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    with sleepers() as [s]:
        make_candidate(
            repo, "run-1", "at-1", attempt="starting", run="dispatching", handle=s.handle, pid=s.pid
        )
        before = last_sequence(repo, "run-1")
        reconcile_connection(conn, store, ProcProvider(), FakeClock())
    for event in repo.events_of("run-1")[before:]:
        assert event.payload["decision"] == {
            "record": "ADR-0068",
            "row": "12",
            "reason": "process_running",
            "evidence": {
                "receipt": "missing",
                "reread": None,
                "process": "running",
                "probe_reason": event.payload["decision"]["evidence"]["probe_reason"],
                "pid_matches": True,
                "grace_paid": False,
                "verifier": "pending",
            },
        }
