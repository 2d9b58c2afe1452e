"""The application layer's ADR-0068 pass (spec 06): checks, open, schema, the single-flight
lock, the pass, close. :func:`primary_pass` is what `qlfsm reconcile` calls (its inputs
checked here, once); `startup` checks its inputs itself and calls :func:`run_primary`.

The zero-candidate start-up costs one SQL statement (spec 04 "Before any candidate", ADR-0068
§6): :func:`_pass` reads the candidate page once and hands it to the pass only when there is a
candidate to decide.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

from reconciler._clock import Clock, SystemClock
from reconciler._errors import FatalError, RetryLater, UsageError
from reconciler._escape import shell_word
from reconciler._flight import single_flight
from reconciler._notify import to_stderr
from reconciler._profiles import PROFILE_ENV, ProfileError, local_profile
from reconciler._root_check import ReceiptRootError, check_root_dir, validate_receipt_root
from reconciler._summary import before_any_candidate
from storage import (
    Busy,
    DatabaseMissing,
    LockBudget,
    StorageError,
    check_schema,
    connect,
    database_error,
    lock_budget_from_env,
    primary_candidates,
)

if TYPE_CHECKING:
    # Annotations only: the pass and its machines are imported when there are candidates
    # (spec 04 "Before any candidate"), not by the zero-candidate path; so is the node.
    from reconciler.node import FileReceiptStore, ProcessProvider
    from reconciler.primary import PrimaryReconciler, Probe

T = TypeVar("T")


def default_profile() -> str:
    """spec 06: `QL_DEPLOYMENT_PROFILE`; unset or empty means `standalone` (checked by
    :func:`check_profile`, with the rules of ``reconciler._profiles``)."""
    return os.environ.get(PROFILE_ENV, "") or "standalone"


def _as_usage(call: Callable[[], T], error: type[Exception], tail: str = "") -> T:
    """``call()``; its ``error`` is a UsageError (exit 2) with the same message (and ``tail``)."""
    try:
        return call()
    except error as exc:
        raise UsageError(f"{exc}{tail}") from exc


def check_profile(profile: str) -> str:
    # spec 04 "Profiles": a cluster never uses local PID evidence.
    return _as_usage(lambda: local_profile(profile), ProfileError)


def check_receipt_root(path: str) -> str:
    """spec 03 "Root", checked before anything is touched: the receipt store's own rules, from
    ``reconciler._root_check``."""
    empty = "receipt root is empty: set --receipt-root to an absolute directory"
    return _as_usage(lambda: validate_receipt_root(path, empty=empty), ReceiptRootError)


def inspect_receipt_root(root: str) -> bool:
    """The normalised ``root`` looked at with one ``lstat`` (no SQL, whatever the candidates):
    True a real directory qlfsm may trust, False missing; UsageError (exit 2) for anything
    else, or a root another user may write (D-16, ``reconciler._root_check``)."""
    return _as_usage(lambda: check_root_dir(root), ReceiptRootError, "; nothing was written")


def open_database(db: str, *, read_only: bool = False) -> sqlite3.Connection:
    """Open an existing database WITHOUT running any SQL (``storage.connect``; never creates).
    A path that is a device, FIFO or directory is refused before it is opened."""
    try:
        return connect(db, read_only=read_only)
    except DatabaseMissing as exc:
        raise FatalError(
            f"database {db!r} does not exist; reconcile never creates one "
            f"(create it with `qlfsm db init --db {shell_word(db)}`)"
        ) from exc
    except StorageError as exc:
        raise FatalError(str(exc)) from exc


def database_file(conn: sqlite3.Connection) -> str:
    """The file of an open connection's main database ("" in memory): what its single-flight
    lock and its messages name (one ``PRAGMA database_list``)."""
    # The main database is always the first row (seq 0).
    return str(conn.execute("PRAGMA database_list").fetchone()[2] or "")


def read_named(db: str, query: Callable[[], T]) -> T:
    """A candidate read (start-up's page, `drain`'s windows), its failure named: the real
    problem (locked: exit 75; read-only, corrupt, not QingLong's: exit 1), never advice to
    `db init` a file that exists."""
    started = time.monotonic()
    try:
        return query()
    except sqlite3.DatabaseError as exc:
        named = database_error(db, exc, waited_s=time.monotonic() - started)
        if isinstance(named, Busy):
            raise RetryLater(str(named)) from exc  # D-20: transient, exit 75
        raise FatalError(str(named)) from exc


def lock_budget_s() -> LockBudget:
    """``$QLFSM_LOCK_BUDGET_S`` as a ``storage.LockBudget``; UsageError (exit 2) when it is not
    a number of seconds >= 0, before anything is opened."""
    return _as_usage(lock_budget_from_env, ValueError)


class PassOptions(TypedDict, total=False):
    """The keywords of :func:`run_primary` besides its inputs (defaults there): ``dry_run``,
    ``notify`` and the ports ``clock``, ``provider``, ``probe``."""

    dry_run: bool
    notify: Callable[[str], None] | None
    clock: Clock | None
    provider: ProcessProvider | None
    probe: Probe | None


def primary_pass(
    db: str | sqlite3.Connection,
    receipt_root: str,
    profile: str,
    budget: LockBudget | None = None,
    **options: Unpack[PassOptions],
) -> dict[str, Any]:
    """One ADR-0068 pass on the database ``db`` (a file path, or an open connection that stays
    open): spec 04's summary.

    Raises UsageError (bad root, profile or lock budget) before touching anything, and
    FatalError (missing, unusable or foreign database); RetryLater when another process held
    the database or the start-up lock past the budget (D-20: one line, not a row per
    candidate). When there are candidates, a root that exists but is not a real directory, or
    a missing root beside a launched (`starting`/`running`) Attempt, is also UsageError, raised
    before anything is written (D-3c). Zero candidates or a truncated page: one SQL statement
    (for a path; a connection adds the ``PRAGMA database_list`` that names its file), no
    receipt, no /proc, no sleep, no write (spec 04 "Before any candidate"): the root is looked
    at with one ``lstat`` only (a root that is not a trustworthy directory is refused whatever
    the candidates, D-16). ``budget`` (a ``storage.LockBudget``, default from
    ``$QLFSM_LOCK_BUDGET_S``) bounds the total wait for other processes' write locks and for
    the single-flight start-up lock (``reconciler._flight``, not taken by a dry run);
    `startup` shares one. Each warning of the summary is one ``notify`` line (default stderr,
    ``qlfsm: warning: ...``, D-16). ``clock``, ``provider`` and ``probe``: the pass's ports
    (default the system clock and ``/proc``).

    ``dry_run``: the same reads, probes and grace, nothing written: the connection is made
    read-only (``PRAGMA query_only``) before anything else, and the summary (with
    ``"dry_run": true``) is what the real pass would give now.
    """
    root = check_inputs(receipt_root, profile)
    return run_primary(db, root, profile, lock_budget_s() if budget is None else budget, **options)


def check_inputs(receipt_root: str, profile: str) -> str:
    """The usage errors of a pass, before anything is opened (spec 06): the receipt root
    (spec 03 "Root"; normalised and returned), the profile (a cluster never uses local PID
    evidence, spec 04 "Profiles"), and the root looked at with one ``lstat`` (a file, a link
    or a loose root is exit 2 whatever the candidates, D-16)."""
    root = check_receipt_root(receipt_root)
    check_profile(profile)
    inspect_receipt_root(root)
    return root


@dataclass(frozen=True, slots=True)
class PassInputs:
    """A pass's checked inputs: the normalised receipt root, the profile, the lock budget,
    whether it is a dry run, and its ports (clock, process provider, probe; None for the
    system clock and ``/proc``)."""

    root: str
    profile: str
    budget: LockBudget
    dry_run: bool
    ports: tuple[Clock | None, ProcessProvider | None, Probe | None]


def run_primary(
    db: str | sqlite3.Connection,
    root: str,
    profile: str,
    budget: LockBudget,
    *,
    dry_run: bool = False,
    notify: Callable[[str], None] | None = None,
    clock: Clock | None = None,
    provider: ProcessProvider | None = None,
    probe: Probe | None = None,
) -> dict[str, Any]:
    """:func:`primary_pass` on inputs :func:`check_inputs` has checked (``root`` normalised)."""
    inputs = PassInputs(root, profile, budget, dry_run, (clock, provider, probe))
    if not isinstance(db, sqlite3.Connection):
        with pass_connection(db, budget, notify, dry_run=dry_run) as conn:
            summary = _pass(conn, db, inputs)
    else:
        # The caller's connection, left open; a dry run makes it read-only for the pass and
        # gives it back as it was.
        path = database_file(db)
        if dry_run:
            (before,) = db.execute("PRAGMA query_only").fetchone()
            db.execute("PRAGMA query_only = ON")
            try:
                summary = _pass(db, path, inputs)
            finally:
                db.execute(f"PRAGMA query_only = {int(before)}")
        else:
            # In memory: no file to take the single-flight lock beside, no other process to
            # wait for.
            with single_flight(path, budget, notify) if path else nullcontext():
                summary = _pass(db, path, inputs)
    warn(notify, summary.get("warnings") or [])
    return summary


def warn(notify: Callable[[str], None] | None, warnings: Iterable[str]) -> None:
    """Each warning of a pass as one ``notify`` line (default stderr): ``qlfsm: warning: ...``
    (D-16)."""
    say = to_stderr if notify is None else notify
    for warning in warnings:
        say(f"qlfsm: warning: {warning}")


@contextmanager
def pass_connection(
    db: str, budget: LockBudget, notify: Callable[[str], None] | None, *, dry_run: bool
) -> Iterator[sqlite3.Connection]:
    """The connection of a pass on the database file ``db`` (start-up's, or `drain`'s for all
    its pages), closed after it: a dry run's read-only, a real pass's under the single-flight
    lock."""
    with closing(open_database(db, read_only=True) if dry_run else open_database(db)) as conn:
        if dry_run:
            # Belt and braces: SQLite itself refuses any write on this connection.
            conn.execute("PRAGMA query_only = ON")
        # D-20: one start-up at a time per database (a dry run writes nothing: no lock).
        with nullcontext() if dry_run else single_flight(db, budget, notify):
            yield conn


def _pass(conn: sqlite3.Connection, db: str, inputs: PassInputs) -> dict[str, Any]:
    # The ONE statement of the zero-candidate path: up to 256 candidates and a truncation flag,
    # read once for the whole pass.
    page, truncated = read_named(db, lambda: primary_candidates(conn))
    summary = before_any_candidate(page, truncated)
    if summary is not None:
        # spec 04 "Before any candidate": no machine, no repository, no receipt, no /proc.
        if inputs.dry_run:
            summary["dry_run"] = True
        return summary
    check_schema(conn, path=db)
    from reconciler.node import FileReceiptStore

    pass_ = primary_reconciler(conn, FileReceiptStore(inputs.root), inputs)
    try:
        summary = pass_.run_page(page)
    except ReceiptRootError as exc:
        # The root checked as a root, before anything was written (D-3c): exit 2.
        raise UsageError(f"{exc}; nothing was written") from exc
    if pass_.stopped == "database_locked":
        raise RetryLater(locked_line(db, summary, inputs.budget))
    return summary


def primary_reconciler(
    conn: sqlite3.Connection, store: FileReceiptStore, inputs: PassInputs
) -> PrimaryReconciler:
    """The ADR-0068 pass on ``conn`` (start-up's, or one of `drain`'s pages)."""
    from reconciler.node import ProcProvider
    from reconciler.primary import PrimaryReconciler

    clock, provider, probe = inputs.ports
    return PrimaryReconciler(
        conn,
        store,
        ProcProvider() if provider is None else provider,
        SystemClock() if clock is None else clock,
        profile=inputs.profile,
        budget=inputs.budget,
        probe=probe,
        dry_run=inputs.dry_run,
    )


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
