"""ADR-0068 §5: the final verifier proves every retained candidate a second time.

It returns the pass's results anew: a retained candidate it cannot prove gets a new, revoked
result; nothing decided earlier is changed in place.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from fsm.qinglong import PrimaryDecision
from reconciler._summary import CandidateResult, describe
from reconciler.node import Missing
from reconciler.primary._state import (
    Candidate,
    PassContext,
    probe_fields,
    revised,
    revoked,
    root_problem,
    same_answer,
    unchanged,
)
from storage import PrimaryCandidate, primary_candidates, run_with_attempts

# Reads a page of candidates again (the final verifier): candidates and "more exist".
PageQuery = Callable[[sqlite3.Connection], tuple[list[PrimaryCandidate], bool]]


def verify(
    ctx: PassContext, todo: list[Candidate], query: PageQuery | None = None
) -> tuple[list[CandidateResult], bool]:
    """Every candidate's result as the verifier leaves it (in ``todo``'s order, then what it
    found besides), and whether its page was truncated. ``query``: the page's own query
    (default start-up's; `qlfsm drain` gives a page its window, docs/decisions.md D-26)."""
    # spec 04 "Final verifier": the candidate query runs again (the page is not reused).
    page, truncated = (primary_candidates if query is None else query)(ctx.conn)
    by_id = {c.page.run_id: c for c in todo}
    retained = {c.page.run_id: c for c in todo if c.result and c.result.outcome == "remaining"}
    proven: dict[str, CandidateResult] = {}
    found: list[CandidateResult] = []
    for now in page:
        cand = by_id.get(now.run_id)
        if cand is None or cand.result is None:
            found.append(CandidateResult(now.run_id, None, "verifier", "unresolved", "new"))
        elif now.run_id in retained:
            proven[now.run_id] = verify_one(ctx, cand, now)
        elif cand.result.outcome == "recovered" and not ctx.dry_run:
            # It was terminalized or lost, yet it is a candidate again: someone moved it.
            # (A dry run wrote nothing: its recovered candidates are still on the page.)
            found.append(CandidateResult(now.run_id, None, "verifier", "unresolved", "reappeared"))
    seen = {now.run_id for now in page}
    for run_id, cand in retained.items():
        if run_id not in seen and not truncated:
            assert cand.result is not None
            proven[run_id] = revoked(cand.result, "vanished")
    kept = [c.result for c in todo if c.result is not None]
    return [proven.get(r.run_id, r) for r in kept] + found, truncated


def verify_one(ctx: PassContext, cand: Candidate, now: PrimaryCandidate) -> CandidateResult:
    """The retained candidate's result: as it was when proven again, else revoked."""
    result, att = cand.result, cand.attempt
    assert result is not None and cand.fingerprint is not None and att is not None
    try:
        read = ctx.store.read(att.id)
        unusable = root_problem(ctx.store, read, att)
        if unusable is not None:
            return revoked(result, unusable)
        if not isinstance(read, Missing):
            return revoked(result, "receipt_appeared")
        evidence = ctx.probe(att.executor_handle, ctx.provider, platform=ctx.platform)
        # The second probe is decided by the table as the first was (rows 9-13), on the
        # core as it asked for the probe: only the row that retained it proves it again.
        assert cand.before_probe is not None
        retained = cand.core.next()
        proof = cand.before_probe.observe("probe", **probe_fields(evidence, att)).next()
        if isinstance(proof, PrimaryDecision) and proof.outcome == "failed":
            return revoked(result, proof.reason, outcome="failed")  # row 9
        assert isinstance(retained, PrimaryDecision)
        if not same_answer(proof, retained):
            return revoked(result, f"process_{evidence.verdict}:{evidence.reason}")
        run, attempts, _ = run_with_attempts(ctx.conn, now.run_id)
        if (
            run is None
            or (now.status, now.version) != (run.status, run.version)
            or not unchanged(run, attempts, cand.fingerprint)
        ):
            return revoked(result, "fingerprint_changed")
    except Exception as exc:
        return revised(result, "failed", f"verifier_error:{describe(exc)}")
    return result
