"""ADR-0068: the receipt-first, process-identity-aware start-up reconciler (spec 04).

The pass does only I/O. Which row of spec 04 decides a candidate is
:class:`fsm.qinglong.PrimaryCore`'s answer (the table in ``fsm/qinglong/_primary_table.py``);
the pass gathers exactly the evidence the core asks for, feeds back what it saw, and commits
the decided edge's effect in ONE transaction in which the decision is taken again on the Run
and Attempts re-read inside it (the compare-and-set is in the UPDATE's WHERE, checked by row
count).

One pass over the bounded candidate page, serially in Run id order, in two phases so that the
publication grace is paid ONCE per pass (spec 04 "The grace"):

- phase 1 takes every candidate until the core decides it or asks for the grace (row 13: the
  probe said `not_running`); those are set aside with the monotonic time of their probe;
- one sleep, long enough that the LAST of those probes is a full grace old (so every one is);
- phase 2 observes the grace for each, reads its receipt again, re-checks it and commits.

Then the final verifier (ADR-0068 §5) queries the page again and proves every retained
candidate a second time. ``dry_run``: the same reads, probes and grace, and nothing written.

Ports are injected: the connection, a ReceiptStore, a ProcessProvider, a Clock and the probe.

The pass is functions over immutable records (``_state.py``): gather (the evidence loop and
the grace, ``_gather.py``) → decide (the core) → commit (``_writes.py``) → verify
(``_verify.py``) → summarize (``_summary.py``). Each step returns a new candidate record; the
ports and settings are one frozen :class:`PassContext`; the one mutable thing is the pass's
own :class:`PassStatus` (why it stopped writing, and its warnings), owned by :func:`pass_page`'s
caller.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

from fsm.qinglong import PRIMARY_PASS_ROWS, PrimaryCore, PrimaryDecision
from reconciler._profiles import grace_seconds
from reconciler._summary import (
    CandidateResult,
    before_any_candidate,
    describe,
    summarize,
)
from reconciler.node import (
    Clock,
    PassProvider,
    ProcessProvider,
    ReceiptRootError,
    ReceiptStore,
    inspect_handle,
)
from reconciler.primary._gather import drive, pay_grace, phase2
from reconciler.primary._state import (
    Candidate,
    Interrupted,
    PassContext,
    PassStatus,
    Probe,
    decided,
    revised,
    revoked,
)
from reconciler.primary._verify import PageQuery, verify
from reconciler.primary._writes import QUARANTINE_KEEP_MS as QUARANTINE_KEEP_MS
from storage import (
    AttemptRow,
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

Step = Callable[[PassContext, PassStatus, Candidate], Candidate]


class PrimaryReconciler:
    """One ADR-0068 pass; see the module docstring. Use :func:`reconcile_connection`.

    The ports and settings are fixed when it is made; ``stopped`` is why the pass stopped
    writing as it ran (database_locked / database_read_only / …, or None); its warnings (one
    line each, D-16) are in the summary's ``warnings``.
    """

    __slots__ = ("context", "status")

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
        self.context = PassContext(
            conn=conn,
            repo=Repository(conn),
            store=store,
            # The boot id once per pass; an absent stat confirmed before it counts (D-13).
            provider=PassProvider(provider),
            clock=clock,
            platform=platform,
            grace=grace_seconds(profile),
            budget=budget if budget is not None else lock_budget_from_env(),
            # The real inspection unless a port is given (read when the pass is made).
            probe=probe if probe is not None else inspect_handle,
            dry_run=dry_run,
        )
        self.status = PassStatus()

    @property
    def stopped(self) -> str | None:
        """Why the pass stopped writing, once it has."""
        return self.status.stopped

    def run(self) -> dict[str, Any]:
        page, truncated = primary_candidates(self.context.conn)
        summary = before_any_candidate(page, truncated)
        if summary is None:
            return self.run_page(page)
        return self._marked(summary)

    def run_page(
        self, page: list[PrimaryCandidate], query: PageQuery | None = None
    ) -> dict[str, Any]:
        """The whole pass on ``page`` (not empty), its verifier re-reading the page with
        ``query`` (default start-up's own query): `qlfsm drain` gives each of its pages its
        window (``storage.candidate_window``, docs/decisions.md D-26)."""
        ctx = self.context
        with lock_budget(ctx.conn, ctx.budget):
            summary = pass_page(ctx, self.status, page, query)
        return self._marked(summary)

    def _marked(self, summary: dict[str, Any]) -> dict[str, Any]:
        if self.context.dry_run:
            summary["dry_run"] = True
        if self.status.warnings:
            summary["warnings"] = list(dict.fromkeys(self.status.warnings))
        return summary


# --- the pass: gather → decide → commit → verify → summarize ---------------------------------


def pass_page(
    ctx: PassContext,
    status: PassStatus,
    page: list[PrimaryCandidate],
    query: PageQuery | None = None,
) -> dict[str, Any]:
    """One pass over a page of candidates, neither empty nor truncated: spec 04's summary.
    ``query`` reads the page again for the final verifier (default: start-up's query)."""
    todo = gathered(ctx, status, page)
    if status.stopped is not None:
        # The verifier's reads could wait on the same lock; the pass is blocked anyway.
        return summarize([_not_verified(c, status.stopped) for c in todo], False)
    results, truncated = verify(ctx, todo, query)
    return summarize(results, truncated)


def gathered(ctx: PassContext, status: PassStatus, page: list[PrimaryCandidate]) -> list[Candidate]:
    """Phase 1 on every candidate, the one grace for those set aside, then their phase 2:
    each decided (and committed), not yet verified."""
    check_root(ctx, page)
    todo = [guarded(ctx, status, Candidate(c, PrimaryCore(c.status)), drive) for c in page]
    waiting = [c for c in todo if c.result is None]
    if waiting and status.stopped is None:
        pay_grace(ctx, waiting)
    return [c if c.result is not None else guarded(ctx, status, c, phase2) for c in todo]


def _not_verified(cand: Candidate, stopped: str) -> CandidateResult:
    result = cand.result
    assert result is not None
    if result.outcome == "remaining":
        return revoked(result, f"not_run:{stopped}", outcome="failed")
    return result


def check_root(ctx: PassContext, page: list[PrimaryCandidate]) -> None:
    """The receipt root is checked as a root, once, before anything is written (D-3c).

    One that exists but is not a real directory raises ReceiptRootError (a configuration
    error: `qlfsm` exits 2). A missing root is "no receipt" only while no candidate was ever
    launched: the launcher creates the root before its first commit, so a missing root
    beside a `starting`/`running` Attempt means the wrong root (or a lost one), and reading
    it as "no receipt" would turn a published completion into `lost`.
    """
    store, repo = ctx.store, ctx.repo
    if store.check_root():
        # D-16: a shard another user may write is refused like such a root, before any
        # write; only the shards of these candidates' Attempts are looked at (no listing).
        runs = [cand.run_id for cand in page if cand.problem is None]
        try:
            ids = repo.attempt_ids_of(runs)  # one statement for the page
        except sqlite3.Error:  # a row that cannot be read: run by run, skipping the bad one
            ids = [att.id for run in runs for att in _attempts_alone(repo, run)]
        store.check_shards(ids)
        return
    for cand in page:
        for att in _attempts_alone(repo, cand.run_id):
            if att.status in ("starting", "running"):
                raise ReceiptRootError(
                    f"receipt root {store.root!r} does not exist, yet Attempt {att.id} "
                    f"of Run {cand.run_id} is {att.status} (the launcher creates the root "
                    "before any spawn): point the receipt root at the launcher's receipt "
                    "directory, or restore it"
                )


def _attempts_alone(repo: Repository, run_id: str) -> list[AttemptRow]:
    try:
        return repo.attempts_of(run_id)
    except Exception:  # a bad row is that candidate's failure, reported in phase 1
        return []


def guarded(ctx: PassContext, status: PassStatus, cand: Candidate, step: Step) -> Candidate:
    # spec 04 row 14: any exception while handling the candidate -> failed. Each write is
    # its own transaction, already rolled back by the time the exception reaches here.
    if cand.page.problem is not None:
        # A row the candidate query could not read (storage._text): this one fails alone.
        return _failed(cand, f"BadRow: {cand.page.problem}")
    if status.stopped is not None:
        # The database cannot be written any more (locked past the lock budget, read-only,
        # or its filesystem full): no further write is attempted, nothing more waited for.
        row = PRIMARY_PASS_ROWS.exception
        return decided(cand, row, "failed", f"{status.stopped}:not_attempted")
    try:
        cand = step(ctx, status, cand)
    except Exception as escaped:
        exc = escaped
        if isinstance(escaped, Interrupted):
            cand, exc = escaped.cand, escaped.error
        blocker = write_blocker(exc)
        if blocker is not None:
            status.stopped = blocker
            exc = _named(ctx.conn, exc)
        if cand.result is not None:
            # Decided (and committed) before the error: the decision stands, the error named.
            kept = cand.result
            reason = f"{kept.reason};error:{describe(exc)}"
            return cand._replace(result=revised(kept, kept.outcome, reason))
        cand = _failed(cand, describe(exc))
        if isinstance(exc, Conflict):
            return _decided_elsewhere(ctx, cand)  # the compare-and-set found the Run moved
        return cand
    if cand.result is not None and cand.result.reason in CHANGED_MEANWHILE:
        return _decided_elsewhere(ctx, cand)
    return cand


def _decided_elsewhere(ctx: PassContext, cand: Candidate) -> Candidate:
    """D-20: the Run moved between this pass's reads (row 2 `status_changed`, row 13
    `changed_before_lost`, or a row 14 compare-and-set Conflict). Read it once more: when
    it is no longer a candidate (it left `dispatching`/`running`: another start-up, an
    operator or QingLong itself decided it meanwhile, in its own atomic transaction),
    it is decided elsewhere and blocks nothing (counted `recovered`, reason
    `decided_elsewhere:<status now>`). Still a candidate, gone, or unreadable: the
    decision taken stands (it blocks)."""
    try:
        run = ctx.repo.get_run(cand.page.run_id)
    except Exception:
        return cand
    if run is None or run.status in CANDIDATE_STATUSES:
        return cand
    assert cand.result is not None
    elsewhere = revised(cand.result, "recovered", f"decided_elsewhere:{run.status}")
    return cand._replace(result=elsewhere)


def _named(conn: sqlite3.Connection, exc: Exception) -> Exception:
    """A lock or read-only error under its storage name (Busy, DatabaseReadOnly)."""
    path = getattr(conn, "path", "")
    if not path:
        return exc
    # A read that found the database locked waited the connection's busy timeout.
    return database_error(path, exc, waited_s=busy_wait_s(conn))


def _failed(cand: Candidate, error: str) -> Candidate:
    # spec 04 row 14, from wherever the candidate's core stands.
    core = cand.core.fail(error)
    decision = core.next()
    assert isinstance(decision, PrimaryDecision)
    return decided(cand._replace(core=core), decision.row, decision.outcome, decision.reason)


class PredictSettings(TypedDict, total=False):
    """The settings of :class:`PrimaryReconciler` (defaults there) that :func:`predict` takes
    too: ``profile``, ``platform``, ``budget`` and ``probe``."""

    profile: str
    platform: str
    budget: LockBudget | None
    probe: Probe | None


class PassSettings(PredictSettings, total=False):
    """Every setting of :class:`PrimaryReconciler` besides its ports."""

    dry_run: bool


def predict(
    conn: sqlite3.Connection,
    store: ReceiptStore,
    provider: ProcessProvider,
    clock: Clock,
    run_id: str,
    **settings: Unpack[PredictSettings],
) -> tuple[dict[str, Any] | None, bool]:
    """What a dry run decides now for the one candidate ``run_id`` (``qlfsm explain``): its
    summary entry (None when it is not a candidate on the page), and whether the page was
    truncated (then no candidate is decided, as in a whole pass). Only this candidate is read
    and probed, and the grace is paid only when it needs it; a retained one is proven again
    by the final verifier, as in a whole pass. Nothing is written."""
    pass_ = PrimaryReconciler(conn, store, provider, clock, dry_run=True, **settings)
    ctx = pass_.context
    page, truncated = primary_candidates(ctx.conn)
    mine = [c for c in page if c.run_id == run_id]
    if truncated or not mine:
        return None, truncated
    with lock_budget(ctx.conn, ctx.budget):
        # A single candidate: it waits for the grace only if phase 1 set it aside.
        [cand] = gathered(ctx, pass_.status, mine)
        result = cand.result
        assert result is not None
        if result.outcome == "remaining":
            [result, *_] = verify(ctx, [cand])[0]
    return result.as_dict(), False


def reconcile_connection(
    conn: sqlite3.Connection,
    store: ReceiptStore,
    provider: ProcessProvider,
    clock: Clock,
    **settings: Unpack[PassSettings],
) -> dict[str, Any]:
    """Run one ADR-0068 pass and return spec 04's summary (see :class:`PrimaryReconciler`).

    ``budget``: the most the pass waits, in total, for other processes' write locks
    (default ``$QLFSM_LOCK_BUDGET_S``, else 5 s); then it stops writing and every candidate
    not yet decided fails with a reason naming the lock (docs/decisions.md "lock budget").
    ``dry_run``: every read, probe and the grace as usual, but nothing is written, moved or
    deleted; the summary says what each candidate would get (and gains ``"dry_run": true``).
    """
    return PrimaryReconciler(conn, store, provider, clock, **settings).run()
