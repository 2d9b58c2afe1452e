"""The simulated node's parts (tests/_sim.py): its constants and gate labels, the template
database, the actors' slots, and the fakes on the node's ports — the receipt store
(``MemoryReceiptStore``) and the clock (``FakeClock``) whose calls are gates.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from _support import init_db

from reconciler.node import (
    FakeClock,
    FakeProcessTable,
    Found,
    Invalid,
    MemoryReceiptStore,
    ReadResult,
)
from reconciler.primary import GRACE_MS
from reconciler.shadow import Budget
from storage import (
    Actor,
)

if TYPE_CHECKING:
    from _sim import World
    from _sim_odd import OddRun


T0 = 1_700_000_000_000
PROFILE = "edge"
GRACE_S = GRACE_MS[PROFILE] / 1000.0
LAUNCHER = Actor("executor", "local-launcher")
SCHEDULER = Actor("scheduler")
SHADOW_ORIGINS = ("manual", "scheduled_system")
SHADOW_BUDGET = Budget(8, 1)

# Every gate label, in the order a pass meets them. The stateful test has one rule per label.
PRIMARY_LABELS = (
    "read_candidates",
    "first_receipt_read",
    "probe",
    "grace",
    "second_receipt_read",
    "commit",
    "delete_receipt",
    "quarantine_move",
    "verify_candidates",
    "verify_receipt_read",
    "verify_probe",
)
SHADOW_LABELS = ("shadow_page", "shadow_decide", "commit", "shadow_between_commits")
# The gates whose port call can also fail the ordinary way (World.reconciler_fault): the
# process identity probe (a /proc read error the probe does not absorb) is handled while the
# candidate waits at the probe, spec 04 row 14 in that evidence state.
FAULT_LABELS = ("probe",)


class Crashed(BaseException):
    """Raised in a worker whose reconciler was killed: not an Exception, so the reconciler's
    own `except Exception` (row 14) cannot swallow it and carry on touching the store."""


class InvariantViolation(AssertionError):
    """An invariant of docs/orderings.md failed; the message starts with the invariant's name."""


_SESSION: dict[str, Path] = {}


def _session_dir() -> Path:
    """One directory per test process for the template, the seeds and every world, removed at
    exit. RAM-backed when there is a /dev/shm: `synchronous=FULL` fsyncs every commit, and the
    exhaustive search commits tens of thousands of times."""
    if "dir" not in _SESSION:
        shm = "/dev/shm"
        root = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()
        _SESSION["dir"] = Path(tempfile.mkdtemp(prefix="qlfsm-sim-", dir=root))
        atexit.register(shutil.rmtree, _SESSION["dir"], True)
    return _SESSION["dir"]


def template_db() -> Path:
    """One `db init` database per test process; every world copies it (the schema is the
    node's, created by the real migrations)."""
    path = _session_dir() / "template.db"
    if not path.exists():
        init_db(path)
    return path


# --- the world's actors ---------------------------------------------------------------------


@dataclass
class Slot:
    """A runtime Run prepared for launch (Run `dispatching`, Attempt `claimed`) and the
    launcher and wrapper process that act on it."""

    run_id: str
    attempt_id: str
    phase: str = "prepared"  # prepared | starting | spawned | recorded | refused
    launcher_alive: bool = True
    token: str | None = None
    token_hash: str | None = None
    version: int = 0
    pid: int | None = None
    handle: str | None = None
    started_ms: int | None = None
    published: bool = False
    wrapper_done: bool = False  # exited, killed or crashed: it publishes nothing more
    cancel_asked: bool = False  # the exhaustive search asks at most once per Run


@dataclass
class LegacySlot:
    run_id: str
    attempt_ids: list[str]
    kind: str
    cron_id: int | None = None
    pid: int | None = None


@dataclass(frozen=True)
class Ev:
    """One traced port call of a reconciler pass."""

    pass_no: int
    label: str
    attempt_id: str | None
    result: str
    mono: float


@dataclass(frozen=True)
class Seed:
    db: Path
    slots: list[Slot]
    legacy: list[LegacySlot]
    table: FakeProcessTable
    files: dict[str, bytes]
    clock: tuple[float, float]
    odd: list[OddRun] = field(default_factory=list)


class SimStore(MemoryReceiptStore):
    """The in-memory store, gated and traced when the reconciler calls it."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        self.deleted: list[str] = []

    def read(self, attempt_id: str) -> ReadResult:
        w = self.world.calling_worker()
        if w is None:
            return super().read(attempt_id)
        label = (
            "verify_receipt_read"
            if w.queries >= 2
            else ("second_receipt_read" if w.slept else "first_receipt_read")
        )
        w.gate(label, attempt_id)
        got = super().read(attempt_id)
        kind = (
            ("forged" if attempt_id in self.world.forged else "found")
            if isinstance(got, Found)
            else ("invalid" if isinstance(got, Invalid) else "missing")
        )
        self.world.trace.append(Ev(w.number, label, attempt_id, kind, self.world.clock.monotonic()))
        return got

    def delete(self, attempt_id: str) -> None:
        w = self.world.calling_worker()
        if w is not None:
            w.gate("delete_receipt", attempt_id)
            self.deleted.append(attempt_id)
        super().delete(attempt_id)

    def quarantine(self, attempt_id: str, ref: str | None = None) -> str:
        w = self.world.calling_worker()
        if w is not None:
            w.gate("quarantine_move", attempt_id)
        return super().quarantine(attempt_id, ref)


class SimClock(FakeClock):
    def __init__(self, world: World) -> None:
        super().__init__(T0 + 60_000)
        self.world = world

    def sleep(self, seconds: float) -> None:
        w = self.world.calling_worker()
        if w is not None:
            w.gate("grace")
            w.slept = True
        super().sleep(seconds)
        if w is not None:
            self.world.trace.append(Ev(w.number, "grace", None, f"{seconds}", self.monotonic()))
