"""`qlfsm explain --db PATH --run ID [--json] [--svg FILE]` (spec 06): one run's path through
the Run and Attempt machines, read-only. The path is built by ``reconciler.ops._explain``; the
drawing by ``reconciler.diagrams._path``."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from fsm.qinglong import ATTEMPT_ACTIVE
from reconciler._atomic import replace_file
from reconciler._escape import clean, json_line, json_safe, shell_word
from reconciler._profiles import PROFILES
from reconciler.cli._exit import FatalError, UsageError
from reconciler.cli._util import parser, unknown_run
from reconciler.ops import ACTIVE_RUN, EVENT_PAGE, Steps, iso_time

if TYPE_CHECKING:
    from collections.abc import Iterable

    from reconciler.ops import Explanation, Step

# The evidence fields of a recovery decision, in the order ADR-0068 §2 gathers them.
_EVIDENCE_ORDER = ("receipt", "process", "probe_reason", "pid_matches", "grace_paid", "reread")


# A stretch of more than this many consecutive events that move no state is folded into one line
# in the human page (docs/decisions.md D-30): a storm is counted, an ordinary run shows all.
FOLD_OVER = 20
_HEADERS = ["#", "time (UTC)", "actor", "edge", "trigger"]


def explain_command(argv: list[str]) -> int:
    p = parser(
        "qlfsm explain",
        "One run's path through the Run and Attempt machines, from its events: time, actor, "
        "from -> to, trigger, and the row, reason and evidence of each recovery decision. "
        f"More than {FOLD_OVER} consecutive events that move no state are counted on one line "
        "(--all-events shows each). Read-only. Exit 0, 2 unknown run or no dot for --svg, "
        "1 unusable database.",
    )
    p.add_argument("--db", required=True, help="the node's SQLite file (never created)")
    p.add_argument("--run", required=True, metavar="ID", help="the run to explain")
    p.add_argument("--json", action="store_true", help="print the path as one JSON object")
    p.add_argument(
        "--all-events",
        action="store_true",
        help=f"show every event, also stretches of more than {FOLD_OVER} events that move no "
        "state (folded into one counting line by default; --json always lists every event)",
    )
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
    from reconciler.ops import UnknownRun, explain_run
    from storage import check_schema

    with contextlib.closing(open_database(args.db)) as conn:
        check_schema(conn, path=args.db)
        try:
            found = explain_run(
                conn,
                args.db,
                args.run,
                receipt_root=args.receipt_root,
                profile=args.profile,
                origins=args.origins,
            )
        except UnknownRun as exc:
            raise unknown_run(args.db, args.run) from exc
        if args.svg is not None:
            _write_svg(args.svg, found, args.dot)
        # The steps are read from `conn` as they are written (issue 29): it stays open.
        if args.json:
            write_json(found, sys.stdout)
        else:
            write_human(found, sys.stdout, db=args.db, fold=None if args.all_events else FOLD_OVER)
            if args.svg is not None:
                sys.stdout.write(f"\ndiagrams with this run's edges: {clean(args.svg)}\n")
    return 0


def write_json(found: Explanation, out: TextIO) -> None:
    """``found`` as one line of JSON, byte for byte what ``print_json(found.as_dict())`` prints,
    written a step at a time: the head, each step through ``json.dumps``, the tail (issue 29)."""
    # `json.dumps` ends the object `..., "steps": []}`: the steps go between the brackets.
    out.write(json_line({**found.head(), "steps": []})[: -len("]}")])
    # `json_line`'s encoding, a page of steps at a time: a list encodes as its items joined by
    # `, ` between brackets, so one encode, one escape and one write per page (issue 29).
    encode = json.JSONEncoder(ensure_ascii=False).encode
    steps = iter(_outline(found))
    sep = ""
    while page := [step.as_dict() for step in itertools.islice(steps, EVENT_PAGE)]:
        out.write(sep + json_safe(encode(page))[1:-1])
        sep = ", "
    out.write("], " + json_line(found.tail())[1:] + "\n")


def _cells(s: Step) -> list[str]:
    source = s.source if s.source is not None else "·"
    move = f"{s.machine}: {source} -> {s.dest}" if s.machine else "-"
    actor = s.actor_type + (f":{clean(s.actor_id)}" if s.actor_id else "")
    return [clean(c) for c in (str(s.sequence), iso_time(s.at_ms), actor, move, clean(s.trigger))]


def _outline(found: Explanation) -> Iterable[Step]:
    """The steps, each event that moves nothing as a ``Quiet`` when the source can tell."""
    return found.steps.outline() if isinstance(found.steps, Steps) else found.steps


def _quiet(step: Step) -> bool:
    """An event that moves no state and records no decision: what a fold may count."""
    return (
        step.machine is None
        and step.row is None
        and step.decision is None
        and step.resolution is None
    )


@dataclass
class _Stretch:
    """A run of consecutive quiet events: its first and last sequence, and counts by type."""

    first: int = 0
    last: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    short: list[Step] = field(default_factory=list)  # its steps while it may still be shown

    def add(self, step: Step, fold: int) -> None:
        if not self.counts:
            self.first = step.sequence
        self.last = step.sequence
        self.counts[step.type] += 1
        self.short = [*self.short, step] if self.counts.total() <= fold else []


@dataclass
class _Plan:
    """The first pass over the steps: the table's column widths over the rows shown, and the
    stretches that fold (by first sequence)."""

    widths: list[int]
    folded: dict[int, _Stretch]
    any_row: bool = False


def _plan(found: Explanation, fold: int | None) -> _Plan:
    plan = _Plan([len(h) for h in _HEADERS], {})
    for quiet, group in itertools.groupby(_outline(found), key=_quiet):
        shown: Iterable[Step] = group
        if quiet and fold is not None:
            stretch = _Stretch()
            for step in group:
                stretch.add(step, fold)
            if not stretch.short:  # more than `fold` events: it folds
                plan.folded[stretch.first] = stretch
            shown = stretch.short
        for step in shown:
            plan.any_row = plan.any_row or bool(step.row)
            plan.widths = [max(w, len(c)) for w, c in zip(plan.widths, _cells(step), strict=True)]
    return plan


def _count(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def _fold_line(st: _Stretch) -> str:
    # The wording of issue 29: a count, a multiplication sign, the type; an en dash, an em dash.
    kinds = ", ".join(f"{_count(n)} \u00d7 {clean(kind)}" for kind, n in st.counts.items())
    return f"events {_count(st.first)}\u2013{_count(st.last)}: {kinds} \u2014 no state change"


def write_human(found: Explanation, out: TextIO, *, db: str, fold: int | None) -> None:
    """The human page, written as it goes: two passes over the steps (the widths and the folds,
    then the rows), each one keyset page of events at a time (issue 29)."""
    plan = _plan(found, fold)
    run = found.run
    head = found.head()
    lines = [
        f"run {clean(run.id)} ({clean(run.execution_owner)}, "
        f"{clean(run.execution_origin)}): now {clean(run.status)}"
        + (f" ({clean(run.error_code)})" if run.error_code else "")
    ]
    for a in head["attempts"]:
        lines.append(
            f"attempt {a['attempt']} {clean(a['id'])}: {a['status']}"
            + (f" ({clean(a['error_code'])})" if a["error_code"] else "")
            + (f", exit {a['exit_code']}" if a["exit_code"] is not None else "")
        )
    status_of = {a["id"]: a["status"] for a in head["attempts"]}
    for j in head["journal"]:
        where = f" at {clean(j['quarantine_ref'])}" if j["quarantine_ref"] else ""
        line = f"receipt journal of attempt {clean(j['attempt_id'])}: {j['state']}{where}"
        status = status_of.get(j["attempt_id"])
        if j["state"] == "quarantined" and status not in ATTEMPT_ACTIVE:
            # docs/decisions.md D-12 "resolve": the row outlives the decision on purpose.
            line += (
                f"; no longer blocks start-up (the Attempt is {clean(status)}); `qlfsm sweep` "
                f"removes the copy and this row after {iso_time(j['purge_after_ms'])}"
            )
        lines.append(line)
    lines.append("")
    lines.append("  ".join(h.ljust(w) for h, w in zip(_HEADERS, plan.widths, strict=True)).rstrip())
    lines.append("  ".join("-" * w for w in plan.widths))
    out.write("\n".join(lines) + "\n")
    # The folded stretches are not read again (a source that can skip them, `Steps`, skips).
    skip = {first: st.last for first, st in plan.folded.items()}
    steps = found.steps.skipping(skip) if isinstance(found.steps, Steps) else found.steps
    folds = deque(plan.folded.values())  # in sequence order, as the first pass met them
    skip_to = 0
    for step in steps:
        while folds and folds[0].first <= step.sequence:
            skip_to = folds[0].last
            out.write(_fold_line(folds.popleft()) + "\n")
        if step.sequence <= skip_to:
            continue
        row = "  ".join(c.ljust(w) for c, w in zip(_cells(step), plan.widths, strict=True))
        out.write(row.rstrip() + "\n")
        out.writelines(f"    {n}\n" for n in _notes(step))
    out.writelines(_fold_line(st) + "\n" for st in folds)  # a stretch that ends the run
    out.writelines(f"\n{para}\n" for para in _tail(found, plan, db))


def _tail(found: Explanation, plan: _Plan, db: str) -> list[str]:
    """The paragraphs after the table, each written after a blank line."""
    paras: list[str] = []
    run = found.run
    if plan.folded:
        folded = sum(st.counts.total() for st in plan.folded.values())
        first = min(plan.folded)
        paras.append(
            f"{_count(folded)} events that move no state are counted above, not shown (stretches "
            f"of more than {FOLD_OVER}); every event: qlfsm explain --db {shell_word(db)} --run "
            f"{shell_word(run.id)} --all-events, or a page at a time: qlfsm inspect --db "
            f"{shell_word(db)} --run {shell_word(run.id)} --after {first - 1}"
        )
    active = run.status in ACTIVE_RUN
    if active and not plan.any_row:
        paras.append(
            "no start-up decision moved this run: a pass writes an event only when it moves a "
            "state (a live process kept running, or a run left unresolved or pending, leaves "
            "none)"
        )
    if isinstance(found.now, Mapping):
        paras.append(_render_now(found.now))
    elif active and run.execution_owner == "runtime":
        paras.append(
            "the decision start-up would take now: add --receipt-root DIR (a dry run: reads "
            "its receipt, probes its process, writes nothing)"
        )
    if found.processes:
        lines = [f"    {x}" for view in found.processes for x in render_process(view)]
        paras.append("\n".join(["what /proc says now (pids, groups and ticks only):", *lines]))
    if isinstance(found.decide, Mapping):
        paras.append("\n".join(_render_decide(found.decide, found.now)))
    return paras


def _write_svg(path: str, found: Explanation, dot: str | None) -> None:
    """The diagrams with the path of this run's state-moving events (issue 29: an event that
    moves nothing is no edge), written whole to a temporary file, then moved into place."""
    from reconciler.diagrams import DiagramsError, path_svg

    title = f"run {found.run.id}: the edges it took, numbered by event sequence"
    try:
        svg = path_svg(title, found.taken(), dot)
    except DiagramsError as exc:
        raise UsageError(f"--svg: {exc}") from exc
    try:
        # A drawing to share: the mode `open` would give it (0666 less the umask).
        replace_file(path, f"{path}.{os.getpid()}.tmp", svg.encode("utf-8"), mode=0o666)
    except OSError as exc:
        raise FatalError(f"--svg {path!r} cannot be written ({exc.strerror})") from exc


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
    alive = "ALIVE: the handle's exact process runs" if view["alive"] else "not alive"
    out.append(f"    {alive} -> {clean(view['verdict'])} ({clean(view['probe_reason'])})")
    if recorded is None:
        out.append("    RunAttempts.pid: none recorded")
    elif isinstance(handle, Mapping) and view.get("pid_matches"):
        out.append(f"    RunAttempts.pid {recorded}: the handle's pid")
    else:
        why = "not proven by any handle"
        if isinstance(handle, Mapping):
            why = "differs from the handle's pid (spec 04 row 11)"
        out.append(f"    RunAttempts.pid {recorded}: {why}")
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
    if blocks is False and isinstance(now, Mapping):
        out = [
            f"nothing to decide: start-up decides this run itself (row {clean(now.get('row'))} "
            f"-> {clean(now.get('outcome'))})"
        ]
        if stop:
            out.append(f"    to end the job anyway, stop its process group: {clean(stop)}")
        return out
    if not decide.get("command"):
        return ["no operator decision applies to this run from where it is"]
    lead = "the decision to make" if blocks else "to decide it by hand"
    out = [
        f"{lead} (the legal targets from here: {', '.join(decide['targets'])}):",
        f"    {decide['command']}",
        "    add --dry-run first to see the edges and events it would write",
    ]
    if stop:
        out.append(f"    its process is alive: stop its group first: {clean(stop)}")
        out.append("    (resolve refuses a live job without --force; --force does not stop it)")
    return out


def _render_now(now: Mapping[str, Any]) -> str:
    said = f"start-up now ({clean(now.get('record'))}, nothing written): "
    if now.get("row") is None:
        return said + clean(now.get("reason"))
    out = [
        f"{said}row {clean(now['row'])} -> {clean(now.get('outcome'))} ({clean(now.get('reason'))})"
    ]
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


def _notes(step: Step) -> list[str]:
    out: list[str] = []
    if step.row is not None:
        # The row's words from spec 04 are in the JSON (`row_facts`); here the row and reason.
        said = f"decision: {clean(step.record)} row {clean(step.row)}"
        if step.row_recorded and step.decision is not None:
            out.append(f"{said}: {clean(step.decision.get('reason'))}")
            evidence = step.decision.get("evidence")
            if isinstance(evidence, Mapping):
                out.append(f"evidence: {describe_evidence(evidence)}")
        else:
            out.append(
                f"{said} (inferred from what the event records; it was written without its "
                "evidence)"
            )
    resolution = step.resolution
    if resolution is not None:
        process = resolution.get("process")
        probe = f", process {clean(process)}" if process else ""
        if resolution.get("probe_reason"):
            probe += f" ({clean(resolution['probe_reason'])})"
        forced = ", FORCED" if resolution.get("force") else ""
        out.append(
            f"operator's decision -> {clean(resolution.get('to'))}{forced}{probe}: "
            f"{clean(resolution.get('reason'))}"
        )
    if details := step.details:
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
