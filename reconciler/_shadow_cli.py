"""`qlfsm shadow` and `qlfsm startup` (spec 06).

`shadow` fails open (ADR-0448 §9): whatever happens after its arguments parse, it prints the
audit record (state `failed` + errorType on any failure) and exits 0. Only a wrong argument
exits 2. `startup` runs the start-up order of spec 05 "Switches": (2.x normalization) ->
legacy shadow -> primary (ADR-0068); its exit code is the primary verdict.

Privacy (spec 05): nothing printed here names a Run, Attempt or Cron, a pid, a path, a
command or an error message of the shadow pass: only states, counts and enum strings.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._cliutil import (
    EXIT_FATAL,
    EXIT_SAFE,
    EXIT_USAGE,
    FatalError,
    UsageError,
    parser,
    print_json,
    run_command,
    table,
)
from ._shadow import (
    ORIGINS_ENV,
    PROFILE_ENV,
    PROFILES,
    Cursor,
    ProfileError,
    ShadowResult,
    failed,
    resolve_profile,
    run_shadow,
)
from ._shadow_report import OUTCOME_KEYS

if TYPE_CHECKING:
    from storage import LockBudget


class InvalidResumeCursor(Exception):
    """The --resume-cursor file is not one this tool wrote."""


def _db_profile_origins(p: Any) -> None:
    """The flags `shadow` and `startup` share (spec 06)."""
    p.add_argument("--db", required=True, help="path of the node's SQLite file (never created)")
    p.add_argument("--profile", choices=PROFILES, help=f"default: ${PROFILE_ENV} or standalone")
    p.add_argument("--origins", help=f"comma-separated origins (default: ${ORIGINS_ENV})")


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
        sys.stderr.write(f"qlfsm: error: {exc}\n")
        return EXIT_USAGE
    try:
        resume = read_cursor(args.resume_cursor) if args.resume_cursor else None
    except Exception as exc:
        result = ShadowResult(failed(exc))
    else:
        result = run_shadow(
            args.db, profile=args.profile, origins=args.origins, resume_cursor=resume
        )
        if args.resume_cursor and result.audit["state"] in ("reconciled", "incomplete"):
            try:
                store_cursor(args.resume_cursor, result.cursor)
            except OSError as exc:
                result = ShadowResult(failed(exc))
    if args.json:
        print_json(result.audit)
    else:
        sys.stdout.write(human_audit(result.audit) + "\n")
    return EXIT_SAFE


shadow_command.handles_errors = True  # type: ignore[attr-defined]


def read_cursor(path: str) -> Cursor | None:
    """The cursor a previous `shadow`/`startup` left in ``path``; None when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InvalidResumeCursor() from exc
    if (
        not isinstance(data, dict)
        or data.get("schemaVersion") != 1
        or not isinstance(data.get("createdAtMs"), int)
        or not isinstance(data.get("runId"), str)
    ):
        raise InvalidResumeCursor()
    return (int(data["createdAtMs"]), str(data["runId"]))


def store_cursor(path: str, cursor: Cursor | None) -> None:
    """Write the next cursor (mode 0600, atomically), or remove the file when the pass has
    nothing left to resume."""
    if cursor is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"schemaVersion": 1, "createdAtMs": cursor[0], "runId": cursor[1]}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def human_audit(audit: Mapping[str, Any]) -> str:
    """The audit record for a person: states, counts and enum strings only."""
    state = audit["state"]
    dropped = _dropped(audit)
    if state == "disabled":
        return (
            "legacy shadow: disabled (no reviewed origin enabled in "
            f"--origins / ${ORIGINS_ENV}); the database was not opened{dropped}"
        )
    if state == "profile_rejected":
        return (
            f"legacy shadow: refused for profile {audit['profile']} (a cluster uses its own "
            f"reconciler, ADR-0448 §8); the database was not opened{dropped}"
        )
    if state == "failed":
        return (
            f"legacy shadow: failed ({audit['errorType']}); nothing more was done and start-up "
            "continues (fail-open, ADR-0448 §9)"
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
    headers = ["origin", "scanned", *OUTCOME_KEYS]
    rows = [
        [e["origin"], str(e["scanned"]), *(str(e[k]) for k in OUTCOME_KEYS)]
        for e in report["byOrigin"]
    ]
    rows.append(["total", str(cov["scanned"]), *(str(report["outcomes"][k]) for k in OUTCOME_KEYS)])
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
    p = parser("qlfsm startup", "Start-up order: (2.x normalization) -> legacy shadow -> primary.")
    _db_profile_origins(p)
    p.add_argument("--receipt-root", required=True, help="absolute receipt directory")
    p.add_argument(
        "--legacy-normalize",
        action="store_true",
        help="first do what 2.x initData does: running instances -> stopped, crontabs -> idle",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    try:
        profile = resolve_profile(
            args.profile if args.profile is not None else os.environ.get(PROFILE_ENV)
        )
    except ProfileError as exc:
        raise UsageError(
            f"${PROFILE_ENV} is not a deployment profile; set it to one of {', '.join(PROFILES)}"
        ) from exc
    # Usage errors first, before anything is read or written (spec 06): the primary pass
    # would refuse these only after normalization and the shadow pass had run.
    from ._primary_cli import check_profile, check_receipt_root, lock_budget_s, primary_pass

    check_receipt_root(args.receipt_root)
    check_profile(profile)
    # ONE lock budget for the whole start-up: normalization, shadow and primary together wait
    # at most this long for another process's write lock (docs/decisions.md "lock budget").
    lock = lock_budget_s()
    if not os.path.exists(args.db):
        raise FatalError(
            f"database {args.db!r} does not exist; create it with `qlfsm db init --db {args.db}`"
        )
    if args.legacy_normalize:
        _normalize(args.db, lock)
    shadow = run_shadow(args.db, profile=profile, origins=args.origins, lock=lock)
    summary, code = primary_pass(args.db, args.receipt_root, profile, lock)
    safe = bool(summary.get("safe", False)) and code == EXIT_SAFE
    if args.json:
        print_json({"shadow": shadow.audit, "primary": summary, "safe": safe})
    else:
        sys.stdout.write(human_startup(shadow.audit, summary, safe) + "\n")
    return code if code in (EXIT_SAFE, 3, EXIT_USAGE, EXIT_FATAL) else EXIT_FATAL


def _normalize(db: str, lock: LockBudget) -> None:
    """2.x `initData` (spec 02): fail-open like the shadow pass; counts only on stderr."""
    try:
        from storage import connect, lock_budget, normalize_legacy

        conn = connect(db)
        try:
            with lock_budget(conn, lock):
                done = normalize_legacy(conn)
        finally:
            conn.close()
    except Exception as exc:
        sys.stderr.write(f"qlfsm: legacy normalization failed ({type(exc).__name__}); continuing\n")
        return
    sys.stderr.write(
        f"qlfsm: legacy normalization: {done.running_instances} running instance(s) -> "
        f"stopped (no finish time), {done.crontabs} crontab(s) -> idle\n"
    )


def human_startup(audit: Mapping[str, Any], summary: Mapping[str, Any], safe: bool) -> str:
    keys = ("scanned", "recovered", "remaining", "unresolved", "failed")
    counts = ", ".join(f"{summary.get(k, 0)} {k}" for k in keys)
    trunc = " (truncated: more than one page of candidates)" if summary.get("truncated") else ""
    verdict = "SAFE to admit work" if safe else "NOT safe: start-up blocked"
    return "\n".join(
        [
            human_audit(audit),
            "",
            f"primary (ADR-0068): {counts}{trunc}",
            f"start-up verdict: {verdict}",
        ]
    )
