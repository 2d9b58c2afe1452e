"""Shared test set-up: hypothesis profiles and real-SQLite fixtures.

Hypothesis profile: ``QLFSM_HYPOTHESIS_PROFILE`` = ``ci`` (default: derandomized, no example
database, modest) or ``thorough`` (many more examples, for a long local run).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _shadow_support import LegacyDb
from _support import init_db
from hypothesis import settings

from reconciler.node import FileReceiptStore
from storage import Repository, connect

# The orderings suite's coverage: recorded while it runs, `--qlfsm-coverage DIR` to write it.
pytest_plugins = ["_coverage_plugin"]

settings.register_profile(
    "ci", derandomize=True, database=None, max_examples=50, deadline=None, print_blob=True
)
settings.register_profile(
    "thorough", derandomize=False, database=None, max_examples=2000, deadline=None
)
settings.load_profile(os.environ.get("QLFSM_HYPOTHESIS_PROFILE", "ci"))

Snapshot = dict[str, list[tuple[object, ...]]]


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database initialised by `db init`, copied for every test that needs one."""
    return init_db(tmp_path_factory.mktemp("template") / "template.db")


@pytest.fixture
def db_path(template_db: Path, tmp_path: Path) -> Path:
    """A fresh, initialised QingLong 3.0 database file in ``tmp_path``."""
    path = tmp_path / "ql.db"
    shutil.copyfile(template_db, path)
    return path


@pytest.fixture
def repo(db_path: Path) -> Iterator[Repository]:
    """A repository on its own connection (the writer under test)."""
    with contextlib.closing(connect(str(db_path))) as conn:
        yield Repository(conn)


def read_snapshot(path: Path) -> Snapshot:
    """Every row of the Run tables, read through a SECOND, fresh connection."""
    conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
    try:
        return {
            table: sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            for table in ("Runs", "RunAttempts", "RunEvents", "LocalCompletionReceiptJournal")
        }
    finally:
        conn.close()


@pytest.fixture
def snapshot(db_path: Path) -> Callable[[], Snapshot]:
    return lambda: read_snapshot(db_path)


@pytest.fixture
def reader(db_path: Path) -> Iterator[Repository]:
    """A repository on a second connection, for reading back what the writer committed."""
    with contextlib.closing(connect(str(db_path))) as conn:
        yield Repository(conn)


@pytest.fixture
def conn(db_path: Path) -> Iterator[Any]:
    """A bare connection to ``db_path``, for the reconciler and launcher under test."""
    with contextlib.closing(connect(str(db_path))) as conn:
        yield conn


@pytest.fixture
def store(tmp_path: Path) -> FileReceiptStore:
    """An empty receipt root under ``tmp_path``, as the launcher leaves it (it creates the root
    before any spawn; a missing root beside a launched Attempt is a configuration error)."""
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    return FileReceiptStore(str(root))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[LegacyDb]:
    """A legacy QingLong database (`db init`, then rows written one by one) in ``tmp_path``."""
    made = LegacyDb(tmp_path / "ql.db")
    yield made
    made.close()
