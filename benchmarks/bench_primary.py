"""Benchmarks of the ADR-0068 pass (a script, not a test): each figure is a ratio in ONE run.

(a) `qlfsm reconcile` on zero candidates, the whole process, against `python -c` doing only the
    candidate query with sqlite3 (target <= 1.4);
(b) 256 `not_running` candidates (real /proc: the pid is gone, real receipt root) against a raw
    sqlite3 script doing the candidate query, one grace, and per candidate one
    `BEGIN IMMEDIATE` with the same compare-and-set UPDATEs and event INSERTs (no receipts, no
    /proc; target <= 1.3);
    Reported beside it, not a target: the same raw script plus only what ADR-0068 and the
    redesign's own rules add to it (the floor): loading `transitions`, per candidate the Run
    read before the decision and its re-check inside the transaction, two receipt lookups on
    the real receipt root and one /proc probe. `b_floor_ratio` is floor/raw, `b_vs_floor`
    qlfsm/floor: what qlfsm's own code costs beyond what the records require;
(c) the peak RSS of both sides of (b) (target <= 1.5);
(d) SQL statements per dead candidate, counted with sqlite3's trace callback in-process
    (aim <= 8).

Usage: python benchmarks/bench_primary.py [--rounds N] [--json] [--instructions]
Each round runs both sides back to back, in alternating order, so machine noise hits both
alike; the figure is the ratio of the medians. The load average is reported with it.
``--instructions`` adds (a) and (b) as ratios of instructions executed (valgrind's cachegrind,
one run of each side, PYTHONHASHSEED=0): CPU work only (no fsync, no sleep, no scheduling),
but the same from run to run whatever the load.
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

# The raw floor of the reconciler's work on N not_running candidates (README "Performance"): the
# candidate query, one grace, and per candidate ONE `BEGIN IMMEDIATE` with the same
# compare-and-set UPDATEs (one per aggregate) and the same two event INSERTs (payloads of the
# same shape and size), under the write pragmas qlfsm uses. No receipts, no /proc, no reads of
# the Run, no verifier: everything qlfsm does beyond this is what the ratio measures.
RAW_PASS = r"""
import json, os, sqlite3, sys, time
db, sql, grace = sys.argv[1], sys.argv[2], float(sys.argv[3])
c = sqlite3.connect("file:" + db + "?mode=rw", uri=True, isolation_level=None, timeout=5)
page = c.execute(sql, (257,)).fetchall()
time.sleep(grace)
c.execute("PRAGMA foreign_keys=ON"); c.execute("PRAGMA synchronous=FULL")
c.execute("PRAGMA journal_mode")
now = int(time.time() * 1000)
code = "RECOVERY_PROCESS_NOT_RUNNING"
summary = "Durable process identity proves the execution is not running"
decision = {"record": "ADR-0068", "row": "13", "reason": "process_not_running:pid_absent",
            "evidence": {"receipt": "missing", "reread": "missing", "process": "not_running",
                         "probe_reason": "pid_absent", "pid_matches": True, "grace_paid": True,
                         "verifier": None}}
EVENT = ('INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, '
         'actor_id, attempt_id, payload, created_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?)')
for run_id, status, version, active in page:
    att_id = "at-" + run_id[4:]
    c.execute("BEGIN IMMEDIATE")
    cur = c.execute('UPDATE "RunAttempts" SET status = ?, error_code = ?, error_summary = ?, '
                    'finished_at_ms = ? WHERE id = ? AND status = ? AND callback_sequence = ?',
                    ("lost", code, summary, now, att_id, "running", 0))
    assert cur.rowcount == 1
    seq = version  # event_sequence == version for these Runs
    payloads = (
        {"attempt_id": att_id, "from_status": "running", "to_status": "lost",
         "version": version + 1, "error_code": code, "decision": decision},
        {"from_status": "running", "to_status": "lost", "version": version + 2,
         "error_code": code, "decision": decision},
    )
    for k, (typ, payload) in enumerate(zip(("attempt.lost", "run.lost"), payloads), 1):
        c.execute(EVENT, (os.urandom(16).hex(), run_id, seq + k, typ, f"{typ}:{run_id}",
                          "reconciler", "local-startup", att_id,
                          json.dumps(payload, separators=(",", ":"), sort_keys=True), now))
    cur = c.execute('UPDATE "Runs" SET error_code = ?, error_summary = ?, event_sequence = ?, '
                    'status = ?, version = ? WHERE id = ? AND version = ? AND status = ?',
                    (code, summary, seq + 2, "lost", version + 2, run_id, version, "running"))
    assert cur.rowcount == 1
    c.execute("COMMIT")
print(len(page))
"""


# The floor (not a target): RAW_PASS plus the work no implementation of ADR-0068 with this
# design can skip. The machine library is loaded (the decisions are `transitions` machines);
# per candidate the Run with its Attempts is read once before the decision and once inside the
# write transaction (the re-check), the receipt path is looked up twice (first read, and again
# after the grace: shard directory, then the file) on the real receipt root, and the
# candidate's pid is probed in /proc once; the boot id is read once per pass.
FLOOR_PASS = "import transitions.core\n" + RAW_PASS.replace(
    "db, sql, grace = sys.argv[1], sys.argv[2], float(sys.argv[3])\n",
    "db, sql, grace = sys.argv[1], sys.argv[2], float(sys.argv[3])\n"
    "SEL, ROOT, PID = sys.argv[4], sys.argv[5], int(sys.argv[6])\n"
    "open('/proc/sys/kernel/random/boot_id', 'rb').read()\n",
).replace(
    '    c.execute("BEGIN IMMEDIATE")\n',
    "    c.execute(SEL, (run_id,)).fetchall()\n"
    "    for _ in range(2):\n"
    "        try:\n"
    "            os.close(os.open(ROOT + '/' + att_id[:2], os.O_RDONLY | os.O_DIRECTORY))\n"
    "            os.close(os.open(ROOT + '/' + att_id[:2] + '/' + att_id + '.json', os.O_RDONLY))\n"
    "        except FileNotFoundError:\n"
    "            pass\n"
    "    try:\n"
    "        open(f'/proc/{PID}/stat', 'rb').read()\n"
    "    except FileNotFoundError:\n"
    "        os.stat('/proc')\n"
    '    c.execute("BEGIN IMMEDIATE")\n'
    "    c.execute(SEL, (run_id,)).fetchall()\n",
)


def make_db(path: Path, candidates: int) -> int:
    """A QingLong database with ``candidates`` running Runs whose process is gone; that
    process's pid (0 without candidates)."""
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
    return proc.pid if candidates else 0


# Both sides run with compiled bytecode, as an installed qlfsm does: this environment may set
# PYTHONDONTWRITEBYTECODE, which would make every qlfsm process compile its own modules again.
ENV: dict[str, str] = {}


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
        env=ENV or None,
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


def install_kind() -> str:
    """How the measured qlfsm is installed: an editable install runs setuptools' import finder
    in every process (about 17 M instructions here), which a node's `pip install .` does not."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    if any(site.glob("__editable__*qlfsm*")):
        return "editable (its import finder runs in every qlfsm process: use `pip install .`)"
    if any(site.glob("qlfsm-*.dist-info")):
        return "installed"
    return "not installed (python -m reconciler)"


def instructions(argv: list[str]) -> int:
    """Instructions the whole process executes (valgrind --tool=cachegrind, no cache model)."""
    env = dict(ENV or os.environ, PYTHONHASHSEED="0")
    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            *argv,
        ],
        capture_output=True,
        check=False,
        env=env,
    )
    if done.returncode not in (0, 3):
        raise SystemExit(f"{argv[:3]} under valgrind failed: {done.stderr.decode()[-400:]}")
    for line in done.stderr.decode().splitlines():
        if "I   refs:" in line or "I refs:" in line:
            return int(line.split(":")[1].replace(",", ""))
    raise SystemExit("valgrind printed no instruction count")


def statements_per_dead_candidate(work: Path, n: int = 32) -> float:
    """(d): every statement the pass sends, minus the ones it sends once per pass."""
    from reconciler.node import SystemClock
    from reconciler.node._receipt_store import FileReceiptStore
    from reconciler.primary._pass import reconcile_connection

    counts = {}
    for size in (n, 2 * n):
        db = work / f"count-{size}.db"
        make_db(db, size)
        conn = connect(str(db))
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        summary = reconcile_connection(
            conn, FileReceiptStore(str(work / "receipts")), ProcProvider(), SystemClock()
        )
        conn.close()
        assert summary["recovered"] == size, summary
        counts[size] = len(seen)
    return (counts[2 * n] - counts[n]) / n


def bench(rounds: int, count_instructions: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="qlfsm-bench-"))
    try:
        zero = work / "zero.db"
        make_db(zero, 0)
        template = work / "many.db"
        dead_pid = make_db(template, N)
        from storage._candidates import RUN_WITH_ATTEMPTS_SQL

        floor_args = [RUN_WITH_ATTEMPTS_SQL, str(work / "receipts"), str(dead_pid)]
        # The launcher creates the root before any spawn; a missing root beside launched
        # Attempts is a configuration error (docs/decisions.md D-3c). The zero-candidate path
        # never looks at it.
        (work / "receipts").mkdir(mode=0o700)
        root = str(work / "receipts")
        ENV.update(os.environ)
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        warm = work / "warm.db"
        shutil.copyfile(template, warm)  # one untimed run of each side writes the bytecode
        timed([*qlfsm_argv(), "reconcile", "--db", str(warm), "--receipt-root", root])
        timed([*qlfsm_argv(), "reconcile", "--db", str(zero), "--receipt-root", root])
        timed([sys.executable, "-c", RAW_ZERO, str(zero), PRIMARY_CANDIDATES_SQL])
        shutil.copyfile(template, warm)
        timed(
            [sys.executable, "-c", FLOOR_PASS, str(warm), PRIMARY_CANDIDATES_SQL, "0", *floor_args]
        )
        per_candidate = statements_per_dead_candidate(work)
        load_before = os.getloadavg()
        q_zero, r_zero = [], []
        q_many, r_many, q_rss, r_rss, f_many = [], [], [], [], []
        for i in range(rounds):
            a, b, f = work / f"q{i}.db", work / f"r{i}.db", work / f"f{i}.db"
            for copy in (a, b, f):
                shutil.copyfile(template, copy)

            def ours_zero() -> None:
                q_zero.append(
                    timed([*qlfsm_argv(), "reconcile", "--db", str(zero), "--receipt-root", root])[
                        0
                    ]
                )

            def raw_zero() -> None:
                r_zero.append(
                    timed([sys.executable, "-c", RAW_ZERO, str(zero), PRIMARY_CANDIDATES_SQL])[0]
                )

            def ours_many(a: Path = a) -> None:
                t, rss, out = timed(
                    [*qlfsm_argv(), "reconcile", "--db", str(a), "--receipt-root", root, "--json"]
                )
                summary = json.loads(out)
                assert summary["recovered"] == N, summary
                q_many.append(t)
                q_rss.append(rss)

            def raw_many(b: Path = b) -> None:
                t, rss, out = timed(
                    [sys.executable, "-c", RAW_PASS, str(b), PRIMARY_CANDIDATES_SQL, "0.1"]
                )
                assert out.strip() == str(N)
                r_many.append(t)
                r_rss.append(rss)

            def floor_many(f: Path = f) -> None:
                t, _, out = timed(
                    [
                        sys.executable,
                        "-c",
                        FLOOR_PASS,
                        str(f),
                        PRIMARY_CANDIDATES_SQL,
                        "0.1",
                        *floor_args,
                    ]
                )
                assert out.strip() == str(N)
                f_many.append(t)

            groups = ((ours_zero, raw_zero), (ours_many, raw_many, floor_many))
            for group in groups:
                for side in group if i % 2 == 0 else reversed(group):
                    side()
        med = statistics.median
        counted: dict[str, Any] = {}
        if count_instructions:
            a, b = work / "iq.db", work / "ir.db"
            shutil.copyfile(template, a)
            shutil.copyfile(template, b)
            iq_zero = instructions(
                [*qlfsm_argv(), "reconcile", "--db", str(zero), "--receipt-root", root]
            )
            ir_zero = instructions(
                [sys.executable, "-c", RAW_ZERO, str(zero), PRIMARY_CANDIDATES_SQL]
            )
            iq_many = instructions(
                [*qlfsm_argv(), "reconcile", "--db", str(a), "--receipt-root", root, "--json"]
            )
            ir_many = instructions(
                [sys.executable, "-c", RAW_PASS, str(b), PRIMARY_CANDIDATES_SQL, "0.1"]
            )
            f = work / "if.db"
            shutil.copyfile(template, f)
            floor_argv = [sys.executable, "-c", FLOOR_PASS, str(f), PRIMARY_CANDIDATES_SQL, "0.1"]
            if_many = instructions([*floor_argv, *floor_args])
            counted = {
                "a_instructions_qlfsm": iq_zero,
                "a_instructions_raw": ir_zero,
                "a_instructions_ratio": round(iq_zero / ir_zero, 2),
                "b_instructions_qlfsm": iq_many,
                "b_instructions_raw": ir_many,
                "b_instructions_ratio": round(iq_many / ir_many, 2),
                "b_instructions_floor": if_many,
                "b_instructions_floor_ratio": round(if_many / ir_many, 2),
            }
        return {
            "qlfsm": install_kind(),
            "rounds": rounds,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "a_zero_qlfsm_ms": round(med(q_zero) * 1000, 1),
            "a_zero_raw_ms": round(med(r_zero) * 1000, 1),
            "a_ratio": round(med(q_zero) / med(r_zero), 2),
            "b_256_qlfsm_ms": round(med(q_many) * 1000, 1),
            "b_256_raw_ms": round(med(r_many) * 1000, 1),
            "b_ratio": round(med(q_many) / med(r_many), 2),
            "b_floor_ms": round(med(f_many) * 1000, 1),
            "b_floor_ratio": round(med(f_many) / med(r_many), 2),
            "b_vs_floor": round(med(q_many) / med(f_many), 2),
            "c_peak_rss_qlfsm_kib": max(q_rss),
            "c_peak_rss_raw_kib": max(r_rss),
            "c_ratio": round(max(q_rss) / max(r_rss), 2),
            "d_statements_per_dead_candidate": per_candidate,
            **counted,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--instructions", action="store_true", help="also count instructions (needs valgrind)"
    )
    args = p.parse_args()
    result = bench(args.rounds, args.instructions)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>32}  {value}")
        print(
            f"targets: (a) <= 1.4 {'ok' if result['a_ratio'] <= 1.4 else 'MISSED'}; "
            f"(b) <= 1.3 {'ok' if result['b_ratio'] <= 1.3 else 'MISSED'}; "
            f"(c) <= 1.5 {'ok' if result['c_ratio'] <= 1.5 else 'MISSED'}; "
            f"(d) <= 8 {'ok' if result['d_statements_per_dead_candidate'] <= 8 else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
