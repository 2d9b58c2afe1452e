"""`qlfsm shadow` and `qlfsm startup` (spec 06): each parses its arguments, calls the
application layer (``reconciler._startup``: the pass, its resume cursor, the single-flight
lock, the start-up order), prints the report and maps the verdict to an exit code.

`shadow` fails open (ADR-0448 §9): whatever happens after its arguments parse, it prints the
audit record (state `failed` + errorType on any failure) and exits 0. Only a wrong argument
exits 2. `startup` runs the start-up order of spec 05 "Switches": (2.x normalization) ->
legacy shadow -> primary (ADR-0068); its exit code is the primary verdict.

Privacy (spec 05): nothing printed here names a Run, Attempt or Cron, a pid, a path, a
command or an error message of the shadow pass: only states, counts and enum strings.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from reconciler._profiles import PROFILE_ENV, PROFILES
from reconciler.cli._guard import Terminated, interrupted, say, settle
from reconciler.cli._text import clean, shell_word
from reconciler.cli._util import (
    EXIT_BLOCKED,
    EXIT_SAFE,
    EXIT_USAGE,
    UsageError,
    parser,
    print_json,
    run_command,
    table,
)
from reconciler.shadow import (
    ALLOWED_ORIGINS,
    ORIGINS_ENV,
    OUTCOME_KEYS,
    REFUSED_ORIGINS,
    ShadowResult,
    failed,
    unknown_origin_hints,
)


def _db_profile_origins(p: Any) -> None:
    """The flags `shadow` and `startup` share (spec 06)."""
    p.add_argument("--db", required=True, help="path of the node's SQLite file (never created)")
    p.add_argument("--profile", choices=PROFILES, help=f"default: ${PROFILE_ENV} or standalone")
    p.add_argument(
        "--origins",
        metavar="LIST",
        help=f"comma-separated origins to recover, from: {', '.join(ALLOWED_ORIGINS)} "
        f"({', '.join(sorted(REFUSED_ORIGINS))} are refused, anything else is ignored and "
        f"counted; default: ${ORIGINS_ENV}; none enabled = the shadow pass is disabled)",
    )


def _shadow_parser() -> Any:
    p = parser("qlfsm shadow", "ADR-0448 bounded legacy-shadow start-up recovery (fails open).")
    _db_profile_origins(p)
    p.add_argument(
        "--resume-cursor",
        metavar="FILE",
        help="read the resume cursor from FILE and write the next one there (private file)",
    )
    p.add_argument("--json", action="store_true", help="print the audit record as one JSON object")
    return p


def shadow_command(argv: list[str]) -> int:
    try:
        args = _shadow_parser().parse_args(argv)
    except UsageError as exc:
        say(f"qlfsm: error: {exc}")
        return EXIT_USAGE
    try:
        result = _shadow(args)
        # The pass is over and its record is what happened: a signal from here on waits, so
        # that it cannot append "interrupted" to a whole `reconciled` record (spec 06: one
        # record, and it says what the pass did).
        settle()
    except (KeyboardInterrupt, Terminated) as exc:
        # Fail-open (ADR-0448 §9, spec 06) holds for a signal too: the pass stops (whatever
        # it committed is whole), its audit record says `failed`, and start-up continues.
        result = ShadowResult(failed(exc))
        interrupted(exc, fail_open=True)
    if args.json:
        print_json(result.audit)
    else:
        sys.stdout.write(human_audit(result.audit) + "\n")
    warn_unknown_origins(result.audit, args.origins)
    return EXIT_SAFE


def warn_unknown_origins(audit: Mapping[str, Any] | None, origins: str | None) -> None:
    """One stderr line per unknown origin item: where it is and what it is close to."""
    if not audit or not audit.get("ignoredOriginCount"):
        return
    value = origins if origins is not None else os.environ.get(ORIGINS_ENV)
    source = "--origins" if origins is not None else f"${ORIGINS_ENV}"
    for hint in unknown_origin_hints(value):
        say(f"qlfsm: warning: {source} {hint}")


shadow_command.handles_errors = True  # type: ignore[attr-defined]


def _shadow(args: Any) -> ShadowResult:
    from reconciler._notify import to_stderr
    from reconciler._shadow_run import shadow_with_cursor

    return shadow_with_cursor(args.db, args.profile, args.origins, args.resume_cursor, to_stderr)


def human_audit(audit: Mapping[str, Any]) -> str:
    """The audit record for a person: states, counts and enum strings only, in lines of at
    most 100 columns (docs/decisions.md D-22)."""
    from reconciler.cli._report import wrap

    return "\n".join(wrap(line) for line in _human_audit(audit).split("\n"))


def _human_audit(audit: Mapping[str, Any]) -> str:
    state = audit["state"]
    dropped = _dropped(audit)
    if state == "disabled":
        return (
            "legacy shadow: disabled (no reviewed origin enabled in "
            f"--origins / ${ORIGINS_ENV}); the database was not opened{dropped}"
        )
    if state == "profile_rejected":
        return (
            f"legacy shadow: refused for profile {clean(audit['profile'])} (a cluster uses its own "
            f"reconciler, ADR-0448 §8); the database was not opened{dropped}"
        )
    if state == "failed":
        return (
            f"legacy shadow: failed ({clean(audit['errorType'])}); nothing more was done and "
            "start-up continues (fail-open, ADR-0448 §9)"
        )
    report = audit["report"]
    cov, budget = report["coverage"], report["budget"]
    lines = [
        f"legacy shadow: {state} (assessment {report['assessment']}){dropped}",
        f"  profile {report['profile']}, {report['configuredOriginCount']} origin(s), budget "
        f"{budget['pageSize']} x {budget['maxPages']} page(s) = {budget['maxCandidates']}",
        f"  coverage: {cov['pages']} page(s), {cov['scanned']} scanned, stop {cov['stopReason']}"
        + (
            ", more remain" + (" (resume cursor available)" if cov["resumeAvailable"] else "")
            if cov["remaining"]
            else ""
        ),
    ]
    # An origin a column, an outcome a row: the seven reviewed origins and the total fit in
    # 100 columns (95 at most), the nine outcomes as columns did not (docs/decisions.md D-22).
    by_origin = report["byOrigin"]
    headers = ["outcome", *(e["origin"] for e in by_origin), "total"]
    rows = [["scanned", *(str(e["scanned"]) for e in by_origin), str(cov["scanned"])]]
    rows.extend(
        [k, *(str(e[k]) for e in by_origin), str(report["outcomes"][k])] for k in OUTCOME_KEYS
    )
    lines.append("")
    lines.append(table(headers, rows))
    return "\n".join(lines)


def _dropped(audit: Mapping[str, Any]) -> str:
    refused = int(audit.get("refusedOriginCount", 0))
    unknown = int(audit.get("ignoredOriginCount", 0))
    if not refused and not unknown:
        return ""
    return f"; origin items ignored: {refused} refused (once/grpc), {unknown} unknown"


# --- startup ----------------------------------------------------------------------------------


def startup_command(argv: list[str]) -> int:
    return run_command(argv, _startup)


def _startup(argv: list[str]) -> int:
    p = parser(
        "qlfsm startup",
        "Start-up order: (2.x normalization) -> legacy shadow -> primary (ADR-0068); after a "
        "SAFE primary pass, the sweep of what ended runs left behind. Exit 0 safe to start, "
        "3 start-up blocked (the runs that block it are listed, with the `qlfsm explain` that "
        "shows why), 2 usage, 1 fatal, 4 output lost, 75 locked (another process held the "
        "database or the start-up past $QLFSM_LOCK_BUDGET_S: try again), 130/143 "
        "interrupted. One start-up at a time per database: a second one waits for the first.",
    )
    _db_profile_origins(p)
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
    from reconciler._startup import check_startup, startup, startup_profile

    profile = startup_profile(args.profile)
    check_startup(args.receipt_root, profile)  # usage errors before the metrics extra is looked for
    client = None
    if args.metrics_file is not None:
        if args.dry_run:
            raise UsageError(
                "--metrics-file with --dry-run: a dry run predicts and writes nothing, so it "
                "has no start-up to report; drop one of them"
            )
        from reconciler.cli._metrics import check_metrics_file

        client = check_metrics_file(args.metrics_file)  # the extra, before anything is read
    report = startup(
        args.db,
        args.receipt_root,
        profile=profile,
        origins=args.origins,
        legacy_normalize=args.legacy_normalize,
        first_boot=args.first_boot,
        dry_run=args.dry_run,
    )
    summary, audit = report.primary.as_dict(), None
    if report.shadow is not None:
        audit = report.shadow.as_dict()
    if client is not None and audit is not None:
        _metrics(client, args.metrics_file, args.db, audit, summary, report.safe, report.durations)
    if args.json:
        print_json(report.as_dict())
    else:
        sweep = None if report.dry_run else report.sweep
        text = human_startup(audit, summary, report.safe, args.db, sweep, args.receipt_root)
        if report.first_boot:
            text = f"{first_boot_line(args.db, dry_run=report.dry_run)}\n{text}"
        sys.stdout.write(text + "\n")
    if audit is not None:
        warn_unknown_origins(audit, args.origins)
    return EXIT_SAFE if report.safe else EXIT_BLOCKED


def _metrics(
    client: Any,
    path: str,
    db: str,
    audit: Mapping[str, Any],
    summary: Mapping[str, Any],
    safe: bool,
    took: Mapping[str, float],
) -> None:
    """Written before the report is printed (a lost stdout must not lose the metrics too);
    a failure is one warning line and never changes the verdict (docs/decisions.md D-22)."""
    from reconciler.cli._metrics import MetricsNotWritten, write_metrics

    try:
        write_metrics(client, path, db, shadow=audit, summary=summary, safe=safe, durations=took)
    except MetricsNotWritten as exc:
        say(
            f"qlfsm: warning: metrics file {shell_word(path)} not written ({exc}); start-up is "
            "done and its verdict stands; the previous file, if any, is unchanged"
        )


def first_boot_line(db: str, *, dry_run: bool = False) -> str:
    """The human line of a first boot (D-21)."""
    if dry_run:
        return (
            f"first boot: database {clean(db)} does not exist; startup --first-boot would create "
            "it (the `qlfsm db init` schema) and find nothing to recover"
        )
    return f"first boot: created database {clean(db)} (the `qlfsm db init` schema)"


def human_startup(
    audit: Mapping[str, Any] | None,
    summary: Mapping[str, Any],
    safe: bool,
    db: str,
    sweep: Mapping[str, Any] | None = None,
    receipt_root: str | None = None,
) -> str:
    """Both passes, every candidate the primary pass decided or left (``_report``: run, row,
    what happened in plain words, reason; at most 100 columns a line, D-22), what blocks
    start-up (``_verdict``), the sweep, and the verdict. ``audit`` None: a dry run, which
    skipped normalization and the shadow pass."""
    from reconciler.cli._sweep import human_sweep
    from reconciler.cli._verdict import blocking_lines, verdict_line

    trunc = " (truncated at 256: none was decided)" if summary.get("truncated") else ""
    shadow = (
        human_audit(audit)
        if audit is not None
        else "legacy shadow (ADR-0448): skipped (dry run: it has no dry run; "
        "normalization skipped too)"
    )
    lines = [shadow, ""]
    from reconciler.cli._report import candidate_lines, plain_counts

    scanned = f"primary (ADR-0068): {summary.get('scanned', 0)} scanned"
    lines.append(f"{scanned}: {plain_counts(summary)}{trunc}")
    lines.extend(candidate_lines(summary))
    lines.extend(blocking_lines(summary, db, receipt_root))
    if sweep is not None:
        lines.append(human_sweep(sweep))
    verdict = verdict_line(safe)
    if audit is None:
        verdict = f"dry run, nothing written; the primary pass would say: {verdict}"
    lines.append(verdict)
    return "\n".join(lines)
