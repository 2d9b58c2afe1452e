"""The ordering-exploration harness (issue 6): one simulated node, every actor's atomic steps.

Built on the same ports as the real parts: ``FakeClock`` (reconciler/node/_clock.py),
``FakeProcessTable`` (reconciler/node/_identity.py), ``MemoryReceiptStore``
(reconciler/node/_receipt_store.py) and a REAL SQLite file made by `db init`, in its own temporary
directory. The reconcilers are the real, unmodified code: ``reconciler.primary._pass.reconcile``
and ``reconciler.shadow._pass.run_pass`` run in a worker thread, and every port call they make
(the candidate query, each receipt read, each process probe, the grace, each COMMIT, each
receipt delete or quarantine move, the legacy page and per-candidate decision, the gap between
the two legacy commits) is a GATE: the worker stops there until the driver releases exactly
that step. Only one thread ever runs at a time, so an ordering is a plain sequence of steps
and a replay is deterministic.

Why gates at the ports instead of a re-implementation of the passes: the orderings explored
are the real code's orderings. A "step" of the reconciler is what it does between two gates.

A reconciler crash closes the worker's connection while the worker is parked at a gate (at
the COMMIT gate that is between BEGIN IMMEDIATE and COMMIT: SQLite discards the open
transaction, as it does when a process dies), then every later port call of that worker raises
:class:`Crashed`, so a dead reconciler never touches the store again.

The invariants of issue 6 §2 are checked by :meth:`World.check` after every step (the
stateful test and the exhaustive search call it); a violation raises
:class:`InvariantViolation` naming the invariant.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from _support import init_db

import reconciler.primary._pass as primary_mod
import reconciler.shadow._pass as shadow_mod
from fsm import ATTEMPT_TERMINAL, RUN_TERMINAL
from reconciler.node import (
    CaptureFailed,
    Evidence,
    FakeClock,
    FakeProcessTable,
    Found,
    Invalid,
    MemoryReceiptStore,
    ReadResult,
    Receipt,
    ReceiptExists,
    capture_handle,
    encode_receipt,
    new_token,
    parse_handle,
)
from reconciler.node._launcher import _mark_failed
from reconciler.primary import GRACE_MS, reconcile
from reconciler.shadow import Budget, PassHooks, PassPorts
from storage import (
    PRIMARY_CANDIDATES_SQL,
    Actor,
    AttemptChange,
    Expect,
    Repository,
    RunChange,
    StorageError,
    connect,
    in_transaction,
    journal_register,
    legacy_candidates,
    legacy_log_id,
    uuid7,
)
from storage._connection import QlConnection

T0 = 1_700_000_000_000
PROFILE = "edge"
GRACE_S = GRACE_MS[PROFILE] / 1000.0
LAUNCHER = Actor("executor", "local-launcher")
SCHEDULER = Actor("scheduler")
SHADOW_ORIGINS = ("manual", "scheduled_system")
SHADOW_BUDGET = Budget(8, 1)

# Every gate label, in the order a pass meets them. The stateful test has one rule per label.
PRIMARY_LABELS = (
    "read_candidates",
    "first_receipt_read",
    "probe",
    "grace",
    "second_receipt_read",
    "commit",
    "delete_receipt",
    "quarantine_move",
    "verify_candidates",
    "verify_receipt_read",
    "verify_probe",
)
SHADOW_LABELS = ("shadow_page", "shadow_decide", "commit", "shadow_between_commits")


class Crashed(BaseException):
    """Raised in a worker whose reconciler was killed: not an Exception, so the reconciler's
    own `except Exception` (row 14) cannot swallow it and carry on touching the store."""


class InvariantViolation(AssertionError):
    """One of issue 6's invariants failed; the message starts with the invariant's name."""


_SESSION: dict[str, Path] = {}


def _session_dir() -> Path:
    """One directory per test process for the template, the seeds and every world, removed at
    exit. RAM-backed when there is a /dev/shm: `synchronous=FULL` fsyncs every commit, and the
    exhaustive search commits tens of thousands of times."""
    if "dir" not in _SESSION:
        shm = "/dev/shm"
        root = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()
        _SESSION["dir"] = Path(tempfile.mkdtemp(prefix="qlfsm-sim-", dir=root))
        atexit.register(shutil.rmtree, _SESSION["dir"], True)
    return _SESSION["dir"]


def template_db() -> Path:
    """One `db init` database per test process; every world copies it (the schema is the
    node's, created by the real migrations)."""
    path = _session_dir() / "template.db"
    if not path.exists():
        init_db(path)
    return path


# --- the worker thread and its gates --------------------------------------------------------


class Worker:
    """One reconciler process: a thread parked at a gate until the driver releases it."""

    def __init__(self, world: World, kind: str, number: int) -> None:
        self.world = world
        self.kind = kind  # "primary" | "shadow"
        self.number = number
        self.cv = threading.Condition()
        self.label: str | None = None
        self.detail: str | None = None
        self.arrivals = 0
        self.go = False
        self.crashed = False
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.conn: sqlite3.Connection | None = None
        # Where the primary pass is: the receipt read's label depends on it.
        self.slept = False
        self.queries = 0
        self.thread = threading.Thread(target=self._main, name=f"{kind}-{number}", daemon=True)

    # worker side ------------------------------------------------------------------------------

    def gate(self, label: str, detail: str | None = None) -> None:
        with self.cv:
            if self.crashed:
                raise Crashed()
            self.label, self.detail = label, detail
            self.arrivals += 1
            self.cv.notify_all()
            while not self.go and not self.crashed:
                self.cv.wait()
            self.go = False
            if self.crashed:
                raise Crashed()

    def _main(self) -> None:
        try:
            self.conn = self.world.gated_connect(self)
            if self.kind == "primary":
                self.result = reconcile(
                    self.conn,
                    self.world.store,
                    self.world.table,
                    self.world.clock,
                    profile=PROFILE,
                    platform="linux",
                )
            else:
                self.conn.close()
                self.conn = None
                self.result = shadow_mod.run_pass(
                    str(self.world.db),
                    origins=SHADOW_ORIGINS,
                    budget=SHADOW_BUDGET,
                    clock=self.world.clock,
                    ports=self.world.shadow_ports,
                )
        except BaseException as exc:  # recorded; the driver decides what it means
            if not self.crashed:
                self.error = exc
        finally:
            if self.conn is not None:
                with contextlib.suppress(Exception):
                    self.conn.close()
            with self.cv:
                self.done = True
                self.label = None
                self.cv.notify_all()

    # driver side ------------------------------------------------------------------------------

    def _await(self, seen: int) -> None:
        with self.cv:
            if not self.cv.wait_for(lambda: self.arrivals > seen or self.done, timeout=60):
                raise RuntimeError(f"worker {self.thread.name} hung at {self.label}")

    def start(self) -> None:
        self.thread.start()
        self._await(0)

    def step(self) -> None:
        with self.cv:
            seen = self.arrivals
            self.label = None
            self.go = True
            self.cv.notify_all()
        self._await(seen)

    def kill(self) -> None:
        """The reconciler process dies where it is parked: its connection is dropped (an open
        transaction is discarded by SQLite), and it never runs another step."""
        with self.cv:
            conn = self.conn
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            self.crashed = True
            self.cv.notify_all()
        self.thread.join(timeout=60)
        if self.thread.is_alive():  # pragma: no cover - a hang is a harness bug
            raise RuntimeError("crashed worker did not stop")


class GatedConnection(QlConnection):
    """The reconciler's connection: the candidate query and every COMMIT are gates."""

    worker: Worker | None = None

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:  # type: ignore[override]
        w = self.worker
        if w is not None and threading.current_thread() is w.thread:
            if sql == PRIMARY_CANDIDATES_SQL:
                w.queries += 1
                w.gate("read_candidates" if w.queries == 1 else "verify_candidates")
            elif sql.strip().upper() == "COMMIT":
                w.gate("commit")
        return super().execute(sql, *args)


# --- the world's actors ---------------------------------------------------------------------


@dataclass
class Slot:
    """A runtime Run prepared for launch (Run `dispatching`, Attempt `claimed`) and the
    launcher and wrapper process that act on it."""

    run_id: str
    attempt_id: str
    phase: str = "prepared"  # prepared | starting | spawned | recorded | refused
    launcher_alive: bool = True
    token: str | None = None
    token_hash: str | None = None
    version: int = 0
    pid: int | None = None
    handle: str | None = None
    started_ms: int | None = None
    published: bool = False
    wrapper_done: bool = False  # exited, killed or crashed: it publishes nothing more
    cancel_asked: bool = False  # the exhaustive search asks at most once per Run


@dataclass
class LegacySlot:
    run_id: str
    attempt_ids: list[str]
    kind: str
    cron_id: int | None = None
    pid: int | None = None


@dataclass(frozen=True)
class Ev:
    """One traced port call of a reconciler pass."""

    pass_no: int
    label: str
    attempt_id: str | None
    result: str
    mono: float


@dataclass(frozen=True)
class Seed:
    db: Path
    slots: list[Slot]
    legacy: list[LegacySlot]
    table: FakeProcessTable
    files: dict[str, bytes]
    clock: tuple[float, float]


class SimStore(MemoryReceiptStore):
    """The in-memory store, gated and traced when the reconciler calls it."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        self.deleted: list[str] = []

    def read(self, attempt_id: str) -> ReadResult:
        w = self.world.calling_worker()
        if w is None:
            return super().read(attempt_id)
        label = (
            "verify_receipt_read"
            if w.queries >= 2
            else ("second_receipt_read" if w.slept else "first_receipt_read")
        )
        w.gate(label, attempt_id)
        got = super().read(attempt_id)
        kind = (
            ("forged" if attempt_id in self.world.forged else "found")
            if isinstance(got, Found)
            else ("invalid" if isinstance(got, Invalid) else "missing")
        )
        self.world.trace.append(Ev(w.number, label, attempt_id, kind, self.world.clock.monotonic()))
        return got

    def delete(self, attempt_id: str) -> None:
        w = self.world.calling_worker()
        if w is not None:
            w.gate("delete_receipt", attempt_id)
            self.deleted.append(attempt_id)
        super().delete(attempt_id)

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str:
        w = self.world.calling_worker()
        if w is not None:
            w.gate("quarantine_move", attempt_id)
        return super().quarantine(attempt_id, ref)


class SimClock(FakeClock):
    def __init__(self, world: World) -> None:
        super().__init__(T0 + 60_000)
        self.world = world

    def sleep(self, seconds: float) -> None:
        w = self.world.calling_worker()
        if w is not None:
            w.gate("grace")
            w.slept = True
        super().sleep(seconds)
        if w is not None:
            self.world.trace.append(Ev(w.number, "grace", None, f"{seconds}", self.monotonic()))


class SimShadowHooks(PassHooks):
    """The shadow pass's gates, and the check that its silent outcomes write nothing."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.before: tuple[Any, ...] = ()

    def _worker(self) -> Worker:
        w = self.world.calling_worker()
        assert w is not None
        return w

    def before_decide(self, conn: sqlite3.Connection, cand: Any) -> None:
        self._worker().gate("shadow_decide", cand.run_id)
        self.before = _run_state(conn, cand.run_id)

    def after_decide(self, conn: sqlite3.Connection, cand: Any, state: str) -> None:
        w = self._worker()
        after = _run_state(conn, cand.run_id)
        self.world.decisions.append((w.number, cand.run_id, state))
        if state in ("pending", "ambiguous", "skipped") and self.before != after:
            self.world.violations.append(
                f"legacy-silent-outcomes-write-nothing: {cand.run_id} was {state} yet "
                f"changed {self.before} -> {after}"
            )

    def between_commits(self) -> None:
        self._worker().gate("shadow_between_commits")


# --- the world ------------------------------------------------------------------------------


class World:
    """A node: its database file, process table, receipt store and clock, the launcher and
    wrapper of each runtime Slot, the legacy Runs, and at most one reconciler at a time."""

    def __init__(
        self, runtime: int = 2, legacy: tuple[str, ...] = (), *, seed: Seed | None = None
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="world-", dir=_session_dir()))
        self.db = self.dir / "ql.db"
        shutil.copyfile(template_db() if seed is None else seed.db, self.db)
        self.conn = connect(str(self.db))
        self.repo = Repository(self.conn)
        self.table = FakeProcessTable()
        self.store = SimStore(self)
        self.clock = SimClock(self)
        self.worker: Worker | None = None
        self.workers = 0
        self.trace: list[Ev] = []
        self.probes: list[tuple[int, str, str, bool, float]] = []
        self.violations: list[str] = []
        self.decisions: list[tuple[int, str, str]] = []
        self.torn: set[str] = set()
        self.summaries: list[dict[str, Any]] = []
        self.last_label: str | None = None
        self.forged: set[str] = set()
        if seed is None:
            self.slots = [self._prepare(i) for i in range(runtime)]
            self.legacy = [self._legacy(j, kind) for j, kind in enumerate(legacy)]
        else:
            # A copy of a quiet world (no reconciler running): the same file, the same Python
            # state, so replays in the exhaustive search skip the set-up transactions.
            self.slots = copy.deepcopy(seed.slots)
            self.legacy = copy.deepcopy(seed.legacy)
            self.table = copy.deepcopy(seed.table)
            self.store.files = dict(seed.files)
            self.clock._ms, self.clock._mono = seed.clock
        self._seen_terminal: dict[str, tuple[Any, ...]] = {}
        self._seen_runs: dict[str, tuple[Any, ...]] = {}
        self._patches = [
            mock.patch.object(primary_mod, "inspect_handle", self._probe_wrapper()),
        ]
        # The shadow pass takes its fakes through its ports (reconciler.shadow._ports).
        self.shadow_ports = PassPorts(
            open=self._shadow_connect, candidates=self._shadow_page, hooks=SimShadowHooks(self)
        )
        for p in self._patches:
            p.start()
        self.check()

    # --- set-up ----------------------------------------------------------------------------

    def seed(self) -> Seed:
        """Freeze this quiet world (no reconciler, nothing quarantined) so that
        ``World(seed=...)`` starts as an exact copy."""
        assert self.worker is None and not self.store.quarantined and not self.trace
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        path = self.dir.parent / f"{self.dir.name}-seed.db"
        shutil.copyfile(self.db, path)
        return Seed(
            path,
            copy.deepcopy(self.slots),
            copy.deepcopy(self.legacy),
            copy.deepcopy(self.table),
            dict(self.store.files),
            (self.clock._ms, self.clock._mono),
        )

    def _prepare(self, i: int) -> Slot:
        run_id, attempt_id = f"run-{i}", f"att-{i}"
        v = self.repo.create_run(run_id=run_id, at_ms=T0).version
        for trigger in ("queue", "dispatch"):
            v = self.repo.advance(
                run_id, v, [RunChange(trigger)], actor=Actor("system"), at_ms=T0
            ).version
        v = self.repo.create_attempt(
            run_id=run_id, attempt_id=attempt_id, expected_version=v, at_ms=T0
        ).version
        return Slot(run_id, attempt_id, version=v)

    def _legacy(self, j: int, kind: str) -> LegacySlot:
        """A legacy Run the 2.x engine left behind (spec 05), written row by row."""
        rid = f"leg-{j}"
        c = self.conn
        cron_id = 900 + j
        status, attempts, origin = {
            "abandon": ("queued", ("claimed",), "manual"),
            "lost": ("running", ("running",), "manual"),
            "complete": ("running", ("running",), "manual"),
            "pending": ("running", ("running",), "scheduled_system"),
            "ambiguous": ("running", ("running", "running"), "manual"),
        }[kind]
        pid = 7000 + j
        log = f"/ql/log/job{j}.log"
        c.execute(
            "INSERT INTO `Crontabs` (id, name, command, schedule, status, createdAt, updatedAt) "
            "VALUES (?, ?, 'task x.js', '*/5 * * * *', 0, '2026-01-01', '2026-01-01')",
            (cron_id, f"job {j}"),
        )
        version = 3 + len(attempts)
        c.execute(
            'INSERT INTO "Runs" (id, project_id, task_id, task_revision, legacy_cron_id, '
            "trigger_type, execution_origin, execution_owner, status, version, event_sequence, "
            "created_at_ms, started_at_ms) VALUES (?, 'default', ?, '1', ?, 'cron', ?, "
            "'legacy', ?, ?, ?, ?, ?)",
            (
                rid,
                f"legacy-cron:{cron_id}",
                cron_id,
                origin,
                status,
                version,
                version,
                T0 + j,
                T0 + j if status == "running" else None,
            ),
        )
        # The legacy fixtures' event history: one event per version (spec 02 rule).
        for seq in range(1, version + 1):
            c.execute(
                'INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, '
                "actor_id, attempt_id, payload, created_at_ms) "
                "VALUES (?, ?, ?, 'run.reconciled', ?, 'legacy_shell', NULL, NULL, '{}', ?)",
                (f"ev-{rid}-{seq}", rid, seq, f"fixture:{seq}", T0 + j),
            )
        ids = []
        for n, a_status in enumerate(attempts, start=1):
            aid = f"leg-{j}-a{n}"
            c.execute(
                'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, pid, '
                "log_artifact_id, callback_sequence, created_at_ms, started_at_ms) "
                "VALUES (?, ?, ?, ?, 'legacy_local', ?, ?, 0, ?, ?)",
                (
                    aid,
                    rid,
                    n,
                    a_status,
                    pid,
                    legacy_log_id(log),
                    T0 + j,
                    None if a_status == "claimed" else T0 + j + 1,
                ),
            )
            ids.append(aid)
        if kind != "abandon":
            finished = kind == "complete"
            c.execute(
                "INSERT INTO `RunningInstances` (cron_id, pid, log_path, started_at, "
                "finished_at, status, exit_code, createdAt, updatedAt) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, '2026-01-01', '2026-01-01')",
                (
                    cron_id,
                    pid,
                    log,
                    T0 // 1000,
                    T0 // 1000 + 5 if finished else None,
                    1 if finished else 0,
                    0 if finished else None,
                ),
            )
        return LegacySlot(rid, ids, kind, cron_id, pid)

    # --- wrappers around the real code ------------------------------------------------------

    def calling_worker(self) -> Worker | None:
        w = self.worker
        if w is not None and threading.current_thread() is w.thread:
            return w
        return None

    def gated_connect(self, worker: Worker) -> sqlite3.Connection:
        # storage.connect's settings, plus check_same_thread=False so the driver can drop the
        # connection of a crashed worker.
        conn = sqlite3.connect(
            f"file:{self.db}?mode=rw",
            uri=True,
            timeout=5.0,
            isolation_level=None,
            factory=GatedConnection,
            check_same_thread=False,
        )
        assert isinstance(conn, GatedConnection)
        conn.row_factory = sqlite3.Row
        conn.worker = worker
        return conn

    def _shadow_connect(self, path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        w = self.calling_worker()
        assert w is not None and path == str(self.db)
        conn = self.gated_connect(w)
        w.conn = conn
        return conn

    def _probe_wrapper(self) -> Callable[..., Evidence]:
        inner = primary_mod.inspect_handle

        def probe(handle_text: object, provider: Any, *, platform: str = "linux") -> Evidence:
            w = self.calling_worker()
            if w is None:
                return inner(handle_text, provider, platform=platform)
            label = "verify_probe" if w.queries >= 2 else "probe"
            slot = self._slot_of_handle(handle_text)
            w.gate(label, slot.attempt_id if slot else None)
            evidence = inner(handle_text, provider, platform=platform)
            alive = slot is not None and self.alive(slot)
            mono = self.clock.monotonic()
            aid = slot.attempt_id if slot else None
            self.trace.append(Ev(w.number, label, aid, evidence.verdict, mono))
            if slot is not None:
                self.probes.append((w.number, slot.attempt_id, evidence.verdict, alive, mono))
            return evidence

        return probe

    def _shadow_page(self, *a: Any) -> Any:
        w = self.calling_worker()
        assert w is not None
        w.gate("shadow_page")
        return legacy_candidates(*a)

    def _slot_of_handle(self, handle_text: object) -> Slot | None:
        for s in self.slots:
            if s.handle is not None and s.handle == handle_text:
                return s
        return None

    # --- ground truth -----------------------------------------------------------------------

    def alive(self, slot: Slot) -> bool:
        """Is the EXACT process of the slot's handle alive (same boot, pid, group, start)?"""
        h = parse_handle(slot.handle)
        if h is None or h.boot_id != self.table.boot:
            return False
        proc = self.table.processes.get(h.pid)
        return (
            proc is not None
            and proc.start_ticks == h.start_ticks
            and proc.pgid == h.pgid
            and proc.state not in ("Z", "X", "x")
        )

    # --- the launcher (mirrors reconciler/node/_launcher.launch, one rule per durable step) -------

    def db_free(self) -> bool:
        """False while the reconciler holds the write lock (parked at its COMMIT gate): a
        writer would wait for it, so the driver does not schedule one."""
        w = self.worker
        return w is None or w.label != "commit"

    def launch_prepare(self, i: int) -> None:
        """Transaction 1: Attempt `starting` with the token hash, and the journal row."""
        s = self.slots[i]
        token, token_hash = new_token()
        run = self.repo.get_run(s.run_id)
        att = self.repo.get_attempt(s.attempt_id)
        if (
            run is None
            or att is None
            or run.status not in ("queued", "dispatching")
            or att.status != "claimed"
        ):
            s.phase, s.launcher_alive = "refused", False  # LaunchRefused: nothing changed
            return
        at = max(self.clock.now_ms(), run.created_at_ms, att.created_at_ms)

        def work(c: sqlite3.Connection) -> int:
            done = self.repo.advance_in(
                c,
                s.run_id,
                run.version,
                [
                    AttemptChange(
                        s.attempt_id,
                        "start",
                        set={"callback_token_hash": token_hash},
                        dedupe_key=f"local-launch:{s.attempt_id}:starting",
                    )
                ],
                actor=LAUNCHER,
                at_ms=at,
                expect=Expect(
                    run={"status": run.status},
                    attempts={s.attempt_id: {"status": "claimed", "callback_sequence": 0}},
                ),
            )
            journal_register(c, s.attempt_id, s.run_id, at)
            return done.version

        try:
            s.version = in_transaction(self.conn, work)
        except StorageError:
            s.phase, s.launcher_alive = "refused", False
            return
        s.token, s.token_hash, s.phase = token, token_hash, "starting"
        s.started_ms = max(self.clock.now_ms(), at)

    def launch_spawn(self, i: int) -> None:
        """The wrapper starts in its own process group; the launcher captures its handle."""
        s = self.slots[i]
        assert self.db_free(), "a failed capture writes: schedule the spawn only when free"
        pid = self.table.spawn()
        s.pid = pid
        try:
            s.handle = capture_handle(pid, self.table, platform="linux")
        except CaptureFailed:
            # As the launcher: SIGKILL the group (nothing is published), mark the launch
            # failed, best effort.
            self.table.reap(pid)
            s.wrapper_done = True
            _mark_failed(
                self.conn, s.run_id, s.attempt_id, s.version, self.clock, "LAUNCH_CAPTURE_FAILED"
            )
            s.phase, s.launcher_alive = "refused", False
            return
        s.phase = "spawned"

    def launch_record(self, i: int) -> None:
        """Transaction 2: Attempt `running` (handle, pid, started), Run `running`. On any
        failure the group is SIGKILLed and the launch marked failed (best effort)."""
        s = self.slots[i]
        assert s.pid is not None and s.started_ms is not None
        try:
            self.repo.advance(
                s.run_id,
                s.version,
                [
                    AttemptChange(
                        s.attempt_id,
                        "run",
                        set={
                            "executor_handle": s.handle,
                            "pid": s.pid,
                            "started_at_ms": s.started_ms,
                        },
                        dedupe_key=f"local-launch:{s.attempt_id}:running",
                    ),
                    RunChange(
                        "start",
                        set={"started_at_ms": s.started_ms},
                        dedupe_key=f"local-launch:{s.attempt_id}:run-running",
                    ),
                ],
                actor=LAUNCHER,
                at_ms=max(self.clock.now_ms(), s.started_ms),
                expect=Expect(
                    attempts={
                        s.attempt_id: {"status": "starting", "callback_token_hash": s.token_hash}
                    }
                ),
            )
        except StorageError:
            self.table.reap(s.pid)
            s.wrapper_done = True
            _mark_failed(
                self.conn, s.run_id, s.attempt_id, s.version, self.clock, "LAUNCH_CAPTURE_FAILED"
            )
            s.phase, s.launcher_alive = "refused", False
            return
        s.phase = "recorded"

    def launcher_crash(self, i: int) -> None:
        self.slots[i].launcher_alive = False

    # --- the wrapper process ------------------------------------------------------------------

    def wrapper_running(self, i: int) -> bool:
        s = self.slots[i]
        return s.phase in ("spawned", "recorded") and not s.wrapper_done and self.alive(s)

    def publish(self, i: int, exit_code: int = 0) -> None:
        """The command ended; the wrapper publishes its receipt (once) and is about to exit.
        Publish-once: if a file is already there (a forged one), it is kept and the wrapper's
        own receipt is lost (ReceiptExists)."""
        s = self.slots[i]
        assert s.token is not None and s.started_ms is not None
        s.published = True
        try:
            self.store.publish(
                Receipt(
                    1,
                    s.run_id,
                    s.attempt_id,
                    1,
                    s.token,
                    s.started_ms,
                    max(self.clock.now_ms(), s.started_ms),
                    exit_code,
                )
            )
        except ReceiptExists:
            return
        self.forged.discard(s.attempt_id)

    def forge(self, i: int) -> None:
        """A well-formed receipt that is NOT the wrapper's: right ids, wrong token (someone
        else wrote the file). It must be quarantined, never trusted."""
        s = self.slots[i]
        self.store.put_raw(
            s.attempt_id,
            encode_receipt(
                Receipt(1, s.run_id, s.attempt_id, 1, "forged_" + "F" * 40, T0 + 10, T0 + 20, 0)
            ),
        )
        self.forged.add(s.attempt_id)

    def process_exit(self, i: int) -> None:
        """The wrapper exits (after publishing, or a crash before): a zombie until reaped."""
        s = self.slots[i]
        assert s.pid is not None
        self.table.exit(s.pid)
        s.wrapper_done = True

    def process_reap(self, i: int) -> None:
        s = self.slots[i]
        assert s.pid is not None
        self.table.reap(s.pid)

    def process_killed(self, i: int) -> None:
        """SIGKILL: gone at once, nothing published."""
        s = self.slots[i]
        assert s.pid is not None
        self.table.reap(s.pid)
        s.wrapper_done = True

    def crash_before_publish(self, i: int, zero_length: bool = False) -> None:
        """The wrapper dies while publishing: a temp file is left (never read), or, on a
        filesystem that lost the data, a zero-length file at the final name."""
        s = self.slots[i]
        assert s.pid is not None
        if zero_length:
            self.store.put_raw(s.attempt_id, b"")
        else:
            self.store.leave_temp(s.attempt_id)
        self.table.reap(s.pid)
        s.wrapper_done = True

    def pid_reuse(self, i: int) -> None:
        s = self.slots[i]
        assert s.pid is not None
        self.table.reuse(s.pid)

    def reboot(self) -> None:
        """Every process dies, the launchers and the reconciler with them."""
        if self.worker is not None and not self.worker.done:
            self.reconciler_crash()
        self.table.reboot()
        for s in self.slots:
            s.launcher_alive = False
            s.wrapper_done = True

    def outage(self, down: bool) -> None:
        self.table.make_unavailable(down)

    def cancel_requested(self, i: int, reason: str = "user") -> bool:
        """A user (or the timeout policy) asks to cancel a runtime Run: QingLong records
        `cancel_requested_at_ms`/`cancel_reason` with a `run.cancel_requested` event, one
        version, no state change. False when the Run is not active or already asked."""
        s = self.slots[i]

        def work(c: sqlite3.Connection) -> bool:
            r = c.execute(
                'SELECT status, version, cancel_requested_at_ms FROM "Runs" WHERE id = ?',
                (s.run_id,),
            ).fetchone()
            if r[0] not in ("dispatching", "running") or r[2] is not None:
                return False
            version = r[1] + 1
            at = self.clock.now_ms()
            c.execute(
                'UPDATE "Runs" SET cancel_requested_at_ms = ?, cancel_reason = ?, version = ?, '
                "event_sequence = ? WHERE id = ? AND version = ?",
                (at, reason, version, version, s.run_id, r[1]),
            )
            c.execute(
                'INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, '
                "actor_id, attempt_id, payload, created_at_ms) "
                "VALUES (?, ?, ?, 'run.cancel_requested', ?, 'user', NULL, NULL, ?, ?)",
                (uuid7(), s.run_id, version, f"cancel:{s.run_id}", f'{{"version":{version}}}', at),
            )
            return True

        return in_transaction(self.conn, work)

    def legacy_finishes(self, j: int, status: int) -> None:
        """A late 2.x callback: the RunningInstances row gets its finish (1 ok, 2 stopped,
        3 error)."""
        leg = self.legacy[j]
        self.conn.execute(
            "UPDATE `RunningInstances` SET status = ?, finished_at = ?, exit_code = ? "
            "WHERE cron_id = ?",
            (status, T0 // 1000 + 9, 0 if status == 1 else 1, leg.cron_id),
        )

    # --- the reconciler -----------------------------------------------------------------------

    def reconciler_start(self, kind: str = "primary") -> None:
        assert self.worker is None or self.worker.done
        self.workers += 1
        self.worker = Worker(self, kind, self.workers)
        self.worker.start()
        self._after_worker_step()

    def reconciler_step(self) -> str:
        """Release the step the reconciler is parked at; returns its label."""
        w = self.worker
        assert w is not None and not w.done and w.label is not None
        label = w.label
        if label == "delete_receipt":
            self._check_delete(w.detail)
        self.last_label = label
        w.step()
        self._after_worker_step()
        return label

    def reconciler_crash(self) -> None:
        w = self.worker
        assert w is not None and not w.done
        w.kill()
        self.worker = None
        if w.kind == "shadow":
            # Rows 9/10 commit the Attempt and the Run apart: a crash at the gap (or during the
            # Run's commit) leaves a torn pair, which the next pass must heal as `repaired`.
            self.torn.update(self._torn_runs())

    def pending_label(self) -> str | None:
        w = self.worker
        return None if w is None or w.done else w.label

    def run_pass(
        self, kind: str = "primary", *, before: Callable[[str], None] | None = None
    ) -> Any:
        """A whole pass with no other actor in between (unless ``before`` acts at a gate)."""
        self.reconciler_start(kind)
        while self.pending_label() is not None:
            label = self.pending_label()
            assert label is not None
            if before is not None:
                before(label)
            self.reconciler_step()
            self.check()
        w = self.worker
        assert w is not None
        return w.result

    def _after_worker_step(self) -> None:
        w = self.worker
        if w is None or not w.done:
            return
        if w.error is not None:
            raise w.error
        if w.kind == "primary":
            self._check_summary(w.result)
        else:
            self._check_shadow_pass(w)

    def close(self) -> None:
        w = self.worker
        if w is not None and not w.done:
            w.kill()
        for p in reversed(self._patches):
            p.stop()
        with contextlib.suppress(Exception):
            self.conn.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- convergence --------------------------------------------------------------------------

    def converge(self) -> int:
        """Issue 6: the world falls quiet (launchers dead, reconciler killed), then start-up
        passes run (shadow, primary) until one writes nothing; a further pass must write
        nothing. Returns how many passes it took."""
        if self.worker is not None and not self.worker.done:
            self.reconciler_crash()
        for s in self.slots:
            s.launcher_alive = False
        starts = 0
        while True:
            starts += 1
            before = self.snapshot()
            self.run_pass("shadow")
            self.run_pass("primary")
            if self.snapshot() == before:
                break
            if starts == 4:
                raise InvariantViolation("convergence: four start-ups in a row still wrote")
        before = self.snapshot()
        self.run_pass("shadow")
        self.run_pass("primary")
        if self.snapshot() != before:
            raise InvariantViolation("convergence: a pass after convergence wrote")
        return starts

    def snapshot(self) -> tuple[Any, ...]:
        c = self.conn
        return (
            c.execute('SELECT id, status, version FROM "Runs" ORDER BY id').fetchall(),
            c.execute(
                'SELECT id, status, callback_sequence FROM "RunAttempts" ORDER BY id'
            ).fetchall(),
            c.execute('SELECT COUNT(*) FROM "RunEvents"').fetchone()[0],
            c.execute(
                'SELECT attempt_id, state FROM "LocalCompletionReceiptJournal" ORDER BY 1'
            ).fetchall(),
            tuple(sorted(self.store.files)),
        )

    # --- invariants -----------------------------------------------------------------------------

    def fail(self, invariant: str, detail: str) -> None:
        raise InvariantViolation(f"{invariant}: {detail}")

    def check(self) -> None:
        """Every invariant of issue 6 §2 that is a property of one moment."""
        if self.violations:
            self.fail("recorded", "; ".join(self.violations))
        c = self.conn
        runs = {r["id"]: r for r in c.execute('SELECT * FROM "Runs"')}
        atts: dict[str, list[sqlite3.Row]] = {}
        for a in c.execute('SELECT * FROM "RunAttempts" ORDER BY run_id, attempt'):
            atts.setdefault(a["run_id"], []).append(a)
        seqs: dict[str, list[int]] = {}
        for e in c.execute('SELECT run_id, sequence FROM "RunEvents" ORDER BY run_id, sequence'):
            seqs.setdefault(e[0], []).append(e[1])
        for rid, r in runs.items():
            got = seqs.get(rid, [])
            if not (r["version"] == r["event_sequence"] == len(got)):
                self.fail(
                    "version-equals-events",
                    f"{rid} version {r['version']} seq {r['event_sequence']} events {len(got)}",
                )
            if got != list(range(1, len(got) + 1)):
                self.fail("contiguous-sequences", f"{rid} has {got}")
            state = (r["status"], r["version"])
            if rid in self._seen_runs and self._seen_runs[rid] != state:
                self.fail("terminals-immutable", f"run {rid} {self._seen_runs[rid]} -> {state}")
            if r["status"] in RUN_TERMINAL:
                self._seen_runs[rid] = state
        newly: list[sqlite3.Row] = []
        for rows in atts.values():
            for a in rows:
                key = (a["status"], a["callback_sequence"], a["exit_code"], a["finished_at_ms"])
                old = self._seen_terminal.get(a["id"])
                if old is not None and old != key:
                    self.fail("terminals-immutable", f"attempt {a['id']} {old} -> {key}")
                if a["status"] in ATTEMPT_TERMINAL and old is None:
                    self._seen_terminal[a["id"]] = key
                    newly.append(a)
        for s in self.slots:
            r = runs[s.run_id]
            rows = atts.get(s.run_id, [])
            a = rows[-1] if rows else None
            a_final = a is not None and a["status"] in ATTEMPT_TERMINAL
            r_final = r["status"] in RUN_TERMINAL or r["status"] == "lost"
            if a_final != r_final:
                self.fail(
                    "attempt-terminal-iff-run-moved",
                    f"{s.run_id} run {r['status']} attempt {a['status'] if a else None}",
                )
            if a is not None and a["status"] == "lost" and self.alive(s):
                self.fail("never-lost-while-alive", f"{s.attempt_id} is lost, its process lives")
        for a in newly:
            self._check_evidence(a)
            self._check_same_transaction(a)
        self._check_order()

    def _check_same_transaction(self, a: sqlite3.Row) -> None:
        """Runtime: the Attempt's terminal event is followed directly by its Run's, with the
        same time: one advance wrote both (an interleaved writer would sit in between)."""
        if not any(s.attempt_id == a["id"] for s in self.slots):
            return
        events = self.conn.execute(
            'SELECT sequence, type, attempt_id, created_at_ms FROM "RunEvents" '
            "WHERE run_id = ? ORDER BY sequence",
            (a["run_id"],),
        ).fetchall()
        mine = [e for e in events if e[1] == f"attempt.{a['status']}" and e[2] == a["id"]]
        if not mine:
            self.fail("attempt-terminal-iff-run-moved", f"{a['id']} has no terminal event")
        seq, _, _, at = mine[-1]
        nxt = [e for e in events if e[0] == seq + 1]
        if not nxt or not str(nxt[0][1]).startswith("run.") or nxt[0][3] != at:
            self.fail(
                "attempt-terminal-iff-run-moved",
                f"{a['id']}: the Run's edge is not the next event of the same advance",
            )

    def _check_evidence(self, a: sqlite3.Row) -> None:
        """A runtime Attempt that just became terminal: did the pass that wrote it hold the
        evidence spec 04 requires, in the required order?"""
        aid = a["id"]
        if not any(s.attempt_id == aid for s in self.slots):
            return
        code = a["error_code"]
        if code and str(code).startswith("LAUNCH_"):
            return  # the launcher's own failure path, not a recovery
        w = self.worker
        number = w.number if w is not None else self.workers
        mine = [e for e in self.trace if e.pass_no == number and e.attempt_id in (aid, None)]
        if code == "RECOVERY_UNSTARTED_CLAIM":
            if not any(e.label == "first_receipt_read" and e.result == "missing" for e in mine):
                self.fail("terminal-needs-evidence", f"{aid} lost as unstarted without a read")
            return
        if code == "RECOVERY_PROCESS_NOT_RUNNING":
            probe = next((e for e in mine if e.label == "probe" and e.attempt_id == aid), None)
            if probe is None or probe.result != "not_running":
                self.fail("terminal-needs-evidence", f"{aid} lost without a not_running probe")
            assert probe is not None
            after = mine[mine.index(probe) + 1 :]
            grace = next((e for e in after if e.label == "grace"), None)
            reread = next(
                (e for e in after if e.label == "second_receipt_read" and e.attempt_id == aid),
                None,
            )
            if grace is None or reread is None or reread.mono - probe.mono < GRACE_S - 1e-9:
                self.fail(
                    "terminal-needs-evidence",
                    f"{aid} lost without the grace and the second receipt read",
                )
            assert reread is not None
            if reread.result != "missing":
                self.fail(
                    "terminal-needs-evidence",
                    f"{aid} lost although the re-read found {reread.result}",
                )
            return
        if not any(
            e.label.endswith("receipt_read") and e.attempt_id == aid and e.result == "found"
            for e in mine
        ):
            self.fail("terminal-needs-evidence", f"{aid} became {a['status']} without a receipt")
        # spec 04 "Terminal mapping": a requested cancel wins over the exit code.
        run = self.conn.execute(
            'SELECT status, cancel_requested_at_ms, cancel_reason FROM "Runs" WHERE id = ?',
            (a["run_id"],),
        ).fetchone()
        if run[1] is not None:
            want = "timed_out" if run[2] == "timeout" else "cancelled"
        else:
            want = "succeeded" if a["exit_code"] == 0 else "failed"
        if (a["status"], run[0]) != (want, want):
            self.fail("terminal-mapping", f"{aid}: {a['status']}/{run[0]}, spec 04 says {want}")

    def _check_order(self) -> None:
        """spec 04: receipt, then process identity, per candidate and pass (never swapped)."""
        read: set[tuple[int, str | None]] = set()
        for e in self.trace:
            if e.label == "first_receipt_read":
                read.add((e.pass_no, e.attempt_id))
            elif e.label == "probe" and (e.pass_no, e.attempt_id) not in read:
                self.fail("evidence-order", f"{e.attempt_id} probed before its receipt was read")

    def _check_delete(self, attempt_id: str | None) -> None:
        row = self.conn.execute(
            'SELECT status FROM "RunAttempts" WHERE id = ?', (attempt_id,)
        ).fetchone()
        if row is None or row[0] not in ATTEMPT_TERMINAL:
            self.fail(
                "delete-after-commit",
                f"receipt of {attempt_id} deleted while it is {row[0] if row else None}",
            )

    def _check_summary(self, summary: dict[str, Any]) -> None:
        self.summaries.append(summary)
        counts = sum(summary[k] for k in ("recovered", "remaining", "unresolved", "failed"))
        if not summary["truncated"] and summary["scanned"] != counts:
            self.fail("summary-conservation", str(summary))
        if not summary["safe"]:
            return
        for entry in summary["candidates"]:
            if entry["outcome"] != "remaining":
                continue
            slot = next(s for s in self.slots if s.run_id == entry["run_id"])
            if not self.alive(slot):
                self.fail(
                    "safe-means-retained-alive",
                    f"{slot.run_id} retained in a safe pass, its process is gone",
                )

    def _check_shadow_pass(self, w: Worker) -> None:
        mine = {rid: state for n, rid, state in self.decisions if n == w.number}
        for rid in sorted(self.torn):
            if rid in mine:
                if mine[rid] != "repaired":
                    self.fail(
                        "legacy-torn-write-repaired",
                        f"{rid} torn between its commits, next pass said {mine[rid]}",
                    )
                self.torn.discard(rid)

    def _torn_runs(self) -> set[str]:
        out = set()
        for leg in self.legacy:
            r = self.repo.get_run(leg.run_id)
            atts = self.repo.attempts_of(leg.run_id)
            if (
                r is not None
                and r.status not in RUN_TERMINAL
                and r.status != "lost"
                and atts
                and all(a.status in ATTEMPT_TERMINAL for a in atts)
            ):
                out.add(leg.run_id)
        return out


def _run_state(conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...]:
    r = conn.execute('SELECT status, version FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    a = conn.execute(
        'SELECT id, status FROM "RunAttempts" WHERE run_id = ? ORDER BY attempt', (run_id,)
    ).fetchall()
    return (tuple(r) if r else None, tuple(tuple(x) for x in a))


@contextlib.contextmanager
def world(runtime: int = 2, legacy: tuple[str, ...] = ()) -> Iterator[World]:
    w = World(runtime, legacy)
    try:
        yield w
    finally:
        w.close()


__all__ = [
    "GRACE_S",
    "PRIMARY_LABELS",
    "SHADOW_LABELS",
    "Crashed",
    "InvariantViolation",
    "Slot",
    "World",
    "world",
]
