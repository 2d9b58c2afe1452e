"""`qlfsm drain --db PATH --receipt-root DIR [--profile P] [--json] [--dry-run]` (D-26): more
than a page of candidates decided page by page, each page with the whole ADR-0068 pass
(``reconciler._drain``).

Exit codes as `reconcile` (spec 06): 0 nothing blocks start-up any more, 3 blockers remain (or
more than a page of candidates still stays, their processes alive), 2 usage, 1 fatal, 75 the
database or the start-up lock held past the lock budget, 130/143 interrupted (the pages
finished before it stay committed, and the one line says how many).
"""

from __future__ import annotations

import sys
from typing import Any

from reconciler.cli._exit import EXIT_BLOCKED, EXIT_SAFE
from reconciler.cli._report import wrap
from reconciler.cli._util import parser, pass_arguments, print_result
from reconciler.cli._verdict import counts_line


def drain_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm drain",
        "Decide more candidates than start-up reads at once (256): page by page in Run id "
        "order, each page with the whole ADR-0068 pass (receipts, probes, one grace, the "
        "receipt again, the verifier), until none is left or only blockers are; under the "
        "single-flight lock of `startup`. Exit 0 safe to start, 3 blocked, 2 usage, 1 fatal, "
        "75 locked (try again), 130/143 interrupted (finished pages stay committed).",
    )
    pass_arguments(
        p,
        json_help="print the result as one JSON object",
        dry_run_help="walk every page (real receipt reads, real probes, the grace) and write "
        "nothing",
    )
    args = p.parse_args(argv)
    from reconciler._drain import drain
    from reconciler._reconcile import default_profile
    from reconciler.cli import _guard

    profile = args.profile if args.profile is not None else default_profile()
    done: list[dict[str, Any]] = []

    def on_page(summary: dict[str, Any]) -> None:
        done.append(summary)
        kept = sum(int(p["recovered"]) for p in done)
        written = "nothing was written (dry run)" if args.dry_run else (
            f"the {len(done)} page(s) drained stay committed ({kept} run(s) decided)"
        )  # fmt: skip
        _guard.advise_after_interrupt(f"{written}; run qlfsm drain again for the rest")
        if not args.json:
            # One page, one line (at most 100 columns: counts only, D-22).
            sys.stdout.write(f"page {summary['page']}: {counts_line(summary)}\n")
            sys.stdout.flush()

    _guard.advise_after_interrupt(
        "no page was finished (a decision committed before it stays); run qlfsm drain again"
    )
    summary = drain(args.db, args.receipt_root, profile, dry_run=args.dry_run, on_page=on_page)
    print_result(args.json, summary, lambda: render(summary, args.db, args.receipt_root))
    return EXIT_SAFE if summary["safe"] else EXIT_BLOCKED


def render(summary: dict[str, Any], db: str, receipt_root: str) -> str:
    """The total, what still blocks start-up (the command that explains each blocking run)
    and the verdict (``_verdict``: one wording)."""
    from reconciler.cli._verdict import closing_lines

    lines = [f"drained {len(summary['pages'])} page(s): {counts_line(summary)}"]
    if summary["truncated"]:
        lines.append(
            wrap(
                f"still more than 256 candidates ({summary['remaining']} retained: their "
                "processes are alive); start-up reads one page and stays blocked: run qlfsm "
                "drain again once they have ended"
            )
        )
    # The truncated page is said above.
    lines += closing_lines({**summary, "truncated": False}, db, receipt_root, "the drain")
    return "\n".join(lines)
