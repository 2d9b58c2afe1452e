"""`qlfsm resolve`: an operator's audited decision along legal ADR-0001 edges only (spec 06),
on real SQLite files, receipt files and processes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from _primary_support import (
    dead_handle,
    linux_only,
    make_candidate,
    make_run,
    other_connection,
    qlfsm,
    sleepers,
)
from test_startup_report import pasted

from reconciler.node import FakeClock, ProcProvider
from reconciler.ops import (
    InvalidReason,
    ResolveRefused,
    check_reason,
    legal_targets,
    operator_actor,
    resolve,
)
from reconciler.ops._resolve import MAX_REASON_CHARS, RESOLVE_TARGETS
from storage import Conflict, Repository

# spec 01, transcribed again here (not from fsm): which plain edges exist.
RUN_EDGES = {
    "created": {"queued", "cancelled"},
    "queued": {"dispatching", "cancelled", "timed_out"},
    "dispatching": {"running", "retry_wait", "failed", "cancelled", "lost", "timed_out"},  # (**)
    "running": {
        "waiting_approval", "retry_wait", "succeeded", "failed", "cancelled", "timed_out", "lost"
    },
    "waiting_approval": {"running", "cancelled", "timed_out"},
    "retry_wait": {"queued", "cancelled", "timed_out"},
    "lost": {"queued", "failed", "cancelled", "retry_wait"},
    "succeeded": set(), "failed": set(), "cancelled": set(), "timed_out": set(),
}  # fmt: skip
ATTEMPT_EDGES = {
    "claimed": {"starting", "cancelled", "lost"},
    "starting": {"running", "failed", "cancelled", "timed_out", "lost"},
    "running": {"succeeded", "failed", "cancelled", "timed_out", "lost"},
}


def resolve_cli(
    db: Path, run_id: str, to: str, *extra: str, reason: str = "checked by hand"
) -> Any:
    env = {**os.environ, "USER": "alice"}
    return qlfsm(
        "resolve", "--db", str(db), "--run", run_id, "--to", to, "--reason", reason, *extra,
        env=env,
    )  # fmt: skip


def startup(db: Path, root: Path, *extra: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    return qlfsm("startup", "--db", str(db), "--receipt-root", str(root), *extra, env=env)


# --- the decision, pure -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "attempts"),
    [
        (run, atts)
        for run in RUN_EDGES
        for atts in [(), *[(a,) for a in ATTEMPT_EDGES], ("claimed", "running")]
    ],
)
def test_the_legal_choices_are_the_targets_every_aggregate_reaches_in_one_spec_01_edge(
    run: str, attempts: tuple[str, ...]
) -> None:
    expected = [
        t
        for t in RESOLVE_TARGETS
        if t in RUN_EDGES[run] and all(t in ATTEMPT_EDGES[a] for a in attempts)
    ]
    assert legal_targets(run, list(attempts)) == expected


def test_the_reason_is_trimmed_bounded_and_plain_text() -> None:
    assert check_reason("  process gone; checked on the host  ") == (
        "process gone; checked on the host"
    )
    assert check_reason("进程已确认退出") == "进程已确认退出"
    assert len(check_reason("x" * MAX_REASON_CHARS)) == MAX_REASON_CHARS
    for bad in ("", "   ", "x" * (MAX_REASON_CHARS + 1), "two\nlines", "esc\x1b[31m", "rtl\u202e"):
        with pytest.raises(InvalidReason):
            check_reason(bad)


def test_the_actor_is_a_user_named_operator_and_a_login_only_when_it_is_a_plain_name() -> None:
    assert (operator_actor("alice").type, operator_actor("alice").id) == ("user", "operator:alice")
    assert operator_actor(None).id == "operator"
    assert operator_actor("a b;rm -rf").id == "operator"
    assert operator_actor("x" * 65).id == "operator"


# --- refusals: one line, exit 2, nothing written ----------------------------------------------


def test_an_edge_the_tables_forbid_is_refused_naming_the_legal_choices(
    repo: Repository, db_path: Path, snapshot: Any
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    before = snapshot()
    out = resolve_cli(db_path, "run-1", "failed")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert "attempt claimed -> failed is not an ADR-0001 edge" in out.stderr
    assert "legal choices: lost, cancelled" in out.stderr and "nothing was written" in out.stderr
    for to in ("succeeded", "queued", "bogus"):
        out = resolve_cli(db_path, "run-1", to)
        assert out.returncode == 2 and "lost, cancelled" in out.stderr
    assert snapshot() == before


def test_a_terminal_run_is_refused(repo: Repository, db_path: Path, snapshot: Any) -> None:
    make_run(repo, "run-1", "queued")
    assert resolve_cli(db_path, "run-1", "cancelled").returncode == 0
    before = snapshot()
    out = resolve_cli(db_path, "run-1", "failed")
    assert out.returncode == 2 and "terminal" in out.stderr and "nothing was written" in out.stderr
    assert snapshot() == before


def test_an_unknown_run_and_a_bad_reason_are_refused(
    repo: Repository, db_path: Path, snapshot: Any
) -> None:
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    before = snapshot()
    out = resolve_cli(db_path, "nope", "lost")
    assert out.returncode == 2 and "'nope' is not in" in out.stderr
    out = resolve_cli(db_path, "run-1", "lost", reason="\x1b]0;x\x07")
    assert out.returncode == 2 and "control character" in out.stderr
    assert "\x1b" not in out.stderr
    out = resolve_cli(db_path, "run-1", "lost", reason="")
    assert out.returncode == 2 and "empty" in out.stderr
    assert snapshot() == before


@linux_only
def test_a_process_proven_still_running_is_refused_unless_forced_and_force_is_recorded(
    repo: Repository, db_path: Path, snapshot: Any
) -> None:
    with sleepers() as [s]:
        make_candidate(repo, "run-1", "at-1", handle=s.handle, pid=s.pid)
        before = snapshot()
        out = resolve_cli(db_path, "run-1", "lost")
        assert out.returncode == 2 and "still running" in out.stderr
        assert f"pid {s.pid}" in out.stderr and "--force" in out.stderr
        assert snapshot() == before
        out = resolve_cli(db_path, "run-1", "failed", "--force", "--json")
        assert out.returncode == 0, out.stderr
        assert s.proc.poll() is None  # a decision in the database; the process is not touched
    done = json.loads(out.stdout)
    assert done["force"] is True
    assert done["attempts"] == [
        {
            "id": "at-1",
            "from": "running",
            "to": "failed",
            "process": "running",
            "probe_reason": "identity_matches",
        }
    ]
    events = [e for e in repo.events_of("run-1") if e.actor_id == "operator:alice"]
    assert [e.type for e in events] == ["attempt.failed", "run.failed"]
    for e in events:
        assert e.actor_type == "user"
        assert e.payload["resolution"]["force"] is True
        assert e.payload["resolution"]["process"] == "running"


# --- the accepted case ------------------------------------------------------------------------


@linux_only
def test_a_dead_process_is_resolved_in_one_transaction_with_an_audited_event(
    repo: Repository, db_path: Path
) -> None:
    handle, pid = dead_handle()
    version = make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    out = resolve_cli(db_path, "run-1", "failed", "--json", reason="host rebooted; job redone")
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert done["run"] == {"from": "running", "to": "failed"}
    assert done["version"] == version + 2 and len(done["events"]) == 2
    run, att = repo.get_run("run-1"), repo.get_attempt("at-1")
    assert run is not None and att is not None
    assert (run.status, att.status) == ("failed", "failed")
    assert run.error_code == att.error_code == "OPERATOR_RESOLVED"
    assert run.error_summary == "Resolved by an operator: host rebooted; job redone"
    assert run.finished_at_ms is not None and att.finished_at_ms is not None
    new = [e for e in repo.events_of("run-1") if e.sequence > version]
    assert [(e.type, e.sequence) for e in new] == [
        ("attempt.failed", version + 1),
        ("run.failed", version + 2),
    ]
    assert new[0].payload["resolution"] == {
        "to": "failed",
        "reason": "host rebooted; job redone",
        "force": False,
        "process": "not_running",
        "probe_reason": "pid_absent",
    }


def test_a_run_that_moves_meanwhile_is_a_conflict_and_nothing_is_written(
    repo: Repository, db_path: Path, snapshot: Any
) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    other = other_connection(db_path)

    class MovingProvider(ProcProvider):
        """The probe happens between the read and the commit: someone moves the run then."""

        def boot_id(self) -> str:
            other.execute("UPDATE Runs SET version = version + 1 WHERE id = 'run-1'")
            return super().boot_id()

    handle, pid = dead_handle()
    other.execute("UPDATE RunAttempts SET executor_handle = ?, pid = ?", (handle, pid))
    before = snapshot()
    with pytest.raises(Conflict):
        resolve(
            repo.conn, "run-1", "lost", "gone", force=False, provider=MovingProvider(),
            clock=FakeClock(), actor=operator_actor("alice"),
        )  # fmt: skip
    after = snapshot()
    other.close()
    assert after["RunEvents"] == before["RunEvents"]
    assert after["RunAttempts"] == before["RunAttempts"]


def test_the_refusal_names_none_when_no_operator_decision_applies(repo: Repository) -> None:
    make_run(repo, "run-1", "queued")
    with pytest.raises(ResolveRefused) as refused:
        resolve(
            repo.conn, "run-1", "lost", "x", force=False, provider=ProcProvider(),
            clock=FakeClock(), actor=operator_actor(None),
        )  # fmt: skip
    assert refused.value.choices == ("cancelled",)


@linux_only
def test_a_quarantined_receipt_that_blocks_start_up_is_resolved_explained_and_unblocked(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    root = tmp_path / "receipts"
    (root / "at").mkdir(parents=True)
    (root / "at" / "at-1.json").write_bytes(b'{"not": "a receipt"}')
    first = startup(db_path, root, "--json")
    assert first.returncode == 3
    assert json.loads(first.stdout)["primary"]["candidates"][0]["row"] == "6"
    quarantined = root / ".quarantine" / "at" / "at-1.json"
    assert quarantined.exists()
    # Every later start-up stays blocked, and says which run, why, and what to run next.
    blocked = startup(db_path, root)
    assert blocked.returncode == 3
    assert "run-1" in blocked.stdout and "receipt_quarantined_earlier" in blocked.stdout
    # The explain command carries the receipt root, wrapped at 100 columns (D-22).
    explain = ["qlfsm", "explain", "--db", str(db_path), "--run", "run-1", "--receipt-root"]
    assert pasted(blocked.stdout) == [[*explain, str(root)]], blocked.stdout
    assert blocked.stdout.rstrip().endswith("verdict: start-up BLOCKED")
    out = resolve_cli(db_path, "run-1", "failed", reason="receipt corrupt; job rerun by hand")
    assert out.returncode == 0, out.stderr
    assert "quarantined receipt stays at .quarantine/at/at-1.json" in out.stdout
    # The purge time as `explain` shows it (ISO 8601, UTC), never epoch milliseconds.
    assert re.search(
        r"removes both after \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", out.stdout, re.M
    )
    assert "epoch ms" not in out.stdout
    explained = qlfsm("explain", "--db", str(db_path), "--run", "run-1")
    assert "user:operator:alice" in explained.stdout
    assert (
        "operator's decision -> failed, process not_running (pid_absent): receipt corrupt; "
        "job rerun by hand"
    ) in explained.stdout
    again = startup(db_path, root, "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    result = json.loads(again.stdout)
    assert result["safe"] is True and result["primary"]["scanned"] == 0
    # The quarantined copy stays until its purge time; so does the row that points at it.
    assert quarantined.exists() and result["sweep"]["quarantine"]["examined"] == 0
    row = repo.conn.execute(
        "SELECT state FROM LocalCompletionReceiptJournal WHERE attempt_id = 'at-1'"
    ).fetchone()
    assert row is not None and row[0] == "quarantined"


def test_every_target_each_state_allows_is_accepted(repo: Repository, db_path: Path) -> None:
    # One run per (attempt state, target) the tables allow: each resolves, exit 0.
    states = [("claimed", "dispatching"), ("starting", "dispatching"), ("running", "running")]
    cases = [(att, run, to) for att, run in states for to in legal_targets(run, [att])]
    for n, (att, run, to) in enumerate(cases):
        make_candidate(repo, f"run-{n}", f"at-{n}", attempt=att, run=run)
        out = resolve_cli(db_path, f"run-{n}", to)
        assert out.returncode == 0, (att, run, to, out.stderr)
        done = repo.get_run(f"run-{n}")
        assert done is not None and done.status == to
    # claimed: lost, cancelled; starting and running: all three.
    assert len(cases) == 2 + 2 * len(RESOLVE_TARGETS)


def test_every_active_attempt_moves_with_the_run(repo: Repository, db_path: Path) -> None:
    # spec 04 row 1 (more than one active Attempt) blocks start-up for good: resolve moves
    # them all, then the Run, in one transaction.
    version = make_run(repo, "run-1", "dispatching")
    for n in (1, 2):
        version = repo.create_attempt(
            run_id="run-1", attempt_id=f"at-{n}", expected_version=version, at_ms=1_700_000_000_000
        ).version
    out = resolve_cli(db_path, "run-1", "failed", "--json")
    assert out.returncode == 2 and "legal choices: lost, cancelled" in out.stderr
    out = resolve_cli(db_path, "run-1", "cancelled", "--json")
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout)
    assert [a["id"] for a in done["attempts"]] == ["at-1", "at-2"]
    assert done["version"] == version + 3
    statuses = [repo.get_attempt(f"at-{n}") for n in (1, 2)]
    assert [a.status for a in statuses if a] == ["cancelled", "cancelled"]
