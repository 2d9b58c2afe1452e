"""`qlfsm drain`: the candidates of more than one page, decided page by page (D-26).

Start-up reads at most one page of candidates (256) and, when there are more, decides none of
them (spec 04 "Before any candidate": ADR-0068 fails a truncated page closed before any
evidence is read). Without `drain` the way out is one `qlfsm resolve` per run. `drain` takes the
candidates in Run id order, a window of at most 256 at a time, and gives each window the whole
ADR-0068 pass — receipt, probe, ONE grace, the receipt again, a transaction per decision, the
final verifier re-reading that window — through :meth:`PrimaryReconciler.run_page`: the
protocol is the pass's own, not a second one.

Paging is a keyset on ``Runs.id`` (``storage.candidate_window``): each window starts after the
last candidate of the one before, so a window full of candidates that stay (retained live
processes, blockers) is passed once and the candidates after it are reached; no window is read
twice, so blockers cannot keep it looping, and it ends at the candidate that was last when it
began (Runs created meanwhile are left to start-up). A dry run walks the same windows and
writes nothing.

The whole drain holds the single-flight lock (``reconciler._flight``) that `startup` and
`reconcile` take, and spends one lock budget. Every page's decisions are committed before the
next page is read: an interrupt between pages loses nothing committed (the CLI says so).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any

from reconciler._errors import RetryLater, UsageError
from reconciler._reconcile import (
    PassInputs,
    check_inputs,
    lock_budget_s,
    locked_line,
    pass_connection,
    primary_reconciler,
    read_named,
    warn,
)
from reconciler._summary import COUNTS
from storage import LockBudget


def drain(
    db: str,
    receipt_root: str,
    profile: str,
    budget: LockBudget | None = None,
    *,
    dry_run: bool = False,
    notify: Callable[[str], None] | None = None,
    on_page: Callable[[dict[str, Any]], None] | None = None,
    clock: Any = None,
    provider: Any = None,
    probe: Any = None,
) -> dict[str, Any]:
    """Drain the database ``db`` (a path): every page's spec 04 summary and the totals.

    Raises UsageError (bad root, profile or lock budget) before anything is opened, FatalError
    (missing, unusable or foreign database), RetryLater (another process held the database or
    the start-up lock past the budget: the pages done before it keep what they wrote).
    ``on_page`` gets each page's summary as soon as it is committed. ``clock``, ``provider``
    and ``probe``: the pass's ports (default the system clock and ``/proc``)."""
    root = check_inputs(receipt_root, profile)  # D-16: before anything is opened, exit 2
    lock = lock_budget_s() if budget is None else budget
    inputs = PassInputs(root, profile, lock, dry_run, (clock, provider, probe))
    from reconciler.node import FileReceiptStore, ReceiptRootError
    from storage import candidate_window, check_schema, last_candidate

    # D-20: a real drain holds the lock of `startup` and `reconcile` across every page.
    with pass_connection(db, lock, notify, dry_run=dry_run) as conn:
        check_schema(conn, path=db)
        store = FileReceiptStore(root)
        end = read_named(db, partial(last_candidate, conn))
        pages: list[dict[str, Any]] = []
        after: int | None = None
        while end is not None:
            page, _, last = read_named(db, partial(candidate_window, conn, after, end))
            if not page:
                break

            def window(c: sqlite3.Connection, a: int | None = after, u: int | None = last) -> Any:
                # spec 04 "Final verifier": this page's query again, bounded to this page's ids.
                found, more, _ = candidate_window(c, a, u)
                return found, more

            pass_ = primary_reconciler(conn, store, inputs)
            try:
                summary = pass_.run_page(page, window)
            except ReceiptRootError as exc:
                # D-3c: the root checked before this page wrote anything.
                raise UsageError(f"{exc}; {_kept(pages)}") from exc
            if pass_.stopped == "database_locked":
                raise RetryLater(f"{locked_line(db, summary, lock)}; {_kept(pages)}")
            summary["page"] = len(pages) + 1
            pages.append(summary)
            warn(notify, summary.get("warnings", []))
            if on_page is not None:
                on_page(summary)
            if pass_.stopped is not None or last == end:
                # Stopped: read-only or full, no later page could write either (row 14 says why).
                break
            after = last
        return _total(conn, db, pages, dry_run)


def _total(
    conn: sqlite3.Connection, db: str, pages: list[dict[str, Any]], dry_run: bool
) -> dict[str, Any]:
    from storage import PRIMARY_PAGE, primary_candidates

    totals = {k: sum(int(p[k]) for p in pages) for k in COUNTS}
    candidates = [c for p in pages for c in p["candidates"]]
    if dry_run:
        # Nothing was written: what would stay a candidate is what the pages did not decide.
        left = sum(1 for c in candidates if c["outcome"] != "recovered")
        truncated = left > PRIMARY_PAGE
    else:
        # What start-up's own query finds now (one statement): more than a page still blocks.
        now, truncated = read_named(db, partial(primary_candidates, conn))
        left = len(now) + int(truncated)
    summary: dict[str, Any] = {
        "safe": all(p["safe"] for p in pages) and not truncated,
        "pages": [
            {"page": p["page"], **{k: p[k] for k in COUNTS}, "safe": p["safe"]} for p in pages
        ],
        **totals,
        "left": left,
        "truncated": truncated,
        "candidates": candidates,
    }
    if dry_run:
        summary["dry_run"] = True
    warnings = [w for p in pages for w in p.get("warnings", [])]
    if warnings:
        summary["warnings"] = list(dict.fromkeys(warnings))
    return summary


def _kept(pages: list[dict[str, Any]]) -> str:
    if not pages:
        return "no earlier page was drained"
    decided = sum(int(p["recovered"]) for p in pages)
    return f"the {len(pages)} page(s) drained before it keep their {decided} decision(s)"
