"""Random command sequences against the repository and a plain dict model (spec 01)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from _support import T0
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fsm import GuardRefused, IllegalTransition
from storage import (
    Actor,
    AttemptChange,
    Conflict,
    InvalidField,
    Repository,
    RunChange,
    connect,
)

# The model knows spec 01 on its own: it does not ask fsm what is legal.
RUN_NEXT: dict[str, dict[str, str]] = {
    "created": {"queue": "queued", "cancel": "cancelled"},
    "queued": {"dispatch": "dispatching", "cancel": "cancelled", "time_out": "timed_out"},
    "dispatching": {
        "start": "running",
        "schedule_retry": "retry_wait",
        "fail": "failed",
        "cancel": "cancelled",
        "mark_lost": "lost",
        "time_out": "timed_out",  # spec 01 (**): the RUN_TRANSITIONS amendment
    },
    "running": {
        "await_approval": "waiting_approval",
        "schedule_retry": "retry_wait",
        "succeed": "succeeded",
        "fail": "failed",
        "cancel": "cancelled",
        "time_out": "timed_out",
        "mark_lost": "lost",
    },
    "waiting_approval": {"start": "running", "cancel": "cancelled", "time_out": "timed_out"},
    "retry_wait": {"queue": "queued", "cancel": "cancelled", "time_out": "timed_out"},
    "lost": {
        "queue": "queued",
        "fail": "failed",
        "cancel": "cancelled",
        "schedule_retry": "retry_wait",
    },
}
ATTEMPT_NEXT: dict[str, dict[str, str]] = {
    "claimed": {"start": "starting", "cancel": "cancelled", "mark_lost": "lost"},
    "starting": {
        "run": "running",
        "fail": "failed",
        "cancel": "cancelled",
        "time_out": "timed_out",
        "mark_lost": "lost",
    },
    "running": {
        "succeed": "succeeded",
        "fail": "failed",
        "cancel": "cancelled",
        "time_out": "timed_out",
        "mark_lost": "lost",
    },
}
RUN_STATES = {"created", "succeeded", "failed", "cancelled", "timed_out", *RUN_NEXT}
ATTEMPT_STATES = {"succeeded", "failed", "cancelled", "timed_out", "lost", *ATTEMPT_NEXT}
RUN_TERMINAL = {"succeeded", "failed", "cancelled", "timed_out"}
ATTEMPT_TERMINAL = {"succeeded", "failed", "cancelled", "timed_out", "lost"}
# Guarded decision triggers: without evidence they are refused (or illegal from here).
RUN_GUARDED = {
    "start_by_receipt": {"dispatching"},
    "succeed_by_receipt": {"running"},
    "lose_after_grace": {"dispatching", "running"},
    "lose_missing_attempt": {"dispatching"},
}
ATTEMPT_GUARDED = {
    "succeed_by_receipt": {"running"},
    "run_by_receipt": {"starting"},
    "lose_unstarted_claim": {"claimed"},
}
RUN_TRIGGERS = sorted({t for nxt in RUN_NEXT.values() for t in nxt} | set(RUN_GUARDED))
ATTEMPT_TRIGGERS = sorted({t for nxt in ATTEMPT_NEXT.values() for t in nxt} | set(ATTEMPT_GUARDED))
ACTOR = Actor("system")


class RepositoryMachine(RuleBasedStateMachine):
    runs = Bundle("runs")
    attempts = Bundle("attempts")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="qlfsm-stateful-"))
        self.path = self.dir / "ql.db"
        shutil.copyfile(TEMPLATE, self.path)
        self.conn = connect(str(self.path))
        self.repo = Repository(self.conn)
        self.reader = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True)
        # run id -> {"status", "version", "attempts": {id: status}}
        self.model: dict[str, dict[str, Any]] = {}
        # run id -> the terminal status it reached (it must never change afterwards)
        self.frozen: dict[str, str] = {}
        self.frozen_attempts: dict[str, str] = {}
        self.clock = T0
        self.counter = 0

    def teardown(self) -> None:
        self.conn.close()
        self.reader.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def new_id(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}-{self.counter:04d}"

    @initialize(target=runs)
    def first_run(self) -> str:
        return self._create_run()

    @rule(target=runs)
    def create_run(self) -> str:
        return self._create_run()

    def _create_run(self) -> str:
        run_id = self.new_id("run")
        done = self.repo.create_run(run_id=run_id, at_ms=self.tick())
        assert done.version == 1
        self.model[run_id] = {"status": "created", "version": 1, "attempts": {}}
        return run_id

    @rule(target=attempts, run_id=runs)
    def add_attempt(self, run_id: str) -> tuple[str, str]:
        m = self.model[run_id]
        attempt_id = self.new_id("att")
        if m["status"] in RUN_TERMINAL:
            with pytest.raises(InvalidField):
                self.repo.create_attempt(
                    run_id=run_id,
                    attempt_id=attempt_id,
                    expected_version=m["version"],
                    at_ms=self.tick(),
                )
            return (run_id, "")
        done = self.repo.create_attempt(
            run_id=run_id,
            attempt_id=attempt_id,
            expected_version=m["version"],
            at_ms=self.tick(),
        )
        m["version"] += 1
        assert done.version == m["version"]
        m["attempts"][attempt_id] = "claimed"
        return (run_id, attempt_id)

    @rule(run_id=runs, trigger=st.sampled_from(RUN_TRIGGERS))
    def run_edge(self, run_id: str, trigger: str) -> None:
        m = self.model[run_id]
        status = m["status"]
        change = RunChange(trigger)
        if trigger in RUN_NEXT.get(status, {}):
            self.repo.advance(run_id, m["version"], [change], actor=ACTOR, at_ms=self.tick())
            m["status"] = RUN_NEXT[status][trigger]
            m["version"] += 1
        elif status in RUN_GUARDED.get(trigger, set()):
            with pytest.raises(GuardRefused):
                self.repo.advance(run_id, m["version"], [change], actor=ACTOR, at_ms=self.tick())
        else:
            with pytest.raises(IllegalTransition):
                self.repo.advance(run_id, m["version"], [change], actor=ACTOR, at_ms=self.tick())

    @rule(pair=attempts, trigger=st.sampled_from(ATTEMPT_TRIGGERS))
    def attempt_edge(self, pair: tuple[str, str], trigger: str) -> None:
        run_id, attempt_id = pair
        if not attempt_id:
            return
        m = self.model[run_id]
        status = m["attempts"][attempt_id]
        change = AttemptChange(attempt_id, trigger)
        if m["status"] in RUN_TERMINAL:
            with pytest.raises(Conflict):
                self.repo.advance(run_id, m["version"], [change], actor=ACTOR, at_ms=self.tick())
        elif trigger in ATTEMPT_NEXT.get(status, {}):
            self.repo.advance(run_id, m["version"], [change], actor=ACTOR, at_ms=self.tick())
            m["attempts"][attempt_id] = ATTEMPT_NEXT[status][trigger]
            m["version"] += 1
        elif status in ATTEMPT_GUARDED.get(trigger, set()):
            with pytest.raises(GuardRefused):
                self.repo.advance(run_id, m["version"], [change], actor=ACTOR, at_ms=self.tick())
        else:
            with pytest.raises(IllegalTransition):
                self.repo.advance(run_id, m["version"], [change], actor=ACTOR, at_ms=self.tick())

    @rule(run_id=runs, data=st.data())
    def legal_run_edge(self, run_id: str, data: st.DataObject) -> None:
        """Mostly-legal moves, so that sequences reach deep and terminal states."""
        legal = sorted(RUN_NEXT.get(self.model[run_id]["status"], {}))
        if legal:
            self.run_edge(run_id, data.draw(st.sampled_from(legal), label="legal run trigger"))

    @rule(pair=attempts, data=st.data())
    def legal_attempt_edge(self, pair: tuple[str, str], data: st.DataObject) -> None:
        run_id, attempt_id = pair
        if not attempt_id:
            return
        legal = sorted(ATTEMPT_NEXT.get(self.model[run_id]["attempts"][attempt_id], {}))
        if legal:
            trigger = data.draw(st.sampled_from(legal), label="legal attempt trigger")
            self.attempt_edge(pair, trigger)

    @rule(pair=attempts)
    def late_callback(self, pair: tuple[str, str]) -> None:
        """A completion arriving for an Attempt: terminal ones only get the ignored event."""
        run_id, attempt_id = pair
        if not attempt_id:
            return
        m = self.model[run_id]
        if m["attempts"][attempt_id] in ATTEMPT_TERMINAL or m["status"] in RUN_TERMINAL:
            self.repo.append_event(
                run_id,
                m["version"],
                "attempt.late_callback_ignored",
                actor=Actor("executor"),
                at_ms=self.tick(),
                attempt_id=attempt_id,
            )
            m["version"] += 1

    @rule(run_id=runs, trigger=st.sampled_from(RUN_TRIGGERS), behind=st.integers(1, 3))
    def stale_version(self, run_id: str, trigger: str, behind: int) -> None:
        m = self.model[run_id]
        with pytest.raises(Conflict):
            self.repo.advance(
                run_id,
                m["version"] - behind,
                [RunChange(trigger)],
                actor=ACTOR,
                at_ms=self.tick(),
            )

    @precondition(lambda self: len(self.model) > 1)
    @rule()
    def reopen(self) -> None:
        """A new connection takes over the writing: nothing may depend on the old one."""
        self.conn.close()
        self.conn = connect(str(self.path))
        self.repo = Repository(self.conn)

    @invariant()
    def database_matches_the_model(self) -> None:
        rows = self.reader.execute(
            'SELECT id, status, version, event_sequence FROM "Runs"'
        ).fetchall()
        assert {r[0] for r in rows} == set(self.model)
        for run_id, status, version, sequence in rows:
            m = self.model[run_id]
            assert status in RUN_STATES
            assert status == m["status"]
            seqs = [
                s
                for (s,) in self.reader.execute(
                    'SELECT sequence FROM "RunEvents" WHERE run_id = ? ORDER BY sequence',
                    (run_id,),
                )
            ]
            assert version == sequence == len(seqs) == m["version"]
            assert seqs == list(range(1, len(seqs) + 1))
            if run_id in self.frozen:
                assert status == self.frozen[run_id], "a terminal Run changed"
            elif status in RUN_TERMINAL:
                self.frozen[run_id] = status
        for attempt_id, run_id, status in self.reader.execute(
            'SELECT id, run_id, status FROM "RunAttempts"'
        ):
            assert status in ATTEMPT_STATES
            assert status == self.model[run_id]["attempts"][attempt_id]
            if attempt_id in self.frozen_attempts:
                assert status == self.frozen_attempts[attempt_id], "a terminal Attempt changed"
            elif status in ATTEMPT_TERMINAL:
                self.frozen_attempts[attempt_id] = status


TEMPLATE = Path()


@pytest.fixture(autouse=True)
def _template(template_db: Path) -> None:
    global TEMPLATE
    TEMPLATE = template_db


RepositoryMachine.TestCase.settings = settings(settings.default, stateful_step_count=30)
test_random_command_sequences_keep_the_run_log_consistent = RepositoryMachine.TestCase
