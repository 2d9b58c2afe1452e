"""`explain`, `explain --json` and `inspect --run` on one run with a long history (issue 29).

A script, not a test: builds (once, into --dir) a run whose Attempt was lost by row 13 and which
then took a late-callback storm, at 10, 1 000, 10 000 and 100 000 events, then runs each command
on each as whole processes and prints the median wall time, the peak RSS (GNU time's ``%M`` of
the child) and the output's size and lines; the growth factor is RSS at 100 000 / RSS at 10 000.

    python benchmarks/bench_history_events.py --rounds 5 [--dir /tmp/histbench] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = (10, 1_000, 10_000, 100_000)
TIME = "/usr/bin/time"


def build(path: str, events: int) -> None:
    """The run: created .. running (7 events), row 13's two `lost` events, then the storm."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from _decisions import lose_after_grace
    from _primary_support import T0, make_candidate
    from history_support import add_storm

    from storage import Repository, connect, init_schema

    conn = connect(path, create=True)
    try:
        init_schema(conn, path=path)
        repo = Repository(conn)
        make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
        lose_after_grace(repo, "run-1", "at-1")
        (base,) = conn.execute('SELECT event_sequence FROM "Runs"').fetchone()
        add_storm(conn, "run-1", "at-1", events - base, T0 + 5)
    finally:
        conn.close()


# The plain-Python floors (issue 29): the least any program does for the same output. For the
# human page, every event's payload must be parsed (whether an event moves a state or records a
# decision is in it); for `--json`, each event is also a step object of the command's schema
# (19 members) encoded through `json`, a page at a time, and written.
FLOOR_READ = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
after, n = 0, 0
while True:
    rows = conn.execute('SELECT id, run_id, sequence, type, dedupe_key, actor_type, actor_id, '
        'attempt_id, payload, created_at_ms FROM "RunEvents" WHERE run_id = ? AND sequence > ? '
        'ORDER BY sequence LIMIT 1000', (sys.argv[2], after)).fetchall()
    n += sum(1 for r in rows if json.loads(r[8]) is not None)
    if len(rows) < 1000:
        break
    after = rows[-1][2]
print(n)
"""
FLOOR_JSON = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
encode = json.JSONEncoder(ensure_ascii=False).encode
after, sep = 0, ""
sys.stdout.write('{"steps": [')
while True:
    rows = conn.execute('SELECT id, run_id, sequence, type, dedupe_key, actor_type, actor_id, '
        'attempt_id, payload, created_at_ms FROM "RunEvents" WHERE run_id = ? AND sequence > ? '
        'ORDER BY sequence LIMIT 1000', (sys.argv[2], after)).fetchall()
    page = [{"sequence": r[2], "at_ms": r[9], "at": str(r[9]), "type": r[3],
             "actor_type": r[5], "actor_id": r[6], "attempt_id": r[7], "machine": None,
             "from": None, "to": None, "trigger": r[3], "trigger_from_tables": False,
             "record": None, "row": None, "row_recorded": False, "row_facts": None,
             "decision": None, "resolution": None, "payload": json.loads(r[8])} for r in rows]
    if page:
        sys.stdout.write(sep + encode(page)[1:-1])
        sep = ", "
    if len(rows) < 1000:
        break
    after = rows[-1][2]
sys.stdout.write("]}\\n")
"""
# Each process may write its bytecode (a sandbox may forbid it by PYTHONDONTWRITEBYTECODE):
# an installed qlfsm runs from compiled modules, not from source compiled on every start.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(argv: list[str]) -> tuple[float, int, int, int]:
    """Wall seconds, peak RSS KiB, output bytes and lines of one whole process."""
    with tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()
        proc = subprocess.run(
            [TIME, "-f", "%M", "-o", rss.name, *argv], capture_output=True, check=True, env=ENV
        )
        wall = time.perf_counter() - start
        kib = int(rss.read().split()[-1])
    return wall, kib, len(proc.stdout), proc.stdout.count(b"\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "qlfsm-history"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    commands = {
        "explain": ["explain", "--run", "run-1"],
        "explain --json": ["explain", "--run", "run-1", "--json"],
        "inspect --run": ["inspect", "--run", "run-1"],
    }
    results: dict[str, dict[str, dict[str, float]]] = {}
    for n in SIZES:
        db = os.path.join(args.dir, f"history-{n}.db")
        if not os.path.exists(db):
            build(db, n)
        variants = {
            name: [sys.executable, "-m", "reconciler", *cmd, "--db", db]
            for name, cmd in commands.items()
        }
        variants["floor: read every event"] = [sys.executable, "-c", FLOOR_READ, db, "run-1"]
        variants["floor: --json"] = [sys.executable, "-c", FLOOR_JSON, db, "run-1"]
        for name, argv in variants.items():
            measure(argv)  # warm-up: bytecode compiled, file in the page cache
            runs = [measure(argv) for _ in range(args.rounds)]
            results.setdefault(name, {})[str(n)] = {
                "ms": round(statistics.median(r[0] for r in runs) * 1000),
                "rss_mib": round(max(r[1] for r in runs) / 1024, 1),
                "bytes": runs[0][2],
                "lines": runs[0][3],
            }
    for by_size in results.values():
        by_size["growth"] = {
            "rss_100k_over_10k": round(
                by_size["100000"]["rss_mib"] / by_size["10000"]["rss_mib"], 2
            )
        }
    if args.json:
        print(json.dumps({"load": os.getloadavg(), "results": results}))
        return 0
    print(f"load average {os.getloadavg()}")
    for name, by_size in results.items():
        print(f"\n{name}")
        for n in SIZES:
            r = by_size[str(n)]
            print(
                f"  {n:>7} events: {r['ms']:>6} ms  {r['rss_mib']:>6} MiB  "
                f"{r['bytes']:>9} bytes  {r['lines']:>7} lines"
            )
        print(f"  growth of peak RSS 10 000 -> 100 000: {by_size['growth']['rss_100k_over_10k']}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
