"""The application layer: ``reconciler.startup``, ``reconciler.reconcile`` and
``reconciler.shadow_pass`` (``reconciler.shadow`` is the ADR-0448 subpackage), what `qlfsm
startup`, `reconcile` and `shadow` call, and what a Python service embeds. Each takes the
database as a file path or an open ``sqlite3`` connection (its main database file: the passes
open their own connections to it, except ``reconcile``, which runs on the one given and leaves
it open), does the checks, the single-flight lock (``reconciler._flight``, D-20), the passes
and the closing, and returns a typed report (``reconciler._reports``). Nothing here parses
arguments, prints a report or knows an exit code: progress and warning lines go to ``notify``
(default stderr, as `qlfsm` prints them).

Start-up order (spec 05 "Switches"): (2.x normalization) -> legacy shadow -> primary (ADR-0068)
-> after a SAFE primary pass, the sweep, under ONE lock budget and one single-flight lock.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import storage
from reconciler._clock import SystemClock
from reconciler._errors import FatalError, UsageError
from reconciler._escape import shell_word
from reconciler._first_boot import check_directory, create_database
from reconciler._flight import single_flight
from reconciler._notify import one_line, to_stderr
from reconciler._profiles import PROFILE_ENV, ProfileError, resolve_profile
from reconciler._reconcile import (
    PassOptions,
    check_inputs,
    database_file,
    default_profile,
    lock_budget_s,
    open_database,
    primary_pass,
    run_primary,
)
from reconciler._reports import NormalizeReport, ReconcileReport, ShadowReport, StartupReport
from reconciler._shadow_entry import failed, run_shadow
from reconciler._shadow_run import Notify, shadow_with_cursor
from reconciler._summary import empty_summary
from reconciler._sweep import SweepResult, sweep_files
from storage import LockBudget, check_schema, connect, lock_budget


def _path(db: str | sqlite3.Connection) -> str:
    """The database file of ``db`` (a path, or a connection's main database file)."""
    if not isinstance(db, sqlite3.Connection):
        return db
    path = database_file(db)
    if not path:
        raise UsageError(
            "the connection's database is in memory: start-up needs the node's database file"
        )
    return path


# --- reconcile ----------------------------------------------------------------------------------


def reconcile(
    db: str | sqlite3.Connection,
    receipt_root: str,
    *,
    profile: str | None = None,
    budget: LockBudget | None = None,
    **options: Unpack[PassOptions],
) -> ReconcileReport:
    """One ADR-0068 start-up pass (``reconciler._reconcile.primary_pass``) as a typed report.

    ``profile``: default ``$QL_DEPLOYMENT_PROFILE``, else standalone (a cluster profile is a
    UsageError). Raises UsageError, FatalError or RetryLater (``reconciler._errors``) as
    `qlfsm reconcile` exits 2, 1 or 75.
    """
    prof = default_profile() if profile is None else profile
    return ReconcileReport.from_summary(primary_pass(db, receipt_root, prof, budget, **options))


# --- shadow -------------------------------------------------------------------------------------


def shadow_pass(
    db: str | sqlite3.Connection,
    *,
    profile: str | None = None,
    origins: str | None = None,
    resume_cursor: str | None = None,
    notify: Notify | None = None,
) -> ShadowReport:
    """One ADR-0448 shadow pass; never raises (fail-open, ADR-0448 §9): any failure is the
    report's ``state: failed``. ``resume_cursor``: a private file the cursor is read from
    and the next one written to (spec 05 "Supervisor")."""
    try:
        path = _path(db)
    except UsageError as exc:
        return ShadowReport.from_audit(failed(exc))
    result = shadow_with_cursor(path, profile, origins, resume_cursor, notify or to_stderr)
    return ShadowReport.from_audit(result.audit, result.cursor)


# --- startup ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartupInputs:
    """A start-up's inputs, checked once (:func:`check_startup`): the normalised receipt root
    and the resolved profile."""

    receipt_root: str
    profile: str


def check_startup(receipt_root: str, profile: str | None) -> StartupInputs:
    """Usage errors first, before anything is read or written (spec 06): the primary pass
    would refuse these only after normalization and the shadow pass had run. ``profile``:
    default ``$QL_DEPLOYMENT_PROFILE``, else standalone; a bad one is a UsageError naming
    where it came from (the value echoed, escaped: D-23)."""
    try:
        prof = resolve_profile(profile if profile is not None else os.environ.get(PROFILE_ENV))
    except ProfileError as exc:
        where = "--profile" if profile is not None else f"${PROFILE_ENV}"
        raise UsageError(f"{where}: {exc}") from exc
    return StartupInputs(check_inputs(receipt_root, prof), prof)  # D-16: before any write


class StartupOptions(TypedDict, total=False):
    """The keywords of :func:`run_startup` (defaults there), :func:`startup`'s too."""

    origins: str | None
    legacy_normalize: bool
    first_boot: bool
    dry_run: bool
    budget: LockBudget | None
    notify: Notify | None


def startup(
    db: str | sqlite3.Connection,
    receipt_root: str,
    *,
    profile: str | None = None,
    **options: Unpack[StartupOptions],
) -> StartupReport:
    """The node's start-up: (2.x normalization, ``legacy_normalize``) -> the ADR-0448 shadow
    pass (``origins``, default ``$QL3_SHADOW_ORIGINS``) -> the ADR-0068 primary pass -> after
    a SAFE primary pass, the sweep; one start-up at a time per database, all under one lock
    budget (``budget``, default ``$QLFSM_LOCK_BUDGET_S``).

    ``first_boot`` (D-21): a missing database file in a directory that exists is created
    with the `qlfsm db init` schema (``report.first_boot``); without it a missing database is
    a FatalError. ``dry_run``: the primary pass predicted, nothing written (normalization, the
    shadow pass and the sweep, which write, are skipped). Raises UsageError, FatalError or
    RetryLater / ``storage.Busy`` (`qlfsm startup` exits 2, 1, 75); the verdict is
    ``report.safe``.
    """
    return run_startup(db, check_startup(receipt_root, profile), **options)


def run_startup(
    db: str | sqlite3.Connection,
    checked: StartupInputs,
    *,
    origins: str | None = None,
    legacy_normalize: bool = False,
    first_boot: bool = False,
    dry_run: bool = False,
    budget: LockBudget | None = None,
    notify: Notify | None = None,
) -> StartupReport:
    """:func:`startup` on inputs :func:`check_startup` has checked (`qlfsm startup` checks
    them before it looks for the metrics extra)."""
    started = time.monotonic()
    say = to_stderr if notify is None else notify
    receipt_root, prof = checked.receipt_root, checked.profile
    path = _path(db)
    # ONE lock budget for the whole start-up: normalization, shadow and primary together wait
    # at most this long for another process's write lock (docs/decisions.md "lock budget").
    lock = lock_budget_s() if budget is None else budget
    # D-21: only the explicit first-boot choice creates the database, never a directory.
    created = first_boot and not os.path.lexists(path)
    if created and dry_run:
        # A dry run writes nothing: it checks the directory and predicts the empty database's
        # pass (zero candidates, SAFE) without creating it.
        check_directory(path)
    elif created:
        created = create_database(path, lock)
    if not created and not os.path.exists(path):
        raise FatalError(
            f"database {path!r} does not exist; create it with "
            f"`qlfsm db init --db {shell_word(path)}`, or on the node's first start add "
            "--first-boot"
        )
    took: dict[str, float] = {}
    normalized = shadow = None
    if dry_run:
        # The shadow pass has no dry run: it is skipped (it and normalization write), so the
        # prediction is the primary pass's on the database as it is now, or the zero
        # candidates of the one a first boot would create (docs/decisions.md); the sweep
        # writes too, so it is `skipped`, as after a blocked pass.
        primary = ReconcileReport.from_summary(
            {**empty_summary(False), "dry_run": True}
            if created
            else run_primary(path, receipt_root, prof, lock, dry_run=True, notify=say)
        )
        sweep = startup_sweep(path, receipt_root, run=False)
    else:
        # D-15: the schema before the first write (every table and column qlfsm reads; the
        # database opened, never created). Normalization writes the legacy tables, so a file
        # that is not QingLong's is refused here (exit 1), with nothing written, not after it.
        with closing(open_database(path)) as conn:
            check_schema(conn, path=path)
        # D-20: one start-up at a time per database, held across normalization, shadow,
        # primary and sweep; the wait for it is charged to the same one budget. Held past the
        # budget: StartupLocked, exit 75 (try again), before anything is written.
        with single_flight(path, lock, say):
            mark = time.monotonic()
            if legacy_normalize:
                normalized = _normalize(path, lock, say)
                took["normalize"], mark = time.monotonic() - mark, time.monotonic()
            audit = run_shadow(path, profile=prof, origins=origins, lock=lock)
            took["shadow"], mark = time.monotonic() - mark, time.monotonic()
            shadow = ShadowReport.from_audit(audit.audit, audit.cursor)
            summary = run_primary(path, receipt_root, prof, lock, notify=say)
            took["primary"], mark = time.monotonic() - mark, time.monotonic()
            primary = ReconcileReport.from_summary(summary)
            sweep = startup_sweep(path, receipt_root, run=primary.safe, lock=lock, notify=say)
            if primary.safe:
                took["sweep"] = time.monotonic() - mark
        took["total"] = time.monotonic() - started
    return StartupReport(
        safe=primary.safe,
        primary=primary,
        shadow=shadow,
        sweep=sweep,
        normalize=normalized,
        first_boot=created,
        dry_run=dry_run,
        durations=took,
    )


def _normalize(db: str, lock: LockBudget, say: Notify) -> NormalizeReport:
    """2.x `initData` (spec 02): fail-open like the shadow pass; counts only on stderr."""
    try:
        with closing(connect(db)) as conn, lock_budget(conn, lock):
            done = storage.normalize_legacy(conn)
    except Exception as exc:
        say(f"qlfsm: legacy normalization failed ({type(exc).__name__}); continuing")
        return NormalizeReport(error=type(exc).__name__)
    say(
        f"qlfsm: legacy normalization: {done.running_instances} running instance(s) -> "
        f"stopped (no finish time), {done.crontabs} crontab(s) -> idle"
    )
    return NormalizeReport(running_instances=done.running_instances, crontabs=done.crontabs)


# --- the sweep after a SAFE start-up ------------------------------------------------------------


def run_sweep(db: str, receipt_root: str, lock: LockBudget | None = None) -> dict[str, Any]:
    """One sweep on ``db`` (opened without creating it) and ``receipt_root`` (normalised
    already), its writes charged to ``lock`` (a ``storage.LockBudget``; `startup` passes its
    own, so the whole start-up waits at most one budget for other writers). Raises the
    storage and receipt-root errors for the caller to name."""
    with closing(connect(db)) as conn:
        check_schema(conn, path=db)
        with lock_budget(conn, lock):
            return sweep_files(conn, receipt_root, SystemClock()).as_dict()


def startup_sweep(
    db: str,
    receipt_root: str,
    *,
    run: bool,
    lock: LockBudget | None = None,
    notify: Notify = to_stderr,
) -> dict[str, Any]:
    """The sweep of `startup` (``receipt_root`` checked already): only after a SAFE primary
    pass (``run``); never raises for a failure of its own (one warning line, state
    `failed`)."""
    if not run:
        return SweepResult(state="skipped").as_dict()
    try:
        result = run_sweep(db, receipt_root, lock)
    except Exception as exc:
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
        notify(
            one_line(
                f"qlfsm: warning: the sweep after start-up failed ({what}); start-up is still safe"
            )
        )
        return {**SweepResult(state="failed").as_dict(), "error": type(exc).__name__}
    for warning in result.get("warnings", []):
        notify(one_line(f"qlfsm: warning: {warning}"))
    return result
