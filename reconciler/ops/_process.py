"""What `/proc` says now about an active Attempt's process, for `explain` and `resolve`.

The start-up pass decides on the durable handle (spec 03 "Inspection": boot id, pid, process
group, start ticks) and compares the handle's pid with `RunAttempts.pid` (spec 04 row 11). An
operator deciding by hand needs the same facts, and the one pid that is safe to signal: the
handle's, whose identity the probe proved, with its process group — never `RunAttempts.pid`
unproven (docs/decisions.md D-23). Only numbers and verdicts are shown: never a command line,
an environment or a working directory (spec 05 privacy, applied to the operator's view too).

Reads only: the boot id and `<pid>/stat` through the node's provider.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from reconciler.node import (
    ProcessProvider,
    inspect_handle,
    parse_handle,
    parse_proc_stat,
)
from storage import AttemptRow


def _stat_now(provider: ProcessProvider, pid: int) -> dict[str, Any]:
    """`/proc/<pid>/stat` now: whether a process holds the pid, its group, ticks and state."""
    try:
        text = provider.read_stat(pid)
    except Exception:  # spec 03: any provider error is "unknown", never "gone"
        return _stat(None)
    if text is None:
        return _stat(False)
    snap = parse_proc_stat(text, pid)
    if snap is None:  # a stat line we cannot read: something is there, we cannot say what
        return _stat(True)
    return _stat(True, snap.pgrp, snap.start_ticks, snap.state)


def _stat(
    exists: bool | None, pgid: int | None = None, ticks: str | None = None, state: str | None = None
) -> dict[str, Any]:
    return {"exists": exists, "pgid": pgid, "start_ticks": ticks, "state": state}


def process_view(
    attempt: AttemptRow, provider: ProcessProvider, *, platform: str = sys.platform
) -> dict[str, Any]:
    """The evidence of one active Attempt, as the pass would read it, and `/proc` now.

    ``handle``: what the stored `ql3lp1` handle says (null when it does not parse: row 10);
    ``recorded_pid``: `RunAttempts.pid`; ``pid_matches``: the row 11 comparison; ``boot``:
    `same` / `different` / `unknown` (the handle's boot id against this boot's); ``now``: the
    handle pid's `/proc/<pid>/stat` now (exists, group, start ticks, state); ``recorded_now``:
    the same for `RunAttempts.pid` when it differs; ``verdict`` / ``probe_reason``: spec 03's
    three-valued answer; ``alive``: the handle's exact identity is running now."""
    evidence = inspect_handle(attempt.executor_handle, provider, platform=platform)
    handle = parse_handle(attempt.executor_handle)
    linux = platform.startswith("linux")
    view: dict[str, Any] = {
        "attempt_id": attempt.id,
        "status": attempt.status,
        "recorded_pid": attempt.pid,
        "handle": None,
        "pid_matches": None,
        "boot": "unknown",
        "now": None,
        "recorded_now": None,
        "verdict": evidence.verdict,
        "probe_reason": evidence.reason,
        "alive": evidence.verdict == "running",
    }
    if not attempt.executor_handle:
        view["probe_reason"] = "handle_missing"
        view["verdict"] = "unknown"
    if handle is not None:
        view["handle"] = {
            "pid": handle.pid,
            "pgid": handle.pgid,
            "start_ticks": handle.start_ticks,
        }
        view["pid_matches"] = handle.pid == attempt.pid
        if linux:
            with contextlib.suppress(Exception):  # spec 03: unreadable stays unknown
                view["boot"] = "same" if provider.boot_id() == handle.boot_id else "different"
            if view["boot"] == "same":
                view["now"] = _stat_now(provider, handle.pid)
    if (
        linux
        and isinstance(attempt.pid, int)
        and attempt.pid > 0
        and (handle is None or attempt.pid != handle.pid)
    ):
        view["recorded_now"] = _stat_now(provider, attempt.pid)
    return view
