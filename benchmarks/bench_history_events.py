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


def measure(argv: list[str]) -> tuple[float, int, int, int]:
    """Wall seconds, peak RSS KiB, output bytes and lines of one whole process."""
    with tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()
        proc = subprocess.run(
            [TIME, "-f", "%M", "-o", rss.name, *argv], capture_output=True, check=True
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
        for name, cmd in commands.items():
            argv = [sys.executable, "-m", "reconciler", *cmd, "--db", db]
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
