"""The points the ADR-0448 pass passes through, for a harness (spec 05 "Supervisor"): one of
the pass's ports (``reconciler.shadow._ports``), known to its writes too."""

from __future__ import annotations

import sqlite3

from storage import LegacyCandidate


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
