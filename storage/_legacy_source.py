"""The legacy-shadow source and evidence adapter (ADR-0448 §3-§4, spec 05 "Candidates").

Read-only: nothing here writes except :func:`normalize_legacy`, which replays what the 2.x
start-up (`initData`) does and is only run when the operator asks for it. Raw log paths never
leave this module: the adapter turns each into the opaque ``legacy-log:`` id on the spot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from ._candidates import integer, lenient, optional_text, shown, text
from ._changes import MAX_COUNTER
from ._connection import in_transaction
from ._errors import BadRow

if TYPE_CHECKING:
    from fsm.qinglong import InstanceEvidence

# spec 05 "Switches": hard caps, whatever a profile asks for.
LEGACY_PAGE_MAX = 64
EVIDENCE_MAX = 8

# The keyset cursor before every legacy Run (created_at_ms is CHECKed >= 0 by the schema).
CURSOR_START: tuple[int, str] = (-1, "")

_ACTIVE = "('claimed','starting','running')"

# spec 05 "Candidates": legacy-owned, enabled origin, active status, keyset on
# (created_at_ms, id) with a row-value comparison so that SQLite range-seeks the partial index
# qlfsm_runs_legacy_keyset_idx (the status list must repeat the index's WHERE verbatim), never
# OFFSET, LIMIT page + 1. The one active Attempt is found through (run_id, status, id); it
# is used only when the count is exactly one, so the sub-select needs no ORDER BY (no sort).
# Where `db init` made that index the statement names it (`INDEXED BY`): every page is then
# an in-order range of it, O(page) however many legacy Runs are active. On a node without it
# (`db init` never ran) naming it is an error, and the statement is instead one arm per status
# merged in keyset order (`MERGE (UNION ALL)`): each arm an equality SEARCH of QingLong's own
# `(execution_owner, status, id)` whose sort holds that status's active legacy Runs, never the
# history. The single `status IN (...)` unhinted let the planner skip-scan
# `(task_id, created_at_ms, id)` over every Run once ANALYZE had run (issue 27 item 4;
# docs/decisions.md D-27). The parameters are numbered so that the arms share them: ?1, ?2 the
# cursor, then the origins, then the limit (the caller's tuple is the same for both forms).
_KEYSET_INDEX = "qlfsm_runs_legacy_keyset_idx"
_CANDIDATE_ARM = (
    "SELECT r.id, r.status, r.version, r.execution_origin, r.legacy_cron_id, r.created_at_ms, "
    f'(SELECT COUNT(*) FROM "RunAttempts" c WHERE c.run_id = r.id AND c.status IN {_ACTIVE}'
    ") AS active, "
    "a.id, a.status, a.pid, a.log_artifact_id, a.created_at_ms, a.started_at_ms, "
    "a.callback_sequence "
    'FROM "Runs" r{hint} '
    'LEFT JOIN "RunAttempts" a ON a.id = ('
    f'  SELECT f.id FROM "RunAttempts" f WHERE f.run_id = r.id AND f.status IN {_ACTIVE}'
    " LIMIT 1) "
    "WHERE r.execution_owner = 'legacy' "
    "AND r.status IN ('queued','dispatching','running') {status}"
    "AND (r.created_at_ms, r.id) > (?1, ?2) "
    "AND r.execution_origin IN ({origins})"
)
_LEGACY_STATUSES = ("queued", "dispatching", "running")


def candidates_sql(origin_count: int, *, keyset_index: bool = True) -> str:
    """The candidate statement for ``origin_count`` enabled origins (for EXPLAIN in tests):
    the form that names qlfsm's keyset index, or (``keyset_index=False``) the one for a
    database without it."""
    if not 1 <= origin_count <= 16:
        raise ValueError("between 1 and 16 origins")
    origins = ", ".join(f"?{3 + i}" for i in range(origin_count))
    limit = f"?{3 + origin_count}"
    if keyset_index:
        one = _CANDIDATE_ARM.format(hint=f" INDEXED BY {_KEYSET_INDEX}", status="", origins=origins)
        return f"{one} ORDER BY r.created_at_ms, r.id LIMIT {limit}"
    arms = [
        _CANDIDATE_ARM.format(hint="", status=f"AND r.status = '{s}' ", origins=origins)
        for s in _LEGACY_STATUSES
    ]
    # Result columns 6 and 1: r.created_at_ms, r.id (a compound's ORDER BY names its columns).
    return " UNION ALL ".join(arms) + f" ORDER BY 6, 1 LIMIT {limit}"


class ActiveAttempt(NamedTuple):
    id: str
    status: str
    pid: int | None
    log_artifact_id: str | None
    created_at_ms: int
    started_at_ms: int | None
    callback_sequence: int


class LegacyCandidate(NamedTuple):
    run_id: str
    status: str
    version: int
    origin: str
    legacy_cron_id: int | None
    created_at_ms: int
    active_attempts: int
    attempt: ActiveAttempt | None  # set only when exactly one Attempt is active
    # Set when the row cannot be read (text that is not UTF-8, a value of the wrong type):
    # the candidate fails (spec 05 row 12) and ``run_id`` is a printable stand-in; its key
    # cannot serve as a keyset cursor.
    problem: str | None = None

    @property
    def key(self) -> tuple[int, str]:
        return (self.created_at_ms, self.run_id)


def legacy_candidates(
    conn: sqlite3.Connection,
    origins: Sequence[str],
    after: tuple[int, str] | None,
    page: int,
) -> tuple[list[LegacyCandidate], bool]:
    """One keyset page after ``after``: up to ``page`` candidates, and whether more exist."""
    if not 1 <= page <= LEGACY_PAGE_MAX:
        raise ValueError(f"a page holds 1..{LEGACY_PAGE_MAX} candidates")
    params = (*(CURSOR_START if after is None else after), *origins, page + 1)
    with lenient(conn):
        try:
            rows = conn.execute(candidates_sql(len(origins)), params).fetchall()
        except sqlite3.OperationalError as exc:
            if _KEYSET_INDEX not in str(exc):
                raise
            # No qlfsm index here (`db init` never ran): the per-status form (D-27).
            plain = candidates_sql(len(origins), keyset_index=False)
            rows = conn.execute(plain, params).fetchall()
    return [_legacy_candidate(r) for r in rows[:page]], len(rows) > page


def _legacy_candidate(r: sqlite3.Row) -> LegacyCandidate:
    # The statement matched the Run's status, its origin and the active Attempt's status
    # against lists of valid text, so those three columns are that text whatever else is wrong;
    # column 6 is a COUNT(*), an integer.
    active: int = r[6]
    try:
        attempt = None
        if active == 1 and r[7] is not None:
            attempt = ActiveAttempt(
                text(r[7], "RunAttempts.id"),
                r[8],
                _int(r[9]),
                optional_text(r[10], "RunAttempts.log_artifact_id"),
                integer(r[11], "RunAttempts.created_at_ms"),
                _int(r[12]),
                integer(r[13], "RunAttempts.callback_sequence"),
            )
        return LegacyCandidate(
            run_id=text(r[0], "Runs.id"),
            status=r[1],
            version=integer(r[2], "Runs.version"),
            origin=r[3],
            legacy_cron_id=_int(r[4]),
            created_at_ms=integer(r[5], "Runs.created_at_ms"),
            active_attempts=active,
            attempt=attempt,
        )
    except BadRow as exc:
        return LegacyCandidate(
            run_id=shown(r[0]),
            status=r[1],
            version=-1,
            origin=r[3],
            legacy_cron_id=None,
            created_at_ms=r[5] if isinstance(r[5], int) else -1,
            active_attempts=0,
            attempt=None,
            problem=str(exc),
        )


def active_attempts(conn: sqlite3.Connection, run_id: str) -> tuple[int, ActiveAttempt | None]:
    """Re-read at decision time: the active count and, when exactly one, that Attempt."""
    rows = conn.execute(
        "SELECT id, status, pid, log_artifact_id, created_at_ms, started_at_ms, "
        f'callback_sequence FROM "RunAttempts" WHERE run_id = ? AND status IN {_ACTIVE} LIMIT 2',
        (run_id,),
    ).fetchall()
    if len(rows) != 1:
        count = len(rows)
        if count > 1:
            count = int(
                conn.execute(
                    'SELECT COUNT(*) FROM "RunAttempts" WHERE run_id = ? AND status IN ' + _ACTIVE,
                    (run_id,),
                ).fetchone()[0]
            )
        return count, None
    r = rows[0]
    return 1, ActiveAttempt(
        str(r[0]), str(r[1]), _int(r[2]), r[3], int(r[4]), _int(r[5]), int(r[6])
    )


class LatestAttempt(NamedTuple):
    id: str
    status: str
    error_code: str | None
    error_summary: str | None
    finished_at_ms: int | None


def latest_attempt(conn: sqlite3.Connection, run_id: str) -> LatestAttempt | None:
    """The Run's highest-numbered Attempt (spec 05 row 2: response-loss repair)."""
    r = conn.execute(
        "SELECT id, status, error_code, error_summary, finished_at_ms "
        'FROM "RunAttempts" WHERE run_id = ? ORDER BY attempt DESC LIMIT 1',
        (run_id,),
    ).fetchone()
    if r is None:
        return None
    return LatestAttempt(str(r[0]), str(r[1]), r[2], r[3], _int(r[4]))


# --- the RunningInstances evidence adapter ----------------------------------------------------

_INSTANCE_STATUS: dict[int | None, str] = {0: "running", 1: "succeeded", 2: "stopped", 3: "failed"}


def legacy_log_id(log_path: str) -> str:
    """ADR-0448 §4: the opaque 36-character log artifact id of a raw 2.x log path."""
    import hashlib  # here, not at import: the start-up pass never names a 2.x log

    return "legacy-log:" + hashlib.sha256(log_path.encode("utf-8")).hexdigest()[:25]


def instance_evidence(
    conn: sqlite3.Connection, cron_id: int
) -> tuple[list[InstanceEvidence], bool]:
    """The cron's RunningInstances, newest first, at most 8 (+1 read to detect overflow)."""
    from fsm.qinglong import InstanceEvidence  # the shadow pass loaded it already (D-33)

    rows = conn.execute(
        "SELECT pid, log_path, status, finished_at, exit_code FROM `RunningInstances` "
        "WHERE cron_id = ? ORDER BY started_at DESC, id DESC LIMIT ?",
        (cron_id, EVIDENCE_MAX + 1),
    ).fetchall()
    # An unknown 2.x status is no evidence of anything: keep it as "running" (never
    # terminal), so it can only ever make a decision more cautious.
    out = [
        InstanceEvidence(
            pid=_int(r[0]),
            log_id=legacy_log_id(r[1]) if isinstance(r[1], str) and r[1] else None,
            status=_INSTANCE_STATUS.get(_int(r[2]), "running"),  # type: ignore[arg-type]
            finished_at_ms=_finish_ms(r[3]),
            exit_code=_int(r[4]),
        )
        for r in rows[:EVIDENCE_MAX]
    ]
    return out, len(rows) > EVIDENCE_MAX


def _finish_ms(seconds: object) -> int | None:
    """A RunningInstances `finished_at` (unix seconds) in milliseconds (spec 05: seconds x 1000);
    None, no finish time, when its milliseconds pass 2^53 - 1: that row is then no terminal
    evidence (spec 05: a matched row without `finished_at` is not), the other rows of the
    cron are read as usual (docs/decisions.md D-18)."""
    if seconds is None:
        return None
    ms = int(seconds) * 1000  # type: ignore[call-overload]
    # The largest time in milliseconds QingLong can read back is the JavaScript safe integer of
    # every counter (D-29): a finish time past it would be written to Runs.finished_at_ms and
    # make QingLong reject that Run.
    return ms if ms <= MAX_COUNTER else None


def _int(value: object) -> int | None:
    # A bool too, as its int; a float only when whole; text only when it is an integer.
    if isinstance(value, int | str) or (isinstance(value, float) and value.is_integer()):
        try:
            return int(value)
        except ValueError:
            return None
    return None


# --- 2.x start-up normalization (`initData`, spec 02 "Legacy 2.x tables") ---------------------


class Normalized(NamedTuple):
    running_instances: int
    crontabs: int


def normalize_legacy(conn: sqlite3.Connection) -> Normalized:
    """What 2.x `initData` does before the HTTP server listens, in one transaction: every
    running RunningInstance becomes stopped WITHOUT a finish time, and every Crontab that is
    running or queued becomes idle (disabled ones stay disabled; docs/decisions.md)."""

    def work(c: sqlite3.Connection) -> Normalized:
        ri = c.execute(
            "UPDATE `RunningInstances` SET status = 2, "
            "updatedAt = strftime('%Y-%m-%d %H:%M:%f +00:00', 'now') WHERE status = 0"
        ).rowcount
        cr = c.execute(
            "UPDATE `Crontabs` SET status = 1, "
            "updatedAt = strftime('%Y-%m-%d %H:%M:%f +00:00', 'now') "
            "WHERE status IS NULL OR status NOT IN (1, 2)"
        ).rowcount
        return Normalized(int(ri), int(cr))

    return in_transaction(conn, work)
