"""`qlfsm demo`: the embedded end-to-end demo (spec 06).

In a fresh directory with its own SQLite file it launches real jobs through `qlfsm launch`
(one still running, one that exits 0 and publishes its receipt, one SIGKILLed with its whole
process group before the wrapper can publish, one claimed but never started), adds legacy
2.x-shadow runs with their RunningInstances, lets "the server die" (the demo simply stops
touching anything), runs `qlfsm startup --legacy-normalize` as a subprocess, and prints what
happened to each run and why. The still-running job is stopped (SIGTERM to its group) at the
very end so that the demo leaves no process behind; its wrapper then publishes a receipt, as
it would for any job that ends (docs/decisions.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler._escape import clean, shell_word
from reconciler.cli import _guard
from reconciler.cli._exit import UsageError
from reconciler.cli._report import plain_counts, reason_below_table
from reconciler.cli._util import parser
from reconciler.cli._verdict import BLOCKED, SAFE
from storage import (
    Actor,
    AttemptChange,
    Change,
    Repository,
    RunChange,
    connect,
    legacy_log_id,
    uuid7,
)

ORIGINS = "manual,scheduled_node,scheduled_system"
T_SLEEP = "30"


@dataclass
class Job:
    label: str
    owner: str  # runtime | legacy
    before: str  # what was true when the server died
    expect: str  # the Run status start-up should leave
    run_id: str = ""
    pid: int | None = None


def qlfsm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOYMENT"))}
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"`qlfsm {args[0]}` exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def fresh_dir(requested: str | None) -> Path:
    """The demo's own directory: a fresh temporary one, or ``--dir`` (new, or existing and
    empty), made if needed; a path that cannot be that is a usage error naming why (spec 06)."""
    if requested is None:
        try:
            return Path(tempfile.mkdtemp(prefix="qlfsm-demo-"))
        except OSError as exc:
            raise UsageError(
                f"no temporary directory for the demo ({exc.strerror}); give --dir DIR, a new "
                "or empty directory this user may write to (or set TMPDIR)"
            ) from exc
    path = Path(requested).resolve()
    try:
        if path.exists() and any(path.iterdir()):
            raise UsageError(f"--dir {requested!r} is not empty; give a new or empty directory")
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file there or above it, no permission, a read-only filesystem
        raise UsageError(
            f"--dir {requested!r} cannot be the demo's directory ({exc.strerror}); give a new "
            "or empty directory this user may write to"
        ) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(
            f"--dir {requested!r} is not writable by this user; give a new or empty directory "
            "this user may write to"
        )
    return path


def demo_command(argv: list[str]) -> int:
    p = parser("qlfsm demo", "End-to-end demo: real jobs, a dying server, then `startup`.")
    p.add_argument("--dir", help="a new or empty directory (default: a fresh temporary one)")
    args = p.parse_args(argv)
    # D-23: `qlfsm demo | head` is an ordinary way to read it, and after an interrupt its
    # directory is not empty, so "run it again" must name another directory.
    _guard.quiet_on_closed_pipe()
    base = fresh_dir(args.dir)
    _guard.advise_after_interrupt(
        f"the demo's directory {base} is left as it is; to run the demo again give a new "
        "--dir (or none), or remove that directory first"
    )
    db, receipts, logs = base / "ql.db", base / "receipts", base / "logs"
    logs.mkdir()
    say(f"demo directory: {clean(base)}")
    qlfsm("db", "init", "--db", str(db))
    say(f"1. created the QingLong 3.0 schema in {db.name} (`qlfsm db init`)")
    jobs: list[Job] = []
    held = hold_orphans(True)
    try:
        runtime_jobs(str(db), str(receipts), logs, jobs)
        legacy_jobs(str(db), jobs)
        say("3. the server dies here: nothing is told to anyone, the processes stay as they are")
        say("4. next start: `qlfsm startup --legacy-normalize` (2.x initData -> shadow -> primary)")
        proc = qlfsm(
            "startup", "--db", str(db), "--receipt-root", str(receipts), "--origins", ORIGINS,
            "--legacy-normalize", "--json", check=False,
        )  # fmt: skip
        if proc.returncode not in (0, 3):
            raise RuntimeError(f"startup exited {proc.returncode}: {proc.stderr.strip()}")
        result = json.loads(proc.stdout)
        for line in proc.stderr.splitlines():
            say(f"   {line.removeprefix('qlfsm: ')}")
        ok = report(str(db), jobs, result)
        lost = next(j for j in jobs if j.label == EXPLAINED)
        explain(str(db), lost, f"\n5. why was {lost.label!r} marked lost?")
        kept = next(j for j in jobs if j.owner == "runtime" and j.expect == "running")
        question = f"\n6. and {kept.label!r}, which start-up kept running?"
        explain(str(db), kept, question, str(receipts))
    finally:
        stopped = stop_survivors(jobs)
        if held:
            hold_orphans(False)
    if stopped:
        say("\ncleanup: the still-running job was sent SIGTERM (its process group) so the demo "
            "leaves no process behind; its wrapper records the exit in a receipt, which the "
            f"next `qlfsm startup --db {shell_word(db)} --receipt-root {shell_word(receipts)}` "
            "would apply.")  # fmt: skip
    say(f"\ninspect everything: qlfsm inspect --db {shell_word(db)}")
    say(f"the machines and their tables: {diagrams_hint()}")
    return 0 if ok else 1


def say(text: str) -> None:
    # D-14: every line through the rule (each value an argument gave is cleaned or a shell
    # word where it is put in, so a line break inside one never starts a line here).
    sys.stdout.write("\n".join(clean(line) for line in text.split("\n")) + "\n")
    sys.stdout.flush()


# --- runtime jobs through `qlfsm launch` ------------------------------------------------------


def runtime_job(
    db: str, jobs: list[Job], label: str, before: str, expect: str, *, dispatch: bool = False
) -> Job:
    """The demo's next job: a prepared runtime Run, queued (or dispatching) with one claimed
    local_process Attempt."""
    with contextlib.closing(connect(db)) as conn:
        repo = Repository(conn)
        run_id, now = uuid7(), int(time.time() * 1000)
        done = repo.create_run(run_id=run_id, at_ms=now, task_name="demo")
        triggers = ["queue", "dispatch"] if dispatch else ["queue"]
        done = repo.advance(
            run_id, done.version, [RunChange(t) for t in triggers], actor=Actor("scheduler"),
            at_ms=now,
        )  # fmt: skip
        repo.create_attempt(
            run_id=run_id, attempt_id=uuid7(), expected_version=done.version, at_ms=now
        )
    job = Job(label, "runtime", before, expect, run_id)
    jobs.append(job)
    return job


def launch(db: str, receipts: str, run_id: str, log: Path, *cmd: str, wait: bool = False) -> int:
    args = ["launch", "--db", db, "--receipt-root", receipts, "--run-id", run_id,
            "--log", str(log), "--json"]  # fmt: skip
    proc = qlfsm(*args, *(["--wait"] if wait else []), "--", *cmd, check=not wait)
    # `--wait` exits with the job's status, so only a missing report says that launch failed.
    first = json.loads(proc.stdout.splitlines()[0]) if proc.stdout else {}
    if "pid" not in first:
        raise RuntimeError(f"`qlfsm launch` exited {proc.returncode}: {proc.stderr.strip()}")
    return int(first["pid"])


def runtime_jobs(db: str, receipts: str, logs: Path, jobs: list[Job]) -> None:
    say("2. runtime jobs, each started by `qlfsm launch` (its own process group, a receipt "
        "wrapper):")  # fmt: skip
    alive = runtime_job(db, jobs, "backup (sleep 30)", "still running", "running")
    alive.pid = launch(db, receipts, alive.run_id, logs / "backup.log", "sleep", T_SLEEP)
    say(f"   - {alive.label}: running")
    done = runtime_job(db, jobs, "export (exit 0)", "exited 0, receipt written", "succeeded")
    launch(db, receipts, done.run_id, logs / "export.log", "sh", "-c", "echo exported", wait=True)
    say(f"   - {done.label}: finished, its wrapper published a completion receipt")
    killed = runtime_job(db, jobs, "rotate (SIGKILLed)", "killed, no receipt", "lost")
    pid = launch(db, receipts, killed.run_id, logs / "rotate.log", "sleep", T_SLEEP)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # the wrapper and its child, before any publication
    wait_gone(pid)
    say(f"   - {killed.label}: its whole process group was SIGKILLed, no receipt")
    claimed = runtime_job(
        db, jobs, "warmup (claimed only)", "claimed, never started", "lost", dispatch=True
    )
    say(f"   - {claimed.label}: dispatching with a claimed Attempt, never launched")


def wait_gone(pid: int, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return
        time.sleep(0.02)


def hold_orphans(on: bool) -> bool:
    """Make this process the child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``) or stop being it.

    The SIGKILLed job's wrapper is orphaned once `qlfsm launch` has exited. Whether PID 1 reaps
    it before start-up's probe reads ``/proc`` decided between ``zombie_or_dead`` and
    ``pid_absent`` (both ADR-0068 row 13): as its subreaper the demo holds the zombie until it
    ends, so the demo tells the same story on every machine. False where it cannot be set."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(36, int(on), 0, 0, 0) == 0)  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def stop_survivors(jobs: list[Job]) -> int:
    n = 0
    for job in jobs:
        if job.owner == "runtime" and job.pid is not None and job.expect == "running":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.pid, signal.SIGTERM)
                n += 1
    return n


# --- legacy 2.x-shadow runs ---------------------------------------------------------------------


@dataclass(frozen=True)
class LegacySpec:
    label: str
    origin: str
    spawned: bool
    instance: int | None  # RunningInstances.status: 0 running, 1 finished, 2 stopped
    finished: bool
    before: str
    expect: str


LEGACY_JOBS: tuple[LegacySpec, ...] = (
    LegacySpec("legacy sign-in", "manual", True, 1, True, "instance finished, exit 0", "succeeded"),
    LegacySpec("legacy stopped", "manual", True, 2, True, "stopped by hand, finish time set",
               "cancelled"),
    LegacySpec("legacy cron job", "scheduled_node", True, 0, False, "instance still running",
               "lost"),
    LegacySpec("legacy system crond", "scheduled_system", True, 0, False,
               "instance running under system crond", "running"),
    LegacySpec("legacy accepted", "manual", False, None, False, "accepted, not yet spawned",
               "cancelled"),
)  # fmt: skip


def make_legacy(db: str, spec: LegacySpec, n: int) -> str:
    """A legacy-owned Run as the 2.x shadow records it, and its cron's RunningInstance."""
    with contextlib.closing(connect(db)) as conn:
        repo = Repository(conn)
        now = int(time.time() * 1000)
        cron = conn.execute(
            "INSERT INTO `Crontabs` (name, command, schedule, status, createdAt, updatedAt) "
            "VALUES (?, ?, '0 * * * *', 0, datetime('now'), datetime('now'))",
            (spec.label, f"task demo_{n}.js"),
        ).lastrowid
        run_id, pid, log = uuid7(), 31000 + n, f"/ql/data/log/demo_{n}/run.log"
        done = repo.create_run(
            run_id=run_id, at_ms=now, execution_owner="legacy", execution_origin=spec.origin,
            legacy_cron_id=cron, task_id=f"legacy-cron:{cron}", trigger_type="cron",
            actor=Actor("legacy_shell"),
        )  # fmt: skip
        shell = Actor("compatibility")
        done = repo.advance(run_id, done.version, [RunChange("queue")], actor=shell, at_ms=now)
        attempt_id = uuid7()
        done = repo.create_attempt(
            run_id=run_id, attempt_id=attempt_id, expected_version=done.version, at_ms=now,
            executor_type="legacy_local", pid=pid if spec.spawned else None,
            log_artifact_id=legacy_log_id(log) if spec.spawned else None, actor=shell,
        )  # fmt: skip
        if spec.spawned:
            changes: list[Change] = [
                RunChange("dispatch"),
                AttemptChange(attempt_id, "start"),
                AttemptChange(attempt_id, "run", set={"started_at_ms": now}),
                RunChange("start", set={"started_at_ms": now}),
            ]
            repo.advance(run_id, done.version, changes, actor=shell, at_ms=now)
        if spec.instance is not None:
            conn.execute(
                "INSERT INTO `RunningInstances` (cron_id, pid, log_path, started_at, finished_at, "
                "status, exit_code, run_id, attempt_id, createdAt, updatedAt) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, datetime('now'), datetime('now'))",
                (cron, pid, log, now // 1000, now // 1000 + 1 if spec.finished else None,
                 spec.instance, 0 if spec.finished else None, run_id, attempt_id),
            )  # fmt: skip
        return run_id


def legacy_jobs(db: str, jobs: list[Job]) -> None:
    say("   legacy 2.x runs (owned by the Node worker, seen by the shadow):")
    for n, spec in enumerate(LEGACY_JOBS, start=1):
        job = Job(spec.label, "legacy", spec.before, spec.expect, make_legacy(db, spec, n))
        say(f"   - {job.label}: {job.before}")
        jobs.append(job)


# --- the table ----------------------------------------------------------------------------------

PRIMARY_WHY = {
    "5": "ADR-0068 row 5: a trusted completion receipt decides the end",
    "7": "ADR-0068 row 7: claimed but never started: lost, no process probed",
    "12": "ADR-0068 row 12: the exact process is alive: kept running, checked twice",
    "13": "ADR-0068 row 13: process gone, no receipt even after the grace: lost",
}
LEGACY_WHY = {
    "LEGACY_RECONCILE_OWNER_LOST": "ADR-0448 row 10: initData reset its instance to stopped "
    "WITHOUT a finish time: no terminal evidence, lost",
    "LEGACY_RECONCILE_ACCEPTANCE_ABANDONED": "ADR-0448 row 9: accepted, never spawned: abandoned",
    "LEGACY_EXECUTION_CANCELLED": "ADR-0448 row 6: stopped WITH a finish time: cancelled",
    "LEGACY_EXIT_NON_ZERO": "ADR-0448 row 7: its instance finished with an error: failed",
    # A run that ends without one of these codes: by its status.
    "succeeded": "ADR-0448 row 7: its unique instance finished with exit 0: completed",
    "running": "ADR-0448 row 8: system crond outlives the server: pending, waits for its callback",
}


def why(job: Job, status: str, error: str | None, primary: dict[str, dict[str, Any]]) -> str:
    if job.owner == "runtime":
        cand = primary.get(job.run_id)
        if cand is None:
            return "not a primary candidate"
        return PRIMARY_WHY.get(str(cand["row"]), f"ADR-0068 row {cand['row']}") + (
            f" ({cand['reason']})" if cand.get("reason") else ""
        )
    return LEGACY_WHY.get(error or "", LEGACY_WHY.get(status, "see `qlfsm inspect`"))


def report(db: str, jobs: list[Job], result: dict[str, Any]) -> bool:
    primary = {c["run_id"]: c for c in result["primary"].get("candidates", [])}
    rows, ok = [], True
    with contextlib.closing(connect(db)) as conn:
        repo = Repository(conn)
        for job in jobs:
            run = repo.get_run(job.run_id)
            status = run.status if run else "gone"
            error = run.error_code if run else None
            mark = "ok" if status == job.expect else f"UNEXPECTED (wanted {job.expect})"
            ok = ok and status == job.expect
            # The run's state first, then what was true when the server died; the why under
            # the row: at most 100 columns a line, as start-up's report (D-22).
            rows.append(
                [job.label, job.owner, status, mark, job.before, why(job, status, error, primary)]
            )
    shadow = result["shadow"]
    say("")
    if shadow.get("report"):
        rep = shadow["report"]
        counts = ", ".join(f"{v} {k}" for k, v in rep["outcomes"].items() if v)
        say(f"legacy shadow: {shadow['state']} ({rep['assessment']}): {counts}")
    else:
        say(f"legacy shadow: {shadow['state']}")
    # `recovered` split into what it means, in `startup`'s own words (docs/decisions.md D-22).
    say(f"primary: {plain_counts(result['primary'])} -> {SAFE if result['safe'] else BLOCKED}")
    say("")
    headers = ["run", "owner", "after start-up", "check", "when the server died", "why"]
    say("\n".join(reason_below_table(headers, rows)))
    return ok


# The run whose `lost` the demo explains at the end: process gone, no receipt (row 13).
EXPLAINED = "rotate (SIGKILLed)"


def explain(db: str, job: Job, question: str, receipts: str | None = None) -> None:
    """``question``, then what `qlfsm explain` answers for ``job`` (why was the killed job
    marked lost? `explain` answers from its events). With ``receipts``: keeping a job running
    wrote no event (spec 04 row 12), so `explain` asks a dry run what start-up would decide
    now, while the job still runs."""
    root = () if receipts is None else ("--receipt-root", receipts)
    shown = "" if receipts is None else f" --receipt-root {shell_word(receipts)}"
    say(f"{question} qlfsm explain --db {shell_word(db)} --run {job.run_id}{shown}")
    lines = qlfsm("explain", "--db", db, "--run", job.run_id, *root).stdout.splitlines()
    start = 0
    if receipts is not None:
        # Its path is the launcher's edges, as for any run; what is new here is the last part.
        start = next((i for i, line in enumerate(lines) if line.startswith("no start-up")), 0)
    for line in lines[start:]:
        say(f"   {line}".rstrip())


def diagrams_hint() -> str:
    readme = Path(__file__).resolve().parents[2] / "diagrams" / "README.md"
    if readme.exists():
        return f"{readme} (Run, Attempt and legacy-shadow machines beside their tables)"
    return "`qlfsm diagrams render` writes them to diagrams/ (see diagrams/README.md)"
