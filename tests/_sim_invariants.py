"""The invariants of the orderings suite (docs/orderings.md), checked by ``World.check`` after
every step and on every summary and receipt delete (tests/_sim.py).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from _sim_node import (
    GRACE_S,
    InvariantViolation,
)

from fsm.qinglong import ATTEMPT_TERMINAL, RUN_TERMINAL
from reconciler.ops._resolve import OPERATOR_ERROR_CODE

if TYPE_CHECKING:
    pass


class Invariants:
    """The World's checks: a violation raises :class:`InvariantViolation` naming it."""

    # --- invariants -----------------------------------------------------------------------------

    def fail(self, invariant: str, detail: str) -> None:
        raise InvariantViolation(f"{invariant}: {detail}")

    def check(self) -> None:
        """Every invariant of docs/orderings.md that is a property of one moment."""
        if self.violations:
            self.fail("recorded", "; ".join(self.violations))
        c = self.conn
        runs = {r["id"]: r for r in c.execute('SELECT * FROM "Runs"')}
        atts: dict[str, list[sqlite3.Row]] = {}
        for a in c.execute('SELECT * FROM "RunAttempts" ORDER BY run_id, attempt'):
            atts.setdefault(a["run_id"], []).append(a)
        seqs: dict[str, list[int]] = {}
        for e in c.execute('SELECT run_id, sequence FROM "RunEvents" ORDER BY run_id, sequence'):
            seqs.setdefault(e[0], []).append(e[1])
        for rid, r in runs.items():
            got = seqs.get(rid, [])
            if not (r["version"] == r["event_sequence"] == len(got)):
                self.fail(
                    "version-equals-events",
                    f"{rid} version {r['version']} seq {r['event_sequence']} events {len(got)}",
                )
            if got != list(range(1, len(got) + 1)):
                self.fail("contiguous-sequences", f"{rid} has {got}")
            state = (r["status"], r["version"])
            if rid in self._seen_runs and self._seen_runs[rid] != state:
                self.fail("terminals-immutable", f"run {rid} {self._seen_runs[rid]} -> {state}")
            if r["status"] in RUN_TERMINAL:
                self._seen_runs[rid] = state
        newly: list[sqlite3.Row] = []
        for rows in atts.values():
            for a in rows:
                key = (a["status"], a["callback_sequence"], a["exit_code"], a["finished_at_ms"])
                old = self._seen_terminal.get(a["id"])
                if old is not None and old != key:
                    self.fail("terminals-immutable", f"attempt {a['id']} {old} -> {key}")
                if a["status"] in ATTEMPT_TERMINAL and old is None:
                    self._seen_terminal[a["id"]] = key
                    newly.append(a)
        for s in self.slots:
            r = runs[s.run_id]
            rows = atts.get(s.run_id, [])
            a = rows[-1] if rows else None
            a_final = a is not None and a["status"] in ATTEMPT_TERMINAL
            r_final = r["status"] in RUN_TERMINAL or r["status"] == "lost"
            if a_final != r_final:
                self.fail(
                    "attempt-terminal-iff-run-moved",
                    f"{s.run_id} run {r['status']} attempt {a['status'] if a else None}",
                )
            if (
                a is not None
                and a["status"] == "lost"
                and a["error_code"] != OPERATOR_ERROR_CODE
                and self.alive(s)
            ):
                # An operator's `resolve --to lost` is his decision, not a recovery: unforced
                # it refuses only a process PROVEN running (a /proc outage, or a wrapper whose
                # handle is not stored yet, proves nothing); its output names what still runs.
                self.fail("never-lost-while-alive", f"{s.attempt_id} is lost, its process lives")
        for a in newly:
            self._check_evidence(a)
            self._check_same_transaction(a)
        self._check_order()

    def _check_same_transaction(self, a: sqlite3.Row) -> None:
        """Runtime: the Attempt's terminal event is followed directly by its Run's, with the
        same time: one advance wrote both (an interleaved writer would sit in between)."""
        if not any(s.attempt_id == a["id"] for s in self.slots):
            return
        events = self.conn.execute(
            'SELECT sequence, type, attempt_id, created_at_ms FROM "RunEvents" '
            "WHERE run_id = ? ORDER BY sequence",
            (a["run_id"],),
        ).fetchall()
        mine = [e for e in events if e[1] == f"attempt.{a['status']}" and e[2] == a["id"]]
        if not mine:
            self.fail("attempt-terminal-iff-run-moved", f"{a['id']} has no terminal event")
        seq, _, _, at = mine[-1]
        nxt = [e for e in events if e[0] == seq + 1]
        if not nxt or not str(nxt[0][1]).startswith("run.") or nxt[0][3] != at:
            self.fail(
                "attempt-terminal-iff-run-moved",
                f"{a['id']}: the Run's edge is not the next event of the same advance",
            )

    def _check_evidence(self, a: sqlite3.Row) -> None:
        """A runtime Attempt that just became terminal: did the pass that wrote it hold the
        evidence spec 04 requires, in the required order?"""
        aid = a["id"]
        if not any(s.attempt_id == aid for s in self.slots):
            return
        code = a["error_code"]
        if code and str(code).startswith("LAUNCH_"):
            return  # the launcher's own failure path, not a recovery
        if code == OPERATOR_ERROR_CODE:
            return  # an operator's audited decision (`qlfsm resolve`), not a recovery
        w = self.worker
        number = w.number if w is not None else self.workers
        mine = [e for e in self.trace if e.pass_no == number and e.attempt_id in (aid, None)]
        if code == "RECOVERY_UNSTARTED_CLAIM":
            if not any(e.label == "first_receipt_read" and e.result == "missing" for e in mine):
                self.fail("terminal-needs-evidence", f"{aid} lost as unstarted without a read")
            return
        if code == "RECOVERY_PROCESS_NOT_RUNNING":
            probe = next((e for e in mine if e.label == "probe" and e.attempt_id == aid), None)
            if probe is None or probe.result != "not_running":
                self.fail("terminal-needs-evidence", f"{aid} lost without a not_running probe")
            assert probe is not None
            after = mine[mine.index(probe) + 1 :]
            grace = next((e for e in after if e.label == "grace"), None)
            reread = next(
                (e for e in after if e.label == "second_receipt_read" and e.attempt_id == aid),
                None,
            )
            if grace is None or reread is None or reread.mono - probe.mono < GRACE_S - 1e-9:
                self.fail(
                    "terminal-needs-evidence",
                    f"{aid} lost without the grace and the second receipt read",
                )
            assert reread is not None
            if reread.result != "missing":
                self.fail(
                    "terminal-needs-evidence",
                    f"{aid} lost although the re-read found {reread.result}",
                )
            return
        if not any(
            e.label.endswith("receipt_read") and e.attempt_id == aid and e.result == "found"
            for e in mine
        ):
            self.fail("terminal-needs-evidence", f"{aid} became {a['status']} without a receipt")
        # spec 04 "Terminal mapping": a requested cancel wins over the exit code.
        run = self.conn.execute(
            'SELECT status, cancel_requested_at_ms, cancel_reason FROM "Runs" WHERE id = ?',
            (a["run_id"],),
        ).fetchone()
        if run[1] is not None:
            want = "timed_out" if run[2] == "timeout" else "cancelled"
        else:
            want = "succeeded" if a["exit_code"] == 0 else "failed"
        if (a["status"], run[0]) != (want, want):
            self.fail("terminal-mapping", f"{aid}: {a['status']}/{run[0]}, spec 04 says {want}")

    def _check_order(self) -> None:
        """spec 04: receipt, then process identity, per candidate and pass (never swapped)."""
        read: set[tuple[int, str | None]] = set()
        for e in self.trace:
            if e.label == "first_receipt_read":
                read.add((e.pass_no, e.attempt_id))
            elif e.label == "probe" and (e.pass_no, e.attempt_id) not in read:
                self.fail("evidence-order", f"{e.attempt_id} probed before its receipt was read")

    def _check_delete(self, attempt_id: str | None) -> None:
        row = self.conn.execute(
            'SELECT status FROM "RunAttempts" WHERE id = ?', (attempt_id,)
        ).fetchone()
        if row is None or row[0] not in ATTEMPT_TERMINAL:
            self.fail(
                "delete-after-commit",
                f"receipt of {attempt_id} deleted while it is {row[0] if row else None}",
            )

    def _check_summary(self, summary: dict[str, Any]) -> None:
        self.summaries.append(summary)
        counts = sum(summary[k] for k in ("recovered", "remaining", "unresolved", "failed"))
        if not summary["truncated"] and summary["scanned"] != counts:
            self.fail("summary-conservation", str(summary))
        if not summary["safe"]:
            return
        for entry in summary["candidates"]:
            if entry["outcome"] != "remaining":
                continue
            slot = next(s for s in self.slots if s.run_id == entry["run_id"])
            if not self.alive(slot):
                self.fail(
                    "safe-means-retained-alive",
                    f"{slot.run_id} retained in a safe pass, its process is gone",
                )
