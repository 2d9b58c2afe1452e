"""`qlfsm db init` and `qlfsm inspect` (spec 06)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
from typing import Any

from fsm.qinglong import RUN_STATES
from reconciler._escape import clean, shell_word
from reconciler.cli._exit import UsageError
from reconciler.cli._text import table
from reconciler.cli._util import parser, print_json, print_result


def db_command(argv: list[str]) -> int:
    p = parser("qlfsm db", "Create the QingLong 3.0 schema in a new file, or check/upgrade one.")
    sub = p.add_subparsers(dest="action")
    init = sub.add_parser("init", help="create or upgrade the schema (idempotent)")
    init.add_argument("--db", required=True, help="path of the SQLite file")
    init.add_argument("--debug", action="store_true", help="show tracebacks")
    init.add_argument("--json", action="store_true", help="print one JSON object")
    init.add_argument(
        "--force",
        action="store_true",
        help="add the QingLong 3.0 tables even to a file that holds other tables and none of "
        "QingLong's (refused without it)",
    )
    args = p.parse_args(argv)
    if args.action != "init":
        raise UsageError("qlfsm db: say what to do: `qlfsm db init --db PATH`")
    from reconciler._reconcile import lock_budget_s
    from storage import connect, init_schema, lock_budget

    lock = lock_budget_s()  # $QLFSM_LOCK_BUDGET_S: a bad value is exit 2 before anything
    existed = os.path.exists(args.db)
    parent = os.path.dirname(os.path.abspath(args.db))
    if not os.path.isdir(parent):
        raise UsageError(f"directory {parent!r} does not exist; create it first")
    # connect() refuses a device, FIFO or directory before SQLite opens it (no stray
    # `-journal` beside /dev/null); a locked file waits at most the lock budget.
    with contextlib.closing(connect(args.db, create=True)) as conn, lock_budget(conn, lock):
        applied = init_schema(conn, path=args.db, force=args.force)
    done = f"applied {', '.join(applied)}" if applied else "schema up to date, nothing to do"
    data = {"db": args.db, "created": not existed, "applied": applied}
    print_result(args.json, data, lambda: f"{clean(args.db)}: {done}")
    return 0


# The Run statuses (spec 01), for --status: the table's own (fsm loads only its lifecycle tables
# for this name, not `transitions`).
RUN_STATUSES = RUN_STATES


def inspect_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm inspect",
        "Runs, attempts and events of a QingLong 3.0 database (read-only). Runs are listed "
        "in run id order, a page at a time: when more follow, the output says so and names the "
        "--after to pass for the next page. With --run, the run's events are paged the same "
        "way (--limit events after the sequence --after).",
    )
    p.add_argument("--db", required=True, help="path of the SQLite file")
    p.add_argument("--run", help="show one run in full")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--limit",
        type=int,
        default=200,
        help="at most this many runs, or with --run events (default 200)",
    )
    p.add_argument("--status", choices=RUN_STATUSES, help="only runs in this status")
    p.add_argument(
        "--after",
        metavar="ID",
        help="the page after this run (the last one of the previous page); with --run, after "
        "this event sequence",
    )
    args = p.parse_args(argv)
    if args.limit < 1:
        raise UsageError(f"qlfsm inspect: --limit must be at least 1, not {args.limit}")
    if args.run and args.status:
        raise UsageError("qlfsm inspect: --run shows one run; --status filters the list")
    after_sequence = 0
    if args.run and args.after is not None:
        # D-30: with --run, --after is an event sequence (keyset on (run_id, sequence)).
        try:
            after_sequence = int(args.after)
        except ValueError:
            after_sequence = -1
        if after_sequence < 0:
            raise UsageError(
                f"qlfsm inspect: --after {args.after!r} with --run is an event sequence: pass "
                "the last sequence of the previous page (0 or more)"
            )
    from storage import (
        Repository,
        busy_wait_s,
        check_schema,
        connect,
        database_error,
        run_position,
        runs_page,
    )

    truncated = False
    with contextlib.closing(connect(args.db)) as conn:
        try:
            check_schema(conn, path=args.db)
            repo = Repository(conn)
            if args.run:
                run = repo.get_run(args.run)
                if run is None:
                    raise UsageError(
                        f"run {args.run!r} is not in {args.db}; list runs with `qlfsm inspect`"
                    )
                runs = [run]
            else:
                # --after is a keyset cursor: the last Run id of the previous page (D-27).
                if args.after is not None and run_position(conn, args.after) is None:
                    raise UsageError(
                        f"qlfsm inspect: --after {args.after!r} is not a run in {args.db}; pass "
                        "the last run id of the previous page"
                    )
                runs, truncated = runs_page(
                    conn, limit=args.limit, after=args.after, status=args.status
                )
            out: list[dict[str, Any]] = []
            for run in runs:
                item: dict[str, Any] = {"run": run._asdict(), "attempts": [], "events": []}
                if args.run:
                    item["attempts"] = [a._asdict() for a in repo.attempts_of(run.id)]
                    # One keyset page of events, one more read to know whether more follow.
                    chunk = repo.events_page(run.id, after=after_sequence, limit=args.limit + 1)
                    truncated = len(chunk) > args.limit
                    item["events"] = [e._asdict() for e in chunk[: args.limit]]
                elif args.json:
                    item["attempts"] = [a._asdict() for a in repo.attempts_of(run.id)]
                    item["events"] = [e._asdict() for e in repo.events_of(run.id)]
                out.append(item)
        except sqlite3.DatabaseError as exc:
            # Named for what it is (locked, corrupt, ...): one line, exit 1 (spec 06).
            raise database_error(args.db, exc, waited_s=busy_wait_s(conn)) from exc
    next_after = out[-1]["run"]["id"] if truncated and out else None
    if args.run and truncated:
        next_after = str(out[0]["events"][-1]["sequence"])
    if args.json:
        print_json({"runs": out, "truncated": truncated, "next_after": next_after})
        return 0
    if not out:
        sys.stdout.write("no runs" + (f" in status {args.status}" if args.status else "") + "\n")
        return 0
    runs_keys = ["id", "execution_owner", "execution_origin", "status", "version", "error_code"]
    rows = [_cells(r["run"], runs_keys) for r in out]
    sys.stdout.write(table(["run", "owner", "origin", "status", "version", "error"], rows) + "\n")
    if truncated and not args.run:
        more = [f"--db {shell_word(args.db)}", f"--limit {args.limit}"]
        if args.status:
            more.append(f"--status {args.status}")
        more.append(f"--after {shell_word(next_after)}")
        sys.stdout.write(_more(f"{len(out)} run(s)", more))
    if args.run:
        keys = ["id", "attempt", "status", "executor_type", "pid", "exit_code", "callback_sequence"]
        attempts = [_cells(a, keys) for a in out[0]["attempts"]]
        headers = ["attempt", "#", "status", "executor", "pid", "exit", "callback"]
        sys.stdout.write(f"\nattempts\n{table(headers, attempts)}\n")
        events = [
            [
                str(e["sequence"]),
                e["type"],
                e["actor_type"] + (f":{e['actor_id']}" if e["actor_id"] else ""),
                json.dumps(e["payload"], sort_keys=True),
            ]
            for e in out[0]["events"]
        ]
        sys.stdout.write(f"\nevents\n{table(['seq', 'type', 'actor', 'payload'], events)}\n")
        if truncated:
            more = [f"--db {shell_word(args.db)}", f"--run {shell_word(args.run)}"]
            more += [f"--limit {args.limit}", f"--after {next_after}"]
            sys.stdout.write(_more(f"{len(events)} event(s) after sequence {after_sequence}", more))
    return 0


def _cells(record: dict[str, Any], keys: list[str]) -> list[str]:
    """A record's fields as table cells, in ``keys`` order; an absent value (None) is empty."""
    return ["" if record[k] is None else str(record[k]) for k in keys]


def _more(shown: str, flags: list[str]) -> str:
    """The line after a page that is not the last: the command for the next one."""
    return f"(truncated: showing {shown}; more follow: qlfsm inspect {' '.join(flags)})\n"
