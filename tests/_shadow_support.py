"""Fixtures for the legacy-shadow tests: real SQLite files made by `db init`, legacy Runs with
their Attempts, Crontabs and RunningInstances written row by row (no test lives here)."""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.shadow import PassHooks
from storage import LegacyCandidate, Repository, connect, init_schema, legacy_log_id

T0_MS = 1_760_000_000_000
_counter = itertools.count(1)


def new_id(prefix: str) -> str:
    # UUID-shaped and unique, recognisable when a privacy scan looks for it.
    n = next(_counter)
    return f"{prefix}{n:04d}-7a1c-7000-8000-{os.getpid():06d}{n:06d}"[:36]


@dataclass
class Made:
    run_id: str
    attempt_ids: list[str] = field(default_factory=list)
    cron_id: int | None = None
    pid: int | None = None
    log_path: str | None = None
    command: str | None = None


class LegacyDb:
    """A QingLong 3.0 database file with legacy-shadow fixtures."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.conn = connect(self.path, create=True)
        init_schema(self.conn, path=self.path)
        self.repo = Repository(self.conn)
        self.made: list[Made] = []
        self._cron = itertools.count(7_310_001)

    def close(self) -> None:
        self.conn.close()

    # --- rows -----------------------------------------------------------------------------

    def cron(self, command: str = "task ql_sample.js") -> int:
        cron_id = next(self._cron)
        self.conn.execute(
            "INSERT INTO `Crontabs` (id, name, command, schedule, status, createdAt, updatedAt) "
            "VALUES (?, ?, ?, '*/5 * * * *', 0, '2026-01-01', '2026-01-01')",
            (cron_id, f"job {cron_id}", command),
        )
        return cron_id

    def instance(
        self,
        cron_id: int,
        *,
        pid: int | None,
        log_path: str | None,
        status: int,
        started_s: int = T0_MS // 1000,
        finished_s: int | None = None,
        exit_code: int | None = None,
    ) -> None:
        self.conn.execute(
            "INSERT INTO `RunningInstances` (cron_id, pid, log_path, started_at, finished_at, "
            "status, exit_code, createdAt, updatedAt) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, '2026-01-01', '2026-01-01')",
            (cron_id, pid, log_path, started_s, finished_s, status, exit_code),
        )

    def run(
        self,
        *,
        status: str = "running",
        attempts: tuple[str, ...] = ("running",),
        origin: str = "manual",
        owner: str = "legacy",
        cron: bool = True,
        pid: int | None = None,
        log_path: str | None = None,
        created_at_ms: int | None = None,
        run_id: str | None = None,
        command: str = "task ql_sample.js",
    ) -> Made:
        """A Run in ``status`` with one Attempt per entry of ``attempts`` (numbered in order);
        the last one carries ``pid`` and the log id of ``log_path``."""
        rid = run_id or new_id("0199aaaa")
        cron_id = self.cron(command) if cron else None
        created = created_at_ms if created_at_ms is not None else T0_MS + len(self.made)
        version = 3 + len(attempts)
        self.conn.execute(
            'INSERT INTO "Runs" (id, project_id, task_id, task_revision, legacy_cron_id, '
            "trigger_type, execution_origin, execution_owner, status, version, event_sequence, "
            "created_at_ms, started_at_ms) VALUES (?, 'default', ?, '1', ?, 'cron', ?, ?, ?, "
            "?, ?, ?, ?)",
            (
                rid,
                f"legacy-cron:{cron_id}",
                cron_id,
                origin,
                owner,
                status,
                version,
                version,
                created,
                created if status == "running" else None,
            ),
        )
        made = Made(rid, cron_id=cron_id, pid=pid, log_path=log_path, command=command)
        for n, a_status in enumerate(attempts, start=1):
            aid = new_id("0199bbbb")
            last = n == len(attempts)
            finished = (
                created + 5 if a_status in ("succeeded", "failed", "cancelled", "lost") else None
            )
            self.conn.execute(
                'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, pid, '
                "log_artifact_id, callback_sequence, created_at_ms, started_at_ms, "
                "finished_at_ms, error_code, error_summary) "
                "VALUES (?, ?, ?, ?, 'legacy_local', ?, ?, 0, ?, ?, ?, ?, ?)",
                (
                    aid,
                    rid,
                    n,
                    a_status,
                    pid if last else None,
                    legacy_log_id(log_path) if (last and log_path) else None,
                    created,
                    created + 1 if a_status not in ("claimed",) else None,
                    finished,
                    "LEGACY_RECONCILE_OWNER_LOST" if a_status == "lost" else None,
                    "Legacy worker restarted without terminal evidence"
                    if a_status == "lost"
                    else None,
                ),
            )
            made.attempt_ids.append(aid)
        self.made.append(made)
        return made

    # --- reads -----------------------------------------------------------------------------

    def status(self, made: Made) -> tuple[str, list[str]]:
        run = self.repo.get_run(made.run_id)
        assert run is not None
        return run.status, [a.status for a in self.repo.attempts_of(made.run_id)]

    def events(self, made: Made) -> list[str]:
        return [e.type for e in self.repo.events_of(made.run_id)]

    def event_rows(self, made: Made) -> list[sqlite3.Row]:
        return self.conn.execute(
            'SELECT * FROM "RunEvents" WHERE run_id = ? ORDER BY sequence', (made.run_id,)
        ).fetchall()

    def secrets(self) -> list[str]:
        """Everything that must never appear in any output (spec 05 "Fail-open and privacy")."""
        out: list[str] = []
        for m in self.made:
            out.append(m.run_id)
            out.extend(m.attempt_ids)
            if m.cron_id is not None:
                out.append(f"legacy-cron:{m.cron_id}")
            if m.pid is not None:
                out.append(str(m.pid))
            if m.log_path:
                out.append(m.log_path)
                out.append(legacy_log_id(m.log_path))
            if m.command:
                out.append(m.command)
        return out


def bulk_runs(
    conn: sqlite3.Connection,
    n: int,
    *,
    origin: str = "manual",
    status: str = "queued",
    attempt: str | None = None,
    start_ms: int = T0_MS,
    step_ms: int = 1,
    prefix: str = "0199cccc",
) -> list[tuple[int, str]]:
    """``n`` legacy Runs (and optionally one Attempt each) in one transaction; returns their
    keyset keys (created_at_ms, id) in insertion order."""
    keys: list[tuple[int, str]] = []
    conn.execute("BEGIN")
    for i in range(n):
        rid = f"{prefix}-{i:08d}-7000-8000-000000000000"[:36]
        created = start_ms + (i * step_ms)
        conn.execute(
            'INSERT INTO "Runs" (id, project_id, task_id, task_revision, trigger_type, '
            "execution_origin, execution_owner, status, version, event_sequence, created_at_ms) "
            "VALUES (?, 'default', 'legacy-cron:1', '1', 'cron', ?, 'legacy', ?, 1, 1, ?)",
            (rid, origin, status, created),
        )
        if attempt is not None:
            conn.execute(
                'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
                "callback_sequence, created_at_ms) VALUES (?, ?, 1, ?, 'legacy_local', 0, ?)",
                (rid.replace(prefix, "0199dddd", 1), rid, attempt, created),
            )
        keys.append((created, rid))
    conn.execute("COMMIT")
    return keys


class AfterRead(PassHooks):
    """Another writer in the pass's window between reading a candidate and writing it: calls
    ``change`` once the pass has read the candidate's facts and decided its row (the
    ``after_read`` port), then records each outcome in ``seen``."""

    def __init__(self, change: Callable[[], object]) -> None:
        self.change = change
        self.seen: list[str] = []

    def after_read(self, conn: sqlite3.Connection, cand: LegacyCandidate) -> None:
        self.change()

    def after_decide(self, conn: sqlite3.Connection, cand: LegacyCandidate, state: str) -> None:
        self.seen.append(state)
