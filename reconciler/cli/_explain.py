"""`qlfsm explain --db PATH --run ID [--json] [--svg FILE]` (spec 06): one run's path through
the Run and Attempt machines, read-only. The path is built by ``reconciler.ops._explain``; the
drawing by ``reconciler.diagrams._path``."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from reconciler._profiles import PROFILES
from reconciler.cli._text import clean, shell_word
from reconciler.cli._util import FatalError, UsageError, parser, print_json, table
from reconciler.ops import iso_time

_ACTIVE_ATTEMPT = frozenset({"claimed", "starting", "running"})
# The evidence fields of a recovery decision, in the order ADR-0068 §2 gathers them.
_EVIDENCE_ORDER = ("receipt", "process", "probe_reason", "pid_matches", "grace_paid", "reread")


def explain_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm explain",
        "One run's path through the Run and Attempt machines, from its events: time, actor, "
        "from -> to, trigger, and the row, reason and evidence of each recovery decision. "
        "Read-only. Exit 0, 2 unknown run or no dot for --svg, 1 unusable database.",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--run", required=True, metavar="ID", help="the run to explain")
    p.add_argument("--json", action="store_true", help="print the path as one JSON object")
    p.add_argument(
        "--svg",
        metavar="FILE",
        help="also write the Run and Attempt diagrams with this run's edges highlighted and "
        "numbered (needs Graphviz dot: pip install '.[diagrams]')",
    )
    p.add_argument("--dot", help="the dot program for --svg (default: $QLFSM_DOT, graphviz-pure)")
    p.add_argument(
        "--receipt-root",
        metavar="DIR",
        help="for a runtime run still queued/dispatching/running: also show the decision "
        "start-up would take NOW, from a dry run of `qlfsm reconcile` (reads the receipts, "
        "probes the processes, may wait the grace once; writes nothing)",
    )
    p.add_argument(
        "--profile",
        help=f"deployment profile of that dry run, one of {', '.join(PROFILES)} "
        "(default: $QL_DEPLOYMENT_PROFILE, standalone)",
    )
    p.add_argument(
        "--origins",
        help="for a legacy run still active: the enabled origins of the ADR-0448 decision it "
        "would get now (default: $QL3_SHADOW_ORIGINS; none enabled = row 1, skipped)",
    )
    args = p.parse_args(argv)
    if args.svg is not None:
        parent = os.path.dirname(os.path.abspath(args.svg))
        if not os.path.isdir(parent):
            raise UsageError(f"--svg {args.svg!r}: directory {parent!r} does not exist")
    if args.receipt_root is not None:
        # The rules of the pass whose decision it shows, whatever the run (D-16): exit 2.
        from reconciler._reconcile import check_receipt_root, inspect_receipt_root

        inspect_receipt_root(check_receipt_root(args.receipt_root))
    from reconciler._reconcile import open_database
    from reconciler.ops import ACTIVE_RUN, UnknownRun, explain
    from storage import check_schema

    conn = open_database(args.db)
    try:
        check_schema(conn, path=args.db)
        try:
            found = explain(conn, args.run)
        except UnknownRun as exc:
            raise UsageError(
                f"run {args.run!r} is not in {args.db}; list runs with "
                f"`qlfsm inspect --db {shell_word(args.db)}`"
            ) from exc
        if found.run.status in ACTIVE_RUN and found.run.execution_owner == "legacy":
            found.now = _legacy_now(conn, found.run, args.origins)
    finally:
        conn.close()
    if (
        found.run.status in ACTIVE_RUN
        and found.run.execution_owner == "runtime"
        and args.receipt_root is not None
    ):
        found.now = _primary_now(args.db, args.receipt_root, args.profile, found.run.id)
    if found.run.status in ACTIVE_RUN and found.run.execution_owner == "runtime":
        _decide(found, args.db)
    if args.svg is not None:
        _write_svg(args.svg, found, args.dot)
    data = found.as_dict()
    if args.json:
        print_json(data)
    else:
        sys.stdout.write(render(data) + "\n")
        if args.svg is not None:
            sys.stdout.write(f"\ndiagrams with this run's edges: {clean(args.svg)}\n")
    return 0


# The outcomes of spec 04 that leave a run for an operator (start-up BLOCKED on it).
_BLOCKING = frozenset({"unresolved", "failed"})


def _decide(found: Any, db: str) -> None:
    """What `/proc` says now about each active Attempt, and the decision to make: `resolve`
    with the targets fsm's lifecycle tables allow from where the run is (D-23). Reads only."""
    from fsm import ATTEMPT_ACTIVE
    from reconciler.node import ProcProvider
    from reconciler.ops import legal_targets, process_view, stop_command

    active = [a for a in found.attempts if a.status in ATTEMPT_ACTIVE]
    provider = ProcProvider()
    found.processes = [process_view(a, provider) for a in active]
    targets = legal_targets(found.run.status, [a.status for a in active])
    now = found.now
    blocks = None if now is None or now.get("outcome") is None else now["outcome"] in _BLOCKING
    command = None
    if targets:
        command = (
            f"qlfsm resolve --db {shell_word(db)} --run {shell_word(found.run.id)} "
            f"--to {'|'.join(targets)} --reason '…'"
        )
    found.decide = {
        "blocks": blocks,
        "targets": targets,
        "command": command,
        "stop": stop_command(found.processes),
    }


def _legacy_now(conn: Any, run: Any, origins: str | None) -> dict[str, Any]:
    """ADR-0448's row for this run now, with the origins `startup` would enable."""
    from reconciler.ops import legacy_now
    from reconciler.shadow import ORIGINS_ENV, parse_origins

    chosen = parse_origins(origins if origins is not None else os.environ.get(ORIGINS_ENV))
    return legacy_now(conn, run, frozenset(chosen.enabled))


def _primary_now(db: str, root: str, profile: str | None, run_id: str) -> dict[str, Any]:
    """ADR-0068's row for this run now: what a dry run decides for this one candidate (only it
    is read and probed, the grace paid only when it needs it; retained, the final verifier
    proves it again). Checked and opened as a dry run of the pass is."""
    from reconciler._reconcile import (
        check_profile,
        check_receipt_root,
        default_profile,
        inspect_receipt_root,
        lock_budget_s,
        open_database,
    )
    from reconciler.node import FileReceiptStore, ProcProvider, ReceiptRootError, SystemClock
    from reconciler.ops import ADR0068, ROW_FACTS
    from reconciler.primary import predict
    from storage import check_schema

    root = check_receipt_root(root)
    profile = check_profile(profile if profile is not None else default_profile())
    inspect_receipt_root(root)
    conn = open_database(db, read_only=True)
    try:
        conn.execute("PRAGMA query_only = ON")  # nothing may be written
        check_schema(conn, path=db)
        try:
            entry, truncated = predict(
                conn,
                FileReceiptStore(root),
                ProcProvider(),
                SystemClock(),
                run_id,
                profile=profile,
                budget=lock_budget_s(),
            )
        except ReceiptRootError as exc:
            raise UsageError(f"{exc}; nothing was written") from exc
    finally:
        conn.close()
    if entry is None:
        why = (
            "the candidate page was truncated before it"
            if truncated
            else "not a start-up candidate (spec 04 selects runtime runs dispatching/running)"
        )
        return {"record": ADR0068, "row": None, "outcome": None, "reason": why}
    row = str(entry["row"])
    return {
        "record": ADR0068,
        "row": row,
        "outcome": entry["outcome"],
        "reason": entry["reason"],
        "row_facts": ROW_FACTS.get((ADR0068, row)),
    }


def _write_svg(path: str, found: Any, dot: str | None) -> None:
    from reconciler.diagrams import DiagramsError, path_svg

    title = f"run {found.run.id}: the edges it took, numbered by event sequence"
    taken = {"run": found.taken("run"), "attempt": found.taken("attempt")}
    try:
        svg = path_svg(title, taken, dot)
    except DiagramsError as exc:
        raise UsageError(f"--svg: {exc}") from exc
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(svg)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise FatalError(f"--svg {path!r} cannot be written ({exc.strerror})") from exc


def render(data: Mapping[str, Any]) -> str:
    run = data["run"]
    lines = [
        f"run {clean(run['id'])} ({clean(run['execution_owner'])}, "
        f"{clean(run['execution_origin'])}): now {clean(run['status'])}"
        + (f" ({clean(run['error_code'])})" if run["error_code"] else "")
    ]
    for a in data["attempts"]:
        lines.append(
            f"attempt {a['attempt']} {clean(a['id'])}: {a['status']}"
            + (f" ({clean(a['error_code'])})" if a["error_code"] else "")
            + (f", exit {a['exit_code']}" if a["exit_code"] is not None else "")
        )
    status_of = {a["id"]: a["status"] for a in data["attempts"]}
    for j in data["journal"]:
        where = f" at {clean(j['quarantine_ref'])}" if j["quarantine_ref"] else ""
        line = f"receipt journal of attempt {clean(j['attempt_id'])}: {j['state']}{where}"
        status = status_of.get(j["attempt_id"])
        if j["state"] == "quarantined" and status not in _ACTIVE_ATTEMPT:
            # docs/decisions.md D-12 "resolve": the row outlives the decision on purpose.
            line += (
                f"; no longer blocks start-up (the Attempt is {clean(status)}); `qlfsm sweep` "
                f"removes the copy and this row after {iso_time(j['purge_after_ms'])}"
            )
        lines.append(line)
    lines.append("")
    rows = []
    notes: dict[int, list[str]] = {}
    for s in data["steps"]:
        source = s["from"] if s["from"] is not None else "·"
        move = f"{s['machine']}: {source} -> {s['to']}" if s["machine"] else "-"
        actor = s["actor_type"] + (f":{clean(s['actor_id'])}" if s["actor_id"] else "")
        rows.append([str(s["sequence"]), s["at"], actor, move, clean(s["trigger"])])
        notes[s["sequence"]] = _notes(s)
    rendered = table(["#", "time (UTC)", "actor", "edge", "trigger"], rows).splitlines()
    lines.extend(rendered[:2])
    for s, line in zip(data["steps"], rendered[2:], strict=True):
        lines.append(line)
        lines.extend(f"    {n}" for n in notes[s["sequence"]])
    active = run["status"] in ("queued", "dispatching", "running")
    if active and not any(s["row"] for s in data["steps"]):
        lines.append("")
        lines.append(
            "no start-up decision moved this run: a pass writes an event only when it moves a "
            "state (a live process kept running, or a run left unresolved or pending, leaves "
            "none)"
        )
    now = data.get("now")
    if isinstance(now, Mapping):
        lines.append("")
        lines.append(_render_now(now))
    elif active and run["execution_owner"] == "runtime":
        lines.append("")
        lines.append(
            "the decision start-up would take now: add --receipt-root DIR (a dry run: reads "
            "its receipt, probes its process, writes nothing)"
        )
    if data.get("processes"):
        lines.append("")
        lines.append("what /proc says now (pids, groups and ticks only):")
        for view in data["processes"]:
            lines.extend(f"    {x}" for x in render_process(view))
    decide = data.get("decide")
    if isinstance(decide, Mapping):
        lines.append("")
        lines.extend(_render_decide(decide, now))
    return "\n".join(lines)


def render_process(view: Mapping[str, Any]) -> list[str]:
    """One active Attempt's process evidence: the handle, `RunAttempts.pid`, and `/proc` now."""
    head = f"attempt {clean(view['attempt_id'])} ({clean(view['status'])}): "
    handle = view.get("handle")
    recorded = view.get("recorded_pid")
    if not isinstance(handle, Mapping):
        what = "no handle" if view["probe_reason"] == "handle_missing" else "its handle is invalid"
        out = [f"{head}{what} ({clean(view['probe_reason'])}): no process identity to check"]
    else:
        out = [
            f"{head}handle pid {handle['pid']}, process group {handle['pgid']}, start ticks "
            f"{clean(handle['start_ticks'])}",
            "    boot id: "
            + {"same": "this boot's (same)", "different": "another boot's (different)"}.get(
                view["boot"], "unknown (the boot id cannot be read)"
            ),
        ]
        now = view.get("now")
        if view["boot"] != "same":
            out.append(f"    /proc/{handle['pid']} not read: the handle is from another boot")
        elif isinstance(now, Mapping):
            out.append(f"    /proc/{handle['pid']} now: {_stat_words(now, handle)}")
    verdict = f"-> {clean(view['verdict'])} ({clean(view['probe_reason'])})"
    out.append(
        "    "
        + ("ALIVE: the handle's exact process runs " if view["alive"] else "not alive ")
        + verdict
    )
    if recorded is None:
        out.append("    RunAttempts.pid: none recorded")
    elif isinstance(handle, Mapping) and view.get("pid_matches"):
        out.append(f"    RunAttempts.pid {recorded}: the handle's pid")
    else:
        line = f"    RunAttempts.pid {recorded}: " + (
            "differs from the handle's pid (spec 04 row 11)"
            if isinstance(handle, Mapping)
            else "not proven by any handle"
        )
        out.append(line)
        rec_now = view.get("recorded_now")
        if isinstance(rec_now, Mapping):
            out.append(f"    /proc/{recorded} now: {_stat_words(rec_now, None)}")
        out.append(f"    do not signal pid {recorded}: nothing proves it is this job's")
    return out


def _stat_words(now: Mapping[str, Any], handle: Mapping[str, Any] | None) -> str:
    if now.get("exists") is None:
        return "unreadable (unknown)"
    if not now["exists"]:
        return "no such process"
    if now.get("pgid") is None:
        return "a process whose stat line cannot be read"
    text = (
        f"process group {now['pgid']}, start ticks {clean(now['start_ticks'])}, "
        f"state {clean(now['state'])}"
    )
    if handle is not None:
        same = now["pgid"] == handle["pgid"] and str(now["start_ticks"]).lstrip("0") == str(
            handle["start_ticks"]
        ).lstrip("0")
        text += " (the handle's group and ticks)" if same else " (NOT the handle's process)"
    return text


def _render_decide(decide: Mapping[str, Any], now: Any) -> list[str]:
    blocks = decide.get("blocks")
    stop = decide.get("stop")
    out: list[str] = []
    if blocks is False and isinstance(now, Mapping):
        out.append(
            f"nothing to decide: start-up decides this run itself (row {clean(now.get('row'))} "
            f"-> {clean(now.get('outcome'))})"
        )
        if stop:
            out.append(f"    to end the job anyway, stop its process group: {clean(stop)}")
        return out
    if not decide.get("command"):
        out.append("no operator decision applies to this run from where it is")
        return out
    lead = "the decision to make" if blocks else "to decide it by hand"
    out.append(f"{lead} (the legal targets from here: {', '.join(decide['targets'])}):")
    out.append(f"    {decide['command']}")
    out.append("    add --dry-run first to see the edges and events it would write")
    if stop:
        out.append(f"    its process is alive: stop its group first: {clean(stop)}")
        out.append("    (resolve refuses a live job without --force; --force does not stop it)")
    return out


def _render_now(now: Mapping[str, Any]) -> str:
    said = f"start-up now ({clean(now.get('record'))}, nothing written): "
    if now.get("row") is None:
        return said + clean(now.get("reason"))
    head = (
        f"{said}row {clean(now['row'])} -> {clean(now.get('outcome'))} ({clean(now.get('reason'))})"
    )
    out = [head]
    from reconciler.cli._verdict import directory_in, fix_line

    if directory_in(now.get("reason")):
        out.append(f"    {fix_line(now.get('reason'))}")
    if now.get("row_facts"):
        out.append(f"    row {clean(now['row'])}: {clean(now['row_facts'])}")
    evidence = now.get("evidence")
    if isinstance(evidence, Mapping):
        shown = ", ".join(f"{clean(k)}={clean(v)}" for k, v in evidence.items() if v is not None)
        out.append(f"    evidence: {shown}")
        if evidence.get("origin_enabled") is False:
            out.append(
                "    its origin is not enabled: give the origins `startup` runs with "
                "(--origins or $QL3_SHADOW_ORIGINS)"
            )
    return "\n".join(out)


def _notes(step: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    decision = step.get("decision")
    if step.get("row") is not None:
        # The row's words from spec 04 are in the JSON (`row_facts`); here the row and reason.
        record = clean(step.get("record"))
        if step.get("row_recorded") and isinstance(decision, Mapping):
            reason = clean(decision.get("reason"))
            out.append(f"decision: {record} row {clean(step['row'])}: {reason}")
            evidence = decision.get("evidence")
            if isinstance(evidence, Mapping):
                out.append(f"evidence: {describe_evidence(evidence)}")
        else:
            out.append(
                f"decision: {record} row {clean(step['row'])} (inferred from what the event "
                "records; it was written without its evidence)"
            )
    resolution = step.get("resolution")
    if isinstance(resolution, Mapping):
        process = resolution.get("process")
        probe = f", process {clean(process)}" if process else ""
        if resolution.get("probe_reason"):
            probe += f" ({clean(resolution['probe_reason'])})"
        forced = ", FORCED" if resolution.get("force") else ""
        out.append(
            f"operator's decision -> {clean(resolution.get('to'))}{forced}{probe}: "
            f"{clean(resolution.get('reason'))}"
        )
    details = {
        k: v
        for k, v in step["payload"].items()
        if k not in ("from_status", "to_status", "version", "attempt_id", "decision", "resolution")
    }
    if details:
        out.append("details: " + ", ".join(f"{clean(k)}={clean(v)}" for k, v in details.items()))
    return out


def describe_evidence(evidence: Mapping[str, Any]) -> str:
    """The evidence of a recovery decision in ADR-0068 §2 order; unknown keys as they are."""
    parts: list[str] = []
    if "receipt" in evidence:
        parts.append(f"receipt {clean(evidence['receipt'])}")
    if evidence.get("process") is not None:
        probe = f" ({clean(evidence['probe_reason'])})" if evidence.get("probe_reason") else ""
        parts.append(f"process {clean(evidence['process'])}{probe}")
    if evidence.get("pid_matches") is not None:
        parts.append("handle pid matches" if evidence["pid_matches"] else "handle pid differs")
    if "grace_paid" in evidence:
        parts.append("grace paid" if evidence["grace_paid"] else "no grace")
    if evidence.get("reread") is not None:
        parts.append(f"receipt again {clean(evidence['reread'])}")
    if evidence.get("verifier") is not None:
        parts.append(f"verifier {clean(evidence['verifier'])}")
    known = {*_EVIDENCE_ORDER, "verifier"}
    parts += [f"{clean(k)}={clean(v)}" for k, v in evidence.items() if k not in known]
    return ", ".join(parts) if parts else "none recorded"
