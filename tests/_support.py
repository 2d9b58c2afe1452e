"""Helpers shared by the storage/fsm tests (plain functions, no fixtures)."""

from __future__ import annotations

from collections import deque
from pathlib import Path

from fsm import MachineSpec
from storage import Actor, AttemptChange, Repository, RunChange, connect, init_schema

T0 = 1_700_000_000_000
SYSTEM = Actor("system")


def init_db(path: Path) -> Path:
    """A new database at ``path`` initialised by `db init`, its WAL folded back so that a plain
    file copy carries the whole schema."""
    conn = connect(str(path), create=True)
    try:
        init_schema(conn, path=str(path))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path


def lifecycle_path(spec: MachineSpec, target: str) -> list[str]:
    """Triggers of the shortest unguarded path from the initial state to ``target``."""
    seen: dict[str, list[str]] = {spec.initial: []}
    todo = deque([spec.initial])
    while todo:
        state = todo.popleft()
        if state == target:
            return seen[state]
        for e in spec.edges:
            if e.guard is None and e.source == state and e.dest not in seen:
                seen[e.dest] = [*seen[state], e.trigger]
                todo.append(e.dest)
    raise AssertionError(f"{target} unreachable in {spec.name}")


def run_in(repo: Repository, run_id: str, status: str, *, at_ms: int = T0) -> int:
    """Create a Run and walk it to ``status`` along lifecycle edges; return its version."""
    from fsm import RUN_SPEC

    version = repo.create_run(run_id=run_id, at_ms=at_ms).version
    for trigger in lifecycle_path(RUN_SPEC, status):
        version = repo.advance(
            run_id, version, [RunChange(trigger)], actor=SYSTEM, at_ms=at_ms
        ).version
    return version


def attempt_in(
    repo: Repository, run_id: str, attempt_id: str, status: str, *, at_ms: int = T0
) -> int:
    """A Run in `dispatching` with one Attempt walked to ``status``; return the Run version."""
    from fsm import ATTEMPT_SPEC

    version = run_in(repo, run_id, "dispatching", at_ms=at_ms)
    version = repo.create_attempt(
        run_id=run_id, attempt_id=attempt_id, expected_version=version, at_ms=at_ms
    ).version
    for trigger in lifecycle_path(ATTEMPT_SPEC, status):
        version = repo.advance(
            run_id, version, [AttemptChange(attempt_id, trigger)], actor=SYSTEM, at_ms=at_ms
        ).version
    return version


class Model:
    """A plain in-memory model for `Lifecycle.attach`."""

    state: str
