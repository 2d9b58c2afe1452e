"""The node's actors as atomic steps (tests/_sim.py): the launcher (one rule per durable step of
``reconciler.launcher.launch``), the wrapper, the processes, the operator, the outage.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from _sim_node import (
    LAUNCHER,
    T0,
)

from reconciler.launcher import new_token
from reconciler.launcher._launcher import _mark_failed
from reconciler.node import (
    CaptureFailed,
    Receipt,
    ReceiptExists,
    capture_handle,
    encode_receipt,
)
from reconciler.ops import ResolveRefused, operator_actor, resolve
from storage import (
    AttemptChange,
    Expect,
    RunChange,
    StorageError,
    in_transaction,
    journal_register,
    uuid7,
)

if TYPE_CHECKING:
    pass


class NodeActors:
    """The World's actors other than the reconcilers: each method is one atomic step."""

    # --- the launcher (mirrors reconciler.launcher.launch, one rule per durable step) -------------

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

    def operator_resolves(self, run_id: str, target: str) -> bool:
        """An operator runs `qlfsm resolve RUN --to TARGET` (the real ``reconciler.ops.resolve``,
        unforced): it probes every active Attempt, refuses a process proven running, a terminal
        Run or an edge ADR-0001 forbids, else moves the Attempts and the Run in one
        transaction. False when it wrote nothing (refused, or the Run moved meanwhile)."""
        try:
            resolve(
                self.conn,
                run_id,
                target,
                "decided by the operator",
                force=False,
                provider=self.table,
                clock=self.clock,
                actor=operator_actor(None),
            )
        except (ResolveRefused, StorageError):
            return False
        self.resolved = True
        # A legacy Run torn between its two commits and then resolved was ended by the
        # operator: no pass will repair it (legacy-torn-write-repaired does not apply).
        self.torn.discard(run_id)
        return True

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
