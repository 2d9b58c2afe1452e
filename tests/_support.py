"""Helpers shared by the storage/fsm tests (plain functions, no fixtures)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

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
    from fsm.qinglong import RUN_SPEC

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
    from fsm.qinglong import ATTEMPT_SPEC

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


_DIGEST = """
import hashlib, json, pathlib, sys
db, empty_is_none, roots = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
out = {}
for suffix in ("", "-wal", "-journal"):
    path = pathlib.Path(db + suffix)
    data = path.read_bytes() if path.exists() else None
    if suffix and empty_is_none and not data:
        data = None
    out[path.name] = None if data is None else hashlib.sha256(data).hexdigest()
for root in roots:
    for p in sorted(pathlib.Path(root).rglob("*")):
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
print(json.dumps(out))
"""


def tree_digest(
    db: Path | str, *roots: Path | str, empty_log_is_none: bool = False
) -> dict[str, str | None]:
    """Every byte a write could touch, as digests: the database file, its -wal and -journal,
    and every file and directory under the roots; not the -shm (SQLite's shared-memory index of
    the log, which readers update too). ``empty_log_is_none``: an empty -wal/-journal counts as
    none (a read-only connection may leave an empty log behind). Read in another process:
    closing a descriptor of the database file here would drop this process's SQLite locks on it
    (POSIX advisory locks are per process, not per descriptor)."""
    flag = "1" if empty_log_is_none else "0"
    out = subprocess.run(
        [sys.executable, "-c", _DIGEST, str(db), flag, *map(str, roots)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    digest: dict[str, str | None] = json.loads(out.stdout)
    return digest


def built_again(name: str) -> ModuleType:
    """A fresh copy of module ``name``, executed again under its own name (so mutmut's mutants
    of its table-building helpers are switched on), leaving the imported module in place: the
    rest of the suite keeps the classes it was built with."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    imported = sys.modules[name]
    sys.modules[name] = module  # dataclasses resolve their module while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules[name] = imported
    return module


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (a file or directory) read-only even for root: the immutable attribute (root
    bypasses permission bits, not `chattr +i`); for another user, the permission bits."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make {path.name} immutable here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def drop_statements_on(path: Path, table: str, statement: str = "INSERT") -> None:
    """Another application's trigger that silently drops every ``statement`` on ``table``."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute(
            f'CREATE TRIGGER drop_rows BEFORE {statement} ON "{table}" '
            "BEGIN SELECT RAISE(IGNORE); END"
        )
        conn.commit()
    finally:
        conn.close()
