"""`qlfsm reconcile` (spec 06) and :func:`primary_pass`, the entry the `startup` command uses.

The zero-candidate start-up must cost one SQL statement and nothing else (spec 04, ADR-0068 §6),
so this module loads only the light part of the standard library (not ``typing``, ``argparse``
or ``json``: the usual command line is parsed by hand, argparse serves help and errors, and the
empty summary is written by hand), ``reconciler.cli._exit`` and, when called, the two light
storage modules (``storage._connection``: open without SQL; ``storage._candidates``:
the candidate statement). Only when there ARE candidates does it import the reconciler (``fsm``,
``transitions``, the repository, receipts, identity). The receipt root is checked with the
store's own rules from ``reconciler.node._root_check`` (``os`` and ``stat`` only): importing
the store costs ~16 ms, about half of the whole zero-candidate start-up (benchmarks/README.md).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

from reconciler._profiles import LOCAL_PROFILES, PROFILE_ENV, PROFILES, ProfileError, local_profile
from reconciler.cli._exit import EXIT_BLOCKED, EXIT_SAFE, FatalError, RetryLater, UsageError
from reconciler.primary._empty import empty_summary

TYPE_CHECKING = False  # no `typing` at run time (see the module docstring)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from storage._connection import LockBudget

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
    """spec 03 "Root", checked before anything is touched: the receipt store's own rules, from
    the light module that imports ``os`` alone (not the store)."""
    from reconciler.node import ReceiptRootError, validate_receipt_root

    try:
        return validate_receipt_root(
            path, empty="receipt root is empty: set --receipt-root to an absolute directory"
        )
    except ReceiptRootError as exc:
        raise UsageError(str(exc)) from exc


def inspect_receipt_root(root: str) -> bool:
    """The normalised ``root`` looked at with one ``lstat`` (no SQL, whatever the candidates):
    True a real directory qlfsm may trust, False missing; UsageError (exit 2) for anything
    else, or a root another user may write (D-16, ``reconciler.node._root_check``)."""
    from reconciler.node._root_check import ReceiptRootError, check_root_dir

    try:
        return check_root_dir(root)
    except ReceiptRootError as exc:
        raise UsageError(f"{exc}; nothing was written") from exc


def open_database(db: str, *, read_only: bool = False) -> sqlite3.Connection:
    """Open an existing database WITHOUT running any SQL (``storage.connect``; never creates).
    A path that is a device, FIFO or directory is refused before it is opened."""
    from storage._connection import connect
    from storage._errors import DatabaseMissing, StorageError

    try:
        return connect(db, read_only=read_only)
    except DatabaseMissing as exc:
        from reconciler._escape import shell_word

        raise FatalError(
            f"database {db!r} does not exist; reconcile never creates one "
            f"(create it with `qlfsm db init --db {shell_word(db)}`)"
        ) from exc
    except StorageError as exc:
        raise FatalError(str(exc)) from exc


def check_database(db: str) -> None:
    """The check a writing command makes before its first write (docs/decisions.md D-15):
    ``db`` opened, every table and column qlfsm reads checked (``storage.check_schema``),
    closed. Reads only: a file that is not QingLong's is refused (exit 1) unwritten."""
    from storage._schema import check_schema

    conn = open_database(db)
    try:
        check_schema(conn, path=db)
    finally:
        conn.close()


def candidate_page(conn: sqlite3.Connection, db: str) -> tuple[list[Any], bool]:
    """The ONE statement of the zero-candidate path: up to 256 candidates and a truncation
    flag (``storage.primary_candidates``). A failure names the real problem (locked, read-
    only, corrupt, not QingLong's) and never advises `db init` for a file that exists."""
    from storage._candidates import primary_candidates
    from storage._connection import database_error
    from storage._errors import Busy

    started = time.monotonic()
    try:
        return primary_candidates(conn)
    except sqlite3.DatabaseError as exc:
        named = database_error(db, exc, waited_s=time.monotonic() - started)
        if isinstance(named, Busy):
            raise RetryLater(str(named)) from exc  # D-20: transient, exit 75
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
    FatalError (missing, unusable or foreign database: exit 1); RetryLater (exit 75) when
    another process held the database or the start-up lock past the budget (D-20: one line,
    not a row per candidate). When there are candidates, a
    root that exists but is not a real directory, or a missing root beside a launched
    (`starting`/`running`) Attempt, is also UsageError, raised before anything is written
    (D-3c). Zero candidates or a truncated page: one SQL statement, no receipt, no /proc, no
    sleep, no write (spec 04 "Before any candidate"): the root is looked at with one ``lstat``
    only (a root that is not a trustworthy directory is exit 2 whatever the candidates, D-16).
    ``budget`` (a ``storage.LockBudget``, default from ``$QLFSM_LOCK_BUDGET_S``) bounds the
    total wait for other processes' write locks and for the single-flight start-up lock
    (``reconciler.cli._flight``, not taken by a dry run); `startup` shares one.

    ``dry_run``: the same reads, probes and grace, nothing written: the connection is made
    read-only (``PRAGMA query_only``) before anything else, and the summary (with
    ``"dry_run": true``) and exit code are what the real pass would give now.
    """
    root = check_receipt_root(receipt_root)
    check_profile(profile)
    inspect_receipt_root(root)  # a file, a link or a loose root: exit 2 (D-16), candidates or not
    if budget is None:
        budget = lock_budget_s()
    conn = open_database(db, read_only=True) if dry_run else open_database(db)
    try:
        if dry_run:
            # Belt and braces: SQLite itself refuses any write on this connection.
            conn.execute("PRAGMA query_only = ON")
            summary = _pass(conn, db, root, profile, budget, dry_run=True)
        else:
            # D-20: one start-up at a time per database (a dry run writes nothing: no lock).
            from reconciler.cli._flight import single_flight

            with single_flight(db, budget):
                summary = _pass(conn, db, root, profile, budget, dry_run=False)
    finally:
        conn.close()
    warnings: list[str] = summary.get("warnings") or []
    for warning in warnings:
        sys.stderr.write(f"qlfsm: warning: {warning}\n")  # one line each (D-16)
    return summary, exit_code(summary)


def _pass(
    conn: sqlite3.Connection,
    db: str,
    root: str,
    profile: str,
    budget: LockBudget,
    *,
    dry_run: bool,
) -> dict[str, Any]:
    page, truncated = candidate_page(conn, db)
    if truncated or not page:
        summary = empty_summary(truncated, len(page))
        if dry_run:
            summary["dry_run"] = True
        return summary
    # There are candidates: now, and only now, pay for the machines and the repository.
    from reconciler.node._clock import SystemClock
    from reconciler.node._identity import ProcProvider
    from reconciler.node._receipt_store import FileReceiptStore, ReceiptRootError
    from reconciler.primary._pass import PrimaryReconciler
    from storage import check_schema

    check_schema(conn, path=db)
    pass_ = PrimaryReconciler(
        conn,
        FileReceiptStore(root),
        ProcProvider(),
        SystemClock(),
        profile=profile,
        budget=budget,
        dry_run=dry_run,
    )
    try:
        summary = pass_.run()
    except ReceiptRootError as exc:
        # The root checked as a root, before anything was written (D-3c): exit 2.
        raise UsageError(f"{exc}; nothing was written") from exc
    if pass_.stopped == "database_locked":
        raise RetryLater(locked_line(db, summary, budget))
    return summary


def locked_line(db: str, summary: Mapping[str, Any], budget: LockBudget) -> str:
    """D-20: a pass that another writer held past the lock budget is one cause, one line
    (exit 75), not a row per candidate: it says what was kept and that a rerun decides the
    rest."""
    left = sum(
        1
        for c in summary["candidates"]
        if "database_locked" in c["reason"] or c["reason"].startswith("error:Busy")
    )
    done = len(summary["candidates"]) - left
    kept = (
        "nothing was written" if done == 0 else f"the {done} decided before it keep what they wrote"
    )
    return (
        f"database {db!r} is locked by another process: waited {budget.spent:.1f} s "
        f"($QLFSM_LOCK_BUDGET_S={budget.seconds:g}), {left} of "
        f"{len(summary['candidates'])} candidate(s) not decided; {kept}; try again when that "
        "process has finished writing"
    )


def reconcile_command(argv: list[str]) -> int:
    """`qlfsm reconcile`. The usual command line is read without argparse (the zero-candidate
    path must not import it); anything else (help, a typo, an abbreviation) goes to argparse,
    which says what is wrong. Errors are mapped by ``run_command``, loaded only then."""
    quick = _quick_args(argv)
    if quick is None:
        from reconciler.cli._util import run_command

        return run_command(argv, _parsed)
    try:
        return _reconcile(quick)
    except Exception as exc:
        from reconciler.cli._util import run_command

        failed = exc

        def again(_: list[str]) -> int:
            raise failed  # mapped to its one line and exit code like any command's error

        return run_command(argv, again)


reconcile_command.handles_errors = True  # type: ignore[attr-defined]


class _Args:
    """The flags of `qlfsm reconcile`, as argparse would give them."""

    def __init__(self) -> None:
        self.db: str | None = None
        self.receipt_root: str | None = None
        self.profile: str | None = None
        self.json = False
        self.dry_run = False
        self.debug = False


_VALUES = {"--db": "db", "--receipt-root": "receipt_root", "--profile": "profile"}
_SWITCHES = {"--json": "json", "--dry-run": "dry_run", "--debug": "debug"}


def _quick_args(argv: list[str]) -> _Args | None:
    """The flags when ``argv`` is spelled out plainly (``--db PATH`` or ``--db=PATH``), else
    None (argparse then parses it, and explains what it does not accept)."""
    args = _Args()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _SWITCHES:
            setattr(args, _SWITCHES[word], True)
            i += 1
            continue
        name, eq, value = word.partition("=")
        if name not in _VALUES:
            return None
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            i += 1
            value = argv[i]
        setattr(args, _VALUES[name], value)
        i += 1
    if args.db is None or args.receipt_root is None:
        return None
    return args


def _parsed(argv: list[str]) -> int:
    from reconciler.cli._util import parser

    p = parser(
        "qlfsm reconcile",
        "ADR-0068 start-up pass: receipts first, then process identity, one grace, the "
        "receipt again; exit 0 safe, 3 blocked, 2 usage, 1 fatal, 4 output lost, "
        "75 locked (try again), 130/143 interrupted. One start-up at a time per database: a "
        "second one waits for the first. $QLFSM_LOCK_BUDGET_S: the most seconds the pass "
        "waits for another process's write lock or start-up (default 5).",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--receipt-root", required=True, help="absolute completion-receipt root")
    p.add_argument(
        "--profile",
        default=None,
        help=f"one of {', '.join(PROFILES)}; only {' or '.join(LOCAL_PROFILES)} run this "
        f"local pass (default: ${PROFILE_ENV}, else standalone)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="decide every candidate (real receipt reads, real probes, the grace) and write "
        "nothing: no commit, quarantine, journal change, receipt moved or deleted",
    )
    return _reconcile(p.parse_args(argv))


def _reconcile(args: Any) -> int:
    profile = args.profile if args.profile is not None else default_profile()
    summary, code = primary_pass(args.db, args.receipt_root, profile, dry_run=args.dry_run)
    if args.json:
        text = _flat_json(summary)
        if text is None:
            # As cli._util.print_json (D-14), without loading argparse on the pass path.
            from reconciler._escape import json_line

            text = json_line(summary)
        sys.stdout.write(text + "\n")
    else:
        sys.stdout.write(render(summary, args.db, args.receipt_root) + "\n")
    return code


def _flat_json(summary: Mapping[str, Any]) -> str | None:
    """``json.dumps(summary)`` for a summary without candidates (booleans and integers only),
    without importing json; None for any other summary."""
    parts = []
    for key, value in summary.items():
        if value is True or value is False:
            shown = "true" if value else "false"
        elif type(value) is int:
            shown = str(value)
        elif value == [] and type(value) is list:
            shown = "[]"
        else:
            return None
        parts.append(f'"{key}": {shown}')
    return "{" + ", ".join(parts) + "}"


def render(summary: dict[str, Any], db: str, receipt_root: str | None = None) -> str:
    """The human summary: one line of counts, the candidates, what blocks start-up (with the
    command that explains each blocking run) and the verdict (``_verdict``: one wording)."""
    from reconciler.cli._verdict import blocking_lines, verdict_line

    head = (
        f"scanned {summary['scanned']}: recovered {summary['recovered']}, remaining "
        f"{summary['remaining']}, unresolved {summary['unresolved']}, failed "
        f"{summary['failed']}" + (" (page truncated at 256)" if summary["truncated"] else "")
    )
    lines = [head]
    if summary["candidates"]:
        # At most 100 columns a line, the reason shortened (its full text in --json): D-22.
        from reconciler.cli._report import candidate_lines

        lines.extend(candidate_lines(summary, reconcile=True))
    blocking = blocking_lines(summary, db, receipt_root)
    if blocking:
        lines.append("")
        lines.extend(blocking)
    verdict = verdict_line(bool(summary["safe"]))
    if summary.get("dry_run"):
        verdict = f"dry run, nothing written; the pass would say: {verdict}"
    lines.append(verdict)
    return "\n".join(lines)
