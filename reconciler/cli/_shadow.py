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
import stat
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from reconciler.cli._guard import Terminated, interrupted, say, settle
from reconciler.cli._text import clean, shell_word
from reconciler.cli._util import (
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
from reconciler.shadow._entry import (
    ALLOWED_ORIGINS,
    CLUSTER_PROFILES,
    ORIGINS_ENV,
    PROFILE_ENV,
    PROFILES,
    REFUSED_ORIGINS,
    Cursor,
    ProfileError,
    ShadowResult,
    failed,
    resolve_profile,
    run_shadow,
    unknown_origin_hints,
)
from reconciler.shadow._report import OUTCOME_KEYS

# A cursor file holds one small JSON object; anything larger is not one qlfsm wrote.
MAX_CURSOR_BYTES = 4096

if TYPE_CHECKING:
    from storage import LockBudget


class InvalidResumeCursor(Exception):
    """The --resume-cursor file is not one this tool wrote (its message says what it is)."""


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
    try:
        resume = read_cursor(args.resume_cursor) if args.resume_cursor else None
    except InvalidResumeCursor as exc:
        # The path is not named (spec 05 privacy is about the audit; stderr stays as sparing).
        say(
            f"qlfsm: warning: --resume-cursor {exc}; the shadow pass did not run and start-up "
            "continues (fail-open) - point it at a regular file qlfsm writes, or remove it"
        )
        return ShadowResult(failed(exc))
    except Exception as exc:
        return ShadowResult(failed(exc))
    result = _shadow_single_flight(args, resume)
    if args.resume_cursor and result.audit["state"] in ("reconciled", "incomplete"):
        try:
            store_cursor(args.resume_cursor, result.cursor)
        except OSError as exc:
            result = ShadowResult(failed(exc))
    return result


def _shadow_single_flight(args: Any, resume: Cursor | None) -> ShadowResult:
    """The pass under the single-flight start-up lock (D-20), taken only when the pass would
    open the database (enabled origins, a local profile: ``would_open``). Fail-open holds
    for the lock too: held past the budget, the record is `failed` with errorType `Busy`
    (the same cause as a locked database: another process holds it), exit 0."""
    if not _would_open(args.origins, args.profile) or not os.path.isfile(args.db):
        return run_shadow(args.db, profile=args.profile, origins=args.origins, resume_cursor=resume)
    from reconciler.cli._flight import StartupLocked, single_flight
    from storage import Busy, lock_budget_from_env

    try:
        lock = lock_budget_from_env()
    except ValueError as exc:
        return ShadowResult(failed(exc))
    try:
        with single_flight(args.db, lock):
            return run_shadow(
                args.db, profile=args.profile, origins=args.origins, resume_cursor=resume, lock=lock
            )
    except StartupLocked:
        return ShadowResult(failed(Busy(0)))
    except (FatalError, OSError) as exc:
        return ShadowResult(failed(exc))


def _would_open(origins: str | None, profile: str | None) -> bool:
    """Whether ``run_shadow`` would open the database: at least one reviewed origin enabled
    and a local profile (otherwise it is disabled or refused without a database, and takes
    no lock)."""
    from reconciler.shadow._entry import parse_origins

    if not parse_origins(origins if origins is not None else os.environ.get(ORIGINS_ENV)).enabled:
        return False
    try:
        prof = resolve_profile(profile if profile is not None else os.environ.get(PROFILE_ENV))
    except ProfileError:
        return False
    return prof not in CLUSTER_PROFILES


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def _not_regular(mode: int) -> str:
    kind = next((name for test, name in _KINDS if test(mode)), "a special file")
    return f"names {kind}, not a regular file"


def read_cursor(path: str) -> Cursor | None:
    """The cursor a previous `shadow` left in ``path``; None when there is none.

    Only a regular file is read, and at most MAX_CURSOR_BYTES of it: a FIFO would block the
    open (start-up would hang) and /dev/zero would never end. The path is checked with lstat
    BEFORE it is opened (opening a device can have effects of its own); the open itself
    refuses a symbolic link (O_NOFOLLOW: the file is replaced by rename when written, so a
    link would be read but never written) and cannot block (O_NONBLOCK), and fstat confirms
    that what was opened is still a regular file.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidResumeCursor(f"cannot be read ({exc.strerror})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise InvalidResumeCursor(_not_regular(st.st_mode))
    if st.st_size > MAX_CURSOR_BYTES:
        raise InvalidResumeCursor(f"is larger than a cursor ({MAX_CURSOR_BYTES} bytes at most)")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidResumeCursor(f"cannot be read ({exc.strerror})") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InvalidResumeCursor(_not_regular(mode))
        data = b""
        while len(data) <= MAX_CURSOR_BYTES:
            chunk = os.read(fd, MAX_CURSOR_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise InvalidResumeCursor(f"cannot be read ({exc.strerror})") from exc
    finally:
        os.close(fd)
    if len(data) > MAX_CURSOR_BYTES:
        raise InvalidResumeCursor(f"is larger than a cursor ({MAX_CURSOR_BYTES} bytes at most)")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise InvalidResumeCursor("is not a cursor qlfsm wrote (not JSON)") from exc
    if (
        not isinstance(parsed, dict)
        or parsed.get("schemaVersion") != 1
        or type(parsed.get("createdAtMs")) is not int
        or not isinstance(parsed.get("runId"), str)
    ):
        raise InvalidResumeCursor("is not a cursor qlfsm wrote (unknown fields)")
    return (int(parsed["createdAtMs"]), str(parsed["runId"]))


def store_cursor(path: str, cursor: Cursor | None) -> None:
    """Write the next cursor (mode 0600, atomically: a new file, fsync, rename over the old
    one, so a crash or a signal leaves the old cursor or the new one, never a part), or remove
    the file when the pass has nothing left to resume."""
    if cursor is None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISREG(st.st_mode):  # only ever a file this tool could have written
            os.unlink(path)
        return
    data = json.dumps({"schemaVersion": 1, "createdAtMs": cursor[0], "runId": cursor[1]})
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(os.path.dirname(os.path.abspath(path)))


def _fsync_directory(directory: str) -> None:
    """Make the rename durable (best effort: not every file system lets a directory sync)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
    started = time.monotonic()
    try:
        profile = resolve_profile(
            args.profile if args.profile is not None else os.environ.get(PROFILE_ENV)
        )
    except ProfileError as exc:
        where = "--profile" if args.profile is not None else f"${PROFILE_ENV}"
        raise UsageError(f"{where}: {exc}") from exc  # the value echoed, escaped (D-23)
    # Usage errors first, before anything is read or written (spec 06): the primary pass
    # would refuse these only after normalization and the shadow pass had run.
    from reconciler.cli._reconcile import (
        check_profile,
        check_receipt_root,
        inspect_receipt_root,
        lock_budget_s,
        primary_pass,
    )

    inspect_receipt_root(check_receipt_root(args.receipt_root))  # D-16: before any write
    check_profile(profile)
    client = None
    if args.metrics_file is not None:
        if args.dry_run:
            raise UsageError(
                "--metrics-file with --dry-run: a dry run predicts and writes nothing, so it "
                "has no start-up to report; drop one of them"
            )
        from reconciler.cli._metrics import check_metrics_file

        client = check_metrics_file(args.metrics_file)  # the extra, before anything is read
    # ONE lock budget for the whole start-up: normalization, shadow and primary together wait
    # at most this long for another process's write lock (docs/decisions.md "lock budget").
    lock = lock_budget_s()
    # D-21: only the explicit first-boot choice creates the database, never a directory.
    first_boot = False
    if args.first_boot and not os.path.lexists(args.db):
        from reconciler.cli._first_boot import check_directory, create_database

        if args.dry_run:
            # A dry run writes nothing: it checks the directory and predicts the empty
            # database's pass (zero candidates, SAFE) without creating it.
            check_directory(args.db)
            first_boot = True
        else:
            first_boot = create_database(args.db, lock)
    if not first_boot and not os.path.exists(args.db):
        raise FatalError(
            f"database {args.db!r} does not exist; create it with "
            f"`qlfsm db init --db {shell_word(args.db)}`, or on the node's first start add "
            "--first-boot"
        )
    if args.dry_run:
        # The shadow pass has no dry run: it is skipped (it and normalization write), so the
        # prediction is the primary pass's on the database as it is now (docs/decisions.md).
        if first_boot:
            from reconciler.primary._empty import empty_summary

            summary, code = {**empty_summary(False), "dry_run": True}, EXIT_SAFE
        else:
            summary, code = primary_pass(args.db, args.receipt_root, profile, lock, dry_run=True)
        safe = bool(summary.get("safe", False)) and code == EXIT_SAFE
        skipped = {"state": "skipped", "reason": "dry_run"}
        if args.json:
            # The same keys as a real start-up (schemas/startup.json, docs/decisions.md D-22):
            # the sweep writes too, so it is `skipped`, as after a blocked pass.
            from reconciler.cli._sweep import startup_sweep

            sweep = startup_sweep(args.db, args.receipt_root, run=False)
            out = {"shadow": skipped, "primary": summary, "sweep": sweep, "safe": safe}
            print_json({**out, "dry_run": True, "first_boot": first_boot})
        else:
            text = human_startup(None, summary, safe, args.db, receipt_root=args.receipt_root)
            if first_boot:
                text = f"{first_boot_line(args.db, dry_run=True)}\n{text}"
            sys.stdout.write(text + "\n")
        return code if code in (EXIT_SAFE, 3, EXIT_USAGE, EXIT_FATAL) else EXIT_FATAL
    # D-15: the schema before the first write. Normalization writes the legacy tables, so a
    # file that is not QingLong's is refused here, with nothing written, not after it.
    from reconciler.cli._flight import single_flight
    from reconciler.cli._reconcile import check_database

    check_database(args.db)
    # D-20: one start-up at a time per database, held across normalization, shadow, primary
    # and sweep; the wait for it is charged to the same one budget. Held past the budget:
    # StartupLocked, exit 75 (try again), before anything is written.
    took: dict[str, float] = {}
    with single_flight(args.db, lock):
        mark = time.monotonic()
        if args.legacy_normalize:
            _normalize(args.db, lock)
            took["normalize"], mark = time.monotonic() - mark, time.monotonic()
        shadow = run_shadow(args.db, profile=profile, origins=args.origins, lock=lock)
        took["shadow"], mark = time.monotonic() - mark, time.monotonic()
        summary, code = primary_pass(args.db, args.receipt_root, profile, lock)
        took["primary"], mark = time.monotonic() - mark, time.monotonic()
        safe = bool(summary.get("safe", False)) and code == EXIT_SAFE
        from reconciler.cli._sweep import startup_sweep

        sweep = startup_sweep(args.db, args.receipt_root, run=safe, lock=lock)
        if safe:
            took["sweep"] = time.monotonic() - mark
    took["total"] = time.monotonic() - started
    if client is not None:
        _metrics(client, args.metrics_file, args.db, shadow.audit, summary, safe, took)
    if args.json:
        print_json(
            {
                "shadow": shadow.audit,
                "primary": summary,
                "sweep": sweep,
                "safe": safe,
                "first_boot": first_boot,
            }
        )
    else:
        text = human_startup(shadow.audit, summary, safe, args.db, sweep, args.receipt_root)
        if first_boot:
            text = f"{first_boot_line(args.db)}\n{text}"
        sys.stdout.write(text + "\n")
    warn_unknown_origins(shadow.audit, args.origins)
    return code if code in (EXIT_SAFE, 3, EXIT_USAGE, EXIT_FATAL) else EXIT_FATAL


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
