"""`qlfsm reconcile` (spec 06): parses, calls the application layer's pass
(``reconciler.reconcile``: the typed report `startup` uses too), prints its summary and maps
it to an exit code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler._startup import reconcile
from reconciler.cli._exit import EXIT_BLOCKED, EXIT_SAFE
from reconciler.cli._report import candidate_lines
from reconciler.cli._util import parser, pass_arguments, print_result
from reconciler.cli._verdict import closing_lines, counts_line


def exit_code(summary: Mapping[str, Any]) -> int:
    return EXIT_SAFE if summary["safe"] else EXIT_BLOCKED


def reconcile_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm reconcile",
        "ADR-0068 start-up pass: receipts first, then process identity, one grace, the "
        "receipt again; exit 0 safe, 3 blocked, 2 usage, 1 fatal, 4 output lost, "
        "75 locked (try again), 130/143 interrupted. One start-up at a time per database: a "
        "second one waits for the first. $QLFSM_LOCK_BUDGET_S: the most seconds the pass "
        "waits for another process's write lock or start-up (default 5).",
    )
    pass_arguments(
        p,
        json_help="print the summary as one JSON object",
        dry_run_help="decide every candidate (real receipt reads, real probes, the grace) and "
        "write nothing: no commit, quarantine, journal change, receipt moved or deleted",
    )
    args = p.parse_args(argv)
    report = reconcile(args.db, args.receipt_root, profile=args.profile, dry_run=args.dry_run)
    summary = report.as_dict()
    print_result(args.json, summary, lambda: render(summary, args.db, args.receipt_root))
    return exit_code(summary)


def render(summary: dict[str, Any], db: str, receipt_root: str | None = None) -> str:
    """The human summary: one line of counts, the candidates, what blocks start-up (with the
    command that explains each blocking run) and the verdict (``_verdict``: one wording)."""
    head = counts_line(summary) + (" (page truncated at 256)" if summary["truncated"] else "")
    # At most 100 columns a line, the reason shortened (its full text in --json): D-22.
    lines = [head, *candidate_lines(summary, reconcile=True)]
    return "\n".join(lines + closing_lines(summary, db, receipt_root, "the pass"))
