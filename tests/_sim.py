"""The ordering-exploration harness: one simulated node, every actor's atomic steps.

Built on the same ports as the real parts: ``FakeClock`` (reconciler/_clock.py),
``FakeProcessTable`` (reconciler/node/_identity.py), ``MemoryReceiptStore``
(reconciler/node/_receipt_store.py) and a REAL SQLite file made by `db init`, in its own temporary
directory. The reconcilers are the real, unmodified code:
``reconciler.primary._pass.reconcile_connection`` and ``reconciler.shadow._pass.run_pass`` run
in a worker thread, and every port call they make (the candidate query, each receipt read, each
process probe, the grace, each COMMIT, each receipt delete or quarantine move, the legacy page
and per-candidate decision, the gap between the two legacy commits) is a GATE: the worker stops
there until the driver releases exactly that step. Only one thread ever runs at a time, so an
ordering is a plain sequence of steps and a replay is deterministic.

Why gates at the ports instead of a re-implementation of the passes: the orderings explored
are the real code's orderings. A "step" of the reconciler is what it does between two gates.

A reconciler crash closes the worker's connection while the worker is parked at a gate (at
the COMMIT gate that is between BEGIN IMMEDIATE and COMMIT: SQLite discards the open
transaction, as it does when a process dies), then every later port call of that worker raises
:class:`Crashed`, so a dead reconciler never touches the store again.

The invariants of docs/orderings.md are checked by :meth:`World.check` after every step (the
stateful test and the exhaustive search call it); a violation raises
:class:`InvariantViolation` naming the invariant.

The harness is split along the code's seams: ``_sim_node.py`` (constants, the template database,
slots, the fake receipt store and clock), ``_sim_workers.py`` (the gated worker and
connection), ``_sim_actors.py`` (launcher, wrapper, processes), ``_sim_shadow.py`` (the legacy
Runs and the shadow pass's ports), ``_sim_invariants.py`` (the checks); :class:`World` here
puts them together and drives the primary pass.
"""

from __future__ import annotations

import contextlib
import copy
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from _sim_actors import NodeActors
from _sim_invariants import Invariants
from _sim_node import (
    FAULT_LABELS,
    GRACE_S,
    PRIMARY_LABELS,
    SHADOW_LABELS,
    T0,
    Crashed,
    Ev,
    InvariantViolation,
    Seed,
    SimClock,
    SimStore,
    Slot,
    _session_dir,
    template_db,
)
from _sim_odd import OddRun, OddRuns
from _sim_shadow import ShadowDriver, SimShadowHooks
from _sim_workers import GatedConnection, Worker

import reconciler.primary._pass as primary_mod
from reconciler.node import (
    Evidence,
    FakeProcessTable,
    parse_handle,
)
from reconciler.shadow import PassPorts
from storage import (
    Actor,
    Repository,
    RunChange,
    connect,
)


class World(NodeActors, ShadowDriver, OddRuns, Invariants):
    """A node: its database file, process table, receipt store and clock, the launcher and
    wrapper of each runtime Slot, the legacy Runs, and at most one reconciler at a time."""

    def __init__(
        self,
        runtime: int = 2,
        legacy: tuple[str, ...] = (),
        *,
        odd: tuple[str, ...] = (),
        seed: Seed | None = None,
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
        self.resolved = False  # an operator's `qlfsm resolve` wrote (World.operator_resolves)
        if seed is None:
            self.slots = [self._prepare(i) for i in range(runtime)]
            self.legacy = [self._legacy(j, kind) for j, kind in enumerate(legacy)]
            # Foreign and damaged runtime Runs (tests/_sim_odd.py), after the slots.
            self.odd: list[OddRun] = [self._odd(j, kind) for j, kind in enumerate(odd)]
        else:
            # A copy of a quiet world (no reconciler running): the same file, the same Python
            # state, so replays in the exhaustive search skip the set-up transactions.
            self.slots = copy.deepcopy(seed.slots)
            self.legacy = copy.deepcopy(seed.legacy)
            self.odd = copy.deepcopy(seed.odd)
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
            copy.deepcopy(self.odd),
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

    def check(self) -> None:
        super().check()
        self._check_odd()

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

    def _probe_wrapper(self) -> Callable[..., Evidence]:
        inner = primary_mod.inspect_handle

        def probe(handle_text: object, provider: Any, *, platform: str = "linux") -> Evidence:
            w = self.calling_worker()
            if w is None:
                return inner(handle_text, provider, platform=platform)
            label = "verify_probe" if w.queries >= 2 else "probe"
            slot = self._slot_of_handle(handle_text)
            aid = slot.attempt_id if slot else self.odd_attempt_of_handle(handle_text)
            w.gate(label, aid)
            evidence = inner(handle_text, provider, platform=platform)
            alive = slot is not None and self.alive(slot)
            mono = self.clock.monotonic()
            self.trace.append(Ev(w.number, label, aid, evidence.verdict, mono))
            if slot is not None:
                self.probes.append((w.number, slot.attempt_id, evidence.verdict, alive, mono))
            return evidence

        return probe

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

    def reconciler_fault(self) -> str:
        """Release the step the reconciler is parked at as a failure: the port call raises an
        ordinary exception (``PortFault``) the pass handles; returns the label."""
        w = self.worker
        assert w is not None and not w.done and w.label in FAULT_LABELS
        label = w.label
        self.last_label = label
        w.step(fault=True)
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
        """The world falls quiet (launchers dead, reconciler killed), then start-up
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
        self._check_odd_settled()
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


@contextlib.contextmanager
def world(
    runtime: int = 2, legacy: tuple[str, ...] = (), odd: tuple[str, ...] = ()
) -> Iterator[World]:
    w = World(runtime, legacy, odd=odd)
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
    "Seed",
    "Slot",
    "World",
    "world",
]
