"""Two things of the ADR-0068 pass the row tests leave open, through its public functions on
real SQLite files and a real receipt root:

- a Run that another writer decided between this pass's reads is decided elsewhere
  (docs/decisions.md D-20): the compare-and-set that found it moved (spec 04 row 14) and the
  candidate first read after it (row 2 `status_changed`) both count `recovered`, naming the
  status the Run has now, and a Run that moved but is still a candidate keeps blocking;
- `predict` (what `qlfsm explain` shows, spec 04's dry run of one candidate) runs with the
  profile, platform, lock budget and probe it was given, as the whole pass does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _primary_support import SYSTEM, T0, make_candidate, make_run

from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    FileReceiptStore,
    capture_handle,
    inspect_handle,
)
from reconciler.primary import predict, reconcile_connection
from storage import LockBudget, Repository, RunChange, connect


def entries(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["row"], c["outcome"], c["reason"]) for c in summary["candidates"]]


def claimed_runs(repo: Repository, n: int) -> None:
    """``n`` dispatching Runs whose one Attempt is `claimed` (spec 04 row 7: `lost` at once)."""
    for i in range(n):
        v = make_run(repo, f"run-{i}", "dispatching")
        repo.create_attempt(run_id=f"run-{i}", attempt_id=f"at-{i}", expected_version=v, at_ms=T0)


class RacingClock(FakeClock):
    """A clock whose first wall-time reading (taken right before the pass's first commit)
    lets another writer go first."""

    def __init__(self, race: Callable[[], object]) -> None:
        super().__init__(T0)
        self.race: Callable[[], object] | None = race

    def now_ms(self) -> int:
        race, self.race = self.race, None
        if race is not None:
            race()
        return super().now_ms()


def another_pass(db_path: Path, root: str) -> dict[str, Any]:
    """Another start-up's whole pass, on its own connection."""
    with contextlib.closing(connect(str(db_path))) as other:
        return reconcile_connection(
            other, FileReceiptStore(root), FakeProcessTable(), FakeClock(T0)
        )


def test_runs_another_writer_decided_between_the_reads_are_recovered_as_decided_elsewhere(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # D-20: the first commit meets a Conflict (row 14); the next two are read after the other
    # pass and show `status_changed` (row 2). None of them blocks: each is decided, elsewhere.
    claimed_runs(repo, 3)
    others: list[dict[str, Any]] = []
    clock = RacingClock(lambda: others.append(another_pass(db_path, store.root)))

    summary = reconcile_connection(conn, store, FakeProcessTable(), clock)

    assert others[0]["recovered"] == 3
    assert entries(summary) == [
        ("14", "recovered", "decided_elsewhere:lost"),
        ("2", "recovered", "decided_elsewhere:lost"),
        ("2", "recovered", "decided_elsewhere:lost"),
    ]
    assert summary["safe"] is True and summary["recovered"] == 3


def test_a_run_moved_meanwhile_to_another_candidate_status_still_blocks(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore
) -> None:
    # D-20: still `running` (a candidate), so not decided by anyone: the conflict stands.
    claimed_runs(repo, 1)

    def start_it() -> None:
        with contextlib.closing(connect(str(db_path))) as other:
            writer = Repository(other)
            run = writer.get_run("run-0")
            assert run is not None
            writer.advance("run-0", run.version, [RunChange("start")], actor=SYSTEM, at_ms=T0)

    summary = reconcile_connection(conn, store, FakeProcessTable(), RacingClock(start_it))

    [(row, outcome, reason)] = entries(summary)
    assert (row, outcome) == ("14", "failed")
    assert reason == (
        "error:Conflict: conflict: run run-0 is no longer at version 4 (now 5); "
        "re-read and decide again"
    )
    assert summary["safe"] is False


# --- predict: the dry run of one candidate (`qlfsm explain`) --------------------------------


@dataclass
class RecordingProbe:
    """The real probe, recording the platform it was asked on and the lock budget the pass's
    connection was charging its writes to at that moment."""

    conn: Any
    seen: list[tuple[str, Any]] = field(default_factory=list)

    def __call__(self, handle: str, provider: Any, *, platform: str) -> Any:
        self.seen.append((platform, getattr(self.conn, "lock_budget", None)))
        return inspect_handle(handle, provider, platform=platform)


def dead_candidates(repo: Repository, n: int) -> FakeProcessTable:
    table = FakeProcessTable()
    for i in range(n):
        pid = table.spawn()
        handle = capture_handle(pid, table, platform="linux")
        table.reap(pid)
        make_candidate(repo, f"run-{i}", f"at-{i}", handle=handle, pid=pid)
    return table


def test_explain_pays_the_grace_of_the_profile_it_was_given_for_the_one_candidate(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    # spec 04 "The grace": edge waits 50 ms, standalone 100 ms; only this candidate's grace.
    table = dead_candidates(repo, 2)
    clock = FakeClock(T0)

    entry, truncated = predict(conn, store, table, clock, "run-1", profile="edge", platform="linux")

    assert truncated is False and entry is not None
    assert (entry["run_id"], entry["row"], entry["outcome"]) == ("run-1", "13", "recovered")
    assert clock.sleeps == [0.05]


def test_explain_probes_on_the_platform_and_charges_the_lock_budget_it_was_given(
    repo: Repository, conn: Any, store: FileReceiptStore
) -> None:
    table = dead_candidates(repo, 1)
    probe = RecordingProbe(conn)
    budget = LockBudget(1.25)

    entry, _ = predict(
        conn, store, table, FakeClock(T0), "run-0", platform="darwin", budget=budget, probe=probe
    )

    # The same probe, platform and budget as the whole dry run on them (spec 04: no /proc on
    # that platform, so the process identity is unknown).
    assert probe.seen == [("darwin", budget)]
    whole = reconcile_connection(
        conn, store, table, FakeClock(T0), platform="darwin", probe=probe, dry_run=True
    )
    assert entry == whole["candidates"][0]
    assert getattr(conn, "lock_budget", "gone") is None  # only while the dry run ran
