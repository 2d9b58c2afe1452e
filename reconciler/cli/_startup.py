"""`qlfsm startup` (spec 06): parses its arguments, calls the application layer
(``reconciler._startup``: the start-up order of spec 05 "Switches", (2.x normalization) ->
legacy shadow -> primary (ADR-0068) -> the sweep, under one single-flight lock), prints the
report and maps the primary verdict to an exit code.

Privacy (spec 05): the shadow part names no Run, Attempt or Cron, pid, path, command or error
message: only states, counts and enum strings.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from reconciler._escape import clean
from reconciler._reports import StartupReport
from reconciler._startup import check_startup, run_startup
from reconciler.cli._exit import EXIT_BLOCKED, EXIT_SAFE, UsageError
from reconciler.cli._report import candidate_lines, plain_counts
from reconciler.cli._shadow import db_profile_origins, human_audit, warn_unknown_origins
from reconciler.cli._sweep import human_sweep
from reconciler.cli._util import parser, print_json
from reconciler.cli._verdict import blocking_lines, verdict_line


def startup_command(argv: list[str]) -> int:
    """The command's body; ``reconciler.cli._main`` runs it under ``run_command``."""
    p = parser(
        "qlfsm startup",
        "Start-up order: (2.x normalization) -> legacy shadow -> primary (ADR-0068); after a "
        "SAFE primary pass, the sweep of what ended runs left behind. Exit 0 safe to start, "
        "3 start-up blocked (the runs that block it are listed, with the `qlfsm explain` that "
        "shows why), 2 usage, 1 fatal, 4 output lost, 75 locked (another process held the "
        "database or the start-up past $QLFSM_LOCK_BUDGET_S: try again), 130/143 "
        "interrupted. One start-up at a time per database: a second one waits for the first.",
    )
    db_profile_origins(p)
    p.add_argument("--receipt-root", required=True, help="absolute receipt directory")
    p.add_argument(
        "--legacy-normalize",
        action="store_true",
        help="first do what 2.x initData does: running instances -> stopped, crontabs -> idle",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--first-boot",
        action="store_true",
        help="the node's first start: when the --db file is missing in a directory that "
        "exists, create it (the `qlfsm db init` schema) and report `first boot`; a missing "
        "directory is still an error, an existing file a normal start-up",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="predict the primary pass and write nothing; normalization and the shadow pass "
        "(which write) are skipped, and the output says so",
    )
    p.add_argument(
        "--metrics-file",
        metavar="PATH",
        help="also write what the start-up did (counts, verdict, durations) to PATH, a *.prom "
        "file for node_exporter's textfile collector, replaced atomically; needs the "
        "`metrics` extra (pip install 'qlfsm[metrics]')",
    )
    args = p.parse_args(argv)
    checked = check_startup(args.receipt_root, args.profile)  # before the metrics extra
    client = None
    if args.metrics_file is not None:
        if args.dry_run:
            raise UsageError(
                "--metrics-file with --dry-run: a dry run predicts and writes nothing, so it "
                "has no start-up to report; drop one of them"
            )
        from reconciler.cli._metrics import check_metrics_file

        client = check_metrics_file(args.metrics_file)  # the extra, before anything is read
    report = run_startup(
        args.db,
        checked,
        origins=args.origins,
        legacy_normalize=args.legacy_normalize,
        first_boot=args.first_boot,
        dry_run=args.dry_run,
    )
    audit = None if report.shadow is None else report.shadow.as_dict()
    if client is not None and audit is not None:
        from reconciler.cli._metrics import write_metrics

        write_metrics(client, args.metrics_file, args.db, report, audit)
    if args.json:
        print_json(report.as_dict())
    else:
        sys.stdout.write(human_startup(report, audit, args.db, args.receipt_root) + "\n")
    warn_unknown_origins(audit, args.origins)
    return EXIT_SAFE if report.safe else EXIT_BLOCKED


def human_startup(
    report: StartupReport, audit: Mapping[str, Any] | None, db: str, receipt_root: str | None
) -> str:
    """The first boot (D-21), both passes, every candidate the primary pass decided or left
    (``_report``: run, row, what happened in plain words, reason; at most 100 columns a line,
    D-22), what blocks start-up (``_verdict``), the sweep, and the verdict. ``audit`` (the
    shadow pass's) None: a dry run, which skipped normalization, the shadow pass and the
    sweep."""
    summary = report.primary.as_dict()
    trunc = " (truncated at 256: none was decided)" if summary.get("truncated") else ""
    shadow = (
        human_audit(audit)
        if audit is not None
        else "legacy shadow (ADR-0448): skipped (dry run: it has no dry run; "
        "normalization skipped too)"
    )
    lines = [shadow, ""]
    if report.first_boot and report.dry_run:
        lines.insert(
            0,
            f"first boot: database {clean(db)} does not exist; startup --first-boot would create "
            "it (the `qlfsm db init` schema) and find nothing to recover",
        )
    elif report.first_boot:
        lines.insert(0, f"first boot: created database {clean(db)} (the `qlfsm db init` schema)")
    scanned = f"primary (ADR-0068): {summary.get('scanned', 0)} scanned"
    lines.append(f"{scanned}: {plain_counts(summary)}{trunc}")
    lines.extend(candidate_lines(summary))
    lines.extend(blocking_lines(summary, db, receipt_root))
    if not report.dry_run:
        lines.append(human_sweep(report.sweep))
    lines.append(
        verdict_line(report.safe, dry_run_of=None if audit is not None else "the primary pass")
    )
    return "\n".join(lines)
