"""qlfsm storage: the QingLong 3.0 local SQLite schema and its Run/Attempt repository."""

from ._candidates import (
    PRIMARY_CANDIDATES_SQL,
    PRIMARY_PAGE,
    PrimaryCandidate,
    primary_candidates,
)
from ._connection import connect, in_transaction, prepare_for_writes, transaction
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
    journal_get,
    journal_quarantine,
    journal_register,
    journal_resolve,
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
from ._rows import AttemptRow, EventRow, RunRow, uuid7
from ._schema import check_schema, init_schema

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
    "Repository",
    "RunChange",
    "RunRow",
    "StorageError",
    "check_schema",
    "connect",
    "in_transaction",
    "init_schema",
    "journal_get",
    "journal_quarantine",
    "journal_register",
    "journal_resolve",
    "prepare_for_writes",
    "primary_candidates",
    "transaction",
    "uuid7",
]
