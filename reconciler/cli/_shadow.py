"""`qlfsm shadow` (spec 06): parses its arguments, calls the application layer
(``reconciler._shadow_run``: the pass and its resume cursor), prints the audit record.

`shadow` fails open (ADR-0448 §9): whatever happens after its arguments parse, it prints the
audit record (state `failed` + errorType on any failure) and exits 0. Only a wrong argument
exits 2.

Privacy (spec 05): nothing printed here names a Run, Attempt or Cron, a pid, a path, a
command or an error message of the shadow pass: only states, counts and enum strings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from reconciler._escape import clean
from reconciler._notify import to_stderr
from reconciler._profiles import PROFILE_ENV, PROFILES
from reconciler._shadow_entry import (
    ALLOWED_ORIGINS,
    ORIGINS_ENV,
    REFUSED_ORIGINS,
    ShadowResult,
    failed,
    unknown_origin_hints,
)
from reconciler._shadow_run import shadow_with_cursor
from reconciler.cli._exit import EXIT_SAFE, EXIT_USAGE, UsageError
from reconciler.cli._guard import Terminated, interrupted, say, settle
from reconciler.cli._report import wrap
from reconciler.cli._text import table
from reconciler.cli._util import parser, print_result


def db_profile_origins(p: Any) -> None:
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


def shadow_command(argv: list[str]) -> int:
    p = parser("qlfsm shadow", "ADR-0448 bounded legacy-shadow start-up recovery (fails open).")
    db_profile_origins(p)
    p.add_argument(
        "--resume-cursor",
        metavar="FILE",
        help="read the resume cursor from FILE and write the next one there (private file)",
    )
    p.add_argument("--json", action="store_true", help="print the audit record as one JSON object")
    try:
        args = p.parse_args(argv)
    except UsageError as exc:
        say(f"qlfsm: error: {exc}")
        return EXIT_USAGE
    try:
        result = shadow_with_cursor(
            args.db, args.profile, args.origins, args.resume_cursor, to_stderr
        )
        # The pass is over and its record is what happened: a signal from here on waits, so
        # that it cannot append "interrupted" to a whole `reconciled` record (spec 06: one
        # record, and it says what the pass did).
        settle()
    except (KeyboardInterrupt, Terminated) as exc:
        # Fail-open (ADR-0448 §9, spec 06) holds for a signal too: the pass stops (whatever
        # it committed is whole), its audit record says `failed`, and start-up continues.
        result = ShadowResult(failed(exc))
        interrupted(exc, fail_open=True)
    print_result(args.json, result.audit, lambda: human_audit(result.audit))
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


def human_audit(audit: Mapping[str, Any]) -> str:
    """The audit record for a person: states, counts and enum strings only, in lines of at
    most 100 columns (docs/decisions.md D-22)."""
    state = audit["state"]
    dropped = _dropped(audit)
    if state == "disabled":
        return wrap(
            "legacy shadow: disabled (no reviewed origin enabled in "
            f"--origins / ${ORIGINS_ENV}); the database was not opened{dropped}"
        )
    if state == "profile_rejected":
        return wrap(
            f"legacy shadow: refused for profile {clean(audit['profile'])} (a cluster uses its own "
            f"reconciler, ADR-0448 §8); the database was not opened{dropped}"
        )
    if state == "failed":
        return wrap(
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
    from reconciler.shadow import OUTCOME_KEYS  # a pass ran: the package is loaded already

    by_origin = report["byOrigin"]
    headers = ["outcome", *(e["origin"] for e in by_origin), "total"]
    rows = [["scanned", *(str(e["scanned"]) for e in by_origin), str(cov["scanned"])]]
    rows.extend(
        [k, *(str(e[k]) for e in by_origin), str(report["outcomes"][k])] for k in OUTCOME_KEYS
    )
    lines.append("")
    lines.extend(table(headers, rows).split("\n"))
    return "\n".join(wrap(line) for line in lines)


def _dropped(audit: Mapping[str, Any]) -> str:
    refused = int(audit.get("refusedOriginCount", 0))
    unknown = int(audit.get("ignoredOriginCount", 0))
    if not refused and not unknown:
        return ""
    return f"; origin items ignored: {refused} refused (once/grpc), {unknown} unknown"
