"""`qlfsm`: one console script, each command implemented in its own module and imported only
when asked for (the start-up path does not load the diagram renderer)."""

from __future__ import annotations

import importlib
import sys

# The guards are installed before any command module is imported, so a signal during a command
# module's import is handled too (one during the `reconciler` package's import is remembered by
# reconciler/_interrupt.py and raised when the guards are installed).
from reconciler.cli import _guard
from reconciler.cli._exit import EXIT_USAGE

COMMANDS: dict[str, tuple[str, str, str]] = {
    "db": ("reconciler.cli._db", "db_command", "db init --db PATH: create or upgrade the schema"),
    "inspect": ("reconciler.cli._db", "inspect_command", "runs, attempts and events (read-only)"),
    "reconcile": ("reconciler.cli._reconcile", "reconcile_command", "ADR-0068 start-up pass"),
    "shadow": ("reconciler.cli._shadow", "shadow_command", "ADR-0448 legacy-shadow pass"),
    "startup": ("reconciler.cli._startup", "startup_command", "normalize, shadow, then primary"),
    "drain": ("reconciler.cli._drain", "drain_command", "more than 256 candidates, page by page"),
    "explain": ("reconciler.cli._explain", "explain_command", "one run's path and decisions"),
    "resolve": ("reconciler.cli._resolve", "resolve_command", "an operator's audited decision"),
    "sweep": ("reconciler.cli._sweep", "sweep_command", "remove what ended runs left behind"),
    "launch": ("reconciler.cli._launch", "launch_command", "start a prepared run's command"),
    "diagrams": ("reconciler.cli._diagrams", "diagrams_command", "render / check the diagrams"),
    "demo": ("reconciler.cli._demo", "demo_command", "end-to-end demo in a fresh directory"),
}

USAGE = (
    "usage: qlfsm COMMAND [ARGS...]   (qlfsm COMMAND --help for each; qlfsm --version)\n\n"
    "commands:\n" + "\n".join(f"  {name:<10} {doc}" for name, (_, _, doc) in COMMANDS.items())
)
# When the package metadata cannot be read (run from a bare source tree): pyproject's version.
FALLBACK_VERSION = "0.1.0"


def version() -> str:
    """The installed distribution's version (importlib.metadata), else FALLBACK_VERSION."""
    from importlib import metadata

    try:
        return metadata.version("qlfsm")
    except metadata.PackageNotFoundError:
        return FALLBACK_VERSION


# `shadow` fails open (spec 06): an interrupt or an unwritable stdout still exits 0.
FAIL_OPEN = frozenset({"shadow"})


def main(argv: list[str] | None = None) -> int:
    """The `qlfsm` entry point. Never raises: every ending is one stderr line and an exit code
    (spec 06; README "Exit codes"). ``argv`` None = the process's own command line (the console
    script, ``python -m reconciler``): a signal then ends the process by that signal after the
    line; with an explicit ``argv`` (in-process use) the code is returned and the caller's
    handlers and streams are restored."""
    args = list(sys.argv[1:] if argv is None else argv)
    fail_open = bool(args) and args[0] in FAIL_OPEN
    try:
        try:
            _guard.start(in_process=argv is not None)
            code = _dispatch(args)
        finally:
            _guard.settle()  # from here on a signal waits: the ending below is not cut
    except SystemExit as exc:  # argparse's --help, or a command's own sys.exit
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        code = _ended_by(exc, fail_open, debug="--debug" in args)
    return _guard.finish(code, fail_open=fail_open)


def _dispatch(args: list[str]) -> int:
    if not args:
        sys.stderr.write("qlfsm: error: name a command; see `qlfsm --help`\n")
        return EXIT_USAGE
    if args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return 0
    if args[0] in ("-V", "--version"):
        sys.stdout.write(f"qlfsm {version()}\n")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        import difflib

        from reconciler._escape import clean

        near = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
        hint = f"did you mean `qlfsm {near[0]}`? " if near else ""
        # D-14 / D-23: the typed word escaped; the suggestion is one of ours.
        _guard.say(
            f"qlfsm: error: unknown command {clean(name)!r}; {hint}choose one of "
            f"{', '.join(COMMANDS)}"
        )
        return EXIT_USAGE
    module_name, func_name, _ = COMMANDS[name]
    func = getattr(importlib.import_module(module_name), func_name)
    if name in FAIL_OPEN:  # it prints its audit record whatever happens: its own errors
        return int(func(rest))
    from reconciler.cli._util import run_command

    return run_command(rest, func)


def _ended_by(exc: BaseException, fail_open: bool, *, debug: bool) -> int:
    """What escaped the command's own handler: a signal that arrived outside it (the module
    import, argument parsing) or an error outside ``run_command``."""
    cause = _guard.interrupt_in(exc)
    if cause is not None:
        return _guard.interrupted(cause, fail_open=fail_open)
    if debug:
        import traceback

        traceback.print_exception(exc)
    else:
        what = f"{type(exc).__name__}: {exc}"
        _guard.say(f"qlfsm: error: unexpected {what} (rerun with --debug for details)")
    return 0 if fail_open else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
