"""Exhaustive small-scope search over the harness's step functions.

Breadth-first over ORDERINGS: a node is the sequence of actions taken since the world was made
(launcher, wrapper, world and reconciler steps, the same functions the stateful test's rules
call); a node is expanded only if the state it reaches was not seen before. A world cannot be
copied (the reconciler is parked inside a thread), so every child is reached by replaying its
parent's ordering on a fresh world: replay is deterministic because only one thread ever runs.

The state key is everything that decides the future: the database rows that matter (statuses,
versions, callback sequences, error codes, journal), the receipt store, the process table as
seen from each slot, the launcher/wrapper flags, and the reconciler's position (its pending
gate and what the current pass has observed so far).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from _sim import FAULT_LABELS, Seed, World
from _sim_odd import ODD_KINDS, TAKEN_AWAY

from reconciler.ops._resolve import RESOLVE_TARGETS

Action = tuple[str, int]


@dataclass(frozen=True)
class Scope:
    name: str
    runtime: int = 2
    legacy: tuple[str, ...] = ()
    odd: tuple[str, ...] = ()  # foreign and damaged runtime Runs (tests/_sim_odd.py)
    launched: int = 2  # slots launched (process alive, Attempt running) before the search
    depth: int = 8
    max_passes: int = 2  # reconciler starts allowed in one ordering
    actions: tuple[str, ...] = (
        "step",
        "start_primary",
        "crash",
        "publish",
        "exit",
        "kill",
        "reuse",
        "reboot",
    )
    converge_leaves: bool = True  # at the depth bound: quiesce and converge


@dataclass
class Stats:
    states: int = 0
    orderings: int = 0  # action sequences executed (edges of the search)
    leaves: int = 0
    converged: int = 0
    max_depth: int = 0
    seconds: float = 0.0
    labels: dict[str, int] = field(default_factory=dict)


_SEEDS: dict[Scope, Seed] = {}


def make_world(scope: Scope) -> World:
    """The scope's starting world; built once, then copied (see ``World.seed``)."""
    seed = _SEEDS.get(scope)
    if seed is None:
        w = World(scope.runtime, scope.legacy, odd=scope.odd)
        for i in range(scope.launched):
            w.launch_prepare(i)
            w.launch_spawn(i)
            w.launch_record(i)
        w.check()
        seed = _SEEDS[scope] = w.seed()
        w.close()
    w = World(scope.runtime, scope.legacy, odd=scope.odd, seed=seed)
    w.check()
    return w


def enabled(w: World, scope: Scope, passes: int) -> list[Action]:
    out: list[Action] = []
    pending = w.pending_label()
    for name in scope.actions:
        if name == "step" and pending is not None:
            out.append(("step", 0))
        elif name == "crash" and pending is not None:
            out.append(("crash", 0))
        elif name in ("start_primary", "start_shadow") and pending is None:
            if passes < scope.max_passes:
                out.append((name, 0))
        elif name == "reboot" and w.table.boots == 1:
            out.append(("reboot", 0))  # one reboot per ordering keeps the scope small
        elif name == "outage":
            out.append(("outage", 0 if w.table.unavailable else 1))
        elif name == "launch":
            for i, s in enumerate(w.slots):
                # Every launcher step may write (the spawn's capture failure marks the launch
                # failed), and a writer waits while the reconciler holds the lock.
                if (
                    s.launcher_alive
                    and s.phase in ("prepared", "starting", "spawned")
                    and (w.db_free())
                ):
                    out.append(("launch", i))
        elif name == "cancel":
            if w.db_free():
                out += [("cancel", i) for i, s in enumerate(w.slots) if not s.cancel_asked]
        elif name == "fault" and pending in FAULT_LABELS:
            out.append(("fault", 0))
        elif name == "resolve":
            # One operator decision per ordering keeps the scope small, while nothing holds
            # the write lock (the choices: _resolve_choices).
            if w.db_free() and not w.resolved:
                out += [("resolve", k) for k in range(len(_resolve_choices(w)))]
        elif name == "take_away":
            if w.db_free():
                out += [
                    ("take_away", j)
                    for j, odd in enumerate(w.odd)
                    if odd.kind in TAKEN_AWAY and not odd.taken
                ]
        elif name == "finish":
            if w.db_free():
                out += [("finish", j) for j in range(len(w.legacy))]
        elif name in SLOT_ACTIONS:
            out += [(name, i) for i, s in enumerate(w.slots) if _slot_action_ok(w, name, i, s)]
    return out


def _resolve_choices(w: World) -> list[tuple[str, str]]:
    """`qlfsm resolve`'s (Run, --to) choices: a runtime Run to each of the three targets (the
    command refuses what ADR-0001 forbids from where the Run is), a Run not yet queued and a
    legacy Run to `cancelled`."""
    runtime = [(s.run_id, to) for s in w.slots for to in RESOLVE_TARGETS]
    created = [(o.run_id, "cancelled") for o in w.odd if ODD_KINDS[o.kind][2] == "created"]
    return runtime + created + [(leg.run_id, "cancelled") for leg in w.legacy]


SLOT_ACTIONS = frozenset({"publish", "crash_publish", "exit", "kill", "reuse", "forge"})


def _slot_action_ok(w: World, name: str, i: int, s: Any) -> bool:
    running = w.wrapper_running(i)
    if name in ("publish", "crash_publish"):
        return running and not s.published
    if name in ("exit", "kill"):
        return running
    if name == "forge":
        return s.attempt_id not in w.store.files and s.attempt_id not in w.forged
    if name == "reuse":
        # The pid is free again; before any reboot (after one, every pid is someone else's).
        return s.pid is not None and s.pid not in w.table.processes and w.table.boots == 1
    raise ValueError(name)  # pragma: no cover - a typo in a scope


def apply(w: World, action: Action) -> int:
    """Perform one action; returns 1 when it started a reconciler pass."""
    name, i = action
    if name == "step":
        w.reconciler_step()
    elif name == "crash":
        w.reconciler_crash()
    elif name == "fault":
        w.reconciler_fault()
    elif name == "start_primary":
        w.reconciler_start("primary")
        return 1
    elif name == "start_shadow":
        w.reconciler_start("shadow")
        return 1
    elif name == "launch":
        # The launcher's next durable step (transaction 1, spawn, transaction 2).
        phase = w.slots[i].phase
        if phase == "prepared":
            w.launch_prepare(i)
        elif phase == "starting":
            w.launch_spawn(i)
        else:
            w.launch_record(i)
    elif name == "publish":
        # The second Run's command fails (exit 1): a receipt must map to `failed` too.
        w.publish(i, exit_code=i % 2)
    elif name == "exit":
        w.process_exit(i)
    elif name == "kill":
        w.process_killed(i)
    elif name == "crash_publish":
        w.crash_before_publish(i, zero_length=True)
    elif name == "reuse":
        w.pid_reuse(i)
    elif name == "forge":
        w.forge(i)
    elif name == "reboot":
        w.reboot()
    elif name == "outage":
        w.outage(bool(i))
    elif name == "finish":
        w.legacy_finishes(i, 1)
    elif name == "take_away":
        w.take_away(i)
    elif name == "resolve":
        w.operator_resolves(*_resolve_choices(w)[i])
    elif name == "cancel":
        w.slots[i].cancel_asked = True
        w.cancel_requested(i, "timeout")
    else:  # pragma: no cover - a typo in a scope
        raise ValueError(name)
    return 0


def state_key(w: World, passes: int) -> tuple[Any, ...]:
    c = w.conn
    procs = []
    for s in w.slots:
        p = w.table.processes.get(s.pid) if s.pid is not None else None
        mine = p is not None and w.alive(s)
        procs.append(
            (
                s.phase,
                s.cancel_asked,
                s.published,
                s.wrapper_done,
                "alive"
                if mine
                else (
                    "zombie"
                    if p is not None and p.state == "Z"
                    else ("other" if p is not None else "none")
                ),
            )
        )
    worker = w.worker
    position: tuple[Any, ...] = ()
    if worker is not None and not worker.done:
        seen = tuple(
            (e.label, e.attempt_id, e.result) for e in w.trace if e.pass_no == worker.number
        )
        position = (worker.kind, worker.label, worker.detail, worker.queries, worker.slept, seen)
    return (
        tuple(
            tuple(r)
            for r in c.execute('SELECT id, status, version, error_code FROM "Runs" ORDER BY id')
        ),
        tuple(
            tuple(r)
            for r in c.execute(
                'SELECT id, status, callback_sequence FROM "RunAttempts" ORDER BY id'
            )
        ),
        tuple(
            tuple(r)
            for r in c.execute(
                'SELECT attempt_id, state FROM "LocalCompletionReceiptJournal" ORDER BY 1'
            )
        ),
        tuple(sorted((k, len(v)) for k, v in w.store.files.items())),
        tuple(sorted(w.store.quarantined)),
        tuple(sorted(w.forged)),
        tuple(procs),
        w.table.boots,
        w.table.unavailable,
        tuple(sorted(w.torn)),
        position,
        passes,
    )


def replay(scope: Scope, ordering: tuple[Action, ...]) -> tuple[World, int]:
    w = make_world(scope)
    passes = 0
    try:
        for action in ordering:
            passes += apply(w, action)
            w.check()
    except BaseException:
        w.close()
        raise
    return w, passes


def explore(scope: Scope, *, on_state: Callable[[World], None] | None = None) -> Stats:
    """Breadth-first over orderings up to ``scope.depth``; raises the first
    InvariantViolation with the ordering that produced it in its message."""
    stats = Stats()
    t0 = time.perf_counter()
    seen: set[tuple[Any, ...]] = set()
    frontier: list[tuple[Action, ...]] = [()]
    w0, _ = replay(scope, ())
    seen.add(state_key(w0, 0))
    w0.close()
    stats.states = 1
    for depth in range(scope.depth):
        nxt: list[tuple[Action, ...]] = []
        for ordering in frontier:
            w, passes = replay(scope, ordering)
            try:
                actions = enabled(w, scope, passes)
            finally:
                w.close()
            for action in actions:
                child = (*ordering, action)
                stats.orderings += 1
                try:
                    cw, cpasses = replay(scope, child)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n  ordering: {list(child)}") from exc
                try:
                    if action[0] == "step" and cw.last_label is not None:
                        # Per ordering, not per new state: a step that ends a pass often
                        # leads back to a state already seen, yet it was explored.
                        label = cw.last_label
                        stats.labels[label] = stats.labels.get(label, 0) + 1
                    key = state_key(cw, cpasses)
                    if key in seen:
                        continue
                    seen.add(key)
                    stats.states += 1
                    stats.max_depth = depth + 1
                    if on_state is not None:
                        on_state(cw)
                    if depth + 1 == scope.depth:
                        stats.leaves += 1
                        if scope.converge_leaves:
                            try:
                                cw.converge()
                            except AssertionError as exc:
                                raise AssertionError(
                                    f"{exc}\n  ordering: {list(child)} + convergence"
                                ) from exc
                            stats.converged += 1
                    else:
                        nxt.append(child)
                finally:
                    cw.close()
        frontier = nxt
        if not frontier:
            break
    stats.seconds = time.perf_counter() - t0
    return stats
