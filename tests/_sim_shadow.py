"""The shadow driver (tests/_sim.py): the legacy Runs, and what the World plugs into the
ADR-0448 pass through its ports (``reconciler.shadow._ports``): the opener and the candidate
source, whose calls are gates, and hooks that gate each decision and the gap between the
two legacy commits and check that silent outcomes write nothing.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from _sim_node import (
    T0,
    LegacySlot,
)
from _sim_workers import Worker

from fsm.qinglong import ATTEMPT_TERMINAL, RUN_TERMINAL
from reconciler.shadow import PassHooks
from storage import (
    legacy_candidates,
    legacy_log_id,
)

if TYPE_CHECKING:
    from _sim import World


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


class ShadowDriver:
    """The World's legacy side: the legacy Runs it sets up, the ports it hands the shadow pass
    (its connection and candidate pages are gates), and the torn-write bookkeeping."""

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
            # spec 05 row 2b: a running Run whose 2.x engine never wrote an Attempt.
            "no_attempt": ("running", (), "manual"),
            # row 4: more than 8 RunningInstances rows for the cron (a cron restarted often).
            "truncated": ("running", ("running",), "manual"),
            # row 5: two instances with the Attempt's pid, neither with its log.
            "two_matches": ("running", ("running",), "manual"),
            # row 11: a queued Run whose one Attempt is running (no row 9 or 10 combination).
            "illegal": ("queued", ("running",), "manual"),
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
        finished = kind == "complete"
        for n, (i_pid, i_log) in enumerate(_instances(kind, pid, log)):
            c.execute(
                "INSERT INTO `RunningInstances` (cron_id, pid, log_path, started_at, "
                "finished_at, status, exit_code, createdAt, updatedAt) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, '2026-01-01', '2026-01-01')",
                (
                    cron_id,
                    i_pid,
                    i_log,
                    T0 // 1000 - n,
                    T0 // 1000 + 5 if finished else None,
                    1 if finished else 0,
                    0 if finished else None,
                ),
            )
        return LegacySlot(rid, ids, kind, cron_id, pid)

    def _shadow_connect(self, path: str, busy_timeout_s: float | None) -> sqlite3.Connection:
        w = self.calling_worker()
        assert w is not None and path == str(self.db)
        conn = self.gated_connect(w)
        w.conn = conn
        return conn

    def _shadow_page(self, *a: Any) -> Any:
        w = self.calling_worker()
        assert w is not None
        w.gate("shadow_page")
        return legacy_candidates(*a)

    def legacy_finishes(self, j: int, status: int) -> None:
        """A late 2.x callback: the RunningInstances row gets its finish (1 ok, 2 stopped,
        3 error)."""
        leg = self.legacy[j]
        self.conn.execute(
            "UPDATE `RunningInstances` SET status = ?, finished_at = ?, exit_code = ? "
            "WHERE cron_id = ?",
            (status, T0 // 1000 + 9, 0 if status == 1 else 1, leg.cron_id),
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


def _instances(kind: str, pid: int, log: str) -> list[tuple[int, str]]:
    """The cron's RunningInstances rows (pid, log path) a legacy Run of ``kind`` starts with."""
    if kind in ("abandon", "no_attempt", "illegal"):
        return []
    if kind == "truncated":
        # spec 05 "Hard caps": evidence per cron <= 8; the ninth row makes it truncated.
        return [(pid, log)] + [(pid + 100 + n, f"{log}.{n}") for n in range(8)]
    if kind == "two_matches":
        # spec 05 "Evidence selection": more than one by pid (and none by log) is ambiguous.
        return [(pid, f"{log}.old"), (pid, f"{log}.older")]
    return [(pid, log)]


def _run_state(conn: sqlite3.Connection, run_id: str) -> tuple[Any, ...]:
    r = conn.execute('SELECT status, version FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    a = conn.execute(
        'SELECT id, status FROM "RunAttempts" WHERE run_id = ? ORDER BY attempt', (run_id,)
    ).fetchall()
    return (tuple(r) if r else None, tuple(tuple(x) for x in a))
