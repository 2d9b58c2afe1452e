"""What a long history costs the zero-candidate start-up and one `inspect` page (a script, not a
test; issue 27 items 4 and 5).

Each database is one QingLong made: QingLong's DDL only (its migrations 0001 and 0003, its
history rows, the 2.x tables as 2.x creates them) and none of qlfsm's own indexes (a node
`qlfsm db init` never touched), holding ``n`` terminal Runs of both owners (one Attempt each,
every one ended), zero candidates, and planner statistics (``ANALYZE``, which a node's
maintenance runs). It is built once with ``executemany`` in one transaction and reused from
``--dir`` (default /tmp/qlfsm-bench-history).

Each figure is measured as whole processes, every variant once per round in a rotating order,
the figure the median over the rounds, of the wall time and of the process's CPU time (user +
system, which a loaded machine inflates less):

- ``startup``: `qlfsm startup --db D --receipt-root R --json` (zero candidates);
- ``inspect``: `qlfsm inspect --db D --json` (one page, the default limit);
- ``inspect --after``: the same, one page from the middle of the history;
- ``inspect --status``: the same, one page of `failed` Runs.

``--before TREE`` adds each variant run from another checkout of qlfsm (``git worktree add``
or ``git archive`` of the commit before a change), ``PYTHONPATH=TREE``, in the same rounds: the
before and after figures come from one run, under one load.

Usage: python benchmarks/bench_history.py [--sizes 10000,1000000] [--rounds N] [--dir DIR]
       [--before TREE] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from storage._ddl import (  # noqa: E402
    LEGACY_TABLES,
    QL3_HISTORY_DDL,
    QL3_MIGRATIONS,
)
from storage._schema import QL3_STREAM, checksum  # noqa: E402

MAIN = "from reconciler.cli._main import main; raise SystemExit(main())"
T0 = 1_700_000_000_000
# Terminal states in proportions a node sees; both owners (QingLong's own runs and 2.x crons).
ENDED = ("succeeded",) * 14 + ("failed",) * 4 + ("cancelled", "timed_out")
ATTEMPT_OF = {"succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled",
              "timed_out": "timed_out"}  # fmt: skip


def run_id(i: int) -> str:
    # Time-ordered ids like QingLong's (UUIDv7-shaped: the creation time leads).
    return f"{T0 + i * 1000:012x}-7{i % 4096:03x}-8{i % 4093:03x}-{i:012x}"


def build(path: Path, n: int) -> None:
    """A QingLong-made database with ``n`` terminal Runs and statistics (ANALYZE)."""
    tmp = path.with_suffix(".building")
    for p in (tmp, Path(str(tmp) + "-wal"), Path(str(tmp) + "-shm")):
        p.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    conn.execute(QL3_HISTORY_DDL)
    for mig_id, stmts in QL3_MIGRATIONS:
        for s in stmts:
            conn.execute(s)
        conn.execute(
            'INSERT INTO "QingLong3SchemaMigrations" VALUES (?, ?, ?, ?, ?)',
            (mig_id, QL3_STREAM, "sqlite", checksum(stmts), T0),
        )
    for s in LEGACY_TABLES:
        if "qlfsm_" not in s:  # 2.x's own tables and indexes only
            conn.execute(s)
    runs = []
    attempts = []
    for i in range(n):
        status = ENDED[i % len(ENDED)]
        owner = "legacy" if i % 3 else "runtime"
        origin = "scheduled_node" if owner == "legacy" else "manual"
        at = T0 + i * 1000
        rid = run_id(i)
        runs.append((rid, "p1", f"task-{i % 50}", "r1", "system", origin, owner, status, 4, 4,
                     at, at + 1, at + 2, at + 900))  # fmt: skip
        attempts.append((f"a{rid}", rid, 1, ATTEMPT_OF[status], "local_process", at + 1, at + 2,
                         at + 900, 0 if status == "succeeded" else 1))  # fmt: skip
    conn.executemany(
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
        "execution_origin, execution_owner, status, version, event_sequence, created_at_ms, "
        "queued_at_ms, started_at_ms, finished_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        runs,
    )
    conn.executemany(
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, created_at_ms, '
        "started_at_ms, finished_at_ms, exit_code) VALUES (?,?,?,?,?,?,?,?,?)",
        attempts,
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    tmp.rename(path)


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one whole process, run in ``cwd``: `python -c`
    puts its working directory first on sys.path, so it must not hold a qlfsm tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env, cwd=cwd)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[3:6]} failed ({done.returncode}): {done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def bench(sizes: list[int], rounds: int, work: Path, before: str | None) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    root = work / "receipts"
    root.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # compiled bytecode, as installed
    env["PYTHONPATH"] = str(HERE.parent)
    for name in ("QL_DEPLOYMENT_PROFILE", "QL3_SHADOW_ORIGINS", "QLFSM_LOCK_BUDGET_S"):
        env.pop(name, None)
    py = [sys.executable, "-c", MAIN]
    result: dict[str, Any] = {"rounds": rounds, "sizes": {}}
    for n in sizes:
        db = work / f"history-{n}.db"
        if not db.exists():
            start = time.perf_counter()
            build(db, n)
            print(f"built {db} ({n} Runs) in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        d = str(db)
        runs = {
            "startup": [*py, "startup", "--db", d, "--receipt-root", str(root), "--json"],
            "inspect": [*py, "inspect", "--db", d, "--json"],
            "inspect --after": [*py, "inspect", "--db", d, "--after", run_id(n // 2), "--json"],
            "inspect --status": [*py, "inspect", "--db", d, "--status", "failed", "--json"],
        }
        envs = {name: env for name in runs}
        if before:
            old = dict(env, PYTHONPATH=before, PYTHONPYCACHEPREFIX=str(work / "pycache-before"))
            for name in list(runs):
                runs[f"{name} (before)"] = runs[name]
                envs[f"{name} (before)"] = old
        for name, argv in runs.items():  # one untimed run of each writes the bytecode
            timed(argv, envs[name], work)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        names = list(runs)
        for i in range(rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                times[name].append(timed(runs[name], envs[name], work))
        result["sizes"][n] = {
            name: {
                "wall_ms": round(statistics.median(w for w, _ in t) * 1000, 1),
                "cpu_ms": round(statistics.median(c for _, c in t) * 1000, 1),
            }
            for name, t in times.items()
        }
    result["load"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sizes", default="10000,1000000")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--dir", default="/tmp/qlfsm-bench-history")
    p.add_argument("--before", help="another qlfsm tree, measured in the same rounds")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out = bench(sizes, args.rounds, Path(args.dir), args.before)
    if args.json:
        print(json.dumps(out))
        return
    print(f"medians of {out['rounds']} rounds, wall / CPU ms (load after: {out['load']})")
    for n, med in out["sizes"].items():
        for k, v in med.items():
            print(f"{n:>9} Runs  {k:<28} {v['wall_ms']:>8} / {v['cpu_ms']}")


if __name__ == "__main__":
    main()
