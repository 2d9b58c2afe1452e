"""`qlfsm resolve --db PATH --run ID --to STATE --reason TEXT [--force] [--operator NAME]
[--json]` (spec 06): an operator's audited decision, along legal ADR-0001 edges only.

The decision itself is ``reconciler.ops._resolve``. Exit 0 when it is committed; 2 when it is
refused (an edge the tables forbid, a terminal run, a process proven still running without
--force, an unknown run, a bad reason) — nothing is written then; 1 when the database is
unusable or the run moved meanwhile (nothing written either: run it again); 75 when another
process held the database past the lock budget (D-20: nothing written, try again).
"""

from __future__ import annotations

import contextlib
from typing import Any

from reconciler._escape import clean, shell_word
from reconciler.cli._exit import UsageError
from reconciler.cli._util import operator_login, parser, print_result, unknown_run


def resolve_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm resolve",
        "An operator's audited decision for a run that blocks start-up: its active Attempt(s) "
        "and the Run move to lost, failed or cancelled along legal ADR-0001 edges, in one "
        "transaction, with events whose actor is `user:operator` and whose payload holds the "
        "reason. Refuses a terminal run, an edge the tables forbid, and a process proven still "
        "running (unless --force). The reason is stored: never put a secret in it.",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--run", required=True, metavar="ID", help="the run to decide")
    p.add_argument(
        "--to",
        required=True,
        metavar="STATE",
        help="lost, failed or cancelled (as the tables allow)",
    )
    p.add_argument(
        "--reason", required=True, help="why, in a few words (kept in the events; no secrets)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="decide even though the process is proven still running (recorded in the event)",
    )
    p.add_argument(
        "--operator",
        metavar="NAME",
        help="who decides (default: $SUDO_USER, $USER or $LOGNAME); the actor id is operator:NAME",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="probe and decide the same way, print the edges and events it would write, and "
        "write nothing (the database is opened read-only)",
    )
    p.add_argument("--json", action="store_true", help="print the decision as one JSON object")
    args = p.parse_args(argv)
    from reconciler.ops import InvalidReason, check_reason

    try:
        reason = check_reason(args.reason)
    except InvalidReason as exc:
        raise UsageError(str(exc)) from exc
    from reconciler._reconcile import lock_budget_s, open_database
    from reconciler.node import ProcProvider, SystemClock
    from reconciler.ops import ResolveRefused, UnknownRun, operator_actor, resolve
    from storage import check_schema, lock_budget

    login = operator_login(args.operator)
    budget = lock_budget_s()  # $QLFSM_LOCK_BUDGET_S: a bad value is exit 2 before anything
    with contextlib.closing(open_database(args.db, read_only=args.dry_run)) as conn:
        if args.dry_run:  # SQLite itself refuses any write on this connection
            conn.execute("PRAGMA query_only = ON")
        check_schema(conn, path=args.db)
        try:
            # D-20: its one write waits at most the lock budget; past it Busy, exit 75.
            with lock_budget(conn, budget):
                done = resolve(
                    conn, args.run, args.to, reason, force=args.force, provider=ProcProvider(),
                    clock=SystemClock(), actor=operator_actor(login), dry_run=args.dry_run,
                )  # fmt: skip
        except UnknownRun as exc:
            raise unknown_run(args.db, args.run) from exc
        except ResolveRefused as exc:
            raise UsageError(f"resolve refused: {exc}; nothing was written") from exc
    data = done.as_dict()
    print_result(args.json, data, lambda: "\n".join(render(data, args.db, args.run)))
    return 0


def render(data: dict[str, Any], db: str, run: str) -> list[str]:
    """The decision in plain lines: what moved (or would), who and why, what stays running."""
    from reconciler.ops import iso_time

    moved = ", ".join(
        f"attempt {clean(a['id'])} {a['from']} -> {a['to']}" for a in data["attempts"]
    )
    head = "would resolve" if data["dry_run"] else "resolved"
    lines = [
        f"{head}: run {clean(data['run_id'])} {data['run']['from']} -> {data['run']['to']}"
        + (f"; {moved}" if moved else "")
        + (" (FORCED: the process was proven running)" if data["force"] else "")
    ]
    if data["dry_run"]:
        lines.append("dry run: nothing was written; it would write, in one transaction:")
        lines.extend(
            f"    {w['aggregate']} {clean(w['id'])}: {w['from']} -> {w['to']}, event "
            f"{w['event']} (dedupe key {clean(w['dedupe_key'])})"
            for w in data["writes"]
        )
        lines.append(
            f"    as {data['actor']['type']}:{clean(data['actor']['id'])}, reason: "
            f"{clean(data['reason'])}; the run would be at version {data['version']}"
        )
    else:
        lines.append(
            f"recorded as {data['actor']['type']}:{clean(data['actor']['id'])} in "
            f"{len(data['events'])} event(s), reason: {clean(data['reason'])}"
        )
    for live in data["still_running"]:
        # D-23: a forced decision is a record, not a kill: say so, and how to stop the group.
        lines.append(
            f"attempt {clean(live['attempt_id'])}: its process (pid {live['pid']}, process group "
            f"{live['pgid']}) is still running: qlfsm did not stop it; stop it with "
            f"`kill -TERM -- -{live['pgid']}`"
        )
    for j in [] if data["dry_run"] else data["journal"]:
        if j["state"] == "quarantined":
            purge = iso_time(j["purge_after_ms"]) if j["purge_after_ms"] is not None else "?"
            lines.append(
                f"the quarantined receipt stays at {clean(j['quarantine_ref'])} under the receipt "
                "root; its journal row no longer blocks start-up, and `qlfsm sweep` removes both "
                f"after {purge}"
            )
        else:
            lines.append(
                f"the receipt journal row of attempt {clean(j['attempt_id'])} ({j['state']}) is "
                "settled by the next `qlfsm sweep` (or `qlfsm startup`)"
            )
    # D-14: the id and path as shell words (`$'...'` when unprintable), never a line break.
    lines.append(f"see it: qlfsm explain --db {shell_word(db)} --run {shell_word(run)}")
    return lines
