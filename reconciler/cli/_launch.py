"""`qlfsm launch` (spec 06): the command line of :func:`reconciler.launcher.launch`."""

from __future__ import annotations

import contextlib
from typing import Any

from reconciler._escape import clean, shell_word
from reconciler.cli._exit import FatalError, UsageError
from reconciler.cli._util import operator_login, parser, print_json
from reconciler.launcher import LaunchFailed, LaunchRefused, launch
from reconciler.node import validate_receipt_root


def _create(conn: Any, run_id: str, attempt_id: str | None, login: str | None) -> None:
    """The queued Run and its claimed Attempt, as QingLong's scheduler writes them (spec 01;
    ``storage.Repository.create_primary_run``), in one transaction; D-23."""
    from reconciler.node import SystemClock, validate_id
    from reconciler.ops import operator_actor
    from storage import InvalidField, Repository, uuid7

    attempt = attempt_id if attempt_id is not None else uuid7()
    for what, value in (("--run-id", run_id), ("--attempt-id", attempt)):
        if not validate_id(value):
            raise UsageError(
                f"{what} {shell_word(value)} is not a valid execution id (spec 03): use 1-36 "
                "characters from A-Z a-z 0-9 . _ : - starting with a letter or digit"
            )
    try:
        Repository(conn).create_primary_run(
            run_id=run_id, attempt_id=attempt, at_ms=SystemClock().now_ms(),
            actor=operator_actor(operator_login(login)),
        )  # fmt: skip
    except InvalidField as exc:
        raise UsageError(f"--create: {exc}; nothing was written") from exc


def launch_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm launch",
        "Start a prepared run's command (queued/dispatching, one claimed local_process "
        "attempt) in its own process group; exit 0 once its handle is committed.",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file")
    p.add_argument("--receipt-root", required=True, help="absolute completion-receipt root")
    p.add_argument("--run-id", required=True, help="the prepared run (with --create: a new id)")
    p.add_argument(
        "--create",
        action="store_true",
        help="first create the run as QingLong's scheduler does: a new runtime Run `queued` "
        "with one `claimed` local_process Attempt, events run.created and run.queued, in one "
        "transaction (an existing run id is refused)",
    )
    p.add_argument(
        "--attempt-id", help="with --create: the new Attempt's id (default: a fresh UUIDv7)"
    )
    p.add_argument(
        "--operator",
        metavar="NAME",
        help="with --create: who asks (default: $SUDO_USER, $USER or $LOGNAME); the actor is "
        "user operator:NAME",
    )
    p.add_argument("--wait", action="store_true", help="wait and exit with the command's code")
    p.add_argument("--log", help="append the command's stdout/stderr to this file")
    p.add_argument("--json", action="store_true", help="print the launch as one JSON object")
    p.add_argument("command", nargs="*", help="the command, after `--`")
    args = p.parse_args(argv)
    if not args.command:
        raise UsageError("qlfsm launch: give the command after `--`, e.g. `-- sleep 5`")
    if args.attempt_id is not None and not args.create:
        raise UsageError("--attempt-id names the Attempt --create makes; add --create")
    try:
        root = validate_receipt_root(args.receipt_root)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    from storage import check_schema, connect

    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(contextlib.closing(connect(args.db)))
        check_schema(conn, path=args.db)  # D-15: before the first write
        log = stack.enter_context(open(args.log, "ab")) if args.log else None  # after the spawn
        if args.create:
            _create(conn, args.run_id, args.attempt_id, args.operator)
        try:
            launched = launch(conn, root, args.run_id, args.command, log=log)
        except LaunchRefused as exc:
            if args.create:
                raise UsageError(
                    f"run {clean(args.run_id)} was created (queued, its Attempt claimed) but not "
                    f"launched: {exc}; fix that, then `qlfsm launch --run-id "
                    f"{shell_word(args.run_id)} -- CMD` (without --create)"
                ) from exc
            raise UsageError(f"qlfsm launch: {exc}") from exc
        except LaunchFailed as exc:
            raise FatalError(f"qlfsm launch: {exc}") from exc
    if args.json:
        print_json(launched.as_dict())
    else:
        print(
            f"launched run {clean(launched.run_id)} attempt {clean(launched.attempt_id)} "
            f"pid {launched.pid}",
            flush=True,
        )
    if not args.wait:
        # The wrapper lives on in its own session and is re-parented when we exit; we never
        # reap it. Marking the Popen finished stops its finalizer from tracking it as a child
        # still to be waited for (and from warning about it): its real status is the receipt.
        launched.process.returncode = 0
        return 0
    code = launched.process.wait()
    return 128 - code if code < 0 else code
