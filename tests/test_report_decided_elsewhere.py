"""`qlfsm startup`'s human report of a Run another writer completed during the pass
(docs/decisions.md D-20, D-22): it is "decided elsewhere: <status now>", never "lost", and the
summary's "lost" counts only the runs this pass marked lost.

The race is real: a second connection (the QingLong writer) holds the SQLite write lock while
a real `qlfsm startup` process reads its candidates; once that process waits for the lock
(seen in ``/proc/<pid>/syscall``: it sleeps in SQLite's busy handler, the only sleep on its
way to its first write), the writer completes one Run and commits. The pass then writes, finds
what the writer left, and reports it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _primary_support import T0, linux_only, make_run

from storage import LOCK_BUDGET_ENV, Repository

pytestmark = linux_only

# x86-64 and arm64 numbers of nanosleep / clock_nanosleep (SQLite's busy handler sleeps in one).
SLEEPS = {"x86_64": {"35", "230"}, "aarch64": {"101", "115"}}
READY_S = 60.0


def claimed(repo: Repository, run_id: str, attempt_id: str) -> None:
    """A dispatching Run whose one Attempt is `claimed`: spec 04 row 7 marks it lost at once,
    with no probe and no grace, so the pass's first step after its reads is a write."""
    v = make_run(repo, run_id, "dispatching")
    repo.create_attempt(run_id=run_id, attempt_id=attempt_id, expected_version=v, at_ms=T0)


def sleeping(pid: int) -> bool:
    """Whether ``pid`` is inside a sleep system call now."""
    try:
        first = Path(f"/proc/{pid}/syscall").read_text().split(" ", 1)[0]
    except OSError:
        return False
    return first in SLEEPS.get(os.uname().machine, set())


def wait_until_waiting_for_the_lock(proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + READY_S
    while not sleeping(proc.pid):
        assert proc.poll() is None, "startup ended before it waited for the write lock"
        assert time.monotonic() < deadline, "startup never waited for the write lock"
        time.sleep(0.005)


def test_a_run_a_concurrent_writer_completed_is_reported_decided_elsewhere_and_not_counted_lost(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    claimed(repo, "run-a", "at-a")  # the QingLong writer completes this one during the pass
    claimed(repo, "run-b", "at-b")  # this one the pass marks lost itself
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    writer = sqlite3.connect(db_path, isolation_level=None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOYMENT"))}
    env[LOCK_BUDGET_ENV] = "120"  # the pass waits for the writer, however loaded the machine
    try:
        writer.execute("BEGIN IMMEDIATE")
        proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "startup", "--db", str(db_path),
             "--receipt-root", str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        try:
            wait_until_waiting_for_the_lock(proc)
            # QingLong's receipt processor: the Attempt and the Run succeeded, one commit.
            writer.execute(
                "UPDATE \"RunAttempts\" SET status = 'succeeded', exit_code = 0, "
                "finished_at_ms = ? WHERE id = 'at-a'",
                (T0 + 1,),
            )
            writer.execute(
                "UPDATE \"Runs\" SET status = 'succeeded', version = version + 1, "
                "finished_at_ms = ? WHERE id = 'run-a'",
                (T0 + 1,),
            )
            writer.execute("COMMIT")
            out, err = proc.communicate(timeout=READY_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        writer.close()

    assert proc.returncode == 0, (out, err)
    assert (
        "primary (ADR-0068): 2 scanned: 0 completed, 1 lost, 1 decided elsewhere, "
        "0 kept running, 0 blocked, 0 failed\n"
    ) in out, out
    # Whichever Run the pass wrote first, run-a is decided elsewhere: a Conflict at its write
    # (row 14) or a status changed since the page (row 2).
    [line_a] = [ln for ln in out.splitlines() if ln.startswith("run-a ")]
    assert re.fullmatch(
        r"run-a +(14|2) +decided elsewhere: succeeded +decided_elsewhere:succeeded", line_a
    ), out
    [line_b] = [ln for ln in out.splitlines() if ln.startswith("run-b ")]
    assert re.fullmatch(r"run-b +7 +lost +unstarted_claim", line_b), out
    assert " lost " not in line_a and out.rstrip().endswith("verdict: SAFE to start"), out
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as reader:
        statuses = dict(reader.execute('SELECT id, status FROM "Runs"').fetchall())
        lost_events = reader.execute(
            "SELECT run_id FROM \"RunEvents\" WHERE type = 'run.lost'"
        ).fetchall()
    assert statuses == {"run-a": "succeeded", "run-b": "lost"}
    assert lost_events == [("run-b",)]


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("decided_elsewhere:succeeded", "decided elsewhere: succeeded"),
        ("decided_elsewhere:lost", "decided elsewhere: lost"),
        ("receipt_failed", "completed"),
        ("process_not_running:zombie_or_dead", "lost"),
    ],
)
def test_each_kind_of_recovered_is_named_for_what_happened_to_the_run(
    reason: str, words: str
) -> None:
    from reconciler.cli._report import outcome_words, plain_counts

    cand = {"run_id": "r", "row": "13", "outcome": "recovered", "reason": reason}
    assert outcome_words(cand) == words
    counts = plain_counts({"recovered": 1, "candidates": [cand]})
    if words.startswith("decided elsewhere"):
        assert counts.startswith("0 completed, 0 lost, 1 decided elsewhere, 0 kept running")
    else:
        assert counts.startswith(f"{int(words == 'completed')} completed, "
                                 f"{int(words == 'lost')} lost, 0 kept running")  # fmt: skip
