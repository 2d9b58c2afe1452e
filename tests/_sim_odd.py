"""Runtime Runs the harness's own launcher never leaves (tests/_sim.py): the rows QingLong's other
writers, another executor or an older or damaged node leave behind, each made once at set-up and
then decided by the REAL ADR-0068 pass like any other candidate (spec 04 rows 1, 3, 3b, 4, 4b,
7 under a `running` Run, 8, 10, 11).

Their Attempts are inserted as rows, without a lifecycle edge: the writer that would have made
them (a scheduler retry, another executor) is no actor of the harness, and firing its edges at
set-up would count as the search taking them (tests/_coverage_record.py listens to every edge).

The invariants (docs/orderings.md, "The invariants"): a row spec 04 holds is never written, by
any pass, in any ordering; a row it loses (3, 4b `claimed`, 7 under a `running` Run) only ever
goes to `lost` (Run and `claimed` Attempt together), and is `lost` once the world converged; a
row decided on the Run's read alone (1, 3, 3b, 4, 4b) has no receipt read and no process
probed for it, ever.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from _sim_node import T0, InvariantViolation

from reconciler.node import capture_handle
from storage import Actor, RunChange, in_transaction

if TYPE_CHECKING:
    from _sim import World

# kind -> (spec 04 row, its outcome, the Run's status, its Attempts as (status, executor type,
# handle, pid)). "handle" names a handle captured from a live process of the fake table; "pid"
# the same process's pid, "other" a pid that differs from the handle's (row 11).
Attempts = tuple[tuple[str, str, str | None, str | int | None], ...]
ODD_KINDS: dict[str, tuple[str, str, str, Attempts]] = {
    "no_attempt": ("3", "lost", "dispatching", ()),
    "nonlocal_claimed": ("4b", "lost", "dispatching", (("claimed", "container", None, None),)),
    "nonlocal_claimed_under_running": (
        "4b",
        "lost",
        "running",
        (("claimed", "container", None, None),),
    ),
    "claimed_under_running": ("7", "lost", "running", (("claimed", "local_process", None, None),)),
    "nonlocal_running": ("4b", "held", "running", (("running", "container", None, None),)),
    "two_active": (
        "1",
        "held",
        "dispatching",
        (("claimed", "local_process", None, None), ("claimed", "local_process", None, None)),
    ),
    "no_active": ("3b", "held", "dispatching", (("failed", "local_process", None, None),)),
    "latest_inactive": (
        "4",
        "held",
        "running",
        (("running", "local_process", "handle", "pid"), ("failed", "local_process", None, None)),
    ),
    "pid_invalid": ("8", "held", "running", (("running", "local_process", "handle", 0),)),
    "invalid_handle": (
        "10",
        "held",
        "running",
        (("running", "local_process", "ql3lp1:garbage", 4242),),
    ),
    "pid_mismatch": ("11", "held", "running", (("running", "local_process", "handle", "other"),)),
    # Held on the Run's read (row 4b) unless QingLong takes the Run away first (World.take_away):
    # deleted with its task, or handed to the legacy owner, between the pass's page and its read
    # of the Run (row 2, `run_gone` / `not_runtime_owned`, unresolved).
    "deleted_meanwhile": ("4b", "held", "running", (("running", "container", None, None),)),
    "handed_over_meanwhile": ("4b", "held", "running", (("running", "container", None, None),)),
}
# QingLong's API has made this Run, not yet queued for any node: no reconciler's candidate;
# only an operator's `qlfsm resolve --to cancelled` may end it (ADR-0001 `created -> cancelled`).
ODD_KINDS["created"] = ("-", "operator", "created", ())
# The kinds World.take_away may take, and how.
TAKEN_AWAY = {"deleted_meanwhile": "delete", "handed_over_meanwhile": "hand_over"}
# The rows another writer leaves (spec 04 rows 1 to 11), without the two kinds above that only
# an actor's step makes interesting and the Run no node has been handed yet.
FOREIGN_AND_DAMAGED = tuple(k for k in ODD_KINDS if k not in TAKEN_AWAY and k != "created")
# Decided on the Run's read alone (ADR-0068 §2 step 1): no receipt read, no probe.
READ_RUN_ROWS = frozenset({"1", "3", "3b", "4", "4b"})
EVIDENCE_LABELS = frozenset(
    {"first_receipt_read", "second_receipt_read", "verify_receipt_read", "probe", "verify_probe"}
)


@dataclass
class OddRun:
    run_id: str
    kind: str
    attempt_ids: list[str]
    handles: dict[str, str] = field(default_factory=dict)  # handle -> its Attempt's id
    initial: tuple[Any, ...] = ()
    taken: bool = False  # QingLong took it away (World.take_away); `initial` is what it left


class OddRuns:
    """The World's foreign and damaged runtime Runs."""

    def _odd(self: World, j: int, kind: str) -> OddRun:
        _, _, run_status, attempts = ODD_KINDS[kind]
        run_id = f"odd-{j}-{kind}"
        v = self.repo.create_run(run_id=run_id, at_ms=T0).version
        for trigger in ("queue", "dispatch") if run_status != "created" else ():
            v = self.repo.advance(
                run_id, v, [RunChange(trigger)], actor=Actor("system"), at_ms=T0
            ).version
        if run_status == "running":
            self.repo.advance(
                run_id,
                v,
                [RunChange("start", set={"started_at_ms": T0})],
                actor=Actor("system"),
                at_ms=T0,
            )
        ids: list[str] = []
        handles: dict[str, str] = {}
        for n, (status, executor, handle, pid) in enumerate(attempts, start=1):
            handle_text, pid_value = handle, pid
            if handle == "handle":
                # A real process of the table, so the probe meets a live identity.
                proc = self.table.spawn()
                handle_text = capture_handle(proc, self.table, platform="linux")
                pid_value = {"pid": proc, "other": proc + 1}.get(str(pid), pid)
            aid = f"{run_id}-att-{n}"
            self.conn.execute(
                'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
                "executor_handle, pid, callback_sequence, created_at_ms, started_at_ms, "
                "finished_at_ms, error_code) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
                (
                    aid,
                    run_id,
                    n,
                    status,
                    executor,
                    handle_text,
                    pid_value,
                    T0,
                    T0 if status != "claimed" else None,
                    T0 if status == "failed" else None,
                    "EXECUTOR_FAILED" if status == "failed" else None,
                ),
            )
            ids.append(aid)
            if handle_text is not None:
                handles[handle_text] = aid
        odd = OddRun(run_id, kind, ids, handles)
        odd.initial = _odd_state(self.conn, odd)
        return odd

    def odd_attempt_of_handle(self: World, handle_text: object) -> str | None:
        for odd in self.odd:
            if isinstance(handle_text, str) and handle_text in odd.handles:
                return odd.handles[handle_text]
        return None

    def take_away(self: World, j: int) -> None:
        """QingLong, not the harness's launcher, takes runtime Run ``j`` away: deletes it (its
        task was deleted: events, Attempts and Run in one transaction) or hands it to the legacy
        owner (one version, one event). From then on no pass may write what it left."""
        odd = self.odd[j]
        how = TAKEN_AWAY[odd.kind]

        def work(c: sqlite3.Connection) -> None:
            if how == "delete":
                for table in ("RunEvents", "RunAttempts"):
                    c.execute(f'DELETE FROM "{table}" WHERE run_id = ?', (odd.run_id,))
                c.execute('DELETE FROM "Runs" WHERE id = ?', (odd.run_id,))
                return
            v = c.execute('SELECT version FROM "Runs" WHERE id = ?', (odd.run_id,)).fetchone()[0]
            c.execute(
                "UPDATE \"Runs\" SET execution_owner = 'legacy', version = ?, event_sequence = ? "
                "WHERE id = ? AND version = ?",
                (v + 1, v + 1, odd.run_id, v),
            )
            c.execute(
                'INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, actor_type, '
                "actor_id, attempt_id, payload, created_at_ms) "
                "VALUES (?, ?, ?, 'run.handed_over', ?, 'system', NULL, NULL, '{}', ?)",
                (f"ev-{odd.run_id}-handed", odd.run_id, v + 1, f"hand:{odd.run_id}", T0),
            )

        in_transaction(self.conn, work)
        odd.taken = True
        odd.initial = _odd_state(self.conn, odd)

    def _check_odd(self: World) -> None:
        for odd in self.odd:
            row, outcome, _, attempts = ODD_KINDS[odd.kind]
            now = _odd_state(self.conn, odd)
            if odd.taken:
                # Whatever the ADR-0068 pass decided, it wrote nothing over what QingLong left
                # (row 2). A handed-over Run is the legacy owner's: the ADR-0448 pass may decide
                # it (spec 05), and only the worker that just stepped can have written it.
                w = self.worker
                if now != odd.initial and w is not None and w.kind == "shadow":
                    odd.initial = now
                elif now != odd.initial:
                    self.fail(
                        "spec-04-holds-write-nothing",
                        f"{odd.run_id} (taken away) was written: {odd.initial} -> {now}",
                    )
                continue
            (status, _), *atts = now
            if outcome == "held" and now != odd.initial:
                self.fail(
                    "spec-04-holds-write-nothing",
                    f"{odd.run_id} (row {row}) was written: {odd.initial} -> {now}",
                )
            if outcome == "operator" and now != odd.initial and now[0][0] != "cancelled":
                self.fail(
                    "spec-04-holds-write-nothing",
                    f"{odd.run_id} (not yet queued) became {now[0][0]}, not the operator's end",
                )
            if outcome == "lost" and now != odd.initial:
                active = [a for a, (s, *_) in zip(atts, attempts, strict=True) if s == "claimed"]
                if status != "lost" or any(a[0] != "lost" for a in active):
                    self.fail(
                        "spec-04-loses-only-to-lost",
                        f"{odd.run_id} (row {row}): {odd.initial} -> {now}",
                    )
            if row in READ_RUN_ROWS:
                touched = [
                    e.label
                    for e in self.trace
                    if e.attempt_id in odd.attempt_ids and e.label in EVIDENCE_LABELS
                ]
                if touched:
                    self.fail(
                        "read-run-rows-gather-nothing-more",
                        f"{odd.run_id} (row {row}) had {touched}",
                    )

    def _check_odd_settled(self: World) -> None:
        """After convergence: every row spec 04 loses is `lost` (a pass that reached it and
        wrote nothing would leave it a candidate for ever)."""
        for odd in self.odd:
            row, outcome, _, _ = ODD_KINDS[odd.kind]
            if odd.taken:
                continue
            status = _odd_state(self.conn, odd)[0][0]
            if outcome == "lost" and status != "lost":
                self.fail("convergence", f"{odd.run_id} (row {row}) is still {status}")


def _odd_state(conn: sqlite3.Connection, odd: OddRun) -> tuple[Any, ...]:
    run = conn.execute('SELECT status, version FROM "Runs" WHERE id = ?', (odd.run_id,)).fetchone()
    atts = conn.execute(
        'SELECT status, callback_sequence, error_code FROM "RunAttempts" WHERE run_id = ? '
        "ORDER BY attempt",
        (odd.run_id,),
    ).fetchall()
    if run is None:
        if not odd.taken:
            raise InvariantViolation(f"runs-never-vanish: {odd.run_id}")
        return ()
    return (tuple(run), *(tuple(a) for a in atts))
