"""`qlfsm explain --db PATH --run ID [--json] [--svg FILE]` (spec 06): one run's path through
the Run and Attempt machines, read-only. The path is built by ``reconciler.ops._explain``; the
drawing by ``reconciler.diagrams._path``."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from reconciler.cli._util import FatalError, UsageError, parser, print_json, table
from reconciler.cli._verdict import clean

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
    args = p.parse_args(argv)
    if args.svg is not None:
        parent = os.path.dirname(os.path.abspath(args.svg))
        if not os.path.isdir(parent):
            raise UsageError(f"--svg {args.svg!r}: directory {parent!r} does not exist")
    from reconciler.cli._reconcile import open_database
    from reconciler.ops._explain import UnknownRun, explain
    from storage import check_schema

    conn = open_database(args.db)
    try:
        check_schema(conn, path=args.db)
        try:
            found = explain(conn, args.run)
        except UnknownRun as exc:
            raise UsageError(
                f"run {args.run!r} is not in {args.db}; list runs with "
                f"`qlfsm inspect --db {args.db}`"
            ) from exc
    finally:
        conn.close()
    if args.svg is not None:
        _write_svg(args.svg, found, args.dot)
    data = found.as_dict()
    if args.json:
        print_json(data)
    else:
        sys.stdout.write(render(data) + "\n")
        if args.svg is not None:
            sys.stdout.write(f"\ndiagrams with this run's edges: {args.svg}\n")
    return 0


def _write_svg(path: str, found: Any, dot: str | None) -> None:
    from reconciler.diagrams._path import path_svg
    from reconciler.diagrams._render import DiagramsError

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
        f"run {clean(run['id'])} ({run['execution_owner']}, {run['execution_origin']}): now "
        f"{run['status']}" + (f" ({clean(run['error_code'])})" if run["error_code"] else "")
    ]
    for a in data["attempts"]:
        lines.append(
            f"attempt {a['attempt']} {clean(a['id'])}: {a['status']}"
            + (f" ({clean(a['error_code'])})" if a["error_code"] else "")
            + (f", exit {a['exit_code']}" if a["exit_code"] is not None else "")
        )
    for j in data["journal"]:
        where = f" at {clean(j['quarantine_ref'])}" if j["quarantine_ref"] else ""
        lines.append(f"receipt journal of attempt {clean(j['attempt_id'])}: {j['state']}{where}")
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
    if not any(s["row"] for s in data["steps"]) and run["status"] in (
        "queued",
        "dispatching",
        "running",
    ):
        lines.append("")
        lines.append(
            "no start-up decision moved this run: a pass writes an event only when it moves a "
            "state (a live process kept running, or a run left unresolved or pending, leaves "
            "none); the last pass's row and reason for it are in the output of "
            "`qlfsm startup` / `qlfsm reconcile`"
        )
    return "\n".join(lines)


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
