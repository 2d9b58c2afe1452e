"""`qlfsm startup --metrics-file`: the start-up's counts in the Prometheus text format for
node_exporter's textfile collector (docs/decisions.md D-22), on real SQLite files, receipts and
dead processes, the written file parsed back with prometheus_client's own parser."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _primary_support import dead_handle, linux_only, make_candidate, qlfsm, receipt
from prometheus_client.parser import text_string_to_metric_families

from reconciler.node import FileReceiptStore
from storage import Repository

ORIGINS = "manual,scheduled_node"


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    return {**base, "NO_COLOR": "1", **extra}


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the file, parsed by prometheus_client: (name, labels) -> value."""
    text = path.read_text(encoding="utf-8")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def snapshot(db: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return (
            conn.execute('SELECT id, status, version FROM "Runs" ORDER BY id').fetchall()
            + conn.execute('SELECT id, status FROM "RunAttempts" ORDER BY id').fetchall()
        )


@pytest.fixture
def node(repo: Repository, db_path: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A node after a crash: a dead job (row 13, lost), a finished one with its receipt (row 5,
    completed), a handle that is not one (row 10, blocked), a claimed Attempt of another
    executor (row 4b, lost) and a dispatching Run with no Attempt (row 3, lost)."""
    root = tmp_path / "receipts"
    root.mkdir()
    handle, pid = dead_handle()
    make_candidate(repo, "run-dead", "at-dead", handle=handle, pid=pid)
    handle, pid = dead_handle()
    make_candidate(repo, "run-done", "at-done", handle=handle, pid=pid)
    FileReceiptStore(str(root)).publish(receipt("run-done", "at-done"))
    make_candidate(repo, "run-odd", "at-odd", handle="ql3lp1.bad", pid=3)
    make_candidate(repo, "run-far", "at-far", attempt="claimed", run="dispatching",
                   executor_type="remote_worker")  # fmt: skip
    from _primary_support import make_run

    make_run(repo, "run-none", "dispatching")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    return db_path, root, textfiles


@linux_only
def test_the_metrics_file_holds_the_start_ups_counts_verdict_and_durations(
    node: tuple[Path, Path, Path],
) -> None:
    db, root, textfiles = node
    prom = textfiles / "qlfsm.prom"
    out = qlfsm("startup", "--db", str(db), "--receipt-root", str(root), "--origins", ORIGINS,
                "--json", "--metrics-file", str(prom), env=env())  # fmt: skip
    assert out.returncode == 3, out.stderr
    assert out.stderr == ""
    result = json.loads(out.stdout)
    got = samples(prom)

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    # ADR-0001 §16 run_reconcile_total{executor,result}: what the primary pass decided.
    decided = {
        (dict(k[1])["executor"], dict(k[1])["result"]): v
        for k, v in got.items()
        if k[0] == "run_reconcile_total" and v
    }
    assert decided == {
        ("local_process", "recovered"): 2,  # lost after the grace, completed by its receipt
        ("local_process", "unresolved"): 1,
        ("other", "recovered"): 1,  # the remote claim (row 4b)
        ("none", "recovered"): 1,  # no Attempt at all (row 3)
    }
    assert sum(decided.values()) == result["primary"]["scanned"] == 5
    assert value("qlfsm_startup_safe") == 0 and value("qlfsm_startup_primary_truncated") == 0
    assert value("qlfsm_startup_primary_scanned") == 5
    total = value("qlfsm_startup_duration_seconds", **{"pass": "total"})
    parts = [value("qlfsm_startup_duration_seconds", **{"pass": p}) for p in ("shadow", "primary")]
    assert 0 < sum(parts) <= total < 60
    assert ("qlfsm_startup_duration_seconds", (("pass", "sweep"),)) not in got  # blocked: no sweep
    # The shadow pass: its audit state and the ADR-0449 metric batch, value for value.
    batch = result["shadow"]["metrics"]
    assert value("qlfsm_legacy_shadow_state", state=result["shadow"]["state"]) == 1
    dims = batch["dimensions"]
    labels = {"profile": dims["profile"], "assessment": dims["assessment"],
              "stop_reason": dims["stopReason"]}  # fmt: skip
    assert value("qlfsm_legacy_shadow_max_candidates", **labels) == batch["values"]["maxCandidates"]
    assert value("qlfsm_legacy_shadow_marked_lost", **labels) == batch["values"]["markedLost"]
    for entry in batch["byOrigin"]:
        assert value("qlfsm_legacy_shadow_origin_candidates", origin=entry["origin"],
                     outcome="scanned") == entry["scanned"]  # fmt: skip
    # No run id, attempt id, path or message in any label (ADR-0001 §16, spec 05).
    label_values = {v for _, labels_ in got for _, v in labels_}
    assert not any(v.startswith(("run-", "at-", "/")) for v in label_values), label_values
    assert os.stat(prom).st_mode & 0o777 == 0o644
    assert sorted(p.name for p in textfiles.iterdir()) == ["qlfsm.prom"]  # no temporary left


@linux_only
def test_a_second_start_up_replaces_the_file_whole(node: tuple[Path, Path, Path]) -> None:
    db, root, textfiles = node
    prom = textfiles / "qlfsm.prom"
    prom.write_text("# a previous start-up's file\nqlfsm_startup_safe 1\nold_series 7\n")
    out = qlfsm("startup", "--db", str(db), "--receipt-root", str(root), "--metrics-file",
                str(prom), env=env())  # fmt: skip
    assert out.returncode == 3, out.stderr
    first = samples(prom)
    assert ("old_series", ()) not in first and first[("qlfsm_startup_safe", ())] == 0
    qlfsm("resolve", "--db", str(db), "--run", "run-odd", "--to", "failed", "--reason", "bad")
    again = qlfsm("startup", "--db", str(db), "--receipt-root", str(root), "--metrics-file",
                  str(prom), env=env())  # fmt: skip
    assert again.returncode == 0, again.stderr
    second = samples(prom)
    assert second[("qlfsm_startup_safe", ())] == 1
    assert second[("qlfsm_startup_primary_scanned", ())] == 0  # everything was decided before
    assert ("qlfsm_startup_duration_seconds", (("pass", "sweep"),)) in second
    assert sorted(p.name for p in textfiles.iterdir()) == ["qlfsm.prom"]


@linux_only
def test_a_metrics_file_that_cannot_be_written_is_one_warning_and_the_verdict_stands(
    node: tuple[Path, Path, Path],
) -> None:
    db, root, _ = node
    # /proc/self is a directory in which nothing can be created, root or not.
    out = qlfsm("startup", "--db", str(db), "--receipt-root", str(root), "--metrics-file",
                "/proc/self/qlfsm.prom", env=env())  # fmt: skip
    assert out.returncode == 3, out.stderr  # the verdict of the start-up that was done
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("qlfsm: warning: metrics file")
    assert "start-up is done and its verdict stands" in out.stderr
    assert out.stdout.rstrip().endswith("verdict: start-up BLOCKED")
    with contextlib.closing(sqlite3.connect(db)) as conn:
        [(status,)] = conn.execute("SELECT status FROM \"Runs\" WHERE id = 'run-dead'")
    assert status == "lost"  # the start-up itself is committed


def shadowing_module(tmp_path: Path) -> Path:
    """A directory whose `prometheus_client` cannot be imported, put first on PYTHONPATH."""
    fake = tmp_path / "no-extra" / "prometheus_client"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("raise ImportError('no prometheus_client here')\n")
    return fake.parent


@linux_only
def test_without_the_extra_the_flag_is_refused_naming_it_and_nothing_is_done(
    node: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    db, root, textfiles = node
    before = snapshot(db)
    prom = textfiles / "qlfsm.prom"
    out = qlfsm("startup", "--db", str(db), "--receipt-root", str(root), "--metrics-file",
                str(prom), env=env(PYTHONPATH=str(shadowing_module(tmp_path))))  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "pip install 'qlfsm[metrics]'" in out.stderr and "nothing was done" in out.stderr
    assert out.stdout == "" and snapshot(db) == before and not prom.exists()
    # The same node without the flag: the extra is never imported, the start-up runs.
    plain = qlfsm("startup", "--db", str(db), "--receipt-root", str(root),
                  env=env(PYTHONPATH=str(shadowing_module(tmp_path))))  # fmt: skip
    assert plain.returncode == 3 and plain.stderr == "", plain.stderr


def test_startup_without_the_flag_never_imports_prometheus_client(
    db_path: Path, tmp_path: Path
) -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['qlfsm', 'startup', '--db', sys.argv[1], '--receipt-root', sys.argv[2]]\n"
        "try:\n    runpy.run_module('reconciler', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('loaded' if 'prometheus_client' in sys.modules else 'not loaded')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(db_path), str(tmp_path)],
                         capture_output=True, text=True, check=False, env=env())  # fmt: skip
    assert out.stdout.splitlines()[-1] == "not loaded", out.stdout + out.stderr


@pytest.mark.parametrize(
    ("where", "extra", "says"),
    [
        ("{t}/textfile/qlfsm.txt", [], "reads only *.prom files"),
        ("{t}/missing/qlfsm.prom", [], "does not exist"),
        ("{t}/textfile/dir.prom", [], "is a directory"),
        ("{t}/textfile/qlfsm.prom", ["--dry-run"], "with --dry-run"),
    ],
    ids=["not-prom", "no-directory", "a-directory", "dry-run"],
)
def test_a_bad_metrics_file_is_a_usage_error_before_anything_is_read(
    db_path: Path, tmp_path: Path, where: str, extra: list[str], says: str
) -> None:
    (tmp_path / "textfile" / "dir.prom").mkdir(parents=True)
    before = snapshot(db_path)
    path = where.format(t=tmp_path)
    out = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(tmp_path),
                "--metrics-file", path, *extra, env=env())  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and says in out.stderr, out.stderr
    assert snapshot(db_path) == before and not (tmp_path / "textfile" / "qlfsm.prom").exists()
