"""The modelling toolkit used for a lifecycle that is not QingLong's (issue 30): a CI job
``queued -> running -> succeeded | failed | cancelled`` with a guarded ``finish``.

Each friction a new user met is a test here: guards given per machine (one machine's guard
never changes another), QingLong's rules only where QingLong passes them, overlapping guards
found by exploring, a listener on any machine, a renamed trigger caught by the drawing check,
a guarded edge committed on the user's own SQLite table, and a decision table of one's own.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from fsm import (
    Case,
    DecisionEngine,
    DecisionRow,
    DecisionTable,
    Edge,
    GuardRefused,
    Lifecycle,
    MachineDefinitionError,
    MachineSpec,
    Step,
)
from fsm.draw import RecordError, check, parse_record, record_of, to_dot, to_mermaid
from fsm.qinglong import (
    GUARDS,
    PRIMARY_GUARDS,
    QINGLONG_RULES,
    PrimaryFacts,
    run_machine,
)
from fsm.testing import explore, explore_table, guard_what
from storage import Conflict, InvalidField, commit_edge


@dataclass(frozen=True)
class Job:
    exit_code: int = 0
    attempts: int = 1
    max_attempts: int = 3


def exit_ok(job: Job) -> bool:
    return job.exit_code == 0


def retries_left(job: Job) -> bool:
    return job.exit_code != 0 and job.attempts < job.max_attempts


def retries_exhausted(job: Job) -> bool:
    return job.exit_code != 0 and job.attempts >= job.max_attempts


CI_GUARDS = {
    "exit_ok": exit_ok,
    "retries_left": retries_left,
    "retries_exhausted": retries_exhausted,
}

CI_JOB = MachineSpec(
    name="ci_job",
    states=("queued", "running", "retry_wait", "succeeded", "failed", "cancelled"),
    initial="queued",
    terminal=frozenset({"succeeded", "failed", "cancelled"}),
    edges=(
        Edge("start", "queued", "running"),
        Edge("cancel", "queued", "cancelled"),
        Edge("finish", "running", "succeeded", "exit_ok"),
        Edge("finish", "running", "retry_wait", "retries_left"),
        Edge("finish", "running", "failed", "retries_exhausted"),
        Edge("cancel", "running", "cancelled"),
        Edge("requeue", "retry_wait", "queued"),
        Edge("cancel", "retry_wait", "cancelled"),
    ),
)

JOBS = st.builds(
    Job,
    exit_code=st.sampled_from([0, 1, 137]),
    attempts=st.integers(1, 4),
    max_attempts=st.integers(1, 3),
)


def test_a_user_machine_with_guarded_edges_needs_no_twin_edge_and_plans_by_its_own_guards() -> None:
    job = Lifecycle(CI_JOB, CI_GUARDS)
    assert job.plan("running", "finish", Job(exit_code=0)) == Step(
        "ci_job", "finish", "running", "succeeded", "exit_ok"
    )
    assert job.plan("running", "finish", Job(exit_code=1, attempts=3)).dest == "failed"
    assert job.plan("running", "finish", Job(exit_code=1, attempts=1)).dest == "retry_wait"
    # QingLong's rules are QingLong's: passed, they refuse the same table, naming the machine
    # and the edge, and no file of qlfsm.
    with pytest.raises(MachineDefinitionError) as refused:
        Lifecycle(CI_JOB, CI_GUARDS, rules=QINGLONG_RULES)
    assert str(refused.value) == (
        "machine 'ci_job' is invalid: guarded edge running -> succeeded (finish) [exit_ok] is "
        "not a legal lifecycle pair; fix that machine's declaration"
    )
    assert "fsm/" not in str(refused.value) and ".py" not in str(refused.value)


def test_the_general_checks_run_for_every_machine_and_name_the_machine_and_the_edge() -> None:
    undo = MachineSpec(
        CI_JOB.name,
        CI_JOB.states,
        "queued",
        CI_JOB.terminal,
        (*CI_JOB.edges, Edge("retry", "failed", "queued")),
    )
    with pytest.raises(MachineDefinitionError) as leaves:
        Lifecycle(undo, CI_GUARDS)
    assert leaves.value.machine == "ci_job"
    assert leaves.value.problem == "edge failed -> queued (retry) leaves terminal 'failed'"
    with pytest.raises(MachineDefinitionError) as unknown:
        Lifecycle(CI_JOB, {"exit_ok": exit_ok})
    assert unknown.value.problem == (
        "edge running -> retry_wait (finish) [retries_left] has unknown guard 'retries_left'"
    )


def test_a_guard_given_to_one_machine_leaves_the_run_machines_planned_edges_unchanged() -> None:
    no_evidence = PrimaryFacts(run_status="running")
    before = run_machine()
    with pytest.raises(GuardRefused):
        before.plan("running", "succeed_by_receipt", no_evidence)
    # A user's machine with a guard of the same name as QingLong's, always true.
    mine = MachineSpec(
        "mine", ("a", "b"), "a", frozenset({"b"}), (Edge("go", "a", "b", "trusted_receipt"),)
    )
    given = {"trusted_receipt": lambda _: True}
    assert Lifecycle(mine, given).plan("a", "go", no_evidence).dest == "b"
    given["trusted_receipt"] = lambda _: (
        False
    )  # the caller's mapping changes later: not the machine
    with pytest.raises(GuardRefused):
        run_machine().plan("running", "succeed_by_receipt", no_evidence)
    assert run_machine() is before
    assert run_machine().guards["trusted_receipt"] is PRIMARY_GUARDS["trusted_receipt"]
    # And nothing global can be written into.
    with pytest.raises(TypeError):
        GUARDS["trusted_receipt"] = lambda _: True  # type: ignore[index]
    with pytest.raises(TypeError):
        PRIMARY_GUARDS["exit_ok"] = exit_ok  # type: ignore[index]


def test_overlapping_guards_are_reported_by_the_exploration() -> None:
    # A second guard meant for failures but true on exit code 0 as well.
    def sloppy_retries_left(job: Job) -> bool:
        return job.attempts < job.max_attempts

    sloppy = Lifecycle(CI_JOB, {**CI_GUARDS, "retries_left": sloppy_retries_left})
    found = explore(sloppy, JOBS, examples=100)
    assert found.overlaps == (
        "running --finish: [exit_ok] -> succeeded and [retries_left] -> retry_wait both held "
        "(the first listed is taken)",
    )
    clean = explore(Lifecycle(CI_JOB, CI_GUARDS), JOBS, examples=100)
    assert clean.overlaps == ()


def test_an_exploration_reports_the_edges_taken_each_guard_both_ways_and_what_was_never_taken() -> (
    None
):
    cov = explore(Lifecycle(CI_JOB, CI_GUARDS), JOBS, examples=150)
    assert cov.machine == "ci_job"
    assert set(cov.edges) == {
        f"edge {e.source} --{e.trigger}{f' [{e.guard}]' if e.guard else ''}--> {e.dest}"
        for e in CI_JOB.edges
    }
    assert all(n > 0 for n in cov.edges.values()), cov.never
    assert all(t > 0 and f > 0 for t, f in cov.guards.values())
    assert cov.never == ()
    # Evidence that never fails leaves the failure edges and their guards' true side unseen.
    only_ok = explore(Lifecycle(CI_JOB, CI_GUARDS), st.just(Job(exit_code=0)), examples=30)
    assert "edge running --finish [retries_exhausted]--> failed" in only_ok.never
    assert "guard retries_left true" in only_ok.never
    assert "guard exit_ok false" in only_ok.never


class Heard:
    def __init__(self) -> None:
        self.edges: list[tuple[str, str, str, str, str | None]] = []
        self.guards: list[tuple[str, str, bool]] = []

    def edge(self, machine: str, source: str, trigger: str, dest: str, guard: str | None) -> None:
        self.edges.append((machine, source, trigger, dest, guard))

    def case(self, machine: str, row: str, state: str, then: str, guard: str) -> None:
        raise AssertionError("a lifecycle reports no decision case")

    def guard(self, machine: str, name: str, held: bool) -> None:
        self.guards.append((machine, name, held))


def test_a_listener_given_to_a_user_machine_receives_its_transitions_and_guard_outcomes() -> None:
    heard = Heard()
    job = Lifecycle(CI_JOB, CI_GUARDS, listeners=[heard])
    job.plan("queued", "start")
    job.plan("running", "finish", Job(exit_code=1, attempts=1))
    assert heard.edges == [
        ("ci_job", "queued", "start", "running", None),
        ("ci_job", "running", "finish", "retry_wait", "retries_left"),
    ]
    # transitions tries the guards in table order until one holds.
    assert heard.guards == [("ci_job", "exit_ok", False), ("ci_job", "retries_left", True)]
    # Another machine of the same spec, built without the listener, reports nothing to it.
    Lifecycle(CI_JOB, CI_GUARDS).plan("queued", "start")
    assert len(heard.edges) == 2


RECORD = """\
# The CI job as its design note says it (written apart from CI_JOB).
queued -> running : start
queued -> cancelled : cancel
running -> succeeded : finish [exit_ok]
running -> retry_wait : finish [retries_left]
running -> failed : finish [retries_exhausted]
running -> cancelled : cancel
retry_wait -> queued : requeue
retry_wait -> cancelled : cancel
"""


def test_a_drawing_agrees_with_its_record_and_a_renamed_trigger_fails_the_check() -> None:
    for rendered in (to_dot(CI_JOB, title="CI job"), to_mermaid(CI_JOB, title="CI job")):
        assert check(rendered, RECORD) == []
    renamed = MachineSpec(
        CI_JOB.name,
        CI_JOB.states,
        CI_JOB.initial,
        CI_JOB.terminal,
        tuple(
            Edge("enqueue", e.source, e.dest, e.guard) if e.trigger == "requeue" else e
            for e in CI_JOB.edges
        ),
    )
    for rendered in (to_dot(renamed), to_mermaid(renamed)):
        assert check(rendered, RECORD) == [
            "drawn but not in the record: retry_wait -> queued : enqueue",
            "in the record but not drawn: retry_wait -> queued : requeue",
        ]
    assert parse_record(record_of(CI_JOB)) == parse_record(RECORD)


def test_a_drawing_carries_the_callers_title_legend_and_looks() -> None:
    from fsm.draw import Looks

    dot = to_dot(CI_JOB, title="CI job", legend=["dashed: guarded"], looks=Looks(rankdir="TB"))
    assert 'label="CI job"' in dot and "rankdir=TB;" in dot and "dashed: guarded\\l" in dot
    assert "ADR" not in dot and "QingLong" not in dot
    mermaid = to_mermaid(CI_JOB, title="CI job", legend=["dashed: guarded"])
    assert mermaid.startswith("---\ntitle: CI job\n---\nstateDiagram-v2\n")
    assert "    running --> succeeded : finish [exit_ok]\n" in mermaid


def test_a_record_line_that_is_not_an_edge_is_refused_naming_the_line_and_the_form() -> None:
    with pytest.raises(RecordError) as bad:
        parse_record("queued -> running : start\nqueued to running\n")
    assert str(bad.value) == (
        "record line 2 is not 'source -> dest : trigger [guard]': 'queued to running'; "
        "write one edge a line in that form"
    )


def test_checking_a_user_diagram_imports_none_of_qinglongs_modules_nor_its_application() -> None:
    # Issue 30: the toolkit does not carry QingLong; its machines live in fsm.qinglong.
    code = (
        "import sys\n"
        "import fsm, fsm.draw\n"
        "from fsm import Edge, Lifecycle, MachineSpec, listen\n"
        "from fsm.draw import check, to_dot\n"
        "spec = MachineSpec('m', ('a', 'b'), 'a', frozenset({'b'}), (Edge('go', 'a', 'b'),))\n"
        "listen(lambda *a: None)()\n"
        "Lifecycle(spec, {}).plan('a', 'go')\n"
        "print(check(to_dot(spec), 'a -> b : go'),"
        " sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('reconciler', 'storage', 'graphviz', 'subprocess')"
        " or m.startswith('fsm.qinglong')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout == "[] []\n"
    # The same probe sees fsm.qinglong once QingLong's machines are imported.
    seen = subprocess.run(
        [sys.executable, "-c", "import sys, fsm.qinglong; print('fsm.qinglong' in sys.modules)"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert seen.stdout == "True\n"


# --- a guarded edge committed on the user's own SQLite table ---------------------------------


def _jobs_db(path: Path) -> None:
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT, version INTEGER)")
        c.execute("CREATE TABLE job_events (job TEXT, source TEXT, dest TEXT)")
        c.execute("INSERT INTO jobs VALUES ('j1', 'running', 4)")
    c.close()


def _read(path: Path) -> tuple[list[Any], list[Any]]:
    c = sqlite3.connect(path)  # a second connection: what was committed
    try:
        return (
            c.execute("SELECT * FROM jobs").fetchall(),
            c.execute("SELECT * FROM job_events").fetchall(),
        )
    finally:
        c.close()


def test_a_planned_edge_is_committed_as_one_compare_and_set_and_a_stale_version_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    _jobs_db(path)
    step = Lifecycle(CI_JOB, CI_GUARDS).plan("running", "finish", Job(exit_code=0))
    conn = sqlite3.connect(path)
    try:
        event = {"job": "j1", "source": step.source, "dest": step.dest}
        new = commit_edge(conn, step, table="jobs", key="j1", version=4,
                          event_table="job_events", event=event)  # fmt: skip
        assert new == 5
        assert _read(path) == ([("j1", "succeeded", 5)], [("j1", "running", "succeeded")])
        # The same plan again: the row is no longer running at version 4.
        with pytest.raises(Conflict) as stale:
            commit_edge(conn, step, table="jobs", key="j1", version=4,
                        event_table="job_events", event=event)  # fmt: skip
        assert str(stale.value) == (
            "conflict: row of jobs j1 is no longer running at version 4; re-read and decide again"
        )
        assert _read(path) == ([("j1", "succeeded", 5)], [("j1", "running", "succeeded")])
    finally:
        conn.close()


def test_an_event_row_that_cannot_be_inserted_rolls_the_edge_back(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    _jobs_db(path)
    step = Step("ci_job", "finish", "running", "failed", "retries_exhausted")
    conn = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.OperationalError):
            commit_edge(conn, step, table="jobs", key="j1", version=4,
                        event_table="job_events", event={"no_such_column": 1})  # fmt: skip
        assert _read(path) == ([("j1", "running", 4)], [])
        with pytest.raises(InvalidField) as bad:
            commit_edge(conn, step, table="jobs; DROP TABLE jobs", key="j1", version=4)
        assert str(bad.value) == (
            "table 'jobs; DROP TABLE jobs' is not a plain SQL name; use letters, digits and "
            "'_' only"
        )
        assert _read(path) == ([("j1", "running", 4)], [])
    finally:
        conn.close()


# --- a decision table of one's own -----------------------------------------------------------


@dataclass(frozen=True)
class Build:
    cached: bool | None = None
    tests_passed: bool | None = None


def _rows(*rows: DecisionRow) -> DecisionTable:
    return DecisionTable(
        name="build_gate",
        evidence=("read_cache", "run_tests"),
        decisions={"skip": "skipped", "ship": "shipped", "block": "blocked"},
        rows=rows,
    )


BUILD_ROWS = (
    DecisionRow("1", "cache hit", "gate 1", (Case("read_cache", "cached", "skip"),)),
    DecisionRow("2", "cache miss", "gate 2", (Case("read_cache", "not_cached", "run_tests"),)),
    DecisionRow("3", "green", "gate 3", (Case("run_tests", "green", "ship"),)),
    DecisionRow("4", "red", "gate 4", (Case("run_tests", "red", "block"),)),
)
BUILD_GUARDS = {
    "cached": lambda b: b.cached is True,
    "not_cached": lambda b: b.cached is False,
    "green": lambda b: b.tests_passed is True,
    "red": lambda b: b.tests_passed is False,
}


def test_a_decision_table_of_ones_own_decides_step_by_step_and_is_explored_with_coverage() -> None:
    engine = DecisionEngine(_rows(*BUILD_ROWS), BUILD_GUARDS)
    walk = engine.walk(Build(cached=False, tests_passed=True), lambda state, f: True)
    assert walk.decided is not None and walk.decided.row.row == "3"
    assert [t.row.row for t in walk.taken] == ["2"]
    builds = st.builds(Build, cached=st.booleans(), tests_passed=st.booleans())
    cov = explore_table(engine, builds, examples=60)
    assert cov.never == () and set(cov.edges) == {
        "case row 1: read_cache -> skip",
        "case row 2: read_cache -> run_tests",
        "case row 3: run_tests -> ship",
        "case row 4: run_tests -> block",
    }
    only_cached = explore_table(engine, st.builds(Build, cached=st.just(True)), examples=10)
    assert "case row 3: run_tests -> ship" in only_cached.never


def test_explore_table_counts_each_guard_of_a_row_by_its_own_truth_not_by_its_row_s() -> None:
    # Two cases of one row lead to the same state under different guards: when one holds, the
    # other was still false on those facts, and the coverage must say so.
    rows = (
        *BUILD_ROWS[:3],
        DecisionRow(
            "4",
            "red or unknown",
            "gate 4",
            (Case("run_tests", "red", "block"), Case("run_tests", "unknown", "block")),
        ),
    )
    guards = {**BUILD_GUARDS, "unknown": lambda b: b.tests_passed is None}
    engine = DecisionEngine(_rows(*rows), guards)
    never_unknown = st.builds(Build, cached=st.just(False), tests_passed=st.booleans())
    cov = explore_table(engine, never_unknown, examples=40, seed=1)
    assert cov.guards["unknown"][0] == 0 and cov.guards["unknown"][1] > 0
    assert cov.guards["red"][0] > 0 and cov.guards["red"][1] > 0
    assert guard_what("unknown", True) in cov.never


def test_a_decision_table_with_a_guard_tried_twice_or_a_state_no_row_reaches_is_refused() -> None:
    twice = (
        *BUILD_ROWS,
        DecisionRow("5", "green again", "gate 5", (Case("run_tests", "green", "ship"),)),
    )
    with pytest.raises(MachineDefinitionError) as ambiguous:
        DecisionEngine(_rows(*twice), BUILD_GUARDS)
    assert (
        ambiguous.value.problem
        == "row 5 in 'run_tests': guard 'green' is tried twice in 'run_tests'"
    )
    with pytest.raises(MachineDefinitionError) as unreached:
        DecisionEngine(_rows(BUILD_ROWS[0], *BUILD_ROWS[2:]), BUILD_GUARDS)
    # Rows 3 and 4 are tried only in a state no row leads to any more (guards are opaque: a
    # row hidden by the rows before it in a reachable state is what explore_table finds).
    assert unreached.value.problem == "unreachable states ['run_tests', 'ship', 'block']"
