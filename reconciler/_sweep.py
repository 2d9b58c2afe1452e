"""`qlfsm sweep`: remove what ended runs left behind, bounded, idempotent, crash-safe.

Two leftovers (spec 03; QingLong 3.0 has a cleanup scanner for the same):

- a `pending` journal row whose Attempt is no longer active (terminal, or gone), with perhaps
  its receipt file: the ADR-0068 pass was killed between its terminal commit and the delete,
  or the Attempt was made `lost` (its receipt may have been published later);
- a `quarantined` journal row past its `purge_after_ms`, with its quarantined copies.

The journal rows say which Attempts to look at: no directory is ever listed (spec 03), so a
receipt file of an ended Attempt that has NO journal row is not found
(docs/decisions.md "Operator commands: sweep").

Per row the order is fixed, and each step is idempotent: the file(s) first, through the
receipt store (no symbolic link followed) -- the receipt or quarantined copies, then the
Attempt's lock file unless it is held (docs/decisions.md D-17) -- then the row, by a
compare-and-set delete that also requires the Attempt to be still not active. A crash between
the two leaves the row, and the next pass removes nothing more and deletes the row; a crash
before leaves both. Nothing of an
active Attempt is touched, and a terminal Attempt whose exact process is still alive (an
operator's forced `resolve`), cannot be judged now (`unknown`) or whose Attempt lock is held
(its wrapper lives, perhaps in another PID namespace, D-17) keeps its `pending` row: its
wrapper may still publish, and the row is what lets a later pass remove that receipt.

Bounded: each of the two phases reads at most ``max_pages`` keyset pages of ``page`` rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from reconciler._clock import Clock, witness_ms
from reconciler._root_check import check_root_dir
from storage import (
    FIRST,
    PendingRow,
    QuarantinedRow,
    delete_pending_of_ended,
    delete_quarantined_of_ended,
    foreign_state_rows,
    journal_shards,
    pending_page,
    quarantined_page,
)

if TYPE_CHECKING:
    # Annotations only: the node is imported when the journal has a row (:func:`sweep_files`).
    from reconciler.node import ProcessProvider

SWEEP_PAGE = 64
SWEEP_MAX_PAGES = 16
MAX_ERRORS_SHOWN = 20
_ACTIVE = frozenset({"claimed", "starting", "running"})


class SweepStore(Protocol):
    """What the sweep needs of the receipt store (``FileReceiptStore`` implements it)."""

    def check_root(self) -> bool: ...

    def check_shards(self, attempt_ids: Iterable[str]) -> None: ...

    def remove_receipt(self, attempt_id: str) -> bool: ...

    def purge_quarantine(self, ref: str) -> int: ...

    def lock_state(self, attempt_id: str) -> str: ...

    def remove_lock(self, attempt_id: str) -> bool: ...


@dataclass
class ReceiptCounts:
    examined: int = 0
    receipts_removed: int = 0
    rows_resolved: int = 0
    kept_active: int = 0
    kept_process_alive: int = 0
    errors: int = 0


@dataclass
class QuarantineCounts:
    examined: int = 0
    copies_purged: int = 0
    rows_removed: int = 0
    kept_active: int = 0
    errors: int = 0


Counts = ReceiptCounts | QuarantineCounts
Row = TypeVar("Row", PendingRow, QuarantinedRow)


@dataclass
class SweepResult:
    state: str = "done"  # done | root_missing
    receipts: ReceiptCounts = field(default_factory=ReceiptCounts)
    quarantine: QuarantineCounts = field(default_factory=QuarantineCounts)
    remaining: bool = False
    errors: list[dict[str, str]] = field(default_factory=list)
    # One line per row that cannot be acted on at all (D-16 "the unusable journal row": an
    # Attempt id that is no path, a quarantine_ref that is no quarantine name of its own
    # Attempt, a value a foreign writer left that the schema forbids): named once, skipped,
    # not an error (D-16); only present in the JSON when there is one.
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.warnings:
            del out["warnings"]
        return out

    def _unusable(self, attempt_id: str, run_id: str, problem: str | None) -> bool:
        """True (and the row named once) when ``problem`` says why the row cannot be acted on
        (D-16 "the unusable journal row"; spec 03: paths only from a validated Attempt id or
        quarantine name): nothing is done with the row, which no pass can settle by a file; an
        operator looks at it."""
        if problem is None:
            return False
        self._name(attempt_id, run_id, problem)
        return True

    def _name(self, attempt_id: str, run_id: str, problem: str) -> None:
        if len(self.warnings) < MAX_ERRORS_SHOWN:
            self.warnings.append(
                f"journal row of Attempt {ascii(attempt_id)[:120]} (run {ascii(run_id)[:120]}) "
                f"{problem}: skipped, nothing touched; look at it with `qlfsm inspect`"
            )

    def _error(self, counts: Counts, attempt_id: str, step: str, exc: BaseException) -> None:
        counts.errors += 1
        if len(self.errors) < MAX_ERRORS_SHOWN:
            text = " ".join(str(exc).split())[:200]
            self.errors.append(
                {"attempt_id": attempt_id, "step": step, "error": f"{type(exc).__name__}: {text}"}
            )


def sweep(
    conn: sqlite3.Connection,
    store: SweepStore,
    provider: ProcessProvider,
    clock: Clock,
    *,
    page: int = SWEEP_PAGE,
    max_pages: int = SWEEP_MAX_PAGES,
) -> SweepResult:
    """One bounded pass (module docstring) with the receipt store and process provider given. A
    root that does not exist: nothing is read or touched (state `root_missing`): its rows may
    name receipts under the right root, which a wrong ``--receipt-root`` must not make look
    gone. ReceiptRootError for a root that is not a real directory."""
    return _sweep(conn, store.check_root, lambda: (store, provider), clock, page, max_pages)


def sweep_files(
    conn: sqlite3.Connection,
    root: str,
    clock: Clock,
    *,
    page: int = SWEEP_PAGE,
    max_pages: int = SWEEP_MAX_PAGES,
) -> SweepResult:
    """:func:`sweep` of the node's receipt root ``root`` (validated already) with the real
    receipt store and /proc provider. They are built, and ``reconciler.node`` imported, when
    the journal has a row: an empty journal needs neither (like a pass without candidates)."""

    @cache
    def ports() -> tuple[SweepStore, ProcessProvider]:
        from reconciler.node import FileReceiptStore, ProcProvider

        return FileReceiptStore(root), ProcProvider()

    # The same check as FileReceiptStore.check_root, without building the store.
    return _sweep(conn, partial(check_root_dir, root), ports, clock, page, max_pages)


def _sweep(
    conn: sqlite3.Connection,
    check_root: Callable[[], bool],
    ports: Callable[[], tuple[SweepStore, ProcessProvider]],
    clock: Clock,
    page: int,
    max_pages: int,
) -> SweepResult:
    result = SweepResult()
    if not check_root():
        result.state = "root_missing"
        return result
    # D-16: a shard another user may write is refused like such a root, before any removal.
    shards = journal_shards(conn)
    if shards:
        ports()[0].check_shards(shards)
    for row in foreign_state_rows(conn, MAX_ERRORS_SHOWN):
        # D-16 "the unusable journal row": no page reads such a row (neither state is its
        # own); named, never acted on.
        result._name(row.attempt_id, row.run_id, f"has state {ascii(row.state)[:40]}, which the "
                     "schema forbids")  # fmt: skip
    _pages(
        partial(pending_page, conn, limit=page),
        partial(_one_pending, conn, ports, result=result),
        result,
        max_pages,
    )
    now_ms = _purge_now(clock, result)  # after the receipts: its warning follows theirs
    _pages(
        partial(quarantined_page, conn, now_ms, limit=page),
        partial(_one_quarantined, conn, ports, result=result),
        result,
        max_pages,
    )
    return result


# A clock ahead of the kernel's by more than this is not trusted for a purge (D-16).
CLOCK_AHEAD_MS = 60 * 1000


def _purge_now(clock: Clock, result: SweepResult) -> int:
    """The time purge times are judged by (D-16): the clock's, unless a second clock in sight
    (the kernel's, which a process-local override like `faketime` does not move) is behind it
    by more than a minute: then that one, and a warning. A clock that is wrong for the whole
    node cannot be seen from here; docs/decisions.md D-16 says what bounds that case."""
    now = clock.now_ms()
    other = witness_ms(clock)
    if other is not None and now - other > CLOCK_AHEAD_MS:
        result.warnings.append(
            f"the clock runs {(now - other) // 1000} s ahead of the kernel's clock: purge "
            "times were judged by the kernel's, so nothing is purged early; set the clock right"
        )
        return other
    return now


def _pages(
    page_after: Callable[[tuple[Any, Any]], tuple[list[Row], bool]],
    one: Callable[[Row], None],
    result: SweepResult,
    max_pages: int,
) -> None:
    """One phase: at most ``max_pages`` keyset pages, each row handled by ``one``."""
    cursor = FIRST
    for _ in range(max_pages):
        rows, more = page_after(cursor)
        for row in rows:
            one(row)
        if not more:
            return
        cursor = rows[-1].key  # as stored: an unusable row's odd key still moves the page on
    result.remaining = True


def _one_pending(
    conn: sqlite3.Connection,
    ports: Callable[[], tuple[SweepStore, ProcessProvider]],
    row: PendingRow,
    result: SweepResult,
) -> None:
    from reconciler.node import inspect_handle

    counts = result.receipts
    counts.examined += 1
    if result._unusable(row.attempt_id, row.run_id, row.problem or _id_problem(row.attempt_id)):
        return
    if row.attempt_status in _ACTIVE:
        counts.kept_active += 1  # its receipt is the ADR-0068 pass's evidence
        return
    store, provider = ports()
    if row.executor_handle:
        evidence = inspect_handle(row.executor_handle, provider)
        if evidence.verdict == "running" or evidence.reason == "provider_unavailable":
            counts.kept_process_alive += 1
            return
    if store.lock_state(row.attempt_id) == "held":
        # D-17: its wrapper lives (perhaps in another PID namespace) and may still publish.
        counts.kept_process_alive += 1
        return
    try:
        if store.remove_receipt(row.attempt_id):
            counts.receipts_removed += 1
    except (OSError, ValueError) as exc:
        result._error(counts, row.attempt_id, "remove_receipt", exc)
        return  # the row stays: it is what a later pass finds the file by
    if not _lock_removed(store, row.attempt_id, result, counts):
        return
    if delete_pending_of_ended(conn, row):
        counts.rows_resolved += 1


def _one_quarantined(
    conn: sqlite3.Connection,
    ports: Callable[[], tuple[SweepStore, ProcessProvider]],
    row: QuarantinedRow,
    result: SweepResult,
) -> None:
    counts = result.quarantine
    counts.examined += 1
    problem = row.problem or _id_problem(row.attempt_id) or _ref_problem(row)
    if result._unusable(row.attempt_id, row.run_id, problem):
        return
    if row.attempt_status in _ACTIVE:
        # It still blocks its candidate (D-3a): someone decides first (`qlfsm resolve`).
        counts.kept_active += 1
        return
    store = ports()[0]
    try:
        counts.copies_purged += store.purge_quarantine(row.quarantine_ref)
    except (OSError, ValueError) as exc:
        result._error(counts, row.attempt_id, "purge_quarantine", exc)
        return
    if not _lock_removed(store, row.attempt_id, result, counts):
        return
    if delete_quarantined_of_ended(conn, row):
        counts.rows_removed += 1


def _id_problem(attempt_id: str) -> str | None:
    from reconciler.node import validate_id

    # spec 03: a receipt path is made only of a validated Attempt id.
    return None if validate_id(attempt_id) else "has an id that is no receipt path"


def _ref_problem(row: QuarantinedRow) -> str | None:
    """Why ``row.quarantine_ref`` names no copy this row may purge (D-16 "the unusable journal
    row"), or None: only a name `quarantine_ref` makes of the row's OWN Attempt is ever turned
    into a path."""
    from reconciler.node import parse_quarantine_ref

    ref = row.quarantine_ref
    parsed = parse_quarantine_ref(ref)
    if parsed is not None and parsed[0] == row.attempt_id:
        return None
    shown = ascii(ref)[:120]
    if parsed is not None:
        return f"has a quarantine_ref {shown} of another Attempt ({ascii(parsed[0])[:60]})"
    if "\x00" in ref:
        why = "holds a NUL"
    elif ref.startswith("/"):
        why = "is an absolute path"
    elif ".." in ref.replace("\\", "/").split("/"):
        why = "leaves the receipt root (`..`)"
    else:
        why = "is no name of the form .quarantine/<ab>/<attempt id>[+<n>].json"
    return f"has a quarantine_ref {shown} that {why}"


def _lock_removed(store: SweepStore, attempt_id: str, result: SweepResult, counts: Counts) -> bool:
    """D-17: the ended Attempt's lock file, at its exact path, unless someone holds it (a
    held lock is never removed; its wrapper unlinks the name itself when it ends). False when
    it could not be looked at: the row stays, so a later pass comes back."""
    try:
        store.remove_lock(attempt_id)
    except (OSError, ValueError) as exc:
        result._error(counts, attempt_id, "remove_lock", exc)
        return False
    return True
