"""Property-based: whatever mix of candidates and evidence, the ADR-0068 invariants hold.

Each example builds a fresh real SQLite file with up to 8 candidates, each with a random
Attempt status, process fate (alive, exited, zombie, PID reused, rebooted, provider down,
bad handle) and receipt (none, valid, invalid, published during the grace), then runs one pass
with the in-memory store, the fake process table and the fake clock.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from _primary_support import make_candidate, receipt
from hypothesis import given
from hypothesis import strategies as st

from reconciler.node import FakeClock, FakeProcessTable, MemoryReceiptStore, capture_handle
from reconciler.primary import reconcile_connection
from storage import Repository, connect

FATES = ("alive", "exited", "zombie", "reused", "bad_handle")
RECEIPTS = ("none", "valid", "invalid", "during_grace")

candidate = st.tuples(
    st.sampled_from(("claimed", "starting", "running")),
    st.sampled_from(FATES),
    st.sampled_from(RECEIPTS),
)


def fresh_db(template_db: Path) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="qlfsm-prop-"))
    path = folder / "ql.db"
    shutil.copyfile(template_db, path)
    return path


@given(st.lists(candidate, min_size=1, max_size=8), st.booleans(), st.booleans())
def test_no_candidate_is_ever_lost_without_trusted_negative_evidence_after_the_grace(
    template_db: Path, mix: list[tuple[str, str, str]], provider_down: bool, reboot: bool
) -> None:
    db = fresh_db(template_db)
    conn = connect(str(db))
    try:
        _check(conn, mix, provider_down, reboot)
    finally:
        conn.close()
        shutil.rmtree(db.parent, ignore_errors=True)


def _check(conn: Any, mix: list[tuple[str, str, str]], provider_down: bool, reboot: bool) -> None:
    repo = Repository(conn)
    table = FakeProcessTable()
    store = MemoryReceiptStore()
    late: list[str] = []
    for i, (attempt, fate, kind) in enumerate(mix):
        run_id, att_id = f"run-{i}", f"at-{i}"
        pid = table.spawn()
        handle = capture_handle(pid, table, platform="linux")
        if fate == "exited":
            table.reap(pid)
        elif fate == "zombie":
            table.exit(pid)
        elif fate == "reused":
            table.reuse(pid)
        elif fate == "bad_handle":
            handle = "ql3lp1.not-a-handle"
        make_candidate(
            repo,
            run_id,
            att_id,
            attempt=attempt,
            run="running" if attempt == "running" else "dispatching",
            handle=handle if attempt != "claimed" else None,
            pid=pid if attempt != "claimed" else None,
        )
        if kind == "valid" and attempt != "claimed":
            store.publish(receipt(run_id, att_id))
        elif kind == "invalid":
            store.put_raw(att_id, b'{"schemaVersion":1}')
        elif kind == "during_grace" and attempt != "claimed":
            late.append(run_id)
    if reboot:
        table.reboot()
    table.make_unavailable(provider_down)

    class PublishingClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            for run_id in late:
                store.publish(receipt(run_id, "at-" + run_id.split("-")[1]))

    clock = PublishingClock()
    summary = reconcile_connection(conn, store, table, clock, platform="linux")

    counts = [summary[k] for k in ("recovered", "remaining", "unresolved", "failed")]
    assert summary["scanned"] == sum(counts) == len(summary["candidates"]) == len(mix)
    assert summary["safe"] == (summary["unresolved"] == 0 and summary["failed"] == 0)
    assert len(clock.sleeps) <= 1
    for entry, (attempt, fate, kind) in zip(summary["candidates"], mix, strict=True):
        run = repo.get_run(entry["run_id"])
        assert run is not None
        events = [e.type for e in repo.events_of(run.id) if e.actor_id == "local-startup"]
        if run.status == "lost" and attempt != "claimed":
            # Row 13 only: trusted negative evidence, one grace, no receipt on either read.
            assert entry["row"] == "13" and clock.sleeps
            assert not provider_down and fate != "bad_handle"
            assert fate != "alive" or reboot
            assert kind == "none"  # a receipt on either read wins over the probe
        if run.status == "lost":
            assert events[-2:] == ["attempt.lost", "run.lost"]
        if provider_down and attempt != "claimed" and kind == "none":
            assert entry["outcome"] == "failed" or fate == "bad_handle"
        if kind == "invalid":
            assert entry["outcome"] == "unresolved" and entry["row"] == "6"
        late_read = kind == "during_grace" and entry["row"] == "13"
        if attempt != "claimed" and (kind == "valid" or late_read):
            assert run.status == "succeeded"
        if entry["outcome"] == "remaining":
            assert fate == "alive" and not reboot and not provider_down
