"""Benchmark (not a test): the cost of one legacy-shadow keyset page at 10^5 legacy runs
against 10^3 (ADR-0448 §3, spec 05 "Candidates": keyset, never OFFSET).

    python benchmarks/bench_shadow.py [--small 1000] [--large 100000]

For each size it builds a real SQLite file with `db init`, fills it with legacy Runs in the
three active statuses (plus terminal ones, which the partial index leaves out) and one active
Attempt each, then times `storage.legacy_candidates` for a standalone page (32) at cursors
spread over the whole key range, and one whole standalone pass (`run_pass`, 4 pages, read-only
outcomes). The ratio large/small must stay near 1: a page is an index range seek, its cost does
not grow with the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from reconciler.shadow import BUDGETS, run_pass
from storage import connect, init_schema, legacy_candidates

T0 = 1_760_000_000_000
STATUSES = ("queued", "dispatching", "running", "succeeded", "failed")


def build(path: str, n: int) -> list[tuple[int, str]]:
    conn = connect(path, create=True)
    init_schema(conn, path=path)
    runs, attempts, keys = [], [], []
    for i in range(n):
        rid = f"0199{i:08x}-0000-7000-8000-000000000000"
        status = STATUSES[i % len(STATUSES)]
        created = T0 + i
        runs.append((rid, status, created))
        if status in ("queued", "dispatching", "running"):
            keys.append((created, rid))
            # Two Attempts, so every candidate is row 3 (ambiguous): the pass writes nothing
            # and repeating it measures the same work.
            for k in (1, 2):
                a_status = "claimed" if status == "queued" else "running"
                attempts.append((f"{rid[:-1]}{k}", rid, k, a_status, created))
    conn.execute("BEGIN")
    conn.executemany(
        'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
        "execution_origin, execution_owner, status, version, event_sequence, created_at_ms) "
        "VALUES (?, 'p', 'legacy-cron:1', '1', 'cron', 'manual', 'legacy', ?, 1, 1, ?)",
        runs,
    )
    conn.executemany(
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
        "callback_sequence, created_at_ms) VALUES (?, ?, ?, ?, 'legacy_local', 0, ?)",
        attempts,
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()
    return keys


def time_pages(path: str, keys: list[tuple[int, str]], repeats: int) -> float:
    conn = connect(path)
    try:
        cursors = [None, *(keys[int(len(keys) * f)] for f in (0.25, 0.5, 0.75, 0.99))]
        for cursor in cursors:  # warm the page cache and the statement cache first
            legacy_candidates(conn, ["manual"], cursor, 32)
        samples = []
        for _ in range(repeats):
            for cursor in cursors:
                t = time.perf_counter()
                legacy_candidates(conn, ["manual"], cursor, 32)
                samples.append(time.perf_counter() - t)
        return statistics.median(samples)
    finally:
        conn.close()


def time_pass(path: str, repeats: int) -> float:
    run_pass(path, origins=["manual"], budget=BUDGETS["standalone"])  # warm-up
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = run_pass(path, origins=["manual"], budget=BUDGETS["standalone"])
        samples.append(time.perf_counter() - t)
        assert out.counts.pages == 4
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=1_000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for n in (args.small, args.large):
            path = os.path.join(tmp, f"legacy-{n}.db")
            keys = build(path, n)
            page = time_pages(path, keys, args.repeats)
            whole = time_pass(path, max(3, args.repeats // 8))
            results[n] = (page, whole)
            print(
                f"{n:>7} legacy runs ({len(keys)} active): page of 32 {page * 1e6:8.1f} us, "
                f"standalone pass (4 pages, 128 candidates) {whole * 1e3:6.2f} ms"
            )
        (ps, ws), (pl, wl) = results[args.small], results[args.large]
        print(f"ratio {args.large}/{args.small}: page {pl / ps:.2f}, pass {wl / ws:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
