"""The application layer's ADR-0448 shadow pass as `qlfsm shadow` and ``reconciler.shadow_pass``
run it: its resume cursor file (``reconciler._cursor``) and the single-flight start-up lock
(D-20). Light on purpose: a disabled pass imports neither ``sqlite3`` nor ``storage``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from reconciler._cursor import Cursor, InvalidResumeCursor, read_cursor, store_cursor
from reconciler._errors import FatalError
from reconciler._escape import one_line
from reconciler._profiles import CLUSTER_PROFILES, PROFILE_ENV, ProfileError, resolve_profile
from reconciler._shadow_entry import ORIGINS_ENV, ShadowResult, failed, run_shadow

Notify = Callable[[str], None]


def shadow_with_cursor(
    db: str, profile: str | None, origins: str | None, cursor_file: str | None, notify: Notify
) -> ShadowResult:
    """The shadow pass with its resume cursor file and its single-flight lock."""
    try:
        resume = read_cursor(cursor_file) if cursor_file else None
    except InvalidResumeCursor as exc:
        # The path is not named (spec 05 privacy is about the audit; stderr stays as sparing).
        notify(
            one_line(
                f"qlfsm: warning: --resume-cursor {exc}; the shadow pass did not run and start-up "
                "continues (fail-open) - point it at a regular file qlfsm writes, or remove it"
            )
        )
        return ShadowResult(failed(exc))
    except Exception as exc:
        return ShadowResult(failed(exc))
    result = _shadow_single_flight(db, profile, origins, resume, notify)
    if cursor_file and result.audit["state"] in ("reconciled", "incomplete"):
        try:
            store_cursor(cursor_file, result.cursor)
        except OSError as exc:
            result = ShadowResult(failed(exc))
    return result


def _shadow_single_flight(
    db: str, profile: str | None, origins: str | None, resume: Cursor | None, notify: Notify
) -> ShadowResult:
    """The pass under the single-flight start-up lock (D-20), taken only when the pass would
    open the database (enabled origins, a local profile: ``would_open``). Fail-open holds
    for the lock too: held past the budget, the record is `failed` with errorType `Busy`
    (the same cause as a locked database: another process holds it), exit 0."""
    if not _would_open(origins, profile) or not os.path.isfile(db):
        return run_shadow(db, profile=profile, origins=origins, resume_cursor=resume)
    from reconciler._flight import StartupLocked, single_flight
    from storage import Busy, lock_budget_from_env

    try:
        lock = lock_budget_from_env()
        with single_flight(db, lock, notify):
            return run_shadow(db, profile=profile, origins=origins, resume_cursor=resume, lock=lock)
    except StartupLocked:
        return ShadowResult(failed(Busy(0)))
    except (ValueError, FatalError, OSError) as exc:  # a bad $QLFSM_LOCK_BUDGET_S: ValueError
        return ShadowResult(failed(exc))


def _would_open(origins: str | None, profile: str | None) -> bool:
    """Whether ``run_shadow`` would open the database: at least one reviewed origin enabled
    and a local profile (otherwise it is disabled or refused without a database, and takes
    no lock)."""
    from reconciler._shadow_entry import parse_origins

    if not parse_origins(origins if origins is not None else os.environ.get(ORIGINS_ENV)).enabled:
        return False
    try:
        prof = resolve_profile(profile if profile is not None else os.environ.get(PROFILE_ENV))
    except ProfileError:
        return False
    return prof not in CLUSTER_PROFILES
