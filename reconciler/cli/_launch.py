"""`qlfsm launch` (spec 06): the command line of :func:`reconciler.node.launch`."""

from __future__ import annotations

import sys
from typing import IO

from reconciler.cli._util import FatalError, UsageError, clean, parser, print_json
from reconciler.node._launcher import LaunchFailed, LaunchRefused, launch
from reconciler.node._receipt_store import validate_receipt_root


def launch_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm launch",
        "Start a prepared run's command (queued/dispatching, one claimed local_process "
        "attempt) in its own process group; exit 0 once its handle is committed.",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file")
    p.add_argument("--receipt-root", required=True, help="absolute completion-receipt root")
    p.add_argument("--run-id", required=True, help="the prepared run")
    p.add_argument("--wait", action="store_true", help="wait and exit with the command's code")
    p.add_argument("--log", help="append the command's stdout/stderr to this file")
    p.add_argument("--json", action="store_true", help="print the launch as one JSON object")
    p.add_argument("command", nargs="*", help="the command, after `--`")
    args = p.parse_args(argv)
    if not args.command:
        raise UsageError("qlfsm launch: give the command after `--`, e.g. `-- sleep 5`")
    try:
        root = validate_receipt_root(args.receipt_root)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    from storage import check_schema, connect

    conn = connect(args.db)
    log: IO[bytes] | None = None
    try:
        check_schema(conn, path=args.db)  # D-15: before the first write
        if args.log:
            log = open(args.log, "ab")  # noqa: SIM115 - closed below, after the spawn
        try:
            launched = launch(conn, root, args.run_id, args.command, log=log)
        except LaunchRefused as exc:
            raise UsageError(f"qlfsm launch: {exc}") from exc
        except LaunchFailed as exc:
            raise FatalError(f"qlfsm launch: {exc}") from exc
    finally:
        conn.close()
        if log is not None:
            log.close()
    if args.json:
        print_json(launched.as_dict())
    else:
        sys.stdout.write(
            f"launched run {clean(launched.run_id)} attempt {clean(launched.attempt_id)} "
            f"pid {launched.pid}\n"
        )
        sys.stdout.flush()
    if not args.wait:
        # The wrapper lives on in its own session and is re-parented when we exit; we never
        # reap it. Marking the Popen finished stops its finalizer from tracking it as a child
        # still to be waited for (and from warning about it): its real status is the receipt.
        launched.process.returncode = 0
        return 0
    code = launched.process.wait()
    return 128 - code if code < 0 else code
