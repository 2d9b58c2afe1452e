"""ADR-0068 §5: the final verifier proves every retained candidate a second time."""

from __future__ import annotations

from fsm import ATTEMPT_ACTIVE, PrimaryDecision
from reconciler.node import Missing
from reconciler.primary._state import PassCandidate, PassState, probe_fields
from reconciler.primary._summary import CandidateResult, describe, fingerprint
from storage import PrimaryCandidate, primary_candidates, run_with_attempts


class Verifying(PassState):
    """The final verifier of :class:`reconciler.primary._pass.PrimaryReconciler`."""

    # --- final verifier (ADR-0068 §5) ---------------------------------------------------------

    def _verify(
        self,
        todo: list[PassCandidate],
        results: list[CandidateResult],
        first: list[PrimaryCandidate],
    ) -> bool:
        # spec 04 "Final verifier": the candidate query runs again (the page is not reused).
        page, truncated = primary_candidates(self.conn)
        by_id = {c.page.run_id: c for c in todo}
        retained = {c.page.run_id: c for c in todo if c.result and c.result.outcome == "remaining"}
        seen: set[str] = set()
        for now in page:
            seen.add(now.run_id)
            cand = by_id.get(now.run_id)
            if cand is None or cand.result is None:
                results.append(CandidateResult(now.run_id, None, "verifier", "unresolved", "new"))
            elif now.run_id in retained:
                self._verify_one(cand, now)
            elif cand.result.outcome == "recovered" and not self.dry_run:
                # It was terminalized or lost, yet it is a candidate again: someone moved it.
                # (A dry run wrote nothing: its recovered candidates are still on the page.)
                results.append(
                    CandidateResult(now.run_id, None, "verifier", "unresolved", "reappeared")
                )
        for run_id, cand in retained.items():
            if run_id not in seen and not truncated:
                self._revoke(cand, "vanished")
        return truncated

    def _verify_one(self, cand: PassCandidate, now: PrimaryCandidate) -> None:
        assert cand.fingerprint is not None and cand.attempt is not None
        att = cand.attempt
        try:
            read = self.store.read(att.id)
            unusable = self._root_problem(read, att)
            if unusable is not None:
                return self._revoke(cand, unusable)
            if not isinstance(read, Missing):
                return self._revoke(cand, "receipt_appeared")
            evidence = self.probe(att.executor_handle, self.provider, platform=self.platform)
            # The second probe is decided by the table as the first was (rows 9-13), on the
            # core as it asked for the probe: only the row that retained it proves it again.
            assert cand.before_probe is not None
            retained = cand.core.next()
            proof = cand.before_probe.observe("probe", **probe_fields(evidence, att)).next()
            if isinstance(proof, PrimaryDecision) and proof.outcome == "failed":
                return self._revoke(cand, proof.reason, outcome="failed")  # row 9
            assert isinstance(retained, PrimaryDecision)
            if not isinstance(proof, PrimaryDecision) or (proof.row, proof.state) != (
                retained.row,
                retained.state,
            ):
                return self._revoke(cand, f"process_{evidence.verdict}:{evidence.reason}")
            run, attempts, _ = run_with_attempts(self.conn, now.run_id)
            if (
                run is None
                or not attempts
                or (now.status, now.version) != (run.status, run.version)
                or fingerprint(run, attempts[-1]) != cand.fingerprint
                or sum(1 for a in attempts if a.status in ATTEMPT_ACTIVE) != 1
            ):
                return self._revoke(cand, "fingerprint_changed")
        except Exception as exc:
            assert cand.result is not None
            cand.result.outcome = "failed"
            cand.result.reason = f"verifier_error:{describe(exc)}"
        return None
