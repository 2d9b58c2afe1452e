"""What plain Python would cost the zero-candidate start-up (a script, not a test).

Each figure is measured in ONE run, as whole processes, every variant once per round in a
rotating order, the figure the median over the rounds:

- ``reconcile``: `qlfsm reconcile --db D --receipt-root R --json` on zero candidates, as it is
  (its usual command line read by hand, the empty summary written by hand);
- ``reconcile+argparse``: the same pass through the standard parser (``--receipt-r``, an
  abbreviation the hand parser leaves to argparse: ``reconciler.cli._util`` and ``argparse``);
- ``reconcile+json``: the same, with ``json`` imported (what ``json.dumps`` would load);
- ``reconcile+reports``: the same, with the typed reports imported (``reconciler._reports``:
  ``dataclasses``, ``typing``, ``copy``), what ``reconciler.reconcile`` would load;
- ``startup``: `qlfsm startup --db D --receipt-root R --json` on zero candidates;
- ``imports`` / ``imports+reports``: the start-up's share of the typed reports, the difference
  between importing what `startup` imports anyway (``argparse``, ``json``, ``typing``,
  ``dataclasses``: the shadow entry's audit record is one) with and without
  ``reconciler._reports``;
- ``raw``: `python -c` running only the candidate statement with ``sqlite3`` (the reference).

Each cost is printed as a share of its path (``reconcile`` or ``startup``); benchmarks/README.md
"Exceptions" keeps one line for each construct that costs >= 5 % of its path.

``--instructions`` adds the same shares in instructions executed (valgrind's cachegrind, one
run of each, ``PYTHONHASHSEED=0``): CPU work only, but the same whatever the load.

Usage: python benchmarks/bench_startup.py [--rounds N] [--json] [--instructions]
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from storage import PRIMARY_CANDIDATES_SQL, connect, init_schema  # noqa: E402

RAW = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect('file:' + sys.argv[1] + '?mode=rw', uri=True, isolation_level=None)\n"
    "rows = c.execute(sys.argv[2], (257,)).fetchall()\n"
    "print(len(rows))\n"
)
MAIN = "from reconciler.cli._main import main; raise SystemExit(main())"
STARTUP_IMPORTS = "import argparse, json, typing, dataclasses, reconciler.shadow._entry"


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """Instructions the whole process executes (valgrind --tool=cachegrind, no cache model)."""
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         *argv],
        capture_output=True, check=False, env=dict(env, PYTHONHASHSEED="0"),
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} under valgrind failed: {done.stderr.decode()[-400:]}")
    for line in done.stderr.decode().splitlines():
        if "I   refs:" in line or "I refs:" in line:
            return int(line.split(":")[1].replace(",", ""))
    raise SystemExit("valgrind printed no instruction count")


def variants(db: str, root: str) -> dict[str, list[str]]:
    py = sys.executable
    args = ["reconcile", "--db", db, "--receipt-root", root, "--json"]
    return {
        "raw": [py, "-c", RAW, db, PRIMARY_CANDIDATES_SQL],
        "reconcile": [py, "-c", MAIN, *args],
        # An abbreviation the hand parser leaves to argparse: the same pass, parsed by argparse.
        "reconcile+argparse": [py, "-c", MAIN, *args[:3], "--receipt-r", *args[4:]],
        "reconcile+json": [py, "-c", f"import json; {MAIN}", *args],
        "reconcile+reports": [py, "-c", f"import reconciler._reports; {MAIN}", *args],
        "startup": [py, "-c", MAIN, "startup", "--db", db, "--receipt-root", root, "--json"],
        # What `startup` imports anyway (the shadow entry's audit record is a dataclass).
        "imports": [py, "-c", STARTUP_IMPORTS],
        "imports+reports": [py, "-c", f"{STARTUP_IMPORTS}, reconciler._reports"],
    }


def bench(rounds: int, count_instructions: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="qlfsm-bench-startup-"))
    db = work / "zero.db"
    conn = connect(str(db), create=True)
    init_schema(conn, path=str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    root = work / "receipts"
    root.mkdir(mode=0o700)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # compiled bytecode, as installed
    env["PYTHONPATH"] = str(HERE.parent)
    for name in ("QL_DEPLOYMENT_PROFILE", "QL3_SHADOW_ORIGINS", "QLFSM_LOCK_BUDGET_S"):
        env.pop(name, None)
    runs = variants(str(db), str(root))
    for argv in runs.values():  # one untimed run of each writes the bytecode
        timed(argv, env)
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    load_before = os.getloadavg()
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(timed(runs[name], env))
    load_after = os.getloadavg()
    med = {name: statistics.median(t) * 1000 for name, t in times.items()}
    counted = (
        {name: instructions(argv, env) for name, argv in runs.items()} if count_instructions else {}
    )

    def share(extra: float, path: str) -> float:
        return round(extra / med[path] * 100, 1)

    def share_i(extra: int, path: str) -> float:
        return round(extra / counted[path] * 100, 1)

    in_instructions = (
        {
            "argparse (reconcile)": share_i(
                counted["reconcile+argparse"] - counted["reconcile"], "reconcile"
            ),
            "json (reconcile)": share_i(
                counted["reconcile+json"] - counted["reconcile"], "reconcile"
            ),
            "dataclass reports (reconcile)": share_i(
                counted["reconcile+reports"] - counted["reconcile"], "reconcile"
            ),
            "dataclass reports (startup)": share_i(
                counted["imports+reports"] - counted["imports"], "startup"
            ),
        }
        if counted
        else {}
    )
    return {
        "instructions_m": {k: round(v / 1e6, 1) for k, v in counted.items()},
        "cost_pct_instructions": in_instructions,
        "rounds": rounds,
        "load": [round(load_before[0], 2), round(load_after[0], 2)],
        "median_ms": {k: round(v, 1) for k, v in med.items()},
        "reconcile_vs_raw": round(med["reconcile"] / med["raw"], 2),
        "cost_pct": {
            "argparse (reconcile)": share(
                med["reconcile+argparse"] - med["reconcile"], "reconcile"
            ),
            "json (reconcile)": share(med["reconcile+json"] - med["reconcile"], "reconcile"),
            "dataclass reports (reconcile)": share(
                med["reconcile+reports"] - med["reconcile"], "reconcile"
            ),
            "dataclass reports (startup)": share(
                med["imports+reports"] - med["imports"], "startup"
            ),
        },
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--json", action="store_true")
    p.add_argument("--instructions", action="store_true", help="also count (valgrind)")
    args = p.parse_args()
    result = bench(args.rounds, args.instructions)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{args.rounds} rounds, load average {result['load'][0]} before, {result['load'][1]} after"
    )
    for name, ms in result["median_ms"].items():
        print(f"  {name:<20} {ms:7.1f} ms")
    print(f"  reconcile / raw: {result['reconcile_vs_raw']}")
    for what, pct in result["cost_pct"].items():
        print(f"  {what:<32} {pct:5.1f} % of its path")
    for name, m in result["instructions_m"].items():
        print(f"  {name:<20} {m:7.1f} M instructions")
    for what, pct in result["cost_pct_instructions"].items():
        print(f"  {what:<32} {pct:5.1f} % of its path's instructions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
