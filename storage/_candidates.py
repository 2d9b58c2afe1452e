"""The primary reconciler's bounded candidate query (spec 04 "Candidates"), and its windows in
Run id order for `qlfsm drain` (docs/decisions.md D-26): the same candidates, taken page after
page by a keyset on ``Runs.id``.

A window is ``(after, upto]`` in id order, each bound given as the ``rowid`` of the Run whose
id bounds it (``None``: unbounded). Comparing with that row's own stored id, rather than a
value carried through Python, keeps the order exact for an id the driver cannot give back as
it is stored (text that is not UTF-8 comes back as bytes, which would compare as a blob).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from ._errors import BadRow
from ._journal import JOURNAL_COLUMNS, JournalRow
from ._rows import AttemptRow, RunRow, columns

PRIMARY_PAGE = 256

# One statement: the zero-candidate start-up pays exactly this and nothing else (spec 04).
# One arm per candidate status, merged in id order (`MERGE (UNION ALL)`), so that each arm is an
# equality SEARCH that comes out in id order: on QingLong's own `(execution_owner, status, id)`
# (spec 02) on any node, or on qlfsm's partial index below where `db init` made it. A single
# `status IN (...)` with `ORDER BY r.id` lets the planner walk the primary key instead, once
# ANALYZE's statistics say a status holds many Runs: every Run read, in id order, to find none
# (issue 27 item 4; docs/decisions.md D-27). Each arm repeats the partial index's WHERE
# verbatim, or SQLite would not consider that index for it.
_COLUMNS = (
    "SELECT r.id, r.status, r.version, "
    '(SELECT COUNT(*) FROM "RunAttempts" a WHERE a.run_id = r.id '
    "AND a.status IN ('claimed','starting','running')) AS active"
)
_WHERE = (
    "FROM \"Runs\" r WHERE r.execution_owner = 'runtime' AND r.status IN ('dispatching','running')"
)
_CANDIDATE_ARM = f"{_COLUMNS} {_WHERE} AND r.status = '{{status}}'"
PRIMARY_CANDIDATES_SQL = (
    _CANDIDATE_ARM.format(status="dispatching")
    + " UNION ALL "
    + _CANDIDATE_ARM.format(status="running")
    + " ORDER BY id LIMIT ?"
)


# qlfsm's own index for the query above (applied by `db init`, migration
# qlfsm-0003-primary-candidates-index): it holds exactly the candidates, in id order, so a page
# is an in-order index range, with no sort and no scan of Runs even after ANALYZE (where
# QingLong's (execution_owner, status, id) index loses to a scan of the primary key on a small
# table). Its status list must repeat the query's WHERE verbatim for SQLite to use it. Without
# it (a node `db init` never touched) each arm of the query searches QingLong's status index.
PRIMARY_CANDIDATES_INDEX = (
    "CREATE INDEX IF NOT EXISTS qlfsm_runs_primary_candidates_idx "
    "ON \"Runs\" (execution_owner, id) WHERE status IN ('dispatching','running')"
)


class PrimaryCandidate(NamedTuple):
    """One row of the candidate query. A tuple, as the query's row is. ``problem`` is set when
    the row cannot be read (an id that is not UTF-8 text, a version that is not an integer):
    the candidate fails (spec 04 row 14); ``run_id`` is then a printable stand-in."""

    run_id: str
    status: str
    version: int
    active_attempts: int
    problem: str | None = None


def primary_candidates(
    conn: sqlite3.Connection, limit: int = PRIMARY_PAGE
) -> tuple[list[PrimaryCandidate], bool]:
    """Up to ``limit`` candidates in Run id order, and whether more exist (fetch limit + 1).

    One row that cannot be read is one candidate with a ``problem``, never an error of the
    whole page (the text is decoded leniently, storage._text)."""
    with lenient(conn):
        rows = conn.execute(PRIMARY_CANDIDATES_SQL, (limit + 1,)).fetchall()
    found = [_candidate(r) for r in rows]
    return found[:limit], len(found) > limit


# D-26: the WHERE and the order of start-up's query, plus the window's bounds.
_SELECT = f"{_COLUMNS}, r.rowid {_WHERE}"
_AFTER = ' AND r.id > (SELECT b.id FROM "Runs" b WHERE b.rowid = ?)'
_UPTO = ' AND r.id <= (SELECT b.id FROM "Runs" b WHERE b.rowid = ?)'
_ORDER = " ORDER BY r.id LIMIT ?"
_LAST = f"SELECT r.rowid {_WHERE} ORDER BY r.id DESC LIMIT 1"


def candidate_window(
    conn: sqlite3.Connection,
    after: int | None = None,
    upto: int | None = None,
    limit: int = PRIMARY_PAGE,
) -> tuple[list[PrimaryCandidate], bool, int | None]:
    """Up to ``limit`` candidates whose id is after the id of the Run with rowid ``after`` and
    at most that of the Run with rowid ``upto`` (either ``None``: no bound), in id order;
    whether more exist in the window (fetch limit + 1); and the rowid of the last one returned
    (the next window's ``after``), ``None`` when none is. One statement."""
    sql, args = _SELECT, []
    if after is not None:
        sql += _AFTER
        args.append(after)
    if upto is not None:
        sql += _UPTO
        args.append(upto)
    with lenient(conn):
        rows = conn.execute(sql + _ORDER, (*args, limit + 1)).fetchall()
    page = rows[:limit]
    last = page[-1][4] if page else None
    return [_candidate(r[:4]) for r in page], len(rows) > limit, last


def last_candidate(conn: sqlite3.Connection) -> int | None:
    """The rowid of the candidate with the greatest id now (``None``: no candidate): where a
    drain stops, so that Runs created while it runs cannot keep it going (D-26)."""
    row = conn.execute(_LAST).fetchone()
    return None if row is None else int(row[0])


def _candidate(r: sqlite3.Row) -> PrimaryCandidate:
    run_id, status, version, active = r
    if type(run_id) is str and type(status) is str and type(version) is int and type(active) is int:
        return PrimaryCandidate(run_id, status, version, active)  # a row as the schema says
    try:
        return PrimaryCandidate(
            text(r[0], "Runs.id"),
            text(r[1], "Runs.status"),
            integer(r[2], "Runs.version"),
            integer(r[3], "the active Attempt count"),
        )
    except BadRow as exc:
        status = r[1] if isinstance(r[1], str) else ""
        return PrimaryCandidate(shown(r[0]), status, -1, 0, str(exc))


# --- reading candidate rows whose text may not be what the schema promises ---------------------
# The driver's default decoding fails a whole statement on the first TEXT value that is not
# valid UTF-8 ("Could not decode to UTF-8 column ..."), so one hostile row would hide every
# candidate of a page and make the pass fatal. The candidate queries (this one and the legacy
# keyset) decode leniently instead: such a value comes back as BadText (its raw bytes) and the
# row becomes ONE failed candidate (spec 04 row 14, spec 05 row 12), named by `shown`.


class BadText(bytes):
    """The raw bytes of a TEXT value that is not valid UTF-8."""


def lenient_text(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return BadText(raw)


@contextmanager
def lenient(
    conn: sqlite3.Connection, decode: Callable[[bytes], object] = lenient_text
) -> Iterator[None]:
    """Decode TEXT with ``decode`` for the block, leniently by default (no SQL statement is
    run)."""
    before = conn.text_factory
    conn.text_factory = decode
    try:
        yield
    finally:
        conn.text_factory = before


def text(value: object, what: str) -> str:
    """``value`` as a str, or BadRow naming ``what`` (a column) and the problem."""
    if isinstance(value, str):
        return value
    if isinstance(value, BadText):
        raise BadRow(f"{what} is not valid UTF-8 text")
    raise BadRow(f"{what} is {_kind(value)}, not text")


def optional_text(value: object, what: str) -> str | None:
    return None if value is None else text(value, what)


def integer(value: object, what: str) -> int:
    """An INTEGER column's value; BadRow for text, a blob or a fraction."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise BadRow(f"{what} is {_kind(value)}, not an integer")


def shown(value: object) -> str:
    """A printable stand-in for a value that may not be text (bytes shown escaped)."""
    if isinstance(value, str):
        return value
    if isinstance(value, BadText):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, bytes):
        return "x'" + value.hex() + "'"
    return repr(value)


def _kind(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, BadText):
        return "text that is not valid UTF-8"
    if isinstance(value, bytes):
        return "a blob"
    if isinstance(value, str):
        return "text"
    if isinstance(value, float):
        return "a real number"
    return type(value).__name__


# --- one read of a candidate's Run and its Attempts (ADR-0068 §2 step 1) -----------------------

_RUN_COLS = columns(RunRow)
_ATTEMPT_COLS = columns(AttemptRow)
# Where the Attempt's columns start and the journal's columns start in a row of the statement.
_N = len(_RUN_COLS)
_M = _N + len(_ATTEMPT_COLS)
RUN_WITH_ATTEMPTS_SQL = (
    "SELECT "
    + ", ".join(
        [f"r.{c}" for c in _RUN_COLS]
        + [f"a.{c}" for c in _ATTEMPT_COLS]
        + [f"j.{c}" for c in JOURNAL_COLUMNS]
    )
    + ' FROM "Runs" r LEFT JOIN "RunAttempts" a ON a.run_id = r.id '
    'LEFT JOIN "LocalCompletionReceiptJournal" j ON j.attempt_id = a.id '
    "WHERE r.id = ? ORDER BY a.attempt"
)


def run_with_attempts(
    conn: sqlite3.Connection, run_id: str
) -> tuple[RunRow | None, list[AttemptRow], JournalRow | None]:
    """The Run, its Attempts (ordered by attempt number) and the receipt journal row of the
    latest Attempt, in ONE statement: ``(None, [], None)`` when the Run is gone.

    The ADR-0068 pass reads a candidate this way once before its decision and once inside its
    write transaction. (The journal is written only by the launcher, before its spawn, and by
    a reconciler: reading it with the Run is reading it before the receipt, as it stands.)"""
    cursor = conn.execute(RUN_WITH_ATTEMPTS_SQL, (run_id,))
    cursor.row_factory = None  # plain tuples: the columns are taken by position below
    rows = cursor.fetchall()
    if not rows:
        return None, [], None
    run = RunRow(*rows[0][:_N])
    attempts = [AttemptRow(*r[_N:_M]) for r in rows if r[_N] is not None]
    last = rows[-1]
    journal = JournalRow(*last[_M:]) if attempts and last[_M] is not None else None
    return run, attempts, journal
