"""What every `qlfsm` command shares: argument parsing that errors in one line, exit codes,
and the rule that a user never sees a traceback (unless ``--debug``)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from reconciler._escape import json_line, one_line, shell_word
from reconciler.cli._exit import (
    EXIT_FATAL,
    EXIT_TEMPFAIL,
    EXIT_USAGE,
    FatalError,
    RetryLater,
    UsageError,
)
from reconciler.cli._guard import Terminated, interrupt_in, interrupted


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def parser(prog: str, description: str) -> Parser:
    p = Parser(prog=prog, description=description)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def pass_arguments(p: Parser, *, json_help: str, dry_run_help: str) -> None:
    """The arguments of a local ADR-0068 pass (`reconcile`, `drain`): --db, --receipt-root,
    --profile, --json and --dry-run."""
    from reconciler._profiles import LOCAL_PROFILES, PROFILE_ENV, PROFILES

    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--receipt-root", required=True, help="absolute completion-receipt root")
    p.add_argument(
        "--profile",
        default=None,
        help=f"one of {', '.join(PROFILES)}; only {' or '.join(LOCAL_PROFILES)} run this "
        f"local pass (default: ${PROFILE_ENV}, else standalone)",
    )
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--dry-run", action="store_true", help=dry_run_help)


def operator_login(name: str | None) -> str | None:
    """Who an operator's command names as its actor: ``--operator`` NAME, else the login that
    runs it ($SUDO_USER, $USER or $LOGNAME, the first one set)."""
    logins = filter(None, map(os.environ.get, ("SUDO_USER", "USER", "LOGNAME")))
    return name if name is not None else next(logins, None)


def run_command(argv: list[str], body: Callable[[list[str]], int]) -> int:
    """Run a command body; map errors to one stderr line and an exit code (spec 06)."""
    try:
        return body(argv)
    except (UsageError, FatalError, RetryLater) as exc:
        _fail(str(exc))
        if isinstance(exc, UsageError):
            return EXIT_USAGE
        return EXIT_FATAL if isinstance(exc, FatalError) else EXIT_TEMPFAIL
    except (KeyboardInterrupt, Terminated, Exception) as exc:
        # SIGINT / SIGTERM / SIGHUP (reconciler.cli._guard), or a signal that Python re-raised
        # as another error: one line, 130 / 143 / 129; never a traceback.
        cause = interrupt_in(exc)
        if cause is not None:
            return interrupted(cause)
        if "--debug" in argv:
            raise
        # Storage errors carry their own one-line advice; anything else is still one line.
        from storage import Busy, StorageError

        if not isinstance(exc, StorageError):
            _fail(f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for details)")
            return EXIT_FATAL
        _fail(str(exc))
        # D-20: another process held the database (or the start-up lock) past the lock
        # budget: transient, one line, exit 75 (EX_TEMPFAIL), for every command.
        return EXIT_TEMPFAIL if isinstance(exc, Busy) else EXIT_FATAL


# D-23: one prefix per line. A message that names its command first (`qlfsm resolve: ...`,
# argparse's `prog: ...`) loses that name here: `qlfsm: error: ` already says whose line it is.
_OWN_PREFIX = re.compile(r"qlfsm(?: [a-z][a-z-]*){1,2}: ")


def _fail(message: str) -> None:
    # D-14: a message may repeat an argument or a path; it stays one line, nothing in it acts.
    text = one_line(message)
    if (own := _OWN_PREFIX.match(text)) is not None:
        text = text[own.end() :]
    sys.stderr.write(f"qlfsm: error: {text}\n")


def print_json(obj: Any) -> None:
    # D-14: DEL, C1, U+2028/U+2029, bidi controls as \uXXXX: one line for every reader.
    sys.stdout.write(json_line(obj) + "\n")


def print_result(as_json: bool, data: Any, human: Callable[[], str]) -> None:
    """``data`` as one JSON line (``--json``), else the text ``human()`` renders for a person."""
    if as_json:
        print_json(data)
    else:
        sys.stdout.write(human() + "\n")


def unknown_run(db: str, run: str) -> UsageError:
    """A run id the database does not hold (`explain`, `resolve`), and where to list them."""
    return UsageError(
        f"run {run!r} is not in {db}; list runs with `qlfsm inspect --db {shell_word(db)}`"
    )
