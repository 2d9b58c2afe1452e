"""The unusable journal row (docs/decisions.md D-16): a `LocalCompletionReceiptJournal` row a
foreign writer or a restored backup left with a value no pass can act on -- a quarantine_ref
that leaves the root or names another Attempt's copy, an id that is no path or no text, text
that is not UTF-8, a time that is no integer, a state the schema forbids -- is named in ONE
warning line, skipped and left as it was; nothing outside the root is touched, the valid rows
of the same pass are still swept, and the sweep exits 0, every pass. Real SQLite files (each
row read back byte for byte through a second connection), a real receipt root, the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _primary_support import linux_only, qlfsm

from reconciler.node import FakeClock, FileReceiptStore, ProcProvider, quarantine_ref
from reconciler.ops import sweep
from storage import connect
from storage._operator import FOREIGN_STATE_SQL

pytestmark = linux_only

COLUMNS = (
    "attempt_id",
    "run_id",
    "state",
    "quarantine_ref",
    "purge_after_ms",
    "registered_at_ms",
    "updated_at_ms",
)
SENTINEL = "sentinel.json"  # beside the receipt root: where `../` and absolute refs point


@dataclass(frozen=True)
class Kind:
    """One unusable row: its columns as SQL expressions (``{sentinel}``: the sentinel's
    absolute path), the id the warning names (as `ascii()` shows it) and the problem."""

    values: tuple[str, str, str, str, str, str, str]
    shown_id: str
    problem: str


def q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


KINDS = {
    "a quarantine_ref that is an absolute path": Kind(
        (q("ab-1"), q("run-x"), q("quarantined"), "{sentinel}", "1", "1", "1"),
        "'ab-1'",
        "that is an absolute path",
    ),
    "a quarantine_ref that climbs out of the root with ..": Kind(
        (q("ab-1"), q("run-x"), q("quarantined"), q("../" + SENTINEL), "1", "1", "1"),
        "'ab-1'",
        "that leaves the receipt root (`..`)",
    ),
    "a quarantine_ref that climbs out through .quarantine/..": Kind(
        (
            q("ab-1"),
            q("run-x"),
            q("quarantined"),
            q(".quarantine/../../" + SENTINEL),
            "1",
            "1",
            "1",
        ),
        "'ab-1'",
        "that leaves the receipt root (`..`)",
    ),
    "a quarantine_ref with a NUL": Kind(
        (
            q("ab-1"),
            q("run-x"),
            q("quarantined"),
            "'.quarantine/ab/ab-1.json' || char(0) || '../../" + SENTINEL + "'",
            "1",
            "1",
            "1",
        ),
        "'ab-1'",
        "that holds a NUL",
    ),
    "a quarantine_ref with a separator too many": Kind(
        (q("ab-1"), q("run-x"), q("quarantined"), q(".quarantine/ab/x/ab-1.json"), "1", "1", "1"),
        "'ab-1'",
        "that is no name of the form .quarantine/<ab>/<attempt id>[+<n>].json",
    ),
    "a quarantine_ref of another Attempt's copy": Kind(
        (q("ab-1"), q("run-x"), q("quarantined"), q(quarantine_ref("zz-other")), "1", "1", "1"),
        "'ab-1'",
        "of another Attempt ('zz-other')",
    ),
    "a quarantined row with no quarantine_ref": Kind(
        (q("ab-1"), q("run-x"), q("quarantined"), "NULL", "1", "1", "1"),
        "'ab-1'",
        "is quarantined with no quarantine_ref",
    ),
    "a quarantine_ref that is not UTF-8": Kind(
        (q("ab-1"), q("run-x"), q("quarantined"), "CAST(x'2e717561ff' AS TEXT)", "1", "1", "1"),
        "'ab-1'",
        "has a non-UTF-8 quarantine_ref",
    ),
    "a purge_after_ms that is not an integer": Kind(
        (q("ab-1"), q("run-x"), q("quarantined"), q(quarantine_ref("ab-1")), "1.5", "1", "1"),
        "'ab-1'",
        "has a non-integer purge_after_ms ('1.5')",
    ),
    "an attempt id that is no path": Kind(
        (q("../ab"), q("run-x"), q("pending"), "NULL", "NULL", "1", "1"),
        "'../ab'",
        "has an id that is no receipt path",
    ),
    "an attempt id that is a BLOB": Kind(
        ("x'6162'", q("run-x"), q("pending"), "NULL", "NULL", "1", "1"),
        "\"b'ab'\"",
        "has a non-text attempt_id (bytes)",
    ),
    "an attempt id that is not UTF-8": Kind(
        ("CAST(x'61ff62' AS TEXT)", q("run-x"), q("pending"), "NULL", "NULL", "1", "1"),
        "'a\\udcffb'",
        "has a non-UTF-8 attempt_id",
    ),
    "a run id that is not UTF-8": Kind(
        (q("ab-1"), "CAST(x'72ff' AS TEXT)", q("pending"), "NULL", "NULL", "1", "1"),
        "'ab-1'",
        "has a non-UTF-8 run_id",
    ),
    "an updated_at_ms that is not an integer": Kind(
        (q("ab-1"), q("run-x"), q("pending"), "NULL", "NULL", "1", q("soon")),
        "'ab-1'",
        "has a non-integer updated_at_ms ('soon')",
    ),
    "a state the schema forbids": Kind(
        (q("ab-1"), q("run-x"), q("done"), q("../" + SENTINEL), "1", "1", "1"),
        "'ab-1'",
        "has state 'done', which the schema forbids",
    ),
}


def write_foreign(db_path: Path, values: list[str]) -> None:
    """Insert a journal row as a foreign writer does: no foreign keys, CHECKs bypassed."""
    with contextlib.closing(sqlite3.connect(db_path)) as other, other:
        other.execute("PRAGMA foreign_keys = OFF")
        other.execute("PRAGMA ignore_check_constraints = ON")
        other.execute(
            f'INSERT INTO "LocalCompletionReceiptJournal" ({", ".join(COLUMNS)}) '
            f"VALUES ({', '.join(values)})"
        )


def stored(db_path: Path) -> list[tuple[Any, ...]]:
    """Every journal row, each column as (type, hex of its bytes): exact, whatever the bytes."""
    cols = ", ".join(f"typeof({c}), hex({c})" for c in COLUMNS)
    with contextlib.closing(sqlite3.connect(db_path)) as second:
        return second.execute(
            f'SELECT {cols} FROM "LocalCompletionReceiptJournal" ORDER BY hex(attempt_id)'
        ).fetchall()


def valid_leftovers(db_path: Path, root: Path) -> list[Path]:
    """Two rows a sweep settles (their Attempts are gone): a `pending` one with its receipt
    file, a `quarantined` one past its purge time with its copy. The files, to check."""
    receipt = root / "ok" / "ok-1.json"
    copy = root / quarantine_ref("ok-2")
    for path in (receipt, copy):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text("{}")
    write_foreign(db_path, [q("ok-1"), q("run-ok"), q("pending"), "NULL", "NULL", "1", "1"])
    write_foreign(
        db_path, [q("ok-2"), q("run-ok"), q("quarantined"), q(quarantine_ref("ok-2")), "1", "1",
                  "1"]
    )  # fmt: skip
    return [receipt, copy]


@pytest.mark.parametrize("kind", list(KINDS), ids=list(KINDS))
def test_an_unusable_journal_row_is_named_once_skipped_untouched_and_the_valid_rows_swept(
    db_path: Path, store: FileReceiptStore, kind: str
) -> None:
    spec = KINDS[kind]
    root = Path(store.root)
    sentinel = root.parent / SENTINEL
    sentinel.write_text("keep me")
    # What a ref of another Attempt names: that Attempt's quarantined copy, inside the root.
    other_copy = root / quarantine_ref("zz-other")
    other_copy.parent.mkdir(parents=True, mode=0o700)
    other_copy.write_text("{}")
    write_foreign(db_path, [v.replace("{sentinel}", q(str(sentinel))) for v in spec.values])
    files = valid_leftovers(db_path, root)
    [before] = [row for row in stored(db_path) if row[1] not in ("6F6B2D31", "6F6B2D32")]
    args = ("sweep", "--db", str(db_path), "--receipt-root", store.root)

    out = qlfsm(*args)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    [line] = out.stderr.splitlines()
    assert line.startswith(f"qlfsm: warning: journal row of Attempt {spec.shown_id} "), line
    assert spec.problem in line and line.endswith("skipped, nothing touched; look at it with "
                                                  "`qlfsm inspect`"), line  # fmt: skip
    # The valid rows of the same pass are swept: both files and both rows gone.
    assert "1 leftover receipt(s) removed, 1 pending row(s) resolved" in out.stdout
    assert "1 quarantined cop(ies) purged, 1 row(s) removed" in " ".join(out.stdout.split())
    assert not any(path.exists() for path in files)
    # The unusable row as it was, nothing outside the root (or of another Attempt) touched.
    assert stored(db_path) == [before]
    assert sentinel.read_text() == "keep me" and other_copy.read_text() == "{}"

    # The next pass, through --json: the same one warning, no error, exit 0 again.
    again = qlfsm(*args, "--json")
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["warnings"] == [line.removeprefix("qlfsm: warning: ")]
    assert data["errors"] == [] and data["receipts"]["errors"] == 0
    assert data["quarantine"]["errors"] == 0
    assert again.stderr.splitlines() == [line]
    assert stored(db_path) == [before] and sentinel.read_text() == "keep me"


def test_startup_names_a_quarantine_ref_that_leaves_the_root_once_and_stays_safe(
    db_path: Path, store: FileReceiptStore
) -> None:
    root = Path(store.root)
    sentinel = root.parent / SENTINEL
    sentinel.write_text("keep me")
    write_foreign(db_path, [q("ab-1"), q("run-x"), q("quarantined"), q(str(sentinel)), "1", "1",
                            "1"])  # fmt: skip
    files = valid_leftovers(db_path, root)
    before = [row for row in stored(db_path) if row[1] == "61622D31"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    out = qlfsm("startup", "--db", str(db_path), "--receipt-root", store.root, "--json", env=env)
    assert out.returncode == 0, out.stderr
    warned = [line for line in out.stderr.splitlines() if "journal row of Attempt" in line]
    assert warned == [
        f"qlfsm: warning: journal row of Attempt 'ab-1' (run 'run-x') has a quarantine_ref "
        f"{str(sentinel)!a} that is an absolute path: skipped, nothing touched; look at "
        "it with `qlfsm inspect`"
    ]
    data = json.loads(out.stdout)
    assert data["sweep"]["state"] == "done" and data["sweep"]["quarantine"]["errors"] == 0
    assert data["sweep"]["quarantine"]["rows_removed"] == 1
    assert not any(path.exists() for path in files)
    assert [row for row in stored(db_path) if row[1] == "61622D31"] == before
    assert sentinel.read_text() == "keep me"


def test_an_odd_keyed_row_last_on_a_page_makes_no_page_repeat_or_skip_a_row(
    db_path: Path, store: FileReceiptStore
) -> None:
    # One row a page: each odd key (a BLOB id, a non-UTF-8 id) is the cursor of the next page.
    # At updated_at_ms 1, text compares by its bytes and BLOBs sort after text:
    # 'a\xffb' < 'ok-1' < 'zz-a' < x'6162'; then 'zz-b' at 2.
    write_foreign(db_path, ["CAST(x'61ff62' AS TEXT)", q("run-x"), q("pending"), "NULL", "NULL",
                            "1", "1"])  # fmt: skip
    write_foreign(db_path, ["x'6162'", q("run-x"), q("pending"), "NULL", "NULL", "1", "1"])
    write_foreign(db_path, [q("zz-a"), q("run-x"), q("pending"), "NULL", "NULL", "1", "1"])
    write_foreign(db_path, [q("zz-b"), q("run-x"), q("pending"), "NULL", "NULL", "1", "2"])
    files = valid_leftovers(db_path, Path(store.root))
    with contextlib.closing(connect(str(db_path))) as conn:
        result = sweep(conn, store, ProcProvider(), FakeClock(10**12), page=1, max_pages=10)
    assert result.receipts.examined == 5 and not result.remaining
    assert result.receipts.rows_resolved == 3  # ok-1, zz-a, zz-b (their Attempts are gone)
    assert result.quarantine.rows_removed == 1 and not any(p.exists() for p in files)
    assert len(result.warnings) == 2
    assert "'a\\udcffb'" in result.warnings[0] and "non-UTF-8 attempt_id" in result.warnings[0]
    assert "\"b'ab'\"" in result.warnings[1] and "non-text attempt_id" in result.warnings[1]
    assert sorted(r[1] for r in stored(db_path)) == ["6162", "61FF62"]  # both kept


def test_the_rows_in_a_forbidden_state_are_found_by_index_ranges_not_a_scan(
    db_path: Path,
) -> None:
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        conn.execute("ANALYZE")
        plan = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {FOREIGN_STATE_SQL}", (20,))]
    searches = [p for p in plan if p.startswith("SEARCH")]
    assert len(searches) == 3 and not any(p.startswith("SCAN") for p in plan), plan
    assert all("USING INDEX ql3_local_receipt_journal_scan_idx (state" in p for p in searches)


# --- not unusable rows: a well-formed ref of its own Attempt whose slot holds no file ----------


def test_a_symbolic_link_at_a_rows_own_quarantine_slot_is_removed_and_never_its_target(
    db_path: Path, store: FileReceiptStore
) -> None:
    root = Path(store.root)
    sentinel = root.parent / SENTINEL
    sentinel.write_text("keep me")
    slot = root / quarantine_ref("ab-1")
    slot.parent.mkdir(parents=True, mode=0o700)
    slot.symlink_to(sentinel)
    write_foreign(db_path, [q("ab-1"), q("run-x"), q("quarantined"), q(quarantine_ref("ab-1")),
                            "1", "1", "1"])  # fmt: skip
    out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", store.root, "--json")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    data = json.loads(out.stdout)
    assert data["quarantine"]["copies_purged"] == 1 and data["quarantine"]["rows_removed"] == 1
    assert not slot.is_symlink() and sentinel.read_text() == "keep me"
    assert stored(db_path) == []


def test_a_directory_at_a_rows_own_quarantine_slot_is_kept_with_its_row_and_named_with_the_fix(
    db_path: Path, store: FileReceiptStore
) -> None:
    root = Path(store.root)
    slot = root / quarantine_ref("ab-1")
    slot.mkdir(parents=True)
    (slot / "inside").write_text("someone's")
    write_foreign(db_path, [q("ab-1"), q("run-x"), q("quarantined"), q(quarantine_ref("ab-1")),
                            "1", "1", "1"])  # fmt: skip
    before = stored(db_path)
    for _ in range(2):  # every pass the same: the operator must act
        out = qlfsm("sweep", "--db", str(db_path), "--receipt-root", store.root)
        assert out.returncode == 1, out.stderr
        [not_cleaned] = [line for line in out.stdout.splitlines() if "not cleaned" in line]
        assert "attempt ab-1 (purge_quarantine)" in not_cleaned
        assert f"a directory stands at the quarantined copy {str(slot)!r}" in not_cleaned
        assert "Is a directory:" not in out.stdout  # the bare error named no fix
        assert out.stderr.count("\n") == 1 and "could not be cleaned" in out.stderr
    assert (slot / "inside").read_text() == "someone's" and stored(db_path) == before
