"""The reconciler as a worker thread parked at gates (tests/_sim.py), and the gated connection:
the candidate query and every COMMIT are gates.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

from _sim_node import (
    PROFILE,
    SHADOW_BUDGET,
    SHADOW_ORIGINS,
    Crashed,
    Ev,
)

from reconciler.primary import reconcile_connection
from reconciler.shadow import run_pass
from storage import (
    PRIMARY_CANDIDATES_SQL,
)
from storage._connection import QlConnection

if TYPE_CHECKING:
    from _sim import World


class PortFault(OSError):
    """A port call that fails the ordinary way (an I/O error), not a crash: the pass goes on
    and handles it (spec 04 row 14 for the candidate being handled)."""


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
        self.fault = False  # the released port call raises PortFault instead of returning
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
            if self.fault:
                self.fault = False
                raise PortFault(f"{label} failed")

    def _main(self) -> None:
        try:
            self.conn = self.world.gated_connect(self)
            if self.kind == "primary":
                self.result = reconcile_connection(
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
                self.result = run_pass(
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

    def step(self, *, fault: bool = False) -> None:
        with self.cv:
            seen = self.arrivals
            self.label = None
            self.go = True
            self.fault = fault
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
                label = "read_candidates" if w.queries == 1 else "verify_candidates"
                w.gate(label)
                # What the page showed is part of the pass's position (tests/_sim_search.py's
                # state key): two orderings that reach the same rows, one having read the
                # page before a launcher or a cancel moved a Run and one after, have different
                # futures (row 2 `status_changed`, a stale version). Only this thread runs, so
                # the same query just before gives exactly the rows the pass reads.
                page = tuple(tuple(r) for r in super().execute(sql, *args).fetchall())
                world = w.world
                world.trace.append(Ev(w.number, label, None, repr(page), world.clock.monotonic()))
            elif sql.strip().upper() == "COMMIT":
                w.gate("commit")
        return super().execute(sql, *args)
