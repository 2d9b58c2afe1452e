"""Long histories (issue 29): `explain` and `inspect --run` on a run with a late-callback storm
of up to 100 000 events, on real SQLite files written once per module and read back through a
second connection, the commands run as real processes."""

from __future__ import annotations

import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _decisions import lose_after_grace
from _primary_support import T0, make_candidate
from history_support import add_storm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from reconciler._escape import json_line
from reconciler.cli._explain import FOLD_OVER, write_human, write_json
from reconciler.ops import Quiet, Steps, explain
from reconciler.ops._explain import (
    LEGACY_RECONCILER_ACTOR,
    LEGACY_ROW_MAPS,
    LEGACY_SHADOW_ACTOR,
    RECEIPT_ACTOR,
    RECONCILER_ACTOR,
    ROW_BY_ERROR_CODE,
    ROW_BY_EVIDENCE,
)
from storage import Repository, connect

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "reconciler" / "cli" / "schemas"
DECISION_AT = 50_000
TOTAL = 100_000
ROW_13 = "decision: ADR-0068 row 13: process_not_running:pid_absent"
EVIDENCE_13 = (
    "evidence: receipt missing, process not_running (pid_absent), handle pid matches, "
    "grace paid, receipt again missing"
)


def qlfsm(*args: str) -> subprocess.CompletedProcess[str]:
    # A long history on a shared machine: a generous timeout (no timing is asserted).
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def storm_db(path: Path, before: int, after: int) -> Path:
    """In the initialised database ``path``: a running local-process run (7 events), ``before``
    events that move no state, row 13's two `lost` events, then ``after`` more."""
    conn = connect(str(path))
    try:
        repo = Repository(conn)
        make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
        if before:
            add_storm(conn, "run-1", "at-1", before, T0 + 1)
        lose_after_grace(repo, "run-1", "at-1")
        if after:
            add_storm(conn, "run-1", "at-1", after, T0 + 5)
    finally:
        conn.close()
    return path


@pytest.fixture(scope="module")
def big(template_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 000 events: the decision (row 13's Attempt and Run `lost`) at events 50 000-50 001."""
    path = tmp_path_factory.mktemp("history") / "big.db"
    shutil.copyfile(template_db, path)
    return storm_db(path, DECISION_AT - 8, TOTAL - DECISION_AT - 1)


@pytest.fixture(scope="module")
def small(template_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1 000 events: the decision at 8-9, then a storm."""
    path = tmp_path_factory.mktemp("history") / "small.db"
    shutil.copyfile(template_db, path)
    return storm_db(path, 0, 1_000 - 9)


def events_in(db: Path) -> list[dict[str, Any]]:
    """Every event of run-1 read through a second, fresh connection."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT sequence, type, actor_type, actor_id, attempt_id, payload, created_at_ms "
            'FROM "RunEvents" WHERE run_id = ? ORDER BY sequence',
            ("run-1",),
        ).fetchall()
    finally:
        conn.close()
    keys = ("sequence", "type", "actor_type", "actor_id", "attempt_id", "payload", "at_ms")
    return [dict(zip(keys, (*r[:5], json.loads(r[5]), r[6]), strict=True)) for r in rows]


def sequences_shown(page: str) -> list[int]:
    """The sequences of the table's rows on a human `explain` page."""
    rows = (re.match(r"(\d+) +\d{4}-", line) for line in page.splitlines())
    return [int(m.group(1)) for m in rows if m]


def test_the_json_of_a_100_000_event_run_is_one_object_on_one_line_listing_every_event_once(
    big: Path,
) -> None:
    out = qlfsm("explain", "--db", str(big), "--run", "run-1", "--json").stdout
    assert len(out.splitlines()) == 1
    data = json.loads(out)
    schema = json.loads((SCHEMA_DIR / "explain.json").read_text(encoding="utf-8"))
    Draft202012Validator(schema).validate(data)
    stored = events_in(big)
    assert len(stored) == TOTAL
    shown = [{k: s[k] for k in stored[0]} for s in data["steps"]]
    assert shown == stored
    moving = [(s["sequence"], s["machine"], s["to"], s["row"]) for s in data["steps"] if s["to"]]
    assert moving[-2:] == [
        (DECISION_AT, "attempt", "lost", "13"),
        (DECISION_AT + 1, "run", "lost", "13"),
    ]


def test_a_decision_at_event_50_000_of_a_storm_is_shown_with_its_row_reason_and_evidence(
    big: Path,
) -> None:
    page = qlfsm("explain", "--db", str(big), "--run", "run-1").stdout
    lines = page.splitlines()
    assert len(lines) <= 400
    shown = sequences_shown(page)
    assert shown == [1, 2, 3, 4, 5, 6, 7, DECISION_AT, DECISION_AT + 1]
    at = lines.index(next(x for x in lines if x.startswith(f"{DECISION_AT} ")))
    assert "reconciler:local-startup" in lines[at] and "attempt: running -> lost" in lines[at]
    assert lines[at + 1 : at + 3] == [f"    {ROW_13}", f"    {EVIDENCE_13}"]
    half = (DECISION_AT - 8) // 2
    after = TOTAL - DECISION_AT - 1
    n = "{:,}".format
    first = (
        f"events 8\u2013{n(DECISION_AT - 1)}: {n(half)} \u00d7 attempt.late_callback_ignored, "
        f"{n(half)} \u00d7 run.reconciled \u2014 no state change"
    )
    second = (
        f"events {n(DECISION_AT + 2)}\u2013{n(TOTAL)}: {n(after - after // 2)} \u00d7 "
        f"attempt.late_callback_ignored, {n(after // 2)} \u00d7 run.reconciled \u2014 no "
        "state change"
    )
    assert first.replace(",", " ").replace("  ", ", ") in lines
    assert second.replace(",", " ").replace("  ", ", ") in lines
    hint = lines[-1]
    assert f"{TOTAL - 9:,} events that move no state".replace(",", " ") in hint
    assert "--run run-1 --all-events" in hint and "qlfsm inspect --db" in hint
    assert hint.endswith("--after 7")


def test_all_events_shows_every_event_of_the_storm(small: Path) -> None:
    folded = qlfsm("explain", "--db", str(small), "--run", "run-1").stdout
    assert sequences_shown(folded) == list(range(1, 10))
    every = qlfsm("explain", "--db", str(small), "--run", "run-1", "--all-events").stdout
    assert sequences_shown(every) == list(range(1, 1_001))
    assert "no state change" not in every
    assert f"    {ROW_13}" in every and f"    {EVIDENCE_13}" in every


@pytest.mark.parametrize("quiet", [FOLD_OVER, FOLD_OVER + 1])
def test_only_a_stretch_longer_than_the_fold_threshold_is_folded(db_path: Path, quiet: int) -> None:
    storm_db(db_path, 0, quiet)
    page = qlfsm("explain", "--db", str(db_path), "--run", "run-1").stdout
    if quiet > FOLD_OVER:
        assert sequences_shown(page) == list(range(1, 10))
        assert f"events 10\u2013{9 + quiet}: " in page
    else:
        assert sequences_shown(page) == list(range(1, 10 + quiet))
        assert "no state change" not in page and "--all-events" not in page


def test_the_streamed_json_is_byte_for_byte_the_whole_object_at_once(small: Path) -> None:
    conn = connect(str(small))
    try:
        found = explain(conn, "run-1")
        out = io.StringIO()
        write_json(found, out)
        assert out.getvalue() == json_line(found.as_dict()) + "\n"
        assert len(found.as_dict()["steps"]) == 1_000  # the source can be read again
    finally:
        conn.close()


def test_inspect_run_after_pages_through_every_event_exactly_once(small: Path) -> None:
    seen: list[int] = []
    after = "0"
    pages = 0
    while True:
        out = qlfsm(
            "inspect", "--db", str(small), "--run", "run-1", "--limit", "300", "--after", after,
            "--json",
        ).stdout  # fmt: skip
        data = json.loads(out)
        pages += 1
        seen += [e["sequence"] for e in data["runs"][0]["events"]]
        if not data["truncated"]:
            assert data["next_after"] is None
            break
        after = data["next_after"]
    assert pages == 4
    assert seen == [e["sequence"] for e in events_in(small)]
    human = qlfsm("inspect", "--db", str(small), "--run", "run-1", "--limit", "300").stdout
    assert human.splitlines()[-1] == (
        f"(truncated: showing 300 event(s) after sequence 0; more follow: qlfsm inspect --db "
        f"{small} --run run-1 --limit 300 --after 300)"
    )


def test_inspect_run_refuses_an_after_that_is_no_event_sequence(small: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "inspect", "--db", str(small), "--run", "run-1",
         "--after", "run-0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "--after 'run-0' with --run is an event sequence" in proc.stderr


def test_steps_skipping_a_quiet_stretch_reads_on_after_it_and_places_the_rest_as_a_full_pass(
    db_path: Path,
) -> None:
    # 7 events, 30 quiet (8-37), row 13's two `lost` (38-39), 30 quiet (40-69); pages of 7, so a
    # skip ends mid-page and the next read starts after it.
    storm_db(db_path, 30, 30)
    conn = connect(str(db_path))
    try:
        steps = Steps(conn, "run-1", "runtime", page=7)
        every = list(steps)
        kept = list(steps.skipping({8: 37, 40: 69}))
    finally:
        conn.close()
    assert [s.sequence for s in every] == list(range(1, 70))
    assert kept == [s for s in every if not (8 <= s.sequence <= 37 or 40 <= s.sequence <= 69)]
    assert [(s.machine, s.source, s.dest, s.row) for s in kept[-2:]] == [
        ("attempt", "running", "lost", "13"),
        ("run", "running", "lost", "13"),
    ]


def test_the_human_page_that_skips_its_folds_is_the_page_of_every_step_read(db_path: Path) -> None:
    storm_db(db_path, 30, 30)
    conn = connect(str(db_path))
    try:
        found = explain(conn, "run-1")
        skipped, listed = io.StringIO(), io.StringIO()
        write_human(found, skipped, db=str(db_path), fold=FOLD_OVER)
        write_human(
            replace(found, steps=list(found.steps)), listed, db=str(db_path), fold=FOLD_OVER
        )
    finally:
        conn.close()
    page = skipped.getvalue()
    assert page == listed.getvalue()
    assert "events 8\u201337: " in page and "events 40\u201369: " in page
    assert sequences_shown(page) == [*range(1, 8), 38, 39]


# Events of every kind the placing rules tell apart (docs/decisions.md D-30): moving and not,
# the ADR-0068 and ADR-0448 writers' actors, recorded decisions and resolutions (and keys that
# only look like them), the error codes, evidence words, dedupe keys and shadow marks a row is
# inferred from, and values of the wrong type.
_ACTORS = [
    RECONCILER_ACTOR,
    RECEIPT_ACTOR,
    LEGACY_RECONCILER_ACTOR,
    LEGACY_SHADOW_ACTOR,
    ("executor", "local-process"),
    ("user", None),
]
_TYPES = [
    "run.reconciled",
    "attempt.late_callback_ignored",
    "run.lost",
    "run.running",
    "attempt.lost",
    "attempt.succeeded",
    "run.no_such_state",
    "note",
]
_CODES = sorted({*ROW_BY_ERROR_CODE, *LEGACY_ROW_MAPS.by_error_code, "SOME_OTHER_CODE"})
_WORDS = sorted({*ROW_BY_EVIDENCE, "some_other_word"})
_DEDUPES = [None, *(p + "x" for p in LEGACY_ROW_MAPS.by_dedupe), "other:x"]
_ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3))
_PAYLOADS = st.fixed_dictionaries(
    {},
    optional={
        "decision": st.one_of(_ANY, st.just({"record": "ADR-0068", "row": "13"}), st.just({})),
        "resolution": st.one_of(_ANY, st.just({"to": "lost"})),
        "error_code": st.one_of(st.sampled_from(_CODES), _ANY),
        "evidence": st.one_of(st.sampled_from(_WORDS), _ANY),
        "shadow": _ANY,
        **{key: _ANY for key in LEGACY_ROW_MAPS.by_payload_key},
        "attempt_id": st.one_of(st.just("at-1"), _ANY),
        "from_status": st.sampled_from(["running", "created", "nonsense"]),
        "to_status": st.sampled_from(["lost", "succeeded", "nonsense"]),
    },
)
_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(_TYPES),
        st.sampled_from(_ACTORS),
        st.sampled_from(_DEDUPES),
        st.sampled_from([None, "at-1"]),
        _PAYLOADS,
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_EVENTS, owner=st.sampled_from(["runtime", "legacy"]))
def test_the_outline_marks_quiet_exactly_the_events_whose_step_moves_and_records_nothing(
    template_db: Path, events: list[tuple[Any, ...]], owner: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ql.db"
        shutil.copyfile(template_db, path)
        conn = connect(str(path))
        try:
            make_candidate(Repository(conn), "run-1", "at-1", handle="ql3lp1.x", pid=4242)
            (base,) = conn.execute('SELECT event_sequence FROM "Runs"').fetchone()
            for i, (kind, actor, dedupe, attempt, payload) in enumerate(events, start=1):
                conn.execute(
                    'INSERT INTO "RunEvents" (id, run_id, sequence, type, dedupe_key, '
                    "actor_type, actor_id, attempt_id, payload, created_at_ms) "
                    "VALUES (?, 'run-1', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (f"e{i}", base + i, kind, dedupe and f"{dedupe}{i}", *actor, attempt,
                     json.dumps(payload), T0 + i),
                )  # fmt: skip
            steps = Steps(conn, "run-1", owner, page=4)
            placed = list(steps)
            outlined = list(steps.outline())
        finally:
            conn.close()
    assert [s.sequence for s in outlined] == [s.sequence for s in placed]
    for got, step in zip(outlined, placed, strict=True):
        quiet = (
            step.machine is None
            and step.row is None
            and step.decision is None
            and step.resolution is None
        )
        assert isinstance(got, Quiet) == quiet
        assert got.as_dict() == step.as_dict()
