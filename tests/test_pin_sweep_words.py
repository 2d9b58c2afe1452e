"""The sweep's words (``reconciler._sweep``, D-16 "the unusable journal row", D-17): why a
journal row cannot be acted on, each warning and error line with its bounds, and the clock a
purge is judged by (issue 28)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pytest
from _support import attempt_in

from reconciler._sweep import (
    CLOCK_AHEAD_MS,
    MAX_ERRORS_SHOWN,
    QuarantineCounts,
    SweepResult,
    _id_problem,
    _purge_now,
    _ref_problem,
)
from reconciler.node import FakeClock, quarantine_ref
from reconciler.ops import sweep
from storage import QuarantinedRow, Repository, connect

ATT = "019f70c0-0000-7000-8000-0000000000c1"


def ref_problem(ref: str, attempt_id: str = ATT) -> str | None:
    return _ref_problem(QuarantinedRow(attempt_id, "run-1", ref, 0, "lost"))


def test_a_quarantine_ref_of_the_rows_own_attempt_is_usable() -> None:
    assert ref_problem(quarantine_ref(ATT, 1)) is None
    assert ref_problem(quarantine_ref(ATT, 3)) is None


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("a\x00b", "holds a NUL"),
        ("/etc/passwd", "is an absolute path"),
        ("x/../y", "leaves the receipt root (`..`)"),
        ("x\\..\\y", "leaves the receipt root (`..`)"),
        ("..", "leaves the receipt root (`..`)"),
        ("x/..y/z", "is no name of the form .quarantine/<ab>/<attempt id>[+<n>].json"),
        ("XX/", "is no name of the form .quarantine/<ab>/<attempt id>[+<n>].json"),
        ("plain", "is no name of the form .quarantine/<ab>/<attempt id>[+<n>].json"),
    ],
)
def test_a_quarantine_ref_that_is_no_name_of_its_own_says_why(ref: str, why: str) -> None:
    assert ref_problem(ref) == f"has a quarantine_ref {ascii(ref)[:120]} that {why}"


def test_a_quarantine_ref_of_another_attempt_names_that_attempt() -> None:
    other = "019f70c0-0000-7000-8000-0000000000c2"
    ref = quarantine_ref(other, 1)
    assert ref_problem(ref) == (f"has a quarantine_ref {ref!a} of another Attempt ({other!a})")


def test_a_long_quarantine_ref_is_shown_cut_to_120_characters() -> None:
    ref = "q" * 300
    assert ref_problem(ref) == (
        f"has a quarantine_ref '{'q' * 119} that is no name of the form "
        ".quarantine/<ab>/<attempt id>[+<n>].json"
    )


def test_an_attempt_id_that_is_no_receipt_path_is_named_so() -> None:
    assert _id_problem(ATT) is None
    assert _id_problem("../x") == "has an id that is no receipt path"


def test_an_unusable_row_is_named_once_with_both_ids_cut_and_at_most_twenty_times() -> None:
    result = SweepResult()
    assert result._unusable(ATT, "run-1", None) is False
    assert result._unusable("a" * 200, "r" * 200, "has a problem") is True
    assert result.warnings == [
        f"journal row of Attempt '{'a' * 119} (run '{'r' * 119}) has a problem: skipped, "
        "nothing touched; look at it with `qlfsm inspect`"
    ]
    for n in range(MAX_ERRORS_SHOWN + 5):
        result._name(f"a{n}", "r", "p")
    assert len(result.warnings) == MAX_ERRORS_SHOWN
    assert result.as_dict()["warnings"] == result.warnings


def test_an_error_is_counted_always_and_shown_in_one_cut_line_at_most_twenty_times() -> None:
    result = SweepResult()
    counts = QuarantineCounts()
    result._error(counts, ATT, "purge_quarantine", OSError(f"disk\n  gone {'x' * 300}"))
    assert result.errors == [
        {
            "attempt_id": ATT,
            "step": "purge_quarantine",
            "error": f"OSError: {('disk gone ' + 'x' * 300)[:200]}",
        }
    ]
    for n in range(MAX_ERRORS_SHOWN + 5):
        result._error(counts, f"a{n}", "remove_lock", ValueError("v"))
    assert counts.errors == MAX_ERRORS_SHOWN + 6
    assert len(result.errors) == MAX_ERRORS_SHOWN
    assert result.errors[-1] == {
        "attempt_id": "a18",
        "step": "remove_lock",
        "error": "ValueError: v",
    }
    assert result.as_dict()["errors"] == result.errors and "warnings" not in result.as_dict()


def test_a_purge_is_judged_by_the_kernels_clock_when_the_clock_runs_more_than_a_minute_ahead() -> (
    None
):
    t = 1_700_000_000_000
    result = SweepResult()
    assert _purge_now(FakeClock(t), result) == t  # no second clock
    assert _purge_now(FakeClock(t + CLOCK_AHEAD_MS, witness_ms=t), result) == t + CLOCK_AHEAD_MS
    assert _purge_now(FakeClock(t - 10**9, witness_ms=t), result) == t - 10**9  # behind: its own
    assert result.warnings == []
    assert _purge_now(FakeClock(t + 1_001_000, witness_ms=t), result) == t
    assert result.warnings == [
        "the clock runs 1001 s ahead of the kernel's clock: purge times were judged by the "
        "kernel's, so nothing is purged early; set the clock right"
    ]


class LockStuckStore:
    """A receipt store whose every lock removal fails (a port double: the files are not the
    point here, the sweep's handling of that failure is)."""

    def __init__(self) -> None:
        self.shards_checked: list[list[str]] = []

    def check_root(self) -> bool:
        return True

    def check_shards(self, attempt_ids: Iterable[str]) -> None:
        self.shards_checked.append(sorted(attempt_ids))

    def remove_receipt(self, attempt_id: str) -> bool:
        return False

    def purge_quarantine(self, ref: str) -> int:
        return 0

    def lock_state(self, attempt_id: str) -> str:
        return "free"

    def remove_lock(self, attempt_id: str) -> bool:
        raise OSError(f"lock of {attempt_id} stuck")


def foreign_row(db_path: Path, attempt_id: str, state: str) -> None:
    with contextlib.closing(sqlite3.connect(db_path)) as other, other:
        other.execute("PRAGMA foreign_keys = OFF")
        other.execute("PRAGMA ignore_check_constraints = ON")
        other.execute(
            'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
            "quarantine_ref, purge_after_ms, registered_at_ms, updated_at_ms) "
            "VALUES (?, 'run-gone', ?, NULL, NULL, 1, 1)",
            (attempt_id, state),
        )


def test_a_lock_that_cannot_be_removed_keeps_the_row_and_is_one_error_naming_its_step(
    db_path: Path,
) -> None:
    foreign_row(db_path, ATT, "pending")  # its Attempt gone: not active, so it is swept
    foreign_row(db_path, "att-odd", "x" * 50)
    store = LockStuckStore()
    with contextlib.closing(connect(str(db_path))) as conn:
        result = sweep(conn, store, None, FakeClock())  # type: ignore[arg-type]
        left = conn.execute('SELECT attempt_id FROM "LocalCompletionReceiptJournal"').fetchall()
    assert result.receipts.errors == 1 and result.receipts.rows_resolved == 0
    assert result.errors == [
        {"attempt_id": ATT, "step": "remove_lock", "error": f"OSError: lock of {ATT} stuck"}
    ]
    assert sorted(r[0] for r in left) == sorted([ATT, "att-odd"])
    assert store.shards_checked == [["01", "at"]]  # each shard checked before any removal
    assert result.warnings == [
        f"journal row of Attempt 'att-odd' (run 'run-gone') has state {ascii('x' * 50)[:40]}, "
        "which the schema forbids: skipped, nothing touched; look at it with `qlfsm inspect`"
    ]


def test_quarantined_rows_beyond_the_page_budget_leave_the_sweep_remaining(
    db_path: Path,
) -> None:
    other = "019f70c0-0000-7000-8000-0000000000c2"
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        for attempt_id in (ATT, other):
            conn.execute(
                'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
                "quarantine_ref, purge_after_ms, registered_at_ms, updated_at_ms) "
                "VALUES (?, 'run-gone', 'quarantined', ?, 1, 1, 1)",
                (attempt_id, quarantine_ref(attempt_id, 1)),
            )
    with contextlib.closing(connect(str(db_path))) as conn:
        result = sweep(conn, LockStuckStore(), None, FakeClock(), page=1, max_pages=1)  # type: ignore[arg-type]
    assert (result.quarantine.examined, result.quarantine.errors) == (1, 1)
    assert result.remaining is True


class ScriptedStore(LockStuckStore):
    """A receipt store double whose answer for each Attempt is given by the test."""

    def __init__(self, script: dict[str, str]) -> None:
        super().__init__()
        self.script = script

    def remove_receipt(self, attempt_id: str) -> bool:
        if self.script.get(attempt_id) == "receipt_fails":
            raise ValueError(f"receipt of {attempt_id} unreadable")
        return self.script.get(attempt_id) == "removed"

    def purge_quarantine(self, ref: str) -> int:
        attempt_id = ref.split("/")[2].split("+")[0].removesuffix(".json")
        if self.script.get(attempt_id) == "purge_fails":
            raise OSError(f"copies of {attempt_id} stuck")
        return 2

    def lock_state(self, attempt_id: str) -> str:
        return "held" if self.script.get(attempt_id) == "held" else "free"

    def remove_lock(self, attempt_id: str) -> bool:
        if self.script.get(attempt_id) == "lock_fails":
            raise OSError(f"lock of {attempt_id} stuck")
        return True


def journal_row(db_path: Path, attempt_id: str, run_id: str, quarantined: bool) -> None:
    with contextlib.closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute(
            'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
            "quarantine_ref, purge_after_ms, registered_at_ms, updated_at_ms) "
            "VALUES (?, ?, ?, ?, ?, 1, 1)",
            (
                attempt_id,
                run_id,
                "quarantined" if quarantined else "pending",
                # An id that is no path has no quarantine name of its own: any ref stands in.
                (quarantine_ref(attempt_id, 1) if ".." not in attempt_id else "x")
                if quarantined
                else None,
                1 if quarantined else None,
            ),
        )


def ids(prefix: str, n: int = 2) -> list[str]:
    return [f"{prefix}{k}-0000-7000-8000-000000000000" for k in range(n)]


@pytest.mark.parametrize("quarantined", [False, True], ids=["pending", "quarantined"])
def test_each_kind_of_row_is_counted_once_per_row_and_each_failure_names_its_step(
    repo: Repository, db_path: Path, quarantined: bool
) -> None:
    script: dict[str, str] = {}
    for attempt_id in ids("ac"):
        attempt_in(repo, "run-" + attempt_id, attempt_id, "running")
        journal_row(db_path, attempt_id, "run-" + attempt_id, quarantined)
    prefixes = {"held": "ha", "removed": "rm", "receipt_fails": "rf", "purge_fails": "pf"}
    prefixes |= {"lock_fails": "lf", "ok": "ok"}
    for kind, prefix in prefixes.items():
        for attempt_id in ids(prefix):
            script[attempt_id] = kind
            journal_row(db_path, attempt_id, "run-" + kind, quarantined)
    for attempt_id in ("../a", "../b"):
        journal_row(db_path, attempt_id, "run-bad", quarantined)
    result = sweep(repo.conn, ScriptedStore(script), None, FakeClock())  # type: ignore[arg-type]
    counts = result.as_dict()["quarantine" if quarantined else "receipts"]
    assert result.warnings == [
        f"journal row of Attempt '{a}' (run 'run-bad') has an id that is no receipt path: "
        "skipped, nothing touched; look at it with `qlfsm inspect`"
        for a in ("../a", "../b")
    ]
    steps = [(e["attempt_id"], e["step"], e["error"]) for e in result.errors]
    if quarantined:
        assert counts == {
            "examined": 16, "copies_purged": 2 * 2 * 5, "rows_removed": 2 * 4,
            "kept_active": 2, "errors": 4,
        }  # fmt: skip
        failing = [(a, "purge_quarantine", f"OSError: copies of {a} stuck") for a in ids("pf")]
    else:
        assert counts == {
            "examined": 16, "receipts_removed": 2, "rows_resolved": 2 * 3,
            "kept_active": 2, "kept_process_alive": 2, "errors": 4,
        }  # fmt: skip
        failing = [
            (a, "remove_receipt", f"ValueError: receipt of {a} unreadable") for a in ids("rf")
        ]
    lock = [(a, "remove_lock", f"OSError: lock of {a} stuck") for a in ids("lf")]
    assert sorted(steps) == sorted(failing + lock)


def test_an_ended_attempt_whose_process_cannot_be_judged_keeps_its_row_each_counted(
    repo: Repository, db_path: Path
) -> None:
    from reconciler.node import FakeProcessTable, ProcessHandle, format_handle

    table = FakeProcessTable()
    handle = format_handle(ProcessHandle("h-1", table.boot, 4242, 4242, "100"))
    for attempt_id in ids("pa"):
        attempt_in(repo, "run-" + attempt_id, attempt_id, "failed")
        repo.conn.execute(
            'UPDATE "RunAttempts" SET executor_handle = ? WHERE id = ?', (handle, attempt_id)
        )
        journal_row(db_path, attempt_id, "run-" + attempt_id, False)
    table.make_unavailable()
    result = sweep(repo.conn, ScriptedStore({}), table, FakeClock())
    assert result.receipts.kept_process_alive == 2
    assert (result.receipts.rows_resolved, result.errors) == (0, [])
