"""`qlfsm demo` pinned byte for byte: its output and exit code, every `qlfsm` command it runs
(arguments, stdout, stderr, exit code: the start-up's JSON summaries among them) and every row
the run leaves in the database (runs, attempts, events, the receipt journal, the legacy
tables), compared with the committed snapshot ``tests/snapshots/demo.txt``.

Only what differs from one run to the next is normalised, each to a placeholder that still
shows where it was: the demo's directory and the repository's path; UUIDs (numbered in the
order they first appear, so that which id is which stays pinned); real pids and their process
groups (numbered the same way; the legacy runs' fixed pids 31001.. stay); ``/proc`` start
ticks; the executor handles (they encode pid, boot id and ticks) and the random hex digests
(callback token hashes, receipt MACs); wall-clock times (epoch milliseconds and seconds,
ISO-8601 and SQLite datetimes).

``QLFSM_UPDATE_SNAPSHOT=1`` rewrites the snapshot instead of comparing (for a deliberate
change of behaviour, reviewed in the diff).
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from reconciler.cli import _demo, main

SNAPSHOT = Path(__file__).parent / "snapshots" / "demo.txt"
REPO = Path(__file__).resolve().parents[1]
TABLES = (
    "Runs",
    "RunAttempts",
    "RunEvents",
    "LocalCompletionReceiptJournal",
    "RunningInstances",
    "Crontabs",
)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
HANDLE = re.compile(r"ql3lp1\.[A-Za-z0-9_=-]+")
DIGEST = re.compile(r"\b[0-9a-f]{64}\b")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
SQL_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [+-]\d\d:\d\d)?")
EPOCH_MS = re.compile(r"\b1[6-9]\d{11}\b")
EPOCH_S = re.compile(r"\b1[6-9]\d{8}\b")
TICKS = re.compile(r"(start ticks |ticks )\d+")


def numbered(pattern: re.Pattern[str], text: str, name: str) -> str:
    seen: dict[str, str] = {}

    def one(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(0), f"<{name}-{len(seen) + 1}>")

    return pattern.sub(one, text)


def normalise(text: str, base: Path, pids: list[int]) -> str:
    text = text.replace(str(base), "<dir>").replace(str(REPO), "<repo>")
    text = HANDLE.sub("<handle>", text)
    text = numbered(UUID, text, "uuid")
    text = DIGEST.sub("<digest>", text)
    text = ISO.sub("<time>", text)
    text = SQL_TIME.sub("<time>", text)
    text = EPOCH_MS.sub("<ms>", text)
    text = EPOCH_S.sub("<s>", text)
    text = TICKS.sub(r"\1<ticks>", text)
    for n, pid in enumerate(pids, start=1):
        text = re.sub(rf"(?<![\d.]){pid}(?![\d.])", f"<pid-{n}>", text)
    return text


def tables(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        parts = []
        for table in TABLES:
            cur = conn.execute(f"SELECT * FROM `{table}` ORDER BY rowid")
            parts.append(f"== table {table}")
            parts.append("|".join(d[0] for d in cur.description))
            parts.extend("|".join("" if v is None else str(v) for v in row) for row in cur)
        return "\n".join(parts)
    finally:
        conn.close()


def launched_pids(db: Path) -> list[int]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT pid FROM RunAttempts WHERE executor_type = 'local_process' "
            "AND pid IS NOT NULL ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return [int(r[0]) for r in rows]


def test_the_demo_prints_runs_and_writes_what_the_committed_snapshot_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []
    real = _demo.qlfsm

    def recorded(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = real(*args, check=check)
        calls.append(
            f"== qlfsm {' '.join(args)}: exit {proc.returncode}\n-- stdout\n{proc.stdout}"
            f"-- stderr\n{proc.stderr}"
        )
        return proc

    monkeypatch.setattr(_demo, "qlfsm", recorded)
    base = tmp_path / "demo"
    code = main(["demo", "--dir", str(base)])
    out, err = capsys.readouterr()
    got = "\n".join(
        [f"== qlfsm demo: exit {code}", "-- stdout", out + "-- stderr", err + "\n".join(calls)]
    )
    got = normalise(got + "\n" + tables(base / "ql.db") + "\n", base, launched_pids(base / "ql.db"))
    if os.environ.get("QLFSM_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(got, encoding="utf-8")
    want = SNAPSHOT.read_text(encoding="utf-8")
    assert got == want
