"""`qlfsm sweep` (spec 06), and how `startup` prints the sweep it runs after a SAFE primary
pass (the sweep step itself is the application layer's, ``reconciler._startup``).

The sweep itself is ``reconciler._sweep``. `sweep` exits 0 when every row it looked at was
settled or rightly kept, 1 when a row could not be cleaned (named on stderr and in the JSON),
2 for a bad receipt root, 1 for a missing or foreign database. Under `startup` it never changes
the exit code: start-up safety is the primary verdict, cleaning is housekeeping; a failure is
one stderr line and ``"state": "failed"`` in the JSON.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from reconciler._escape import clean
from reconciler.cli._exit import EXIT_FATAL, EXIT_SAFE, FatalError, UsageError
from reconciler.cli._guard import say
from reconciler.cli._report import wrap
from reconciler.cli._util import parser, print_json


def human_sweep(result: Mapping[str, Any]) -> str:
    state = result.get("state")
    if state == "skipped":
        return "sweep: not run (start-up is not safe)"
    if state == "root_missing":
        return "sweep: nothing to do (the receipt root does not exist)"
    if state == "failed":
        return f"sweep: failed ({clean(result.get('error', 'error'))}); nothing half-done is left"
    r, q = result["receipts"], result["quarantine"]
    text = (
        f"sweep: {r['receipts_removed']} leftover receipt(s) removed, {r['rows_resolved']} "
        f"pending row(s) resolved ({r['kept_active']} active, {r['kept_process_alive']} with a "
        f"live process kept); {q['copies_purged']} quarantined cop(ies) purged, "
        f"{q['rows_removed']} row(s) removed ({q['kept_active']} of active attempts kept)"
    )
    errors = int(r["errors"]) + int(q["errors"])
    if errors:
        text += f"; {errors} could not be cleaned"
    if result.get("remaining"):
        text += "; more remain for the next pass"
    return wrap(text)  # at most 100 columns a line (docs/decisions.md D-22)


def sweep_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm sweep",
        "Remove what ended runs left behind: receipt files and `pending` journal rows of "
        "Attempts that are no longer active, and quarantined receipts past their purge time "
        "with their rows. Bounded per pass, idempotent; never touches an active Attempt. "
        "Exit 0 done, 1 a row could not be cleaned (named) or the database is unusable, "
        "2 usage.",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--receipt-root", required=True, help="absolute completion-receipt root")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    args = p.parse_args(argv)
    from reconciler._reconcile import (
        check_receipt_root,
        inspect_receipt_root,
        lock_budget_s,
        open_database,
    )
    from reconciler._startup import run_sweep

    root = check_receipt_root(args.receipt_root)
    inspect_receipt_root(root)  # D-16: refused before anything is opened
    lock = lock_budget_s()  # $QLFSM_LOCK_BUDGET_S: a bad value is exit 2 before anything
    open_database(args.db).close()  # missing or foreign: exit 1, before anything is touched
    from reconciler.node import ReceiptRootError

    try:
        result = run_sweep(args.db, root, lock)
    except ReceiptRootError as exc:
        raise UsageError(f"{exc}; nothing was touched") from exc
    except FileNotFoundError as exc:  # pragma: no cover - the file vanished after the check
        raise FatalError(f"database {args.db!r} disappeared: {exc}") from exc
    if args.json:
        print_json(result)
    else:
        sys.stdout.write(human_sweep(result) + "\n")
        for e in result["errors"]:
            # D-14: the attempt id and the error come from the database and the file system.
            sys.stdout.write(f"  not cleaned: attempt {clean(e['attempt_id'])} "
                             f"({clean(e['step'])}): {clean(e['error'])}\n")  # fmt: skip
    for warning in result.get("warnings", []):
        say(f"qlfsm: warning: {warning}")
    failed = int(result["receipts"]["errors"]) + int(result["quarantine"]["errors"])
    if failed:
        say(f"qlfsm: error: {failed} journal row(s) could not be cleaned; they stay for the "
            "next pass (see the errors above)")  # fmt: skip
        return EXIT_FATAL
    return EXIT_SAFE
