"""qlfsm storage: the QingLong 3.0 local SQLite schema and its Run/Attempt repository.

Exports are resolved lazily: importing the repository pulls in `fsm` and `transitions`, which
the zero-candidate start-up (one SQL statement, spec 04) must not pay for.
"""

from __future__ import annotations

import importlib

# No `typing` at run time: the zero-candidate start-up imports this package before its one
# query, and has no use for `typing` (its cost: benchmarks/README.md, "Figures once quoted").
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_EXPORTS: dict[str, str] = {
    "ACTORS": "_repository",
    "Actor": "_repository",
    "Advanced": "_repository",
    "AttemptChange": "_repository",
    "AttemptRow": "_rows",
    "Busy": "_errors",
    "Change": "_repository",
    "Conflict": "_errors",
    "DatabaseMissing": "_errors",
    "DuplicateEvent": "_errors",
    "EventRow": "_rows",
    "Expect": "_repository",
    "InvalidField": "_errors",
    "JournalRow": "_journal",
    "NotAQingLongDatabase": "_errors",
    "NotFound": "_errors",
    "PRIMARY_CANDIDATES_SQL": "_candidates",
    "PRIMARY_PAGE": "_candidates",
    "PrimaryCandidate": "_candidates",
    "Repository": "_repository",
    "RunChange": "_repository",
    "RegistrationConflict": "_journal",
    "RunRow": "_rows",
    "StorageError": "_errors",
    "check_schema": "_schema",
    "commit_edge": "_edge_commit",
    "connect": "_connection",
    "in_transaction": "_connection",
    "init_schema": "_schema",
    "last_candidate": "_candidate_window",
    "journal_get": "_journal",
    "journal_quarantine": "_journal",
    "journal_register": "_journal",
    "journal_resolve": "_journal",
    "journal_withdraw_quarantine": "_journal",
    "prepare_for_writes": "_connection",
    "primary_candidates": "_candidates",
    "run_with_attempts": "_candidates",
    "advance_read": "_advance_once",
    "candidate_window": "_candidate_window",
    "check_read": "_advance_once",
    "transaction": "_connection",
    "uuid7": "_rows",
}

__all__ = [
    "ACTORS",
    "PRIMARY_CANDIDATES_SQL",
    "PRIMARY_PAGE",
    "Actor",
    "Advanced",
    "AttemptChange",
    "AttemptRow",
    "Busy",
    "Change",
    "Conflict",
    "DatabaseMissing",
    "DuplicateEvent",
    "EventRow",
    "Expect",
    "InvalidField",
    "JournalRow",
    "NotAQingLongDatabase",
    "NotFound",
    "PrimaryCandidate",
    "RegistrationConflict",
    "Repository",
    "RunChange",
    "RunRow",
    "StorageError",
    "advance_read",
    "candidate_window",
    "check_read",
    "check_schema",
    "commit_edge",
    "connect",
    "in_transaction",
    "init_schema",
    "journal_get",
    "journal_quarantine",
    "journal_register",
    "journal_resolve",
    "journal_withdraw_quarantine",
    "last_candidate",
    "prepare_for_writes",
    "primary_candidates",
    "run_with_attempts",
    "transaction",
    "uuid7",
]

if TYPE_CHECKING:
    from ._advance_once import advance_read, check_read
    from ._candidate_window import candidate_window, last_candidate
    from ._candidates import (
        PRIMARY_CANDIDATES_SQL,
        PRIMARY_PAGE,
        PrimaryCandidate,
        primary_candidates,
        run_with_attempts,
    )
    from ._connection import (
        connect,
        in_transaction,
        prepare_for_writes,
        transaction,
    )
    from ._edge_commit import commit_edge as commit_edge
    from ._errors import (
        Busy,
        Conflict,
        DatabaseMissing,
        DuplicateEvent,
        InvalidField,
        NotAQingLongDatabase,
        NotFound,
        StorageError,
    )
    from ._journal import (
        JournalRow,
        RegistrationConflict,
        journal_get,
        journal_quarantine,
        journal_register,
        journal_resolve,
        journal_withdraw_quarantine,
    )
    from ._repository import (
        ACTORS,
        Actor,
        Advanced,
        AttemptChange,
        Change,
        Expect,
        Repository,
        RunChange,
    )
    from ._rows import (
        AttemptRow,
        EventRow,
        RunRow,
        uuid7,
    )
    from ._schema import (
        check_schema,
        init_schema,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"storage.{module}"), name)
    globals()[name] = value
    return value


# --- the legacy-shadow source (ADR-0448), appended; lazy like every export above ----------------
_EXPORTS.update(
    {
        "EVIDENCE_MAX": "_legacy_source",
        "LEGACY_PAGE_MAX": "_legacy_source",
        "ActiveAttempt": "_legacy_source",
        "LatestAttempt": "_legacy_source",
        "LegacyCandidate": "_legacy_source",
        "Normalized": "_legacy_source",
        "active_attempts": "_legacy_source",
        "candidates_sql": "_legacy_source",
        "instance_evidence": "_legacy_source",
        "latest_attempt": "_legacy_source",
        "legacy_candidates": "_legacy_source",
        "legacy_log_id": "_legacy_source",
        "normalize_legacy": "_legacy_source",
    }
)
__all__ += [
    "EVIDENCE_MAX",
    "LEGACY_PAGE_MAX",
    "ActiveAttempt",
    "LatestAttempt",
    "LegacyCandidate",
    "Normalized",
    "active_attempts",
    "candidates_sql",
    "instance_evidence",
    "latest_attempt",
    "legacy_candidates",
    "legacy_log_id",
    "normalize_legacy",
]

if TYPE_CHECKING:
    from ._legacy_source import EVIDENCE_MAX as EVIDENCE_MAX
    from ._legacy_source import LEGACY_PAGE_MAX as LEGACY_PAGE_MAX
    from ._legacy_source import ActiveAttempt as ActiveAttempt
    from ._legacy_source import LatestAttempt as LatestAttempt
    from ._legacy_source import LegacyCandidate as LegacyCandidate
    from ._legacy_source import Normalized as Normalized
    from ._legacy_source import active_attempts as active_attempts
    from ._legacy_source import candidates_sql as candidates_sql
    from ._legacy_source import instance_evidence as instance_evidence
    from ._legacy_source import latest_attempt as latest_attempt
    from ._legacy_source import legacy_candidates as legacy_candidates
    from ._legacy_source import legacy_log_id as legacy_log_id
    from ._legacy_source import normalize_legacy as normalize_legacy

# --- faults: the lock budget, named database errors, unreadable rows; lazy like the rest -------
_EXPORTS.update(
    {
        "LOCK_BUDGET_ENV": "_connection",
        "LOCK_BUDGET_S": "_connection",
        "BadRow": "_errors",
        "DatabaseCorrupt": "_errors",
        "DatabaseFull": "_errors",
        "DatabaseReadOnly": "_errors",
        "DatabaseUnusable": "_errors",
        "LockBudget": "_connection",
        "NotARegularFile": "_errors",
        "busy_wait_s": "_connection",
        "database_error": "_connection",
        "lock_budget": "_connection",
        "lock_budget_from_env": "_connection",
        "write_blocker": "_connection",
    }
)
__all__ += [
    "LOCK_BUDGET_ENV",
    "LOCK_BUDGET_S",
    "BadRow",
    "DatabaseCorrupt",
    "DatabaseFull",
    "DatabaseReadOnly",
    "DatabaseUnusable",
    "LockBudget",
    "NotARegularFile",
    "busy_wait_s",
    "database_error",
    "lock_budget",
    "lock_budget_from_env",
    "write_blocker",
]

if TYPE_CHECKING:
    from ._connection import LOCK_BUDGET_ENV as LOCK_BUDGET_ENV
    from ._connection import LOCK_BUDGET_S as LOCK_BUDGET_S
    from ._connection import LockBudget as LockBudget
    from ._connection import busy_wait_s as busy_wait_s
    from ._connection import database_error as database_error
    from ._connection import lock_budget as lock_budget
    from ._connection import lock_budget_from_env as lock_budget_from_env
    from ._connection import write_blocker as write_blocker
    from ._errors import BadRow as BadRow
    from ._errors import DatabaseCorrupt as DatabaseCorrupt
    from ._errors import DatabaseFull as DatabaseFull
    from ._errors import DatabaseReadOnly as DatabaseReadOnly
    from ._errors import DatabaseUnusable as DatabaseUnusable
    from ._errors import NotARegularFile as NotARegularFile

# --- integrity: dropped INSERTs, hot journals; lazy like the rest ------------------------------
_EXPORTS.update(
    {"ForeignDatabase": "_errors", "HotJournal": "_errors", "RowNotInserted": "_errors"}
)
__all__ += ["ForeignDatabase", "HotJournal", "RowNotInserted"]

if TYPE_CHECKING:
    from ._errors import ForeignDatabase as ForeignDatabase
    from ._errors import HotJournal as HotJournal
    from ._errors import RowNotInserted as RowNotInserted

# --- the light records (see _record.py): for the node's and the pass's data classes ----------
_EXPORTS.update({"record": "_record", "record_field": "_record"})
__all__ += ["record", "record_field"]

if TYPE_CHECKING:
    from ._record import record as record
    from ._record import record_field as record_field

# --- the operator's reads and cleanups (inspect, sweep); lazy like the rest --------------------
_EXPORTS.update(
    {
        "FIRST": "_operator",
        "PendingRow": "_operator",
        "QuarantinedRow": "_operator",
        "delete_pending_of_ended": "_operator",
        "delete_quarantined_of_ended": "_operator",
        "foreign_state_rows": "_operator",
        "journal_shards": "_operator",
        "pending_page": "_operator",
        "quarantined_page": "_operator",
        "run_position": "_operator",
        "runs_page": "_operator",
    }
)
__all__ += [
    "FIRST",
    "PendingRow",
    "QuarantinedRow",
    "delete_pending_of_ended",
    "delete_quarantined_of_ended",
    "foreign_state_rows",
    "journal_shards",
    "pending_page",
    "quarantined_page",
    "run_position",
    "runs_page",
]

if TYPE_CHECKING:
    from ._operator import FIRST as FIRST
    from ._operator import PendingRow as PendingRow
    from ._operator import QuarantinedRow as QuarantinedRow
    from ._operator import delete_pending_of_ended as delete_pending_of_ended
    from ._operator import delete_quarantined_of_ended as delete_quarantined_of_ended
    from ._operator import foreign_state_rows as foreign_state_rows
    from ._operator import journal_shards as journal_shards
    from ._operator import pending_page as pending_page
    from ._operator import quarantined_page as quarantined_page
    from ._operator import run_position as run_position
    from ._operator import runs_page as runs_page

# --- the counters QingLong reads (version, event sequence): their bound, D-29 ------------------
_EXPORTS.update(
    {"MAX_COUNTER": "_changes", "CounterExhausted": "_errors", "next_counter": "_changes"}
)
__all__ += ["MAX_COUNTER", "CounterExhausted", "next_counter"]

if TYPE_CHECKING:
    from ._changes import MAX_COUNTER as MAX_COUNTER
    from ._changes import next_counter as next_counter
    from ._errors import CounterExhausted as CounterExhausted
