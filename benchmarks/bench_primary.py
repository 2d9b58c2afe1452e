"""Benchmarks of the ADR-0068 pass (a script, not a test): each figure is a ratio in ONE run.

(a) `qlfsm reconcile` on zero candidates, the whole process, against `python -c` doing only the
    candidate query with sqlite3 (target <= 2.0);
(b) 256 `not_running` candidates (real /proc: the pid is gone) against a raw sqlite3 script doing
    the same statements per candidate plus one grace (target <= 1.5);
(c) the peak RSS of both sides of (b).

Usage: python benchmarks/bench_primary.py [--rounds N] [--json]
Each round runs both sides back to back (interleaved), so machine noise hits both alike; the
figure is the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from reconciler.node._identity import ProcProvider, capture_handle  # noqa: E402
from storage import PRIMARY_CANDIDATES_SQL, connect, init_schema  # noqa: E402

N = 256
T0 = 1_700_000_000_000

RAW_ZERO = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect('file:' + sys.argv[1] + '?mode=rw', uri=True, isolation_level=None)\n"
    "rows = c.execute(sys.argv[2], (257,)).fetchall()\n"
    "print(len(rows))\n"
)

# The raw equivalent of the reconciler's work on N not_running candidates: the same reads and
# writes per candidate, one grace, the verifier's query — without machines, guards or ports.
RAW_PASS = r"""
import os, sqlite3, sys, time, json, uuid
db, root, sql, grace = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
c = sqlite3.connect("file:" + db + "?mode=rw", uri=True, isolation_level=None, timeout=5)
page = c.execute(sql, (257,)).fetchall()
ATTS = 'SELECT * FROM "RunAttempts" WHERE run_id = ? ORDER BY attempt'
JOURNAL = 'SELECT * FROM "LocalCompletionReceiptJournal" WHERE attempt_id = ?'
def receipt(att):
    try:
        fd = os.open(os.path.join(root, att[:2]), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    os.close(fd)
def probe(pid):
    open("/proc/sys/kernel/random/boot_id").read()
    try:
        open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return "not_running"
waiting = []
for run_id, status, version, active in page:
    run = c.execute('SELECT * FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    atts = c.execute(ATTS, (run_id,)).fetchall()
    att_id, pid = atts[-1][0], atts[-1][11]
    receipt(att_id)
    c.execute(JOURNAL, (att_id,)).fetchone()
    probe(pid)
    waiting.append((run_id, att_id, version))
time.sleep(grace)
c.execute("PRAGMA foreign_keys=ON"); c.execute("PRAGMA synchronous=FULL")
c.execute("PRAGMA journal_mode")
now = int(time.time() * 1000)
for run_id, att_id, version in waiting:
    receipt(att_id)
    c.execute('SELECT * FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    c.execute(ATTS, (run_id,)).fetchall()
    c.execute("BEGIN IMMEDIATE")
    c.execute('SELECT * FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    c.execute('SELECT * FROM "RunAttempts" WHERE id = ? AND run_id = ?', (att_id, run_id))
    c.execute('UPDATE "RunAttempts" SET status = ?, error_code = ?, error_summary = ?, '
              'finished_at_ms = ? WHERE id = ? AND status = ? AND callback_sequence = ?',
              ("lost", "RECOVERY_PROCESS_NOT_RUNNING", "s", now, att_id, "running", 0))
    for seq, typ in ((version + 1, "attempt.lost"), (version + 2, "run.lost")):
        c.execute('UPDATE "Runs" SET version = version + 1, event_sequence = event_sequence + 1'
                  + (", status = 'lost'" if typ == "run.lost" else "")
                  + ' WHERE id = ? AND version = ?', (run_id, seq - 1))
        c.execute('INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, '
                  'actor_id, attempt_id, payload, created_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?)',
                  (str(uuid.uuid4()), run_id, seq, typ, f"{typ}:{run_id}", "reconciler",
                   "local-startup", att_id, json.dumps({"to_status": "lost"}), now))
    c.execute("COMMIT")
c.execute(sql, (257,)).fetchall()
print(len(waiting))
"""


def make_db(path: Path, candidates: int) -> None:
    """A QingLong database with ``candidates`` running Runs whose process is gone."""
    from storage import Actor, AttemptChange, Repository, RunChange

    conn = connect(str(path), create=True)
    init_schema(conn, path=str(path))
    if candidates:
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        handle = capture_handle(proc.pid, ProcProvider())
        proc.kill()
        proc.wait()
        repo = Repository(conn)
        system = Actor("system")
        for i in range(candidates):
            run_id, att_id = f"run-{i:04d}", f"at-{i:04d}"
            v = repo.create_run(run_id=run_id, at_ms=T0).version
            for trigger in ("queue", "dispatch"):
                v = repo.advance(run_id, v, [RunChange(trigger)], actor=system, at_ms=T0).version
            v = repo.create_attempt(
                run_id=run_id, attempt_id=att_id, expected_version=v, at_ms=T0
            ).version
            v = repo.advance(
                run_id,
                v,
                [
                    AttemptChange(att_id, "start", set={"callback_token_hash": "0" * 64}),
                    AttemptChange(
                        att_id,
                        "run",
                        set={"executor_handle": handle, "pid": proc.pid, "started_at_ms": T0},
                    ),
                    RunChange("start"),
                ],
                actor=system,
                at_ms=T0,
            ).version
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def timed(argv: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) of that one child, and its stdout.

    The RSS comes from GNU time's ``%M``: ``wait4`` in this process would report the RSS this
    (large) benchmark process had when it forked, not the child's.
    """
    fd, rss_file = tempfile.mkstemp(prefix="qlfsm-rss-")
    os.close(fd)
    start = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-o", rss_file, "-f", "%M", *argv],
        capture_output=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    rss = int(Path(rss_file).read_text().split()[-1])
    os.unlink(rss_file)
    if done.returncode not in (0, 3):
        raise SystemExit(f"{argv[:3]} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed, rss, done.stdout.decode()


def qlfsm_argv() -> list[str]:
    script = Path(sys.executable).parent / "qlfsm"
    return [str(script)] if script.exists() else [sys.executable, "-m", "reconciler"]


def bench(rounds: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="qlfsm-bench-"))
    try:
        zero = work / "zero.db"
        make_db(zero, 0)
        template = work / "many.db"
        make_db(template, N)
        # The launcher creates the root before any spawn; a missing root beside launched
        # Attempts is a configuration error (docs/decisions.md D-3c). The zero-candidate path
        # never looks at it.
        (work / "receipts").mkdir(mode=0o700)
        root = str(work / "receipts")
        q_zero, r_zero = [], []
        q_many, r_many, q_rss, r_rss = [], [], [], []
        for i in range(rounds):
            q_zero.append(
                timed([*qlfsm_argv(), "reconcile", "--db", str(zero), "--receipt-root", root])[0]
            )
            r_zero.append(
                timed([sys.executable, "-c", RAW_ZERO, str(zero), PRIMARY_CANDIDATES_SQL])[0]
            )
            a, b = work / f"q{i}.db", work / f"r{i}.db"
            shutil.copyfile(template, a)
            shutil.copyfile(template, b)
            t, rss, out = timed(
                [*qlfsm_argv(), "reconcile", "--db", str(a), "--receipt-root", root, "--json"]
            )
            summary = json.loads(out)
            assert summary["recovered"] == N, summary
            q_many.append(t)
            q_rss.append(rss)
            t, rss, out = timed(
                [sys.executable, "-c", RAW_PASS, str(b), root, PRIMARY_CANDIDATES_SQL, "0.1"]
            )
            assert out.strip() == str(N)
            r_many.append(t)
            r_rss.append(rss)
        med = statistics.median
        return {
            "rounds": rounds,
            "a_zero_qlfsm_ms": round(med(q_zero) * 1000, 1),
            "a_zero_raw_ms": round(med(r_zero) * 1000, 1),
            "a_ratio": round(med(q_zero) / med(r_zero), 2),
            "b_256_qlfsm_ms": round(med(q_many) * 1000, 1),
            "b_256_raw_ms": round(med(r_many) * 1000, 1),
            "b_ratio": round(med(q_many) / med(r_many), 2),
            "c_peak_rss_qlfsm_kib": max(q_rss),
            "c_peak_rss_raw_kib": max(r_rss),
            "c_ratio": round(max(q_rss) / max(r_rss), 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = bench(args.rounds)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>24}  {value}")
        print(
            f"targets: (a) <= 2.0 {'ok' if result['a_ratio'] <= 2.0 else 'MISSED'}; "
            f"(b) <= 1.5 {'ok' if result['b_ratio'] <= 1.5 else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
