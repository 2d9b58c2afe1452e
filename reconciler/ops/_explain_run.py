"""`explain` as one operation (issue 28 item 5, built like ``resolve``): gather the run's path,
the decision a start-up pass would take for it now, what `/proc` says about its active Attempts
and the decision left to the operator, and return one frozen :class:`Explanation`. Reads only;
never prints (the command line renders it)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from typing import Any

from reconciler._errors import UsageError
from reconciler._escape import shell_word
from reconciler.ops._explain import ADR0068, Explanation, explain
from reconciler.ops._now import ACTIVE_RUN, decision_now, legacy_now
from reconciler.ops._process import process_view
from reconciler.ops._resolve import legal_targets, stop_hint

# The outcomes of spec 04 that leave a run for an operator (start-up BLOCKED on it).
_BLOCKING = frozenset({"unresolved", "failed"})


def explain_run(
    conn: sqlite3.Connection,
    db: str,
    run_id: str,
    *,
    receipt_root: str | None = None,
    profile: str | None = None,
    origins: str | None = None,
) -> Explanation:
    """The explanation of ``run_id`` in the database ``db`` open as ``conn``: its steps a
    streaming source read through ``conn`` (keep it open while they are iterated). For a legacy
    run still active, ADR-0448's row now with ``origins`` (default ``$QL3_SHADOW_ORIGINS``);
    for a runtime one, ADR-0068's row now from a dry run when ``receipt_root`` is given, and
    `/proc` with the operator's decision (D-23). UnknownRun when there is no such run;
    UsageError when the receipt root cannot be read."""
    found = explain(conn, run_id)
    run = found.run
    if run.status not in ACTIVE_RUN:
        return found
    if run.execution_owner == "legacy":
        # ADR-0448's row for this run now, with the origins `startup` would enable.
        from reconciler._shadow_entry import ORIGINS_ENV, parse_origins

        chosen = parse_origins(origins if origins is not None else os.environ.get(ORIGINS_ENV))
        return dataclasses.replace(found, now=legacy_now(conn, run, frozenset(chosen.enabled)))
    if run.execution_owner != "runtime":
        return found
    now = None if receipt_root is None else _primary_now(db, receipt_root, profile, run.id)
    return _with_decision(found, now, db)


def _with_decision(found: Explanation, now: dict[str, Any] | None, db: str) -> Explanation:
    """``found`` with the decision start-up would take now (``now``), what `/proc` says now
    about each active Attempt, and the decision to make: `resolve` with the targets fsm's
    lifecycle tables allow from where the run is (D-23). Reads only."""
    from fsm.qinglong import ATTEMPT_ACTIVE
    from reconciler.node import ProcProvider

    active = [a for a in found.attempts if a.status in ATTEMPT_ACTIVE]
    provider = ProcProvider()
    processes = [process_view(a, provider) for a in active]
    targets = legal_targets(found.run.status, [a.status for a in active])
    blocks = None if now is None or now.get("outcome") is None else now["outcome"] in _BLOCKING
    command = (
        f"qlfsm resolve --db {shell_word(db)} --run {shell_word(found.run.id)} "
        f"--to {'|'.join(targets)} --reason '…'"
        if targets
        else None
    )
    # How to stop the proven-live jobs: their process groups (the launcher starts each job in
    # its own group, spec 03 "Capture"), by the pgid the probe proved.
    live = [v["handle"]["pgid"] for v in processes if v["alive"] and v["handle"]]
    decide = {
        "blocks": blocks,
        "targets": targets,
        "command": command,
        "stop": stop_hint(live) if live else None,
    }
    return dataclasses.replace(found, now=now, processes=processes, decide=decide)


def _primary_now(db: str, root: str, profile: str | None, run_id: str) -> dict[str, Any]:
    """ADR-0068's row for this run now: what a dry run decides for this one candidate (only it
    is read and probed, the grace paid only when it needs it; retained, the final verifier
    proves it again). Checked and opened as a dry run of the pass is."""
    from reconciler._reconcile import (
        check_profile,
        check_receipt_root,
        default_profile,
        inspect_receipt_root,
        lock_budget_s,
        open_database,
    )
    from reconciler.node import FileReceiptStore, ProcProvider, ReceiptRootError, SystemClock
    from reconciler.primary import predict
    from storage import check_schema

    root = check_receipt_root(root)
    profile = check_profile(profile if profile is not None else default_profile())
    inspect_receipt_root(root)
    with contextlib.closing(open_database(db, read_only=True)) as conn:
        conn.execute("PRAGMA query_only = ON")  # nothing may be written
        check_schema(conn, path=db)
        try:
            entry, truncated = predict(
                conn,
                FileReceiptStore(root),
                ProcProvider(),
                SystemClock(),
                run_id,
                profile=profile,
                budget=lock_budget_s(),
            )
        except ReceiptRootError as exc:
            raise UsageError(f"{exc}; nothing was written") from exc
    if entry is None:
        why = (
            "the candidate page was truncated before it"
            if truncated
            else "not a start-up candidate (spec 04 selects runtime runs dispatching/running)"
        )
        return {"record": ADR0068, "row": None, "outcome": None, "reason": why}
    return decision_now(ADR0068, str(entry["row"]), entry["outcome"], entry["reason"])
