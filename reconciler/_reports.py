"""The typed reports of the application layer (``reconciler.reconcile``, ``reconciler.shadow_pass``,
``reconciler.startup``): frozen records a Python caller reads by attribute, each with
``as_dict()``, the JSON object `qlfsm ... --json` prints (schemas/*.json), key for key.

A shadow report keeps its audit record (``as_dict`` returns a copy of it); the primary report
is its typed fields, ``as_dict`` derived from them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler._summary import COUNTS, CandidateResult


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    """One ADR-0068 pass: spec 04's summary, typed. ``safe``: nothing blocks start-up."""

    safe: bool
    scanned: int
    recovered: int
    remaining: int
    unresolved: int
    failed: int
    truncated: bool
    candidates: tuple[CandidateResult, ...]
    dry_run: bool = False
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> ReconcileReport:
        return cls(
            safe=bool(summary["safe"]),
            **{k: int(summary[k]) for k in COUNTS},
            truncated=bool(summary["truncated"]),
            candidates=tuple(
                CandidateResult(
                    c["run_id"], c["attempt_id"], str(c["row"]), c["outcome"], c["reason"]
                )
                for c in summary["candidates"]
            ),
            dry_run=bool(summary.get("dry_run", False)),
            warnings=tuple(summary.get("warnings") or ()),
        )

    def as_dict(self) -> dict[str, Any]:
        """spec 04's summary, as `qlfsm reconcile --json` prints it (``dry_run`` and
        ``warnings`` only when set)."""
        out: dict[str, Any] = {
            "safe": self.safe,
            **{k: getattr(self, k) for k in COUNTS},
            "truncated": self.truncated,
            "candidates": [c.as_dict() for c in self.candidates],
        }
        if self.dry_run:
            out["dry_run"] = True
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True, slots=True)
class ShadowReport:
    """One ADR-0448 pass: its audit record (spec 05; ``state`` one of disabled,
    profile_rejected, reconciled, incomplete, failed) and, apart from it, the resume cursor
    only the caller sees (spec 05 "Supervisor"; None: nothing left to resume)."""

    state: str
    audit: Mapping[str, Any] = field(repr=False, compare=False)
    cursor: tuple[int, str] | None = None

    @classmethod
    def from_audit(
        cls, audit: Mapping[str, Any], cursor: tuple[int, str] | None = None
    ) -> ShadowReport:
        return cls(state=str(audit["state"]), audit=copy.deepcopy(dict(audit)), cursor=cursor)

    def as_dict(self) -> dict[str, Any]:
        """The audit record, as `qlfsm shadow --json` prints it."""
        return copy.deepcopy(dict(self.audit))


@dataclass(frozen=True, slots=True)
class NormalizeReport:
    """2.x ``initData`` (spec 02), fail-open: what it changed, or the error class that
    stopped it (``error`` set, counts 0)."""

    running_instances: int = 0
    crontabs: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StartupReport:
    """One start-up (spec 05 "Switches"): normalization (None: not asked for, or a dry run),
    the shadow pass (None: a dry run skips it), the primary pass, the sweep (its JSON object;
    ``state`` skipped when start-up is not safe or in a dry run), the verdict, whether this
    start-up created the database (D-21), and how long each part took (seconds: normalize,
    shadow, primary, sweep, total; only the parts that ran)."""

    safe: bool
    primary: ReconcileReport
    shadow: ShadowReport | None
    sweep: Mapping[str, Any] = field(repr=False, compare=False)
    normalize: NormalizeReport | None = None
    first_boot: bool = False
    dry_run: bool = False
    durations: Mapping[str, float] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object `qlfsm startup --json` prints (schemas/startup.json)."""
        if self.dry_run:
            shadow: dict[str, Any] = {"state": "skipped", "reason": "dry_run"}
        elif self.shadow is None:
            raise ValueError("only a dry run skips the shadow pass")
        else:
            shadow = self.shadow.as_dict()
        out = {
            "shadow": shadow,
            "primary": self.primary.as_dict(),
            "sweep": copy.deepcopy(dict(self.sweep)),
            "safe": self.safe,
        }
        if self.dry_run:
            out["dry_run"] = True
        return {**out, "first_boot": self.first_boot}
