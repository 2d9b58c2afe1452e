"""The ports of the ADR-0448 pass: where it opens its database, where its candidate pages come
from, the decision table it decides by, what commits a decision, and the points it passes
through (spec 05 "Supervisor").

The defaults are the real parts (``storage.connect``, ``storage.legacy_candidates``, ADR-0448's
engine and legacy_shadow machine from ``fsm.qinglong``, the pass's own writes, hooks that do
nothing). A harness (the tests' simulator, a changed decision table, a wrapped write) plugs its
own in here instead of patching the pass's module.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fsm import Lifecycle
from fsm.qinglong import LegacyDecision, LegacyEngine, legacy_engine, legacy_machine
from reconciler._cursor import Cursor
from reconciler.node import Clock
from reconciler.shadow._hooks import PassHooks
from reconciler.shadow._writes import Context, Reread, write
from storage import LegacyCandidate, Repository, connect, legacy_candidates

# (connection, enabled origins, after this cursor, page size) -> (page, truncated)
CandidateSource = Callable[
    [sqlite3.Connection, Sequence[str], Cursor | None, int],
    tuple[list[LegacyCandidate], bool],
]
# (database path, busy timeout in seconds or None for storage's default) -> connection
Opener = Callable[[str, float | None], sqlite3.Connection]
# (repository, decision, context, clock, hooks, the re-read of the facts inside a write
# transaction) -> None: commits what the decided row says (``reconciler.shadow._writes.write``)
PassWriter = Callable[[Repository, LegacyDecision, Context, Clock, PassHooks, Reread], None]


def connect_storage(db: str, busy_timeout_s: float | None) -> sqlite3.Connection:
    """The default opener: ``storage.connect`` as it is, its storage errors left to the pass's
    fail-open report (spec 05), unlike the primary's ``open_database``, which turns them into
    the command's exit 1."""
    return connect(db) if busy_timeout_s is None else connect(db, busy_timeout_s=busy_timeout_s)


@dataclass(frozen=True)
class PassPorts:
    """What the pass talks to; every field defaults to the real part."""

    open: Opener = connect_storage
    candidates: CandidateSource = legacy_candidates
    hooks: PassHooks = field(default_factory=PassHooks)
    # The decision table the pass decides by (its engine: every read of a candidate's facts and
    # its row) and the legacy_shadow machine its decisions move on; a changed table's here
    # changes both, never the Run and Attempt edges a write fires (those are fsm.qinglong's).
    engine: LegacyEngine = field(default_factory=legacy_engine)
    machine: Lifecycle = field(default_factory=legacy_machine)
    # What commits a decided row; a harness may wrap the real one (other re-read facts, or the
    # exception row 12 keeps to itself).
    write: PassWriter = write
