"""The summary of a pass that decided nothing: zero candidates, or a truncated page."""

from __future__ import annotations


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
