"""spec 04 "Before any candidate": the one rule for a page the pass decides nothing on (zero
candidates, or a truncated page), and its summary."""

from __future__ import annotations

from collections.abc import Sequence


def empty_summary(truncated: bool, observed: int = 0) -> dict[str, object]:
    """Zero candidates (safe) or a truncated page (not safe): nothing else was looked at.

    ``scanned`` is how many candidates the page observed: 0, or the 256 of a truncated page
    (as QingLong's coordinator reports it). None of them was decided, so the four outcome
    counts stay 0: this is the "unless truncated" of ``scanned = recovered + remaining +
    unresolved + failed`` (spec 04 "Summary"; docs/decisions.md).

    It has a module of its own, importing nothing, because the zero-candidate path returns it
    without importing the pass (spec 04 "Before any candidate")."""
    return {
        "safe": not truncated,
        "scanned": observed,
        "recovered": 0,
        "remaining": 0,
        "unresolved": 0,
        "failed": 0,
        "truncated": truncated,
        "candidates": [],
    }


def before_any_candidate(page: Sequence[object], truncated: bool) -> dict[str, object] | None:
    """The summary when the pass must decide nothing on this page, else None (spec 04 "Before
    any candidate"): a truncated page is not safe and zero candidates are; either way nothing
    else is read, probed, slept or written.

    The one place of the rule: the application layer applies it to the page it reads before
    loading the pass (so zero candidates cost one statement and no `fsm` import), and the
    pass to the page it reads itself when it is called directly."""
    if truncated or not page:
        return empty_summary(truncated, len(page))
    return None
