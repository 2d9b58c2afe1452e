"""Text qlfsm did not write reaches no terminal, JSON reader or SVG viewer raw (docs/decisions.md
D-14): run ids, task fields, event types and actors, receipt fields and journal rows written by
someone else, and arguments and environment values, all holding CR, LF, ESC sequences (CSI,
OSC), BEL, NUL, DEL, C1 (U+009B, U+0085), U+2028/U+2029 and bidi controls.

Real SQLite files (rows written through the repository and, where it would refuse them, by
plain SQL with parameters), real receipt files, the real CLI in subprocesses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.dom import minidom
from xml.etree import ElementTree

import pytest
from _primary_support import dead_handle, linux_only, make_candidate
from test_startup_report import pasted

from reconciler._escape import clean, json_safe, shell_word
from storage import Repository, connect

# A second line that would forge a SAFE verdict, a colour, a window title (OSC ... BEL), a
# C1 CSI that clears the screen, NEL, the line/paragraph separators, bidi overrides, DEL, SOH.
EVIL = (
    "\r\nverdict: SAFE to start\r\n\x1b[32m\x1b]0;owned\x07\x1b[0m\x07\x9b2J\x85\u2028\u2029"
    "\u202e\u2066\u200f\u061c\x7f\x01\x1b"
)
RUN = "run-a" + EVIL  # also given as an argument
RUN_NUL = "run-b" + EVIL + "\x00tail"  # argv cannot hold a NUL: seen only in listings
RUN_SWEEP = "run-c" + EVIL
ATTEMPT_SWEEP = "at-c" + EVIL  # a journal row whose attempt id is hostile
# A directory name (no "/" and no NUL: the file system refuses those) for --db and --dir.
DIR = "d" + EVIL

BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def raw_controls(text: str) -> list[str]:
    """The characters a terminal would act on: C0 but LF, DEL, C1, U+2028/U+2029 and the bidi
    controls (qlfsm prints no TAB of its own)."""
    return [
        ch
        for ch in text
        if (ord(ch) < 0x20 and ch != "\n")
        or 0x7F <= ord(ch) <= 0x9F
        or ord(ch) in (0x2028, 0x2029)
        or ord(ch) in BIDI
    ]


def unsafe(out: subprocess.CompletedProcess[str]) -> list[str]:
    """What is wrong with a command's output for a terminal (empty: nothing)."""
    problems = []
    for name, text in (("stdout", out.stdout), ("stderr", out.stderr)):
        raw = raw_controls(text)
        if raw:
            problems.append(f"raw {sorted(set(raw))!r} on {name}")
        forged = [ln for ln in text.splitlines() if ln.lstrip().startswith("verdict:")]
        if len(forged) > 1:
            problems.append(f"{len(forged)} verdict lines on {name}")
    return problems


def assert_shown_safely(out: subprocess.CompletedProcess[str], what: str) -> None:
    problems = unsafe(out)
    assert problems == [], (what, problems, out.stdout[:600], out.stderr[:600])


def one_json_line(out: subprocess.CompletedProcess[str], what: str) -> Any:
    assert raw_controls(out.stdout) == [], (what, out.stdout)
    assert len(out.stdout.splitlines()) == 1, (what, out.stdout)
    return json.loads(out.stdout)


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


def qlfsm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**base, **(env or {})},
    )


@dataclass
class Node:
    db: Path
    root: Path
    base: Path


def _add_event(conn: sqlite3.Connection, run_id: str) -> None:
    """An event of another writer: hostile type, actor id and payload (plain SQL)."""
    (seq,) = conn.execute('SELECT event_sequence FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
    conn.execute(
        'INSERT INTO "RunEvents" (id, run_id, sequence, type, actor_type, actor_id, payload, '
        "created_at_ms) VALUES (?, ?, ?, ?, 'system', ?, ?, ?)",
        (
            f"ev-{run_id}-{seq + 1}",
            run_id,
            seq + 1,
            "note" + EVIL,
            "actor" + EVIL,
            json.dumps({"note" + EVIL: "value" + EVIL}),
            1_700_000_000_500,
        ),
    )
    conn.execute('UPDATE "Runs" SET event_sequence = ? WHERE id = ?', (seq + 1, run_id))


@pytest.fixture
def node(template_db: Path, tmp_path: Path) -> Node:
    """A node whose database, receipts and directory are all hostile."""
    base = tmp_path / DIR
    base.mkdir()
    db = base / "ql.db"
    shutil.copyfile(template_db, db)
    root = base / "receipts"
    (root / "at").mkdir(parents=True)
    conn = connect(str(db))
    try:
        repo = Repository(conn)
        # Row 10 (an invalid handle): unresolved, start-up BLOCKED.
        make_candidate(repo, RUN_NUL, "at-b", handle="ql3lp1.bad", pid=3)
        # A dead process and a receipt whose fields are hostile: quarantined, blocked.
        handle, pid = dead_handle()
        make_candidate(repo, RUN, "at-a", handle=handle, pid=pid)
        (root / "at" / "at-a.json").write_text(
            json.dumps({"run_id": EVIL, "attempt_id": "at-a" + EVIL, "token": EVIL}),
            encoding="utf-8",
        )
        # An ended Attempt whose journal row names an id no path can be made of.
        make_candidate(repo, RUN_SWEEP, ATTEMPT_SWEEP, attempt="claimed", run="dispatching")
        conn.execute("BEGIN")
        conn.execute(
            'UPDATE "Runs" SET task_id = ?, task_name = ?, task_revision = ?, error_code = ? '
            "WHERE id IN (?, ?)",
            ("task" + EVIL, "name" + EVIL, "rev" + EVIL, "E" + EVIL, RUN, RUN_NUL),
        )
        conn.execute(
            "UPDATE \"RunAttempts\" SET status = 'failed', finished_at_ms = 1700000000100 "
            "WHERE id = ?",
            (ATTEMPT_SWEEP,),
        )
        conn.execute("UPDATE \"Runs\" SET status = 'failed' WHERE id = ?", (RUN_SWEEP,))
        conn.execute(
            'INSERT INTO "LocalCompletionReceiptJournal" (attempt_id, run_id, state, '
            "registered_at_ms, updated_at_ms) VALUES (?, ?, 'pending', 1, 1)",
            (ATTEMPT_SWEEP, RUN_SWEEP),
        )
        for run_id in (RUN, RUN_NUL):
            _add_event(conn, run_id)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return Node(db=db, root=root, base=base)


def _human_runs(node: Node, tmp_path: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(what, argv, environment) of every command's human output, in an order that leaves the
    database in each state the next one needs (resolve after the passes)."""
    db, root, base = str(node.db), str(node.root), str(node.base)
    new_db = str(node.base / ("new" + EVIL + ".db"))
    svg = str(node.base / ("path" + EVIL + ".svg"))
    evil_env = {"QL_DEPLOYMENT_PROFILE": EVIL}
    return [
        ("reconcile", ["reconcile", "--db", db, "--receipt-root", root], {}),
        ("reconcile --dry-run", ["reconcile", "--db", db, "--receipt-root", root, "--dry-run"], {}),
        ("startup", ["startup", "--db", db, "--receipt-root", root], {}),
        ("startup --dry-run", ["startup", "--db", db, "--receipt-root", root, "--dry-run"], {}),
        ("shadow", ["shadow", "--db", db, "--origins", "manual," + EVIL], {}),
        ("inspect", ["inspect", "--db", db], {}),
        ("inspect --limit", ["inspect", "--db", db, "--limit", "1"], {}),
        ("inspect --run", ["inspect", "--db", db, "--run", RUN], {}),
        ("inspect --after", ["inspect", "--db", db, "--after", EVIL], {}),
        ("inspect unknown run", ["inspect", "--db", db, "--run", "x" + EVIL], {}),
        ("explain", ["explain", "--db", db, "--run", RUN], {}),
        ("explain --svg", ["explain", "--db", db, "--run", RUN, "--svg", svg], {}),
        ("explain unknown run", ["explain", "--db", db, "--run", "x" + EVIL], {}),
        ("explain --svg bad dir", ["explain", "--db", db, "--run", RUN, "--svg",
                                   base + "/n" + EVIL + "/x"], {}),
        ("resolve bad reason", ["resolve", "--db", db, "--run", RUN, "--to", "failed",
                                "--reason", EVIL], {}),
        ("resolve unknown run", ["resolve", "--db", db, "--run", "x" + EVIL, "--to", "failed",
                                 "--reason", "gone"], {}),
        ("resolve", ["resolve", "--db", db, "--run", RUN, "--to", "failed", "--reason", "gone",
                     "--operator", EVIL], {}),
        ("resolve refused", ["resolve", "--db", db, "--run", RUN, "--to", "failed", "--reason",
                             "again"], {}),
        ("sweep", ["sweep", "--db", db, "--receipt-root", root], {}),
        ("launch refused", ["launch", "--db", db, "--receipt-root", root, "--run-id", EVIL,
                            "--", "true"], {}),
        ("db init", ["db", "init", "--db", new_db], {}),
        ("db init again", ["db", "init", "--db", new_db], {}),
        ("db init no directory", ["db", "init", "--db", base + "/no" + EVIL + "/x.db"], {}),
        ("diagrams render", ["diagrams", "render", "--out", base + "/diagrams" + EVIL], {}),
        ("diagrams check", ["diagrams", "check", "--dir", base + "/none" + EVIL], {}),
        ("unknown command", [EVIL], {}),
        ("unknown flag", ["reconcile", "--db", db, "--" + EVIL], {}),
        ("missing database", ["reconcile", "--db", base + "/x" + EVIL, "--receipt-root", root],
         {}),
        ("startup missing database", ["startup", "--db", base + "/x" + EVIL, "--receipt-root",
                                      root], {}),
        ("relative root", ["reconcile", "--db", db, "--receipt-root", EVIL], {}),
        ("profile from the environment", ["reconcile", "--db", db, "--receipt-root", root],
         evil_env),
        ("startup profile from the environment", ["startup", "--db", db, "--receipt-root", root],
         evil_env),
        ("lock budget from the environment", ["sweep", "--db", db, "--receipt-root", root],
         {"QLFSM_LOCK_BUDGET_S": EVIL}),
    ]  # fmt: skip


@linux_only
def test_every_command_shows_hostile_text_escaped_and_never_prints_a_forged_verdict(
    node: Node, tmp_path: Path
) -> None:
    seen: dict[str, subprocess.CompletedProcess[str]] = {}
    problems: dict[str, list[str]] = {}
    for what, argv, env in _human_runs(node, tmp_path):
        out = qlfsm(*argv, env=env)
        assert "Traceback" not in out.stderr, (what, out.stderr)
        if unsafe(out):
            problems[what] = unsafe(out)
        seen[what] = out
    assert problems == {}
    # The blocked start-up says BLOCKED once, last; the runs are listed with their escapes and
    # the command that explains each is one pasteable line.
    for what in ("reconcile", "startup"):
        out = seen[what]
        assert out.returncode == 3, (what, out.stderr)
        lines = out.stdout.splitlines()
        assert lines[-1] == "verdict: start-up BLOCKED"
        assert [ln for ln in lines if ln.startswith("verdict:")] == [lines[-1]]
        # At most 100 columns a line (docs/decisions.md D-22): a run id too long for a table
        # column is cut into lines (joined, it is whole) and the explain command is wrapped
        # with continuations that bash reads back as the same arguments.
        assert max(len(line) for line in lines) <= 100, (what, out.stdout)
        assert clean(RUN_NUL) in "".join(lines) and "\\x00tail" in out.stdout
        explain = ["qlfsm", "explain", "--db", str(node.db), "--run", RUN, "--receipt-root"]
        assert [*explain, str(node.root)] in pasted(out.stdout), (what, out.stdout)
    assert seen["reconcile --dry-run"].stdout.splitlines()[-1].endswith("start-up BLOCKED")
    # inspect: run id, error, event type and actor, all escaped, nothing dropped.
    inspected = seen["inspect --run"].stdout
    for text in (RUN, "E" + EVIL, "note" + EVIL, "system:actor" + EVIL):
        assert clean(text) in inspected, text
    assert seen["explain"].stdout.startswith(f"run {clean(RUN)} (runtime, manual): now running")
    assert f"--after {shell_word(RUN)}" in seen["inspect --limit"].stdout
    # resolve: done, its "see it" line one pasteable command; the second time a refusal.
    done = seen["resolve"]
    assert done.returncode == 0, done.stderr
    assert f"see it: qlfsm explain --db {shell_word(node.db)} --run {shell_word(RUN)}" in (
        done.stdout.splitlines()
    )
    refused = seen["resolve refused"]
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"run {clean(RUN)} is failed, a terminal state" in refused.stderr
    # sweep: the row no path can be made of is named once, escaped, and skipped (exit 0).
    swept = seen["sweep"]
    assert swept.returncode == 0, swept.stderr
    assert swept.stderr.count("journal row of Attempt 'at-c\\r\\nverdict: SAFE") == 1, swept.stderr
    # One-line errors that repeat an argument stay one line.
    for what in ("inspect --after", "inspect unknown run", "explain unknown run",
                 "resolve bad reason", "resolve unknown run", "launch refused",
                 "db init no directory", "diagrams check", "unknown command", "unknown flag",
                 "missing database", "startup missing database", "relative root",
                 "profile from the environment", "startup profile from the environment",
                 "lock budget from the environment"):  # fmt: skip
        out = seen[what]
        assert out.returncode in (1, 2), (what, out.returncode, out.stdout, out.stderr)
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("qlfsm"), (what, out.stderr)
    assert f"qlfsm db init --db {shell_word(node.base / ('x' + EVIL))}" in (
        seen["missing database"].stderr
    )


def test_the_demo_in_a_hostile_directory_prints_nothing_raw(tmp_path: Path) -> None:
    out = qlfsm("demo", "--dir", str(tmp_path / DIR))
    assert out.returncode == 0, out.stdout + out.stderr
    assert_shown_safely(out, "demo")
    assert f"demo directory: {clean(tmp_path / DIR)}" in out.stdout


@linux_only
def test_every_json_output_is_one_line_for_every_reader_and_parses_to_the_stored_text(
    node: Node,
) -> None:
    db, root = str(node.db), str(node.root)
    runs = {
        "reconcile": ["reconcile", "--db", db, "--receipt-root", root, "--json"],
        "reconcile --dry-run": ["reconcile", "--db", db, "--receipt-root", root, "--dry-run",
                                "--json"],
        "startup": ["startup", "--db", db, "--receipt-root", root, "--json"],
        "startup --dry-run": ["startup", "--db", db, "--receipt-root", root, "--dry-run",
                              "--json"],
        "shadow": ["shadow", "--db", db, "--origins", "manual", "--json"],
        "inspect": ["inspect", "--db", db, "--json"],
        "inspect --run": ["inspect", "--db", db, "--run", RUN, "--json"],
        "explain": ["explain", "--db", db, "--run", RUN, "--json"],
        "sweep": ["sweep", "--db", db, "--receipt-root", root, "--json"],
        "resolve": ["resolve", "--db", db, "--run", RUN, "--to", "failed", "--reason", "gone",
                    "--json"],
        "db init": ["db", "init", "--db", str(node.base / ("new" + EVIL + ".db")), "--json"],
    }  # fmt: skip
    got: dict[str, Any] = {}
    for what, argv in runs.items():
        out = qlfsm(*argv)
        assert out.returncode in (0, 1, 3), (what, out.stderr)
        assert_shown_safely(out, what)
        got[what] = one_json_line(out, what)
    for what in ("reconcile", "reconcile --dry-run"):
        assert {c["run_id"] for c in got[what]["candidates"]} == {RUN, RUN_NUL}
    assert {c["run_id"] for c in got["startup"]["primary"]["candidates"]} == {RUN, RUN_NUL}
    assert {r["run"]["id"] for r in got["inspect"]["runs"]} == {RUN, RUN_NUL, RUN_SWEEP}
    stored = set(strings_in(got["inspect --run"]))
    for text in ("task" + EVIL, "name" + EVIL, "E" + EVIL, "note" + EVIL, "actor" + EVIL,
                 "value" + EVIL):  # fmt: skip
        assert text in stored, text
    assert got["explain"]["run"]["id"] == RUN
    assert got["sweep"]["errors"] == []
    assert [w for w in got["sweep"]["warnings"] if "journal row of Attempt 'at-c" in w] == (
        got["sweep"]["warnings"]
    ) and len(got["sweep"]["warnings"]) == 1
    assert got["resolve"]["run_id"] == RUN
    assert got["db init"]["db"] == str(node.base / ("new" + EVIL + ".db"))


@linux_only
def test_explain_svg_is_well_formed_xml_showing_a_run_id_with_esc_bel_and_soh(
    node: Node,
) -> None:
    svg = node.base / "path.svg"
    out = qlfsm("explain", "--db", str(node.db), "--run", RUN, "--svg", str(svg))
    assert out.returncode == 0, out.stderr
    text = svg.read_text(encoding="utf-8")
    root = ElementTree.fromstring(text)  # raises on a character XML 1.0 forbids
    minidom.parseString(text.encode("utf-8"))
    title = root.find("{http://www.w3.org/2000/svg}title")
    assert title is not None and title.text is not None
    assert title.text.startswith(f"run {clean(RUN)}:")
    assert "\\x1b" in title.text and "\\x07" in title.text and "\\x01" in title.text
    assert raw_controls(text.replace("\n", "")) == []


def test_every_character_xml_forbids_reaches_svg_and_dot_text_visibly_and_parses() -> None:
    from fsm.qinglong import RUN_SPEC
    from reconciler.diagrams import dot_source
    from reconciler.diagrams._path import _inner  # noqa: F401 - the module the SVG comes from
    from reconciler.diagrams._render import xml_text

    forbidden = [chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0xFFFE, 0xFFFF]]
    forbidden += ["\ud800", "\udfff", "\u2028", "\u202e", "&", "<", ">", '"']
    for ch in forbidden:
        shown = xml_text("a" + ch + "b")
        parsed = ElementTree.fromstring(f'<t a="{shown}">{shown}</t>')
        assert parsed.text == parsed.get("a") == clean("a" + ch + "b")
    # The DOT a run's path is drawn from: every HTML-like label is XML, whatever the path.
    source = dot_source(RUN_SPEC, {("queued", "dispatching"): [3, 8]})
    labels = re.findall(r"label=<(<table.*?</table>)>", source, flags=re.S)
    assert len(labels) > 5 and any("#3 #8" in label for label in labels)
    for label in labels:
        ElementTree.fromstring(f"<l>{label}</l>")
    assert raw_controls(source.replace("\n", "").replace("\t", "")) == []


def test_json_safe_escapes_c1_separators_bidi_and_surrogates_and_nothing_else() -> None:
    escaped = [chr(c) for c in [0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *sorted(BIDI)]]
    for ch in [*escaped, "\ud800", "\udcff"]:
        text = json_safe(json.dumps({"k": "a" + ch + "b"}, ensure_ascii=False))
        assert text == '{"k": "a\\u' + f"{ord(ch):04x}" + 'b"}'
        assert json.loads(text) == {"k": "a" + ch + "b"} and len(text.splitlines()) == 1
    kept = "é 中文 😀 \u00a0 \u200b"
    assert json_safe(json.dumps(kept, ensure_ascii=False)) == json.dumps(kept, ensure_ascii=False)


def test_a_shell_word_reads_back_in_bash_as_the_original_text() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    for text in (RUN, "plain-id", "it's", "back\\slash" + EVIL, "é\u202e中"):
        word = shell_word(text)
        assert raw_controls(word) == [] and "\n" not in word
        out = subprocess.run(
            [bash, "-c", f"printf '%s' {word}"], capture_output=True, check=True
        ).stdout
        assert out == text.encode("utf-8"), (text, word)
