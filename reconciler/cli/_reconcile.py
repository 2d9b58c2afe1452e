"""`qlfsm reconcile` (spec 06): parses, calls the application layer's pass
(``reconciler._reconcile.primary_pass``), prints the summary and maps it to an exit code.

The zero-candidate start-up must cost one SQL statement and nothing else (spec 04, ADR-0068 §6),
so this module loads only the light part of the standard library: not ``typing``, nor
``argparse`` or ``json`` — the usual command line is parsed by hand (argparse serves help and
errors) and the empty summary is written by hand, each measured in benchmarks/README.md
"Exceptions" — ``reconciler.cli._exit`` and the application layer's light pass module.
"""

from __future__ import annotations

import sys

from reconciler._profiles import LOCAL_PROFILES, PROFILE_ENV, PROFILES
from reconciler._reconcile import default_profile, primary_pass
from reconciler.cli._exit import EXIT_BLOCKED, EXIT_SAFE

TYPE_CHECKING = False  # no `typing` at run time (see the module docstring)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def exit_code(summary: Mapping[str, Any]) -> int:
    return EXIT_SAFE if summary["safe"] else EXIT_BLOCKED


def reconcile_command(argv: list[str]) -> int:
    """`qlfsm reconcile`. The usual command line is read without argparse (the zero-candidate
    path must not import it); anything else (help, a typo, an abbreviation) goes to argparse,
    which says what is wrong. Errors are mapped by ``run_command``, loaded only then."""
    quick = _quick_args(argv)
    if quick is None:
        from reconciler.cli._util import run_command

        return run_command(argv, _parsed)
    try:
        return _reconcile(quick)
    except Exception as exc:
        from reconciler.cli._util import run_command

        failed = exc

        def again(_: list[str]) -> int:
            raise failed  # mapped to its one line and exit code like any command's error

        return run_command(argv, again)


reconcile_command.handles_errors = True  # type: ignore[attr-defined]


class _Args:
    """The flags of `qlfsm reconcile`, as argparse would give them."""

    def __init__(self) -> None:
        self.db: str | None = None
        self.receipt_root: str | None = None
        self.profile: str | None = None
        self.json = False
        self.dry_run = False
        self.debug = False


_VALUES = {"--db": "db", "--receipt-root": "receipt_root", "--profile": "profile"}
_SWITCHES = {"--json": "json", "--dry-run": "dry_run", "--debug": "debug"}


def _quick_args(argv: list[str]) -> _Args | None:
    """The flags when ``argv`` is spelled out plainly (``--db PATH`` or ``--db=PATH``), else
    None (argparse then parses it, and explains what it does not accept)."""
    args = _Args()
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _SWITCHES:
            setattr(args, _SWITCHES[word], True)
            i += 1
            continue
        name, eq, value = word.partition("=")
        if name not in _VALUES:
            return None
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            i += 1
            value = argv[i]
        setattr(args, _VALUES[name], value)
        i += 1
    if args.db is None or args.receipt_root is None:
        return None
    return args


def _parsed(argv: list[str]) -> int:
    from reconciler.cli._util import parser

    p = parser(
        "qlfsm reconcile",
        "ADR-0068 start-up pass: receipts first, then process identity, one grace, the "
        "receipt again; exit 0 safe, 3 blocked, 2 usage, 1 fatal, 4 output lost, "
        "75 locked (try again), 130/143 interrupted. One start-up at a time per database: a "
        "second one waits for the first. $QLFSM_LOCK_BUDGET_S: the most seconds the pass "
        "waits for another process's write lock or start-up (default 5).",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--receipt-root", required=True, help="absolute completion-receipt root")
    p.add_argument(
        "--profile",
        default=None,
        help=f"one of {', '.join(PROFILES)}; only {' or '.join(LOCAL_PROFILES)} run this "
        f"local pass (default: ${PROFILE_ENV}, else standalone)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="decide every candidate (real receipt reads, real probes, the grace) and write "
        "nothing: no commit, quarantine, journal change, receipt moved or deleted",
    )
    return _reconcile(p.parse_args(argv))


def _reconcile(args: Any) -> int:
    profile = args.profile if args.profile is not None else default_profile()
    summary = primary_pass(args.db, args.receipt_root, profile, dry_run=args.dry_run)
    if args.json:
        text = _flat_json(summary)
        if text is None:
            # As cli._util.print_json (D-14), without loading argparse on the pass path.
            from reconciler._escape import json_line

            text = json_line(summary)
        sys.stdout.write(text + "\n")
    else:
        sys.stdout.write(render(summary, args.db, args.receipt_root) + "\n")
    return exit_code(summary)


def _flat_json(summary: Mapping[str, Any]) -> str | None:
    """``json.dumps(summary)`` for a summary without candidates (booleans and integers only),
    without importing json; None for any other summary."""
    parts = []
    for key, value in summary.items():
        if value is True or value is False:
            shown = "true" if value else "false"
        elif type(value) is int:
            shown = str(value)
        elif value == [] and type(value) is list:
            shown = "[]"
        else:
            return None
        parts.append(f'"{key}": {shown}')
    return "{" + ", ".join(parts) + "}"


def render(summary: dict[str, Any], db: str, receipt_root: str | None = None) -> str:
    """The human summary: one line of counts, the candidates, what blocks start-up (with the
    command that explains each blocking run) and the verdict (``_verdict``: one wording)."""
    from reconciler.cli._verdict import blocking_lines, verdict_line

    head = (
        f"scanned {summary['scanned']}: recovered {summary['recovered']}, remaining "
        f"{summary['remaining']}, unresolved {summary['unresolved']}, failed "
        f"{summary['failed']}" + (" (page truncated at 256)" if summary["truncated"] else "")
    )
    lines = [head]
    if summary["candidates"]:
        # At most 100 columns a line, the reason shortened (its full text in --json): D-22.
        from reconciler.cli._report import candidate_lines

        lines.extend(candidate_lines(summary, reconcile=True))
    blocking = blocking_lines(summary, db, receipt_root)
    if blocking:
        lines.append("")
        lines.extend(blocking)
    verdict = verdict_line(bool(summary["safe"]))
    if summary.get("dry_run"):
        verdict = f"dry run, nothing written; the pass would say: {verdict}"
    lines.append(verdict)
    return "\n".join(lines)
