"""Guards: pure predicates over the evidence a reconciler gathered at the edge.

A guarded edge is taken only with evidence on which its guard holds, and the guard is
evaluated again when the edge fires: the evidence is data, never a callback into I/O.

The ADR-0068 predicates below serve twice, under one name: as the conditions of the decision
machine (``fsm/_primary.py``: which row of spec 04 matches) and as the guards of the Run and
Attempt edges that the decision's write fires (``fsm/_tables.py``). Both see the same observed
facts, so the commit cannot take an edge the decision did not choose.

Five ADR-0448 row guards also guard the Run and Attempt edges the legacy shadow's writes fire
(``RUN_LEGACY_EDGES``, ``ATTEMPT_LEGACY_EDGES`` in ``fsm/_tables.py``): :data:`LEGACY_EDGE_GUARDS`.
The legacy_shadow lifecycle uses the same five functions: one name, one predicate.

Every mapping here is read-only: a machine is given its guards when it is built
(:class:`fsm.Lifecycle`), and nothing a caller does to another machine's guards reaches it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from ._legacy import LEGACY_GUARD_ROWS, LEGACY_STEP_GUARDS, classify_legacy
from ._legacy_facts import LegacyFacts, _named
from ._tables import ATTEMPT_ACTIVE

# "quarantined": the receipt path is empty but the Attempt's journal row says an earlier pass
# quarantined its receipt (spec 03; docs/decisions.md D-3a). Only the first read reports it.
ReceiptRead = Literal["missing", "trusted", "invalid", "quarantined"]
ProcessVerdict = Literal["running", "not_running", "unknown"]


@dataclass(frozen=True, slots=True)
class PrimaryFacts:
    """What the ADR-0068 evidence sequence established for one candidate (spec 04).

    A field left ``None`` means that step did not happen (that fact was not observed).
    ``first_receipt`` / ``second_receipt`` are the two reads of the one receipt path;
    ``grace_paid`` is true once at least one full grace has passed since this candidate's
    probe. Which step fills which field: :data:`fsm.qinglong.PRIMARY_EVIDENCE_FIELDS`.
    """

    run_status: str | None = None
    attempt_status: str | None = None  # the latest Attempt's (None: the Run has none)
    active_attempts: int = 0
    first_receipt: ReceiptRead | None = None
    process: ProcessVerdict | None = None
    handle_pid_matches: bool = False
    grace_paid: bool = False
    second_receipt: ReceiptRead | None = None
    unchanged_on_recheck: bool | None = None
    # The candidate page's status for this Run (spec 04 row 2 compares it with the re-read).
    page_status: str | None = None
    # The read of the Run and its Attempts (ADR-0068 §2 step 1).
    run_present: bool | None = None
    run_owner: str | None = None
    attempt_count: int | None = None
    executor_type: str | None = None  # the latest Attempt's
    handle_present: bool | None = None
    pid_valid: bool | None = None  # a positive integer pid
    cancel_requested: bool | None = None  # spec 04 "Terminal mapping"
    cancel_reason: str | None = None
    # The read that found a receipt (first or second): why it is invalid, or its exit code.
    receipt_problem: str | None = None
    receipt_exit_code: int | None = None
    # The probe's reason (boot_id_differs, pid_absent, invalid_handle, ...; spec 03).
    probe_reason: str | None = None
    # Any exception while handling the candidate (spec 04 row 14), already described.
    error: str | None = None


# --- spec 04 row 14 (and spec 05 row 12) -----------------------------------------------------


def error_raised(facts: object) -> bool:
    # An exception ends the candidate wherever it happened: failed, nothing more is looked at.
    if isinstance(facts, PrimaryFacts):
        return facts.error is not None
    return isinstance(facts, LegacyFacts) and facts.error


# The ADR-0068 guards by name, in the order they are defined here: the decision machine's
# conditions and the guards of the Run and Attempt edges its writes fire.
_PRIMARY: dict[str, Callable[[object], bool]] = {"error_raised": error_raised}


def _primary(own: Callable[[PrimaryFacts], bool]) -> Callable[[object], bool]:
    # ``own`` as a guard over any evidence (it holds only on PrimaryFacts), kept under its name.
    def guard(facts: object) -> bool:
        return isinstance(facts, PrimaryFacts) and own(facts)

    _PRIMARY[own.__name__] = _named(own.__name__, guard)
    return guard


# --- spec 04 rows 1-4: the Run and its Attempts ------------------------------------------------


@_primary
def several_active_attempts(f: PrimaryFacts) -> bool:
    return f.active_attempts > 1  # row 1


@_primary
def run_gone(f: PrimaryFacts) -> bool:
    return f.run_present is False  # row 2


@_primary
def not_runtime_owned(f: PrimaryFacts) -> bool:
    return f.run_present is True and f.run_owner != "runtime"  # row 2


@_primary
def status_changed(f: PrimaryFacts) -> bool:
    # row 2: the Run moved since the candidate page was read.
    return f.run_present is True and f.run_status != f.page_status


@_primary
def attempt_missing_before_start(f: PrimaryFacts) -> bool:
    # spec 04 row 3: a dispatching Run whose Attempt was never created.
    return (
        f.run_status == "dispatching"
        and f.attempt_status is None
        and f.active_attempts == 0
        and f.attempt_count in (None, 0)
    )


@_primary
def no_active_attempt_otherwise(f: PrimaryFacts) -> bool:
    return f.run_present is True and f.active_attempts == 0  # row 3b


@_primary
def latest_attempt_not_active(f: PrimaryFacts) -> bool:
    return (
        f.run_present is True
        and f.attempt_status is not None
        and f.attempt_status not in ATTEMPT_ACTIVE
    )  # row 4


@_primary
def one_active_latest_attempt(f: PrimaryFacts) -> bool:
    # ADR-0068 §2 step 2: only a runtime Run, unchanged since the page, whose one active
    # Attempt is its latest, has a receipt worth reading.
    return (
        f.run_present is True
        and f.run_owner == "runtime"
        and f.page_status is not None
        and f.run_status == f.page_status
        and f.active_attempts == 1
        and f.attempt_status in ATTEMPT_ACTIVE
    )


# --- spec 04 row 4b: the executor type, before any receipt is read ---------------------------


@_primary
def claimed_not_local_process(f: PrimaryFacts) -> bool:
    # row 4b, `claimed`: ADR-0068 §2 step 1 confirms the executor type before step 2 reads a
    # receipt, and a local receipt never stands in for another executor's facts (§6). What is
    # left is the database's own fact that nothing crossed the start barrier (§2 step 5):
    # QingLong's coordinator marks it lost without reading the receipt (docs/decisions.md D-18).
    # No receipt read, no probe: only the facts of the Run's read.
    return (
        f.executor_type is not None
        and f.executor_type != "local_process"
        and f.attempt_status == "claimed"
        and f.active_attempts == 1
        and f.first_receipt is None
        and f.process is None
    )


@_primary
def executor_not_local_process(f: PrimaryFacts) -> bool:
    # row 4b, `starting`/`running`: no local evidence (receipt, process) is looked at (§6).
    return (
        f.run_present is True
        and f.executor_type is not None
        and f.executor_type != "local_process"
        and f.attempt_status in ("starting", "running")
    )


# --- spec 04 rows 5-8: the receipt, read first ------------------------------------------------


@_primary
def trusted_receipt(f: PrimaryFacts) -> bool:
    # ADR-0068 §2 steps 2-4: a receipt counts only once authenticated against the database.
    return f.first_receipt == "trusted" or f.second_receipt == "trusted"


@_primary
def invalid_receipt(f: PrimaryFacts) -> bool:
    # row 6 (and row 13 when the second read finds it)
    return f.first_receipt == "invalid" or f.second_receipt == "invalid"


@_primary
def quarantined_earlier(f: PrimaryFacts) -> bool:
    # row 6: an earlier pass quarantined this Attempt's receipt; the invalid fact stands.
    return f.first_receipt == "quarantined"


@_primary
def unstarted_claim(f: PrimaryFacts) -> bool:
    # ADR-0068 §2 step 5: `claimed` is the fact that nothing was started; no probe needed.
    return (
        f.first_receipt == "missing"
        and f.attempt_status == "claimed"
        and f.active_attempts == 1
        and f.process is None
    )


@_primary
def handle_missing(f: PrimaryFacts) -> bool:
    # row 8
    return f.first_receipt == "missing" and f.handle_present is False


@_primary
def pid_invalid(f: PrimaryFacts) -> bool:
    # row 8
    return f.first_receipt == "missing" and f.pid_valid is False


@_primary
def durable_identity_stored(f: PrimaryFacts) -> bool:
    # ADR-0068 §2 step 5: starting/running may only be judged by the exact durable identity.
    return (
        f.first_receipt == "missing"
        and f.attempt_status in ("starting", "running")
        and f.executor_type == "local_process"
        and f.handle_present is True
        and f.pid_valid is True
    )


# --- spec 04 rows 9-13: the probe, then the grace and the second read -------------------------


@_primary
def provider_unavailable(f: PrimaryFacts) -> bool:
    # row 9
    return f.process == "unknown" and f.probe_reason == "provider_unavailable"


@_primary
def identity_unknown(f: PrimaryFacts) -> bool:
    # row 10: invalid handle or unsupported platform. Unknown is never "gone" (ADR-0068 §3).
    return f.process == "unknown" and f.probe_reason != "provider_unavailable"


@_primary
def handle_pid_mismatch(f: PrimaryFacts) -> bool:
    # row 11
    return f.process in ("running", "not_running") and not f.handle_pid_matches


def _exact_probe_says(f: PrimaryFacts, verdict: ProcessVerdict) -> bool:
    # No receipt on the first read, and the probe of the exact durable identity (boot id, pid,
    # group, start ticks; ADR-0068 §2 step 5) answered ``verdict``.
    return f.first_receipt == "missing" and f.process == verdict and f.handle_pid_matches


@_primary
def exact_process_running(f: PrimaryFacts) -> bool:
    return _exact_probe_says(f, "running")  # spec 04 row 12: it is alive


@_primary
def trusted_not_running(f: PrimaryFacts) -> bool:
    # row 13, first part: trusted negative evidence leads only to the grace (ADR-0068 §2.6).
    return _exact_probe_says(f, "not_running")


@_primary
def grace_elapsed(f: PrimaryFacts) -> bool:
    # row 13: at least one full grace since this candidate's probe
    return f.process == "not_running" and f.grace_paid


@_primary
def receipt_still_missing(f: PrimaryFacts) -> bool:
    # row 13: the second read, after the grace, found nothing either
    return f.grace_paid and f.second_receipt == "missing"


@_primary
def changed_on_recheck(f: PrimaryFacts) -> bool:
    # row 13: the Run/Attempt moved meanwhile; lost would be a guess
    return f.unchanged_on_recheck is False


@_primary
def not_running_after_grace(f: PrimaryFacts) -> bool:
    # ADR-0068 §2 step 6: trusted negative evidence, then ONE grace, then the receipt read
    # again and found absent, then the database re-read unchanged. Nothing less gives lost.
    return trusted_not_running(f) and receipt_still_missing(f) and f.unchanged_on_recheck is True


def _first_match(name: str) -> Callable[[object], bool]:
    # On the legacy_shadow lifecycle a row's edge is taken only when THAT row (the one whose
    # guard is ``name``) is the first of ADR-0448's table that matches ``facts`` (spec 05); the
    # decision machine itself tries the rows' own facts in order.
    def guard(facts: object) -> bool:
        if not isinstance(facts, LegacyFacts):
            return False
        return classify_legacy(facts).row == LEGACY_GUARD_ROWS[name]

    return _named(name, guard)


PRIMARY_GUARDS: Mapping[str, Callable[[object], bool]] = MappingProxyType(dict(_PRIMARY))

# The legacy_shadow lifecycle's row guards (spec 07), each named as on the diagram. Row 12's
# guard is the shared ``error_raised``: an exception is always the first match.
LEGACY_ROW_GUARDS: Mapping[str, Callable[[object], bool]] = MappingProxyType(
    {name: _first_match(name) for name in LEGACY_GUARD_ROWS if name != "error_raised"}
)

# --- spec 05 rows 2, 6, 7, 9, 10: the legacy writes' Run and Attempt edges -----------------
# Each is guarded by its row's guard (repair, cancel, complete, abandon, mark lost): the edges
# a write fires and that row's legacy_shadow edge share the one function.
LEGACY_EDGE_GUARDS: Mapping[str, Callable[[object], bool]] = MappingProxyType(
    {
        name: LEGACY_ROW_GUARDS[name]
        for name in (
            "unique_terminal_attempt",
            "stopped_with_finished",
            "unique_finished_evidence",
            "no_spawn_evidence",
            "no_terminal_evidence",
        )
    }
)

# Every guard of QingLong's machines by name: the Run and Attempt lifecycles', the
# legacy_shadow lifecycle's and both decision machines'.
GUARDS: Mapping[str, Callable[[object], bool]] = MappingProxyType(
    {**PRIMARY_GUARDS, **LEGACY_ROW_GUARDS, **LEGACY_STEP_GUARDS}
)
