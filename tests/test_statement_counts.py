"""How many SQL statements a zero-candidate start-up runs, counted with SQLite's trace
callback on every connection the command opens, on a real database made by `db init` (the
README's figures): `reconcile` (the ADR-0068 pass alone) runs one, the candidate query;
`startup` runs fifteen: the schema check, the candidate query, the sweep's schema check and
its four journal reads (the shards, the rows in a state the schema forbids (D-16), the
pending and the quarantined pages); eleven when the receipt root does not exist (no journal
read)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from reconciler.cli import main
from storage import PRIMARY_CANDIDATES_SQL

SCHEMA_CHECK = [
    "SELECT name FROM sqlite_master WHERE type = 'table'",
    'PRAGMA table_info("Runs")',
    'PRAGMA table_info("RunAttempts")',
    'PRAGMA table_info("RunEvents")',
    'PRAGMA table_info("LocalCompletionReceiptJournal")',
]
CANDIDATES = PRIMARY_CANDIDATES_SQL.replace("?", "257")


def traced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement run on any connection opened from now on."""
    statements: list[str] = []
    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    for name in ("QL3_SHADOW_ORIGINS", "QL_DEPLOYMENT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    return statements


def run(command: str, db: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = main([command, "--db", str(db), "--receipt-root", str(root)])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_a_zero_candidate_reconcile_runs_exactly_the_candidate_query(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    (tmp_path / "receipts").mkdir(mode=0o700)
    statements = traced(monkeypatch)
    out = run("reconcile", db_path, tmp_path / "receipts", capsys)
    assert statements == [CANDIDATES]
    assert out.splitlines()[-1] == "verdict: SAFE to start"


def test_a_zero_candidate_startup_runs_fifteen_statements_with_the_sweep(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    (tmp_path / "receipts").mkdir(mode=0o700)
    statements = traced(monkeypatch)
    out = run("startup", db_path, tmp_path / "receipts", capsys)
    assert len(statements) == 15, statements
    assert statements[:6] == [*SCHEMA_CHECK, CANDIDATES]
    assert statements[6:11] == SCHEMA_CHECK  # the sweep checks the schema again
    sweep = [" ".join(s.split()) for s in statements[11:]]
    assert all('FROM "LocalCompletionReceiptJournal"' in s for s in sweep), sweep
    assert "primary (ADR-0068): 0 scanned: 0 completed, 0 lost, 0 kept running" in out
    assert out.splitlines()[-1] == "verdict: SAFE to start"


def test_a_zero_candidate_startup_without_a_receipt_root_runs_eleven(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    statements = traced(monkeypatch)
    out = run("startup", db_path, tmp_path / "missing", capsys)
    assert statements == [*SCHEMA_CHECK, CANDIDATES, *SCHEMA_CHECK]
    assert "sweep: nothing to do (the receipt root does not exist)" in out
