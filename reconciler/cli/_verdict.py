"""The start-up verdict in words, one wording for every command, and what blocks start-up.

`reconcile` and `startup` both end with :func:`verdict_line` and, when start-up is blocked,
name every candidate that is neither `recovered` nor `remaining` with :func:`blocking_lines`:
the command that shows why (`qlfsm explain ... --receipt-root ...`; the run, its row and
reason are on the pass's own per-run lines, ``reconciler.cli._report``).
Standard library only: the zero-candidate `reconcile` imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler._escape import clean
from reconciler.cli._report import command_lines, wrap
from reconciler.cli._text import use_colour

SAFE = "SAFE to start"
BLOCKED = "start-up BLOCKED"
# The outcomes that let start-up proceed (spec 04 "Summary").
_PASSING = frozenset({"recovered", "remaining"})


def verdict_line(safe: bool, *, dry_run_of: str | None = None) -> str:
    """``verdict: SAFE to start`` or ``verdict: start-up BLOCKED`` (green/red on a TTY);
    ``dry_run_of`` (a dry run): ``dry run, nothing written; <it> would say: verdict: ...``."""
    words = SAFE if safe else BLOCKED
    if use_colour():  # spec 06: colour only on a TTY (and never with NO_COLOR)
        words = f"\x1b[{'32' if safe else '31'}m{words}\x1b[0m"
    if dry_run_of is not None:
        return f"dry run, nothing written; {dry_run_of} would say: verdict: {words}"
    return f"verdict: {words}"


def counts_line(summary: Mapping[str, Any]) -> str:
    """spec 04's counts of a pass (or of every page of a drain), one line."""
    return (
        f"scanned {summary['scanned']}: recovered {summary['recovered']}, remaining "
        f"{summary['remaining']}, unresolved {summary['unresolved']}, failed {summary['failed']}"
    )


def closing_lines(
    summary: Mapping[str, Any], db: str, receipt_root: str | None, name: str
) -> list[str]:
    """The end of `reconcile`'s and `drain`'s output: what blocks start-up
    (:func:`blocking_lines` of ``summary``) after a blank line, then the verdict on
    ``summary["safe"]`` (of a dry run: what ``name`` would say)."""
    blocking = blocking_lines(summary, db, receipt_root)
    verdict = verdict_line(summary["safe"], dry_run_of=name if summary.get("dry_run") else None)
    return [*([""] if blocking else []), *blocking, verdict]


def blocking_lines(
    summary: Mapping[str, Any], db: str, receipt_root: str | None = None
) -> list[str]:
    """What blocks start-up, for a person: the command that shows why for every candidate
    that is not recovered/remaining (wrapped at 100 columns, D-22), or the truncated page.
    Empty when nothing blocks."""
    lines: list[str] = []
    if summary.get("truncated"):
        lines.append("blocked: more than 256 candidate runs (the page was truncated), so none")
        lines.append("was decided; decide them page by page, each with the whole pass (D-26):")
        root: tuple[str, object | None] = (
            ("--receipt-root", receipt_root) if receipt_root else ("--receipt-root DIR", None)
        )
        lines.extend(command_lines([("qlfsm drain", None), ("--db", db), root]))
        lines.append("or list them with (and again with --status dispatching):")
        lines.extend(
            command_lines([("qlfsm inspect", None), ("--db", db), ("--status running", None)])
        )
    blockers = [c for c in summary.get("candidates", []) if c.get("outcome") not in _PASSING]
    if blockers:
        # With the receipt root, `explain`'s first answer is what start-up would decide now,
        # not "add --receipt-root".
        given = [] if receipt_root is None else [("--receipt-root", receipt_root)]
        lines.append(f"blocked by {len(blockers)} run(s):")
        for c in blockers:
            run = ("--run", str(c.get("run_id")))
            lines.extend(command_lines([("qlfsm explain", None), ("--db", db), run, *given]))
        # A directory at a receipt path (D-16): what to do, wrapped at 100 columns (D-22).
        lines.extend(
            wrap(fix_line(c.get("reason"))) for c in blockers if directory_in(c.get("reason"))
        )
    return lines


# The invalid-receipt reason of a directory at the receipt path (reconciler.node._receipt_store
# DIRECTORY_PROBLEM, spelled here: this module must not load the receipt store).
_DIRECTORY_REASON = "invalid_receipt:directory:"


def directory_in(reason: object) -> str | None:
    """The path of a directory standing at a receipt path, from a candidate's reason."""
    if not isinstance(reason, str) or not reason.startswith(_DIRECTORY_REASON):
        return None
    return reason[len(_DIRECTORY_REASON) :].split(";", 1)[0]


def fix_line(reason: object) -> str:
    """What to do about a directory at the receipt path (D-16), one line."""
    path = clean(directory_in(reason))
    return f"remove the directory at {path}: a receipt is a file (look inside it first)"
