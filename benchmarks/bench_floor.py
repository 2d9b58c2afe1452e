"""`qlfsm startup` against a plain-Python floor (issue 28 Deliver 5; a script, not a test).

Whole processes, every variant of a group once per round in a rotating order (so machine noise
hits each side alike; the two sides of a (b) figure back to back), the figure the ratio of the
medians over the rounds of ONE run, beside it the median of the per-round ratios:

(a) `qlfsm startup --db D --receipt-root R --json` on a database with zero candidates, against
    the floor: a plain script (``FLOOR`` below) that imports ``argparse``, ``json``,
    ``dataclasses``, ``typing``, ``logging`` and ``sqlite3`` and does the work the records
    require of that command: parse the same flags with argparse, check the receipt root
    (absolute; one ``lstat``, the sweep must know whether it exists) and the profile, see the
    shadow pass disabled (no origin: the database is not even opened for it, spec 05), open
    the existing database, hold the single-flight ``flock`` (D-20), run the candidate query
    (spec 04: zero candidates, exactly one statement), then the sweep's two journal pages
    (pending receipts, expired quarantine: spec 06, the sweep after a SAFE pass), and print
    the same JSON object, byte for byte (checked).
    Beside it, a reference (not a target): the same floor plus the checks of the project's own
    decisions, done the cheapest way: the schema check before the first write (D-15, five
    statements), the sweep's shard and forbidden-state reads and the kernel clock (D-16).
(b) 256 `running` local-process candidates whose process is gone (real /proc, real receipt
    root; `bench_primary.make_db`), a fresh copy of the database for each process: `qlfsm
    startup --json`, and `qlfsm reconcile --json` (what bench_primary's (b) runs), each against
    the floor doing the same command: the (a) floor plus, when there are candidates,
    bench_primary's (b) floor pass (``bench_primary.FLOOR_PASS``: `transitions` loaded, the
    boot id, per candidate the Run read before the decision and again inside its one
    `BEGIN IMMEDIATE`, two receipt lookups, one /proc probe, the compare-and-set UPDATEs and
    both events; one grace per pass), then the final verifier's candidate query (spec 04);
    same JSON output, byte for byte (checked).
(i) where (a)'s time goes, a reference: `python -c pass`, the plain-Python allowance alone
    (``import argparse, dataclasses, json, logging, sqlite3, typing``) and the modules `qlfsm
    startup` imports (``import reconciler.cli._startup``), in the same rounds.
(c) peak RSS (GNU time's ``%M``) of every variant: separate runs after the timed rounds (so
    the wrapper's own fork and exec are not in the wall times), the median of ``--rss-runs``.

Usage: python benchmarks/bench_floor.py [--rounds N] [--rss-runs N] [--json]
Run it with the interpreter of a venv where qlfsm is installed (`pip install .`): its `qlfsm`
console script is measured, and the floor runs on the same interpreter and site-packages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench_primary import FLOOR_PASS, N, install_kind, make_db, qlfsm_argv  # noqa: E402

from storage import PRIMARY_CANDIDATES_SQL  # noqa: E402
from storage._candidates import RUN_WITH_ATTEMPTS_SQL  # noqa: E402
from storage._operator import (  # noqa: E402
    FOREIGN_STATE_SQL,
    PENDING_PAGE_SQL,
    QUARANTINED_PAGE_SQL,
)
from storage._schema import REQUIRED_COLUMNS  # noqa: E402

TIME = "/usr/bin/time"
PLAIN = "argparse, dataclasses, json, logging, sqlite3, typing"  # issue 28 Deliver 5's list
STARTUP_MODULE = "reconciler.cli._startup"

# The floor, as one flat module: the constants are prepended by `floor_source`. It does the
# default pass with --json only (the benchmark's command lines) and stops on anything else it
# does not implement (an enabled shadow origin, a candidate it would have to decide otherwise,
# a journal row to sweep) rather than print a summary it did not earn.
FLOOR = r"""
import argparse, dataclasses, json, logging, sqlite3, typing  # the plain-Python allowance (PLAIN)
import fcntl, os, sys, time

command = sys.argv[1] if len(sys.argv) > 1 else ""
p = argparse.ArgumentParser(prog="qlfsm " + command)
p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
p.add_argument("--receipt-root", required=True, help="absolute receipt directory")
p.add_argument("--profile", choices=PROFILES, help="default: $QL_DEPLOYMENT_PROFILE")
p.add_argument("--json", action="store_true", help="print one JSON object")
p.add_argument("--dry-run", action="store_true", help="write nothing")
if command == "startup":
    p.add_argument("--origins", metavar="LIST", help="default: $QL3_SHADOW_ORIGINS")
    p.add_argument("--legacy-normalize", action="store_true", help="2.x initData first")
    p.add_argument("--first-boot", action="store_true", help="create a missing database")
    p.add_argument("--metrics-file", metavar="PATH", help="a *.prom file")
elif command != "reconcile":
    p.error("the floor runs `startup` or `reconcile`")
args = p.parse_args(sys.argv[2:])
extras = command == "startup" and (args.legacy_normalize or args.first_boot or args.metrics_file)
if not args.json or args.dry_run or extras:
    p.error("the floor does the default pass with --json only")
root = args.receipt_root
if not os.path.isabs(root):
    p.error("--receipt-root must be an absolute path")
profile = args.profile or os.environ.get("QL_DEPLOYMENT_PROFILE") or "standalone"
if profile not in GRACE_S:
    p.error(f"profile {profile!r} does not run the local start-up pass")
out = {}
if command == "startup":
    origins = os.environ.get("QL3_SHADOW_ORIGINS", "") if args.origins is None else args.origins
    if origins.strip(", "):
        sys.exit("the floor has no shadow pass")
    # spec 05: no enabled origin = disabled, the database not opened for it
    out["shadow"] = {"state": "disabled", "refusedOriginCount": 0, "ignoredOriginCount": 0}
try:
    os.lstat(root)
    root_exists = True
except FileNotFoundError:
    root_exists = False
db = args.db
if not os.path.isfile(db):
    sys.stderr.write(f"qlfsm: database {db!r} does not exist\n")
    sys.exit(1)
c = sqlite3.connect("file:" + db + "?mode=rw", uri=True, isolation_level=None, timeout=5)
if CHECKS:  # D-15: every table and column read, before the first write
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, columns in REQUIRED_COLUMNS.items():
        have = {r[1] for r in c.execute(f'PRAGMA table_info("{table}")')}
        if table not in tables or not have.issuperset(columns):
            sys.exit(f"qlfsm: {db!r} is not a QingLong database")
# D-20: one start-up at a time per database
lock = os.open(os.path.realpath(db) + ".qlfsm-startup.lock", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(lock, fcntl.LOCK_EX)
page = c.execute(CANDIDATES_SQL, (257,)).fetchall()
truncated = len(page) > 256
safe = not truncated
candidates = []
if page and not truncated:
    grace = GRACE_S[profile]
    ROOT = root
@BODY@
    reason = "process_not_running:pid_absent"
    candidates = [{"run_id": r[0], "attempt_id": "at-" + r[0][4:], "row": "13",
                   "outcome": "recovered", "reason": reason} for r in page]
    safe = not c.execute(CANDIDATES_SQL, (257,)).fetchall()  # spec 04 "Final verifier"
n = len(candidates)
out["primary"] = {"safe": safe, "scanned": n, "recovered": n, "remaining": 0, "unresolved": 0,
                  "failed": 0, "truncated": truncated, "candidates": candidates}
if command == "startup":
    state = "skipped" if not safe else "done" if root_exists else "root_missing"
    if state == "done":
        now_ms = int(time.time() * 1000)
        if CHECKS:  # D-16: the shards, rows in a forbidden state, the kernel's clock
            c.execute(SHARDS_SQL).fetchall()
            c.execute(FOREIGN_STATE_SQL, (20,)).fetchall()
            open("/proc/stat", "rb").read()
            open("/proc/uptime", "rb").read()
        if c.execute(PENDING_PAGE_SQL, (-1, "", 65)).fetchall() or c.execute(
            QUARANTINED_PAGE_SQL, (now_ms, -1, "", 65)
        ).fetchall():
            sys.exit("the floor has nothing to sweep")
    zero = ("receipts_removed", "rows_resolved", "kept_active", "kept_process_alive", "errors")
    out["sweep"] = {
        "state": state,
        "receipts": dict.fromkeys(("examined", *zero), 0),
        "quarantine": dict.fromkeys(
            ("examined", "copies_purged", "rows_removed", "kept_active", "errors"), 0
        ),
        "remaining": False,
        "errors": [],
    }
    out = {**out, "safe": safe, "first_boot": False}
else:
    out = out["primary"]
c.close()
print(json.dumps(out))
os.close(lock)
sys.exit(0 if safe else 3)
"""


def floor_body() -> str:
    """bench_primary's (b) floor pass from its grace on (the candidate query, done by FLOOR
    above, is left out), run only when there are candidates: it loads `transitions` and reads
    the boot id first, as bench_primary's floor does before its query."""
    start = FLOOR_PASS.index("time.sleep(grace)\n")
    end = FLOOR_PASS.index("print(len(page))\n")
    body = "import transitions.core\nopen('/proc/sys/kernel/random/boot_id', 'rb').read()\n"
    return textwrap.indent(body + FLOOR_PASS[start:end], "    ")


def floor_source(dead_pid: int, *, checks: bool) -> str:
    constants = {
        "CANDIDATES_SQL": PRIMARY_CANDIDATES_SQL,
        "SEL": RUN_WITH_ATTEMPTS_SQL,
        "PENDING_PAGE_SQL": PENDING_PAGE_SQL,
        "QUARANTINED_PAGE_SQL": QUARANTINED_PAGE_SQL,
        "FOREIGN_STATE_SQL": FOREIGN_STATE_SQL,
        "SHARDS_SQL": (
            'SELECT DISTINCT substr(attempt_id, 1, 2) FROM "LocalCompletionReceiptJournal" '
            "WHERE typeof(attempt_id) = 'text'"
        ),
        "REQUIRED_COLUMNS": dict(REQUIRED_COLUMNS),
        "PROFILES": ("edge", "standalone", "cluster-control", "worker"),
        "GRACE_S": {"edge": 0.05, "standalone": 0.1},  # spec 04 "The grace"
        # bench_primary's floor probes the one pid it knows is dead, not the handle's
        "PID": dead_pid,
        "CHECKS": checks,
    }
    head = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    return head + FLOOR.replace("@BODY@\n", floor_body())


def run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Wall seconds of one whole process and its stdout; it must exit 0 (safe)."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False, env=env, cwd=cwd)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed ({done.returncode}): {done.stderr.decode()}")
    return elapsed, done.stdout.decode()


def peak_rss_kib(argv: list[str], env: dict[str, str], work: Path) -> int:
    """GNU time's ``%M`` of the child (``wait4`` here would report this process's RSS at the
    fork, bench_primary.timed)."""
    out = work / "rss.txt"
    done = subprocess.run(
        [TIME, "-o", str(out), "-f", "%M", *argv],
        capture_output=True,
        check=False,
        env=env,
        cwd=work,
    )
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} under {TIME} failed: {done.stderr.decode()}")
    return int(out.read_text().split()[-1])


Variant = Callable[[int], list[str]]  # round -> argv (a fresh database copy where it writes)


def bench(rounds: int, rss_runs: int) -> dict[str, Any]:
    if not os.access(TIME, os.X_OK):
        raise SystemExit(f"{TIME} (GNU time) is needed for the peak RSS")
    work = Path(tempfile.mkdtemp(prefix="qlfsm-bench-floor-"))
    try:
        zero, template = work / "zero.db", work / "many.db"
        make_db(zero, 0)
        dead_pid = make_db(template, N)
        root = work / "receipts"
        root.mkdir(mode=0o700)
        for name, checks in (("qlfloor", False), ("qlfloor_checked", True)):
            (work / f"{name}.py").write_text(floor_source(dead_pid, checks=checks))
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiled bytecode, as installed
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        for name in ("QL_DEPLOYMENT_PROFILE", "QL3_SHADOW_ORIGINS", "QLFSM_LOCK_BUDGET_S"):
            env.pop(name, None)
        qlfsm = qlfsm_argv()

        def floor(module: str) -> list[str]:
            # found in the children's working directory, the first entry of a `-c` sys.path
            # (the console script's is its own directory)
            return [sys.executable, "-c", f"import {module}"]

        def fresh(tag: str, i: int) -> str:
            copy = work / f"{tag}-{i}.db"
            shutil.copyfile(template, copy)
            return str(copy)

        def args(command: str, db: str) -> list[str]:
            return [command, "--db", db, "--receipt-root", str(root), "--json"]

        # Each group is timed in a rotating order within each round: the two sides of a (b)
        # figure run back to back, in alternating order.
        groups: list[dict[str, Variant]] = [
            {
                "(a) qlfsm startup": lambda i: [*qlfsm, *args("startup", str(zero))],
                "(a) floor startup": lambda i: [*floor("qlfloor"), *args("startup", str(zero))],
                "(a) floor+checks startup": lambda i: [
                    *floor("qlfloor_checked"), *args("startup", str(zero))
                ],
            },
            {
                "(b) qlfsm startup": lambda i: [*qlfsm, *args("startup", fresh("qs", i))],
                "(b) floor startup": lambda i: [
                    *floor("qlfloor"), *args("startup", fresh("fs", i))
                ],
            },
            {
                "(b) qlfsm reconcile": lambda i: [*qlfsm, *args("reconcile", fresh("qr", i))],
                "(b) floor reconcile": lambda i: [
                    *floor("qlfloor"), *args("reconcile", fresh("fr", i))
                ],
            },
            # Where (a) goes: the interpreter alone, the plain-Python allowance alone, and the
            # modules `qlfsm startup` imports before it reads anything.
            {
                "(i) python -c pass": lambda i: [sys.executable, "-c", "pass"],
                "(i) import plain": lambda i: [sys.executable, "-c", f"import {PLAIN}"],
                "(i) import startup": lambda i: [
                    sys.executable, "-c", f"import {STARTUP_MODULE}"
                ],
            },
        ]  # fmt: skip
        variants = {name: variant for group in groups for name, variant in group.items()}
        # One untimed run of each writes the bytecode; each floor prints qlfsm's JSON exactly.
        outputs = {name: run(variant(-1), env, work)[1] for name, variant in variants.items()}
        for g, command in (("a", "startup"), ("b", "startup"), ("b", "reconcile")):
            ours = outputs[f"({g}) qlfsm {command}"]
            for name in (f"({g}) floor {command}", f"({g}) floor+checks {command}"):
                if name in outputs and outputs[name] != ours:
                    raise SystemExit(f"{name} printed\n{outputs[name]}not\n{ours}")
        if json.loads(outputs["(b) qlfsm reconcile"])["recovered"] != N:
            raise SystemExit("(b) qlfsm did not recover every candidate")
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in variants}
        for i in range(rounds):
            for group in groups:
                names = list(group)
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    times[name].append(run(group[name](i), env, work)[0] * 1000)
            for copy in work.glob("*-*.db*"):
                copy.unlink()
        rss: dict[str, list[int]] = {name: [] for name in variants}
        for i in range(rss_runs):
            for name, variant in variants.items():
                rss[name].append(peak_rss_kib(variant(rounds + i), env, work))
        load_after = os.getloadavg()
        return {
            "qlfsm": install_kind(),
            "python": sys.version.split()[0],
            "sqlite": sqlite3.sqlite_version,
            "rounds": rounds,
            "rss_runs": rss_runs,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
            "median_ms": {name: round(statistics.median(t), 1) for name, t in times.items()},
            "peak_rss_kib": {name: statistics.median(r) for name, r in rss.items()},
            "ratios": ratios(times, rss),
            "times_ms": {name: [round(t, 1) for t in ts] for name, ts in times.items()},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


# figure -> (qlfsm variant, floor variant, measure, bound, goal); None: a reference, no target
FIGURES: dict[str, tuple[str, str, str, float | None, float | None]] = {
    "(a) startup, zero candidates": ("(a) qlfsm startup", "(a) floor startup", "ms", 1.5, 1.3),
    "(a) startup vs floor+checks (D-15, D-16)": (
        "(a) qlfsm startup", "(a) floor+checks startup", "ms", None, None
    ),
    "(i) imports alone: `qlfsm startup`'s modules vs the plain ones": (
        "(i) import startup", "(i) import plain", "ms", None, None
    ),
    "(b) startup, 256 dead": ("(b) qlfsm startup", "(b) floor startup", "ms", 1.35, 1.2),
    "(b) reconcile, 256 dead": ("(b) qlfsm reconcile", "(b) floor reconcile", "ms", 1.35, 1.2),
    "(c) peak RSS, (a) startup": ("(a) qlfsm startup", "(a) floor startup", "rss", 1.5, None),
    "(c) peak RSS, (b) startup": ("(b) qlfsm startup", "(b) floor startup", "rss", 1.5, None),
    "(c) peak RSS, (b) reconcile": (
        "(b) qlfsm reconcile", "(b) floor reconcile", "rss", 1.5, None
    ),
}  # fmt: skip


def ratios(times: dict[str, list[float]], rss: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """Each figure: the ratio of the medians (the verdict) and, for wall times, the median of
    the per-round ratios (each round's two runs were close in time: a check on load drift)."""
    out = {}
    for figure, (ours, floor, measure, bound, goal) in FIGURES.items():
        values: dict[str, list[float]] | dict[str, list[int]] = times if measure == "ms" else rss
        mine, base = statistics.median(values[ours]), statistics.median(values[floor])
        ratio = round(mine / base, 2)
        paired = None
        if measure == "ms":
            pairs = zip(times[ours], times[floor], strict=True)
            paired = round(statistics.median(q / f for q, f in pairs), 2)
        out[figure] = {
            "qlfsm": round(mine, 1),
            "floor": round(base, 1),
            "unit": measure if measure == "ms" else "KiB",
            "ratio": ratio,
            "paired_ratio": paired,
            "bound": bound,
            "goal": goal,
            "met": None if bound is None else ratio <= bound,
            "goal_met": None if goal is None else ratio <= goal,
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--rss-runs", type=int, default=3, help="peak-RSS runs of each variant")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = bench(args.rounds, args.rss_runs)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"qlfsm {result['qlfsm']}; Python {result['python']}, SQLite {result['sqlite']}; "
        f"{args.rounds} rounds; load average {result['load_average_before']} before, "
        f"{result['load_average_after']} after"
    )
    print("| figure | qlfsm | floor | ratio | paired | bound (goal) | met |")
    print("|---|---|---|---|---|---|---|")
    for figure, r in result["ratios"].items():
        unit = r["unit"]
        if unit == "KiB":
            ours, floor = f"{r['qlfsm'] / 1024:.1f} MiB", f"{r['floor'] / 1024:.1f} MiB"
        else:
            ours, floor = f"{r['qlfsm']:.1f} ms", f"{r['floor']:.1f} ms"
        if r["bound"] is None:
            target, met = "—", "reference"
        else:
            target = f"<= {r['bound']}" + (f" ({r['goal']})" if r["goal"] else "")
            met = "met" if r["met"] else "MISSED"
            if r["goal"] is not None:
                met += ", goal " + ("met" if r["goal_met"] else "missed")
        paired = "—" if r["paired_ratio"] is None else f"{r['paired_ratio']:.2f}"
        ratio = f"**{r['ratio']:.2f}**"
        print(f"| {figure} | {ours} | {floor} | {ratio} | {paired} | {target} | {met} |")
    for name, ms in result["median_ms"].items():
        print(f"  {name:<32} {ms:7.1f} ms  {result['peak_rss_kib'][name] / 1024:5.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
