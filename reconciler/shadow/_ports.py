"""The ports of the ADR-0448 pass: where it opens its database, where its candidate pages come
from, and the points it passes through (spec 05 "Supervisor").

The defaults are the real parts (``storage.connect``, ``storage.legacy_candidates``, hooks that
do nothing). A harness that interleaves passes (the tests' simulator) plugs its own in here
instead of patching the pass's module.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reconciler._cursor import Cursor
from storage import LegacyCandidate, connect, legacy_candidates

# (connection, enabled origins, after this cursor, page size) -> (page, truncated)
CandidateSource = Callable[
    [sqlite3.Connection, Sequence[str], Cursor | None, int],
    tuple[list[LegacyCandidate], bool],
]
# (database path, busy timeout in seconds or None for storage's default) -> connection
Opener = Callable[[str, float | None], sqlite3.Connection]


class PassHooks:
    """Points the pass passes through, in order. Each does nothing here; the pass never
    depends on what a hook does (it may block, record, or raise to simulate a crash)."""

    def before_decide(self, conn: sqlite3.Connection, cand: LegacyCandidate) -> None:
        """Before one candidate is re-read and decided."""

    def after_read(self, conn: sqlite3.Connection, cand: LegacyCandidate) -> None:
        """After the candidate's facts were read (``gather``) and its row decided, before
        anything is written: the window in which another writer may move what the decision
        used, which the write's compare-and-set and re-read guard must catch (spec 05)."""

    def after_decide(self, conn: sqlite3.Connection, cand: LegacyCandidate, state: str) -> None:
        """After a candidate was decided (and written): ``state`` is the legacy_shadow state."""

    def between_commits(self) -> None:
        """Between the Attempt commit and the Run commit of rows 9/10 (ADR-0448 §6)."""


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
