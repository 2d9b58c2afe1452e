"""`qlfsm reconcile` (spec 06) and :func:`primary_pass`, the entry the `startup` command uses.

The zero-candidate start-up must cost one SQL statement and nothing else (spec 04, ADR-0068 §6),
so this module loads only the standard library, :mod:`reconciler.cli._util` and, when called,
the two light storage modules (``storage._connection``: open without SQL; ``storage._candidates``:
the candidate statement). Only when there ARE candidates does it import the reconciler (``fsm``,
``transitions``, the repository, receipts, identity). The receipt root is checked here with the
rules of ``reconciler.node._receipt_store.validate_receipt_root`` (a test keeps them equal):
importing the store costs ~16 ms, about half of the whole zero-candidate start-up
(benchmarks/README.md).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reconciler._profiles import PROFILE_ENV, ProfileError, local_profile
from reconciler.cli._util import (
    EXIT_BLOCKED,
    EXIT_SAFE,
    FatalError,
    UsageError,
    parser,
    print_json,
    table,
    use_colour,
)
from reconciler.primary._empty import empty_summary

if TYPE_CHECKING:
    from storage._connection import LockBudget

MAX_ROOT_BYTES = 4096


def default_profile() -> str:
    """spec 06: `QL_DEPLOYMENT_PROFILE`; unset or empty means `standalone` (checked by
    :func:`check_profile`, with the rules of ``reconciler._profiles``)."""
    return os.environ.get(PROFILE_ENV, "") or "standalone"


def check_profile(profile: str) -> str:
    # spec 04 "Profiles": a cluster never uses local PID evidence.
    try:
        return local_profile(profile)
    except ProfileError as exc:
        raise UsageError(str(exc)) from exc


def check_receipt_root(path: str) -> str:
    """spec 03 "Root", checked before anything is touched; the same rules (and message) as
    ``reconciler.node._receipt_store.validate_receipt_root``, without importing the store."""
    if not path:
        raise UsageError("receipt root is empty: set --receipt-root to an absolute directory")
    if "\0" in path:
        raise UsageError("receipt root contains a NUL byte: remove it")
    if len(os.fsencode(path)) > MAX_ROOT_BYTES:
        raise UsageError(
            f"receipt root is longer than {MAX_ROOT_BYTES} bytes: use a shorter absolute path"
        )
    if not path.startswith("/"):
        raise UsageError(f"receipt root {path!r} is relative: use an absolute path")
    normalised = os.path.normpath(path)
    if normalised.strip("/") == "":
        raise UsageError("receipt root is '/': use a dedicated directory below it")
    return normalised


def open_database(db: str, *, read_only: bool = False) -> sqlite3.Connection:
    """Open an existing database WITHOUT running any SQL (``storage.connect``; never creates).
    A path that is a device, FIFO or directory is refused before it is opened."""
    from storage._connection import connect
    from storage._errors import DatabaseMissing, StorageError

    try:
        return connect(db, read_only=read_only)
    except DatabaseMissing as exc:
        raise FatalError(
            f"database {db!r} does not exist; reconcile never creates one "
            f"(create it with `qlfsm db init --db {db}`)"
        ) from exc
    except StorageError as exc:
        raise FatalError(str(exc)) from exc


def candidate_page(conn: sqlite3.Connection, db: str) -> tuple[list[Any], bool]:
    """The ONE statement of the zero-candidate path: up to 256 candidates and a truncation
    flag (``storage.primary_candidates``). A failure names the real problem (locked, read-
    only, corrupt, not QingLong's) and never advises `db init` for a file that exists."""
    from storage._candidates import primary_candidates
    from storage._connection import database_error

    started = time.monotonic()
    try:
        return primary_candidates(conn)
    except sqlite3.DatabaseError as exc:
        named = database_error(db, exc, waited_s=time.monotonic() - started)
        raise FatalError(str(named)) from exc


def lock_budget_s(environ: Mapping[str, str] | None = None) -> LockBudget:
    """``$QLFSM_LOCK_BUDGET_S`` as a ``storage.LockBudget``; UsageError (exit 2) when it is not
    a number of seconds >= 0, before anything is opened."""
    from storage._connection import lock_budget_from_env

    try:
        return lock_budget_from_env(environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def exit_code(summary: dict[str, Any]) -> int:
    return EXIT_SAFE if summary["safe"] else EXIT_BLOCKED


def primary_pass(
    db: str,
    receipt_root: str,
    profile: str,
    budget: LockBudget | None = None,
    *,
    dry_run: bool = False,
) -> tuple[dict[str, Any], int]:
    """One ADR-0068 pass on the database file ``db``: (spec 04 summary, exit code 0 or 3).

    Raises UsageError (bad root, profile or lock budget: exit 2) before touching anything, and
    FatalError (missing, unusable or foreign database: exit 1). When there are candidates, a
    root that exists but is not a real directory, or a missing root beside a launched
    (`starting`/`running`) Attempt, is also UsageError, raised before anything is written
    (D-3c). Zero candidates or a truncated page: one SQL statement, no receipt, no /proc, no
    sleep, no write (spec 04 "Before any candidate"): the root is not even looked at.
    ``budget`` (a ``storage.LockBudget``, default from ``$QLFSM_LOCK_BUDGET_S``) bounds the
    total wait for other processes' write locks; `startup` shares one.

    ``dry_run``: the same reads, probes and grace, nothing written: the connection is made
    read-only (``PRAGMA query_only``) before anything else, and the summary (with
    ``"dry_run": true``) and exit code are what the real pass would give now.
    """
    root = check_receipt_root(receipt_root)
    check_profile(profile)
    if budget is None:
        budget = lock_budget_s()
    conn = open_database(db, read_only=True) if dry_run else open_database(db)
    try:
        if dry_run:
            # Belt and braces: SQLite itself refuses any write on this connection.
            conn.execute("PRAGMA query_only = ON")
        page, truncated = candidate_page(conn, db)
        if truncated or not page:
            summary = empty_summary(truncated, len(page))
            if dry_run:
                summary["dry_run"] = True
            return summary, exit_code(summary)
        # There are candidates: now, and only now, pay for the machines and the repository.
        from reconciler.node._clock import SystemClock
        from reconciler.node._identity import ProcProvider
        from reconciler.node._receipt_store import FileReceiptStore, ReceiptRootError
        from reconciler.primary._pass import reconcile
        from storage import check_schema

        check_schema(conn, path=db)
        try:
            summary = reconcile(
                conn,
                FileReceiptStore(root),
                ProcProvider(),
                SystemClock(),
                profile=profile,
                budget=budget,
                dry_run=dry_run,
            )
        except ReceiptRootError as exc:
            # The root checked as a root, before anything was written (D-3c): exit 2.
            raise UsageError(f"{exc}; nothing was written") from exc
    finally:
        conn.close()
    return summary, exit_code(summary)


def reconcile_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm reconcile",
        "ADR-0068 start-up pass: receipts first, then process identity, one grace, the "
        "receipt again; exit 0 safe, 3 blocked, 2 usage, 1 fatal, 4 output lost, "
        "130/143 interrupted. $QLFSM_LOCK_BUDGET_S: the most seconds the pass waits for "
        "another process's write lock (default 5).",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--receipt-root", required=True, help="absolute completion-receipt root")
    p.add_argument(
        "--profile",
        default=None,
        help="edge or standalone (default: $QL_DEPLOYMENT_PROFILE, else standalone)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="decide every candidate (real receipt reads, real probes, the grace) and write "
        "nothing: no commit, quarantine, journal change, receipt moved or deleted",
    )
    args = p.parse_args(argv)
    profile = args.profile if args.profile is not None else default_profile()
    summary, code = primary_pass(args.db, args.receipt_root, profile, dry_run=args.dry_run)
    if args.json:
        print_json(summary)
    else:
        sys.stdout.write(render(summary) + "\n")
    return code


def render(summary: dict[str, Any]) -> str:
    """The human summary: one line of counts, the candidates, and the verdict."""
    verdict = "SAFE to start" if summary["safe"] else "start-up BLOCKED"
    if summary.get("dry_run"):
        verdict = f"dry run, nothing written; the pass would say: {verdict}"
    head = (
        f"scanned {summary['scanned']}: recovered {summary['recovered']}, remaining "
        f"{summary['remaining']}, unresolved {summary['unresolved']}, failed "
        f"{summary['failed']}" + (" (page truncated at 256)" if summary["truncated"] else "")
    )
    lines = [head]
    if summary["candidates"]:
        rows = [
            [c["run_id"], c["attempt_id"] or "-", c["row"], c["outcome"], c["reason"]]
            for c in summary["candidates"]
        ]
        lines.append(table(["run", "attempt", "row", "outcome", "reason"], rows))
    if use_colour():  # spec 06: colour only on a TTY (and never with NO_COLOR)
        verdict = f"\x1b[{'32' if summary['safe'] else '31'}m{verdict}\x1b[0m"
    lines.append(verdict)
    return "\n".join(lines)
