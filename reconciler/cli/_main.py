"""`qlfsm`: one console script, each command implemented in its own module and imported only
when asked for (the start-up path must not pay for the diagram renderer, and a disabled
shadow pass must not import storage at all)."""

from __future__ import annotations

import importlib
import sys

from reconciler.cli._util import EXIT_USAGE, run_command

COMMANDS: dict[str, tuple[str, str, str]] = {
    "db": ("reconciler.cli._db", "db_command", "db init --db PATH: create or upgrade the schema"),
    "inspect": ("reconciler.cli._db", "inspect_command", "runs, attempts and events (read-only)"),
    "reconcile": ("reconciler.cli._reconcile", "reconcile_command", "ADR-0068 start-up pass"),
    "shadow": ("reconciler.cli._shadow", "shadow_command", "ADR-0448 legacy-shadow pass"),
    "startup": ("reconciler.cli._shadow", "startup_command", "normalize, shadow, then primary"),
    "launch": ("reconciler.node._launcher", "launch_command", "start a prepared run's command"),
    "diagrams": ("reconciler.cli._diagrams", "diagrams_command", "render / check the diagrams"),
    "demo": ("reconciler.cli._demo", "demo_command", "end-to-end demo in a fresh directory"),
}

USAGE = (
    "usage: qlfsm COMMAND [ARGS...]   (qlfsm COMMAND --help for each)\n\ncommands:\n"
    + "\n".join(f"  {name:<10} {doc}" for name, (_, _, doc) in COMMANDS.items())
)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write("qlfsm: error: name a command; see `qlfsm --help`\n")
        return EXIT_USAGE
    if args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        sys.stderr.write(
            f"qlfsm: error: unknown command {name!r}; choose one of {', '.join(COMMANDS)}\n"
        )
        return EXIT_USAGE
    module_name, func_name, _ = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        sys.stderr.write(f"qlfsm: error: `qlfsm {name}` is not part of this build yet\n")
        return EXIT_USAGE
    func = getattr(module, func_name)
    return run_command(rest, func) if not getattr(func, "handles_errors", False) else func(rest)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
