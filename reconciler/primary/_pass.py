"""ADR-0068: the receipt-first, process-identity-aware start-up reconciler (spec 04).

The pass does only I/O. Which row of spec 04 decides a candidate is :class:`fsm.PrimaryCore`'s
answer (the table in ``fsm/_primary_table.py``); the pass gathers exactly the evidence the core
asks for, feeds back what it saw, and commits the decided edge's effect in ONE transaction in
which the decision is taken again on the Run and Attempts re-read inside it (the compare-and-set
is in the UPDATE's WHERE, checked by row count).

One pass over the bounded candidate page, serially in Run id order, in two phases so that the
publication grace is paid ONCE per pass (spec 04 "The grace"):

- phase 1 takes every candidate until the core decides it or asks for the grace (row 13: the
  probe said `not_running`); those are set aside with the monotonic time of their probe;
- one sleep, long enough that the LAST of those probes is a full grace old (so every one is);
- phase 2 observes the grace for each, reads its receipt again, re-checks it and commits.

Then the final verifier (ADR-0068 §5) queries the page again and proves every retained
candidate a second time. ``dry_run``: the same reads, probes and grace, and nothing written.

Ports are injected: the connection, a ReceiptStore, a ProcessProvider, a Clock and the probe.

The pass is assembled from its parts: the evidence loop and the grace (``_gather.py``), the
write transactions (``_writes.py``) and the final verifier (``_verify.py``), over the shared
state (``_state.py``).
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from fsm import PRIMARY_PASS_ROWS, PrimaryDecision
from reconciler._profiles import GRACE_MS as GRACE_MS
from reconciler._profiles import grace_seconds
from reconciler.node import (
    Clock,
    PassProvider,
    ProcessProvider,
    ReceiptRootError,
    ReceiptStore,
    inspect_handle,
)
from reconciler.primary._gather import Gathering
from reconciler.primary._state import PassCandidate, Probe
from reconciler.primary._summary import describe, empty_summary, summarize
from reconciler.primary._verify import Verifying
from reconciler.primary._writes import QUARANTINE_KEEP_MS as QUARANTINE_KEEP_MS
from reconciler.primary._writes import Writing
from storage import (
    Conflict,
    LockBudget,
    PrimaryCandidate,
    Repository,
    busy_wait_s,
    database_error,
    lock_budget,
    lock_budget_from_env,
    primary_candidates,
    write_blocker,
)

# The Run statuses of spec 04's candidate query; a Run in any other is not a candidate.
CANDIDATE_STATUSES = frozenset({"dispatching", "running"})
# The reasons of a Run that changed between two reads of this pass (rows 2 and 13).
CHANGED_MEANWHILE = frozenset({"status_changed", "changed_before_lost"})


class PrimaryReconciler(Gathering, Writing, Verifying):
    """One ADR-0068 pass; see the module docstring. Use :func:`reconcile`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        store: ReceiptStore,
        provider: ProcessProvider,
        clock: Clock,
        *,
        profile: str = "standalone",
        platform: str = sys.platform,
        budget: LockBudget | None = None,
        probe: Probe | None = None,
        dry_run: bool = False,
    ) -> None:
        self.grace = grace_seconds(profile)
        self.conn = conn
        self.repo = Repository(conn)
        self.store = store
        # The boot id once per pass; an absent stat confirmed before it counts (D-13).
        self.provider = PassProvider(provider)
        self.clock = clock
        self.platform = platform
        self.budget = budget if budget is not None else lock_budget_from_env()
        # The real inspection unless a port is given (read when the pass is made).
        self.probe: Probe = probe if probe is not None else inspect_handle
        self.dry_run = dry_run
        # Why the pass stopped writing (database_locked / database_read_only), once it has.
        self.stopped: str | None = None
        # One line each, for the operator (stderr, and the summary's `warnings`): D-16.
        self.warnings: list[str] = []

    # --- the pass ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        page, truncated = primary_candidates(self.conn)
        if truncated or not page:
            # spec 04 "Before any candidate": nothing else is read, probed, slept or written.
            summary = empty_summary(truncated, len(page))
        else:
            with lock_budget(self.conn, self.budget):
                summary = self._run(page)
        if self.dry_run:
            summary["dry_run"] = True
        if self.warnings:
            summary["warnings"] = list(dict.fromkeys(self.warnings))
        return summary

    def _run(self, page: list[PrimaryCandidate]) -> dict[str, Any]:
        self._check_root(page)
        todo = [PassCandidate(c) for c in page]
        waiting: list[PassCandidate] = []
        for cand in todo:
            self._guarded(cand, self._phase1)
            if cand.result is None:
                waiting.append(cand)
        if waiting and self.stopped is None:
            self._pay_grace(waiting)
        for cand in waiting:
            self._guarded(cand, self._phase2)
        results = [c.result for c in todo if c.result is not None]
        if self.stopped is not None:
            # The verifier's reads could wait on the same lock; the pass is blocked anyway.
            for cand in todo:
                if cand.result is not None and cand.result.outcome == "remaining":
                    self._revoke(cand, f"not_run:{self.stopped}", outcome="failed")
            return summarize(results, False)
        truncated = self._verify(todo, results, page)
        return summarize(results, truncated)

    def one(self, run_id: str) -> tuple[dict[str, Any] | None, bool]:
        """What a dry run would decide for the Run ``run_id`` alone: its summary entry (None
        when it is not a candidate on the page), and whether the page was truncated (then no
        candidate is decided, as in a whole pass). Only this candidate is read and probed,
        and the grace is paid only when it needs it; a retained one is proven again by the
        final verifier, as in a whole pass."""
        assert self.dry_run
        page, truncated = primary_candidates(self.conn)
        mine = [c for c in page if c.run_id == run_id]
        if truncated or not mine:
            return None, truncated
        with lock_budget(self.conn, self.budget):
            self._check_root(mine)
            [cand] = todo = [PassCandidate(c) for c in mine]
            self._guarded(cand, self._phase1)
            if cand.result is None:
                self._pay_grace(todo)
                self._guarded(cand, self._phase2)
            results = [c.result for c in todo if c.result is not None]
            if cand.result is not None and cand.result.outcome == "remaining":
                self._verify(todo, results, page)
        assert cand.result is not None
        return cand.result.as_dict(), False

    def _check_root(self, page: list[PrimaryCandidate]) -> None:
        """The receipt root is checked as a root, once, before anything is written (D-3c).

        One that exists but is not a real directory raises ReceiptRootError (a configuration
        error: `qlfsm` exits 2). A missing root is "no receipt" only while no candidate was ever
        launched: the launcher creates the root before its first commit, so a missing root
        beside a `starting`/`running` Attempt means the wrong root (or a lost one), and reading
        it as "no receipt" would turn a published completion into `lost`.
        """
        if self.store.check_root():
            # D-16: a shard another user may write is refused like such a root, before any
            # write; only the shards of these candidates' Attempts are looked at (no listing).
            runs = [cand.run_id for cand in page if cand.problem is None]
            try:
                ids = self.repo.attempt_ids_of(runs)  # one statement for the page
            except sqlite3.Error:  # a row that cannot be read: run by run, skipping the bad one
                ids = [i for run in runs for i in self._attempt_ids_alone(run)]
            self.store.check_shards(ids)
            return
        for cand in page:
            try:
                attempts = self.repo.attempts_of(cand.run_id)
            except Exception:  # a bad row is that candidate's failure, reported in phase 1
                continue
            for att in attempts:
                if att.status in ("starting", "running"):
                    raise ReceiptRootError(
                        f"receipt root {self.store.root!r} does not exist, yet Attempt {att.id} "
                        f"of Run {cand.run_id} is {att.status} (the launcher creates the root "
                        "before any spawn): point the receipt root at the launcher's receipt "
                        "directory, or restore it"
                    )

    def _attempt_ids_alone(self, run_id: str) -> list[str]:
        try:
            return [att.id for att in self.repo.attempts_of(run_id)]
        except Exception:  # a bad row is that candidate's failure, reported in phase 1
            return []

    def _guarded(self, cand: PassCandidate, step: Callable[[PassCandidate], None]) -> None:
        # spec 04 row 14: any exception while handling the candidate -> failed. Each write is
        # its own transaction, already rolled back by the time the exception reaches here.
        if cand.page.problem is not None:
            # A row the candidate query could not read (storage._text): this one fails alone.
            decided = _failed(cand, f"BadRow: {cand.page.problem}")
            cand.result = self._result(cand, decided.row, decided.outcome, decided.reason)
            return
        if self.stopped is not None:
            # The database cannot be written any more (locked past the lock budget, read-only,
            # or its filesystem full): no further write is attempted, nothing more waited for.
            row = PRIMARY_PASS_ROWS.exception
            cand.result = self._result(cand, row, "failed", f"{self.stopped}:not_attempted")
            return
        try:
            step(cand)
        except Exception as exc:
            blocker = write_blocker(exc)
            if blocker is not None:
                self.stopped = blocker
                exc = self._named(exc)
            if cand.result is not None:
                # Decided (and committed) before the error: keep the decision, name the error.
                cand.result.reason += f";error:{describe(exc)}"
                return
            decided = _failed(cand, describe(exc))
            cand.result = self._result(cand, decided.row, decided.outcome, decided.reason)
            if isinstance(exc, Conflict):
                self._decided_elsewhere(cand)  # the compare-and-set found the Run moved
            return
        if cand.result is not None and cand.result.reason in CHANGED_MEANWHILE:
            self._decided_elsewhere(cand)

    def _decided_elsewhere(self, cand: PassCandidate) -> None:
        """D-20: the Run moved between this pass's reads (row 2 `status_changed`, row 13
        `changed_before_lost`, or a row 14 compare-and-set Conflict). Read it once more: when
        it is no longer a candidate (it left `dispatching`/`running`: another start-up, an
        operator or QingLong itself decided it meanwhile, in its own atomic transaction),
        it is decided elsewhere and blocks nothing (counted `recovered`, reason
        `decided_elsewhere:<status now>`). Still a candidate, gone, or unreadable: the
        decision taken stands (it blocks)."""
        try:
            run = self.repo.get_run(cand.page.run_id)
        except Exception:
            return
        if run is None or run.status in CANDIDATE_STATUSES:
            return
        assert cand.result is not None
        cand.result.outcome = "recovered"
        cand.result.reason = f"decided_elsewhere:{run.status}"

    def _named(self, exc: Exception) -> Exception:
        """A lock or read-only error under its storage name (Busy, DatabaseReadOnly)."""
        path = getattr(self.conn, "path", "")
        if not path:
            return exc
        # A read that found the database locked waited the connection's busy timeout.
        return database_error(path, exc, waited_s=busy_wait_s(self.conn))


def predict(
    conn: sqlite3.Connection,
    store: ReceiptStore,
    provider: ProcessProvider,
    clock: Clock,
    run_id: str,
    *,
    profile: str = "standalone",
    platform: str = sys.platform,
    budget: LockBudget | None = None,
    probe: Probe | None = None,
) -> tuple[dict[str, Any] | None, bool]:
    """What a dry run decides now for the one candidate ``run_id`` (``qlfsm explain``): its
    summary entry or None, and whether the candidate page was truncated (see
    :meth:`PrimaryReconciler.one`). Nothing is written."""
    return PrimaryReconciler(
        conn,
        store,
        provider,
        clock,
        profile=profile,
        platform=platform,
        budget=budget,
        probe=probe,
        dry_run=True,
    ).one(run_id)


def _failed(cand: PassCandidate, error: str) -> PrimaryDecision:
    # spec 04 row 14, from wherever the candidate's core stands.
    cand.core = cand.core.fail(error)
    decided = cand.core.next()
    assert isinstance(decided, PrimaryDecision)
    return decided


def reconcile(
    conn: sqlite3.Connection,
    store: ReceiptStore,
    provider: ProcessProvider,
    clock: Clock,
    *,
    profile: str = "standalone",
    platform: str = sys.platform,
    budget: LockBudget | None = None,
    probe: Probe | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run one ADR-0068 pass and return spec 04's summary (see :class:`PrimaryReconciler`).

    ``budget``: the most the pass waits, in total, for other processes' write locks
    (default ``$QLFSM_LOCK_BUDGET_S``, else 5 s); then it stops writing and every candidate
    not yet decided fails with a reason naming the lock (docs/decisions.md "lock budget").
    ``dry_run``: every read, probe and the grace as usual, but nothing is written, moved or
    deleted; the summary says what each candidate would get (and gains ``"dry_run": true``).
    """
    return PrimaryReconciler(
        conn,
        store,
        provider,
        clock,
        profile=profile,
        platform=platform,
        budget=budget,
        probe=probe,
        dry_run=dry_run,
    ).run()
