"""Diagrams (spec 07): rendered through `transitions` and a real Graphviz `dot`, then read back
from the rendered files and checked against the records' tables
(``reconciler/diagrams/_records.py``).

Every test that draws runs a real ``dot`` (graphviz-pure from the ``diagrams`` extra, or the
system one); none of them mocks the renderer.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import re
import shutil
from collections.abc import Callable
from html import escape
from pathlib import Path

import pytest

from fsm import Edge, MachineSpec
from fsm.qinglong import ALL_SPECS, ATTEMPT_SPEC, LEGACY_SPEC, RUN_SPEC
from reconciler.cli._diagrams import DEFAULT_DIR, diagrams_command
from reconciler.diagrams import (
    ADR_0001_ATTEMPT_TABLE,
    ADR_0001_RUN_TABLE,
    ADR_0068_TABLE,
    ADR_0448_TABLE,
    LEGACY_DECISION_RECORD,
    PINNED_RENDERER,
    PRIMARY_DECISION_RECORD,
    RECORDS,
    RECORDS_BY_MACHINE,
    DiagramsError,
    ExpectedEdge,
    MachineRecord,
    find_dot,
    parse_mermaid,
    parse_svg,
    render,
    render_sources,
    source_digest,
)
from reconciler.diagrams._record_rows import LifecycleRow
from reconciler.diagrams._records import lifecycle_edges, trigger_lines

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "diagrams"
STALE = "diagrams/ is out of date: run `qlfsm diagrams render` and commit the result"


def _pinned_dot() -> str:
    try:
        return find_dot(PINNED_RENDERER)
    except DiagramsError:
        pytest.fail(f"{PINNED_RENDERER} is missing: pip install -e '.[diagrams]'")


def _available_dots() -> list[str]:
    dots = [_pinned_dot()]
    system = shutil.which("dot")
    if system is not None:
        dots.append(system)
    return dots


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = diagrams_command(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _with_edges(spec: MachineSpec, edges: tuple[Edge, ...]) -> tuple[MachineSpec, ...]:
    changed = dataclasses.replace(spec, edges=edges)
    return tuple(changed if s.name == spec.name else s for s in ALL_SPECS)


def _edge(spec: MachineSpec, source: str, dest: str, guard: str | None) -> Edge:
    return next(e for e in spec.edges if (e.source, e.dest, e.guard) == (source, dest, guard))


def _check_variant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], specs: tuple[MachineSpec, ...]
) -> tuple[int, list[str]]:
    render(tmp_path, specs, dot=_pinned_dot())
    capsys.readouterr()
    code, out, _ = _run(capsys, ["check", "--dir", str(tmp_path)])
    return code, out.splitlines()


# --- The committed diagrams -----------------------------------------------------------------


def test_check_passes_on_the_committed_diagrams(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, ["check"])
    assert (code, err) == (0, ""), out
    assert DEFAULT_DIR == COMMITTED
    # Run, Attempt, legacy-shadow, and the two decision machines (spec 07).
    assert out.startswith("diagrams check: 5 machines")


def test_the_committed_sources_and_readme_are_what_a_fresh_render_writes() -> None:
    for name, text in render_sources().items():
        committed = COMMITTED / name
        assert committed.exists(), f"{name} missing; {STALE}"
        assert committed.read_bytes() == text.encode(), f"{name} differs; {STALE}"


def test_each_committed_svg_was_drawn_from_the_committed_dot_source() -> None:
    for spec in ALL_SPECS:
        svg = (COMMITTED / f"{spec.name}.svg").read_text()
        dot = (COMMITTED / f"{spec.name}.dot").read_bytes()
        assert source_digest(svg) == hashlib.sha256(dot).hexdigest(), f"{spec.name}.svg; {STALE}"


def test_each_committed_svg_draws_the_same_graph_as_a_fresh_render_with_any_dot(
    tmp_path: Path,
) -> None:
    for i, dot in enumerate(_available_dots()):
        out = tmp_path / str(i)
        render(out, dot=dot)
        for spec in ALL_SPECS:
            fresh = parse_svg((out / f"{spec.name}.svg").read_text())
            committed = parse_svg((COMMITTED / f"{spec.name}.svg").read_text())
            assert fresh == committed, f"{spec.name}.svg ({dot}); {STALE}"


def test_the_pinned_renderer_reproduces_the_committed_svgs_byte_for_byte(tmp_path: Path) -> None:
    render(tmp_path, dot=_pinned_dot())
    for spec in ALL_SPECS:
        name = f"{spec.name}.svg"
        assert (tmp_path / name).read_bytes() == (COMMITTED / name).read_bytes(), (
            f"{name}; {STALE} (with {PINNED_RENDERER} installed)"
        )


def test_rendering_twice_gives_the_same_bytes_with_every_dot_on_this_machine(
    tmp_path: Path,
) -> None:
    for i, dot in enumerate(_available_dots()):
        first, second = tmp_path / f"{i}a", tmp_path / f"{i}b"
        names = [p.name for p in render(first, dot=dot)]
        assert names == [p.name for p in render(second, dot=dot)]
        for name in names:
            assert (first / name).read_bytes() == (second / name).read_bytes(), (dot, name)


def test_diagrams_drawn_by_every_dot_on_this_machine_pass_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, dot in enumerate(_available_dots()):
        out = tmp_path / str(i)
        assert _run(capsys, ["render", "--out", str(out), "--dot", dot])[0] == 0
        code, text, _ = _run(capsys, ["check", "--dir", str(out)])
        assert code == 0, (dot, text)


def test_the_svg_shows_guards_on_edges_terminal_marks_and_the_initial_arrow() -> None:
    run = parse_svg((COMMITTED / "run.svg").read_text())
    labels = {(e.source, e.dest, e.label) for e in run.edges}
    assert ("running", "lost", "lose_after_grace [not_running_after_grace]") in labels
    assert ("dispatching", "running", "start_by_receipt [trusted_receipt]") in labels
    assert run.terminal == {"succeeded", "failed", "cancelled", "timed_out"}
    assert run.initial == ["created"]
    attempt = parse_svg((COMMITTED / "attempt.svg").read_text())
    assert "lost" in attempt.terminal  # an Attempt's lost is final, a Run's is not (spec 01)


def test_the_readme_shows_each_diagram_with_its_tables_and_mermaid() -> None:
    readme = (COMMITTED / "README.md").read_text()
    for spec in ALL_SPECS:
        assert f"![{spec.name} diagram]({spec.name}.svg)" in readme
        mermaid = (COMMITTED / f"{spec.name}.mmd").read_text().rstrip("\n")
        assert f"```mermaid\n{mermaid}\n```" in readme
    assert "| `lost` | `queued`, `failed`, `cancelled`, `retry_wait` (\\*) |" in readme
    assert "ADR-0380 amendment" in readme
    assert (
        "| `dispatching` | `running`, `retry_wait`, `failed`, `cancelled`, `lost`, "
        "`timed_out` (\\*\\*) |" in readme
    )
    assert "RUN_TRANSITIONS amendment" in readme
    assert "ADR-0001 has no\n`dispatching -> succeeded` edge" in readme
    assert "| 13 | probe: `not_running` |" in readme
    assert "graphviz-pure" in readme
    # The decision machines beside their tables: each row with its arrows.
    assert (
        "| 9 | probe: `unknown / provider_unavailable` | failed | "
        "`probe -> failed [provider_unavailable]` | — | — |"
    ) in readme
    assert (
        "| 6 | matched row has `finished_at` and status stopped | Attempt + Run → `cancelled`, "
        "reason `reconcile` → cancelled | `read_evidence -> cancelled [stopped_with_finished]` "
        "| `candidate -> cancelled [stopped_with_finished]` |"
    ) in readme
    assert "| `probe -> failed` | `row 9 [provider_unavailable]` | ADR-0068 row 9 |" in readme


def _graph_label_lines(svg: str) -> list[tuple[str, str]]:
    """(y, text) of the texts of the graph's own label (title and legend)."""
    head = svg[svg.index('<g id="graph0"') : svg.index("<g id=", svg.index('<g id="graph0"') + 1)]
    return re.findall(r'<text [^>]*y="([-0-9.]+)"[^>]*>([^<]*)</text>', head)


def test_each_legend_mark_has_a_line_of_its_own_so_no_font_can_make_them_overlap() -> None:
    # dot places every text piece by ITS font's metrics: pieces side by side on one line
    # overlapped when a viewer's sans-serif was wider than the one dot measured.
    for spec in ALL_SPECS:
        lines = _graph_label_lines((COMMITTED / f"{spec.name}.svg").read_text())
        ys = [y for y, _ in lines]
        assert len(lines) >= 3, spec.name
        assert len(set(ys)) == len(ys), (spec.name, lines)


# --- The check fails on a wrong machine, naming the edge ------------------------------------


@pytest.mark.parametrize(
    ("spec", "source", "dest", "guard", "expected"),
    [
        (
            RUN_SPEC,
            "running",
            "lost",
            "not_running_after_grace",
            "missing edge running -> lost [not_running_after_grace] (ADR-0068 row 13)",
        ),
        (
            RUN_SPEC,
            "lost",
            "retry_wait",
            None,
            "missing edge lost -> retry_wait (ADR-0380 amendment to ADR-0001 Run table, row lost)",
        ),
        (
            ATTEMPT_SPEC,
            "claimed",
            "lost",
            "unstarted_claim",
            "missing edge claimed -> lost [unstarted_claim] (ADR-0068 row 7)",
        ),
        (
            LEGACY_SPEC,
            "candidate",
            "pending",
            "awaiting_system_crond",
            "missing edge candidate -> pending [awaiting_system_crond] (ADR-0448 row 8)",
        ),
    ],
)
def test_a_machine_with_one_edge_removed_fails_the_check_naming_that_edge(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spec: MachineSpec,
    source: str,
    dest: str,
    guard: str | None,
    expected: str,
) -> None:
    gone = _edge(spec, source, dest, guard)
    code, lines = _check_variant(
        tmp_path, capsys, _with_edges(spec, tuple(e for e in spec.edges if e != gone))
    )
    assert code == 1
    assert lines == [
        f"{spec.name}.svg: {expected}",
        f"{spec.name}.mmd: {expected}",
        "diagrams check: 2 difference(s) with the records' tables",
    ]


def test_a_machine_with_an_extra_edge_fails_the_check_naming_that_edge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = Edge("requeue", "running", "queued")
    code, lines = _check_variant(tmp_path, capsys, _with_edges(RUN_SPEC, (*RUN_SPEC.edges, extra)))
    assert code == 1
    extra_line = "edge not in any table: running -> queued (drawn as 'requeue')"
    assert lines[:2] == [f"run.svg: {extra_line}", f"run.mmd: {extra_line}"]


def test_an_extra_guarded_edge_on_the_legacy_machine_fails_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = Edge("mark_lost", "candidate", "marked_lost", "trusted_receipt")
    code, lines = _check_variant(
        tmp_path, capsys, _with_edges(LEGACY_SPEC, (*LEGACY_SPEC.edges, extra))
    )
    assert code == 1
    assert (
        "legacy_shadow.svg: edge not in any table: candidate -> marked_lost [trusted_receipt] "
        "(drawn as 'mark_lost [trusted_receipt]')"
    ) in lines


def test_a_renamed_lifecycle_trigger_fails_the_check_with_the_differing_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 30: the record names each ADR-0001 edge's trigger; a copy of the Run spec whose
    # `created -> queued` edge fires `enqueue` instead of `queue` is drawn and checked.
    right = _edge(RUN_SPEC, "created", "queued", None)
    edges = tuple(
        dataclasses.replace(e, trigger="enqueue") if e == right else e for e in RUN_SPEC.edges
    )
    code, lines = _check_variant(tmp_path, capsys, _with_edges(RUN_SPEC, edges))
    assert code == 1
    line = (
        "trigger of created -> queued is 'enqueue'; the record names 'queue' "
        "(ADR-0001 Run table, row created)"
    )
    assert lines == [
        f"run.svg: {line}",
        f"run.mmd: {line}",
        "diagrams check: 2 difference(s) with the records' tables",
    ]


def test_the_record_names_a_trigger_for_every_adr0001_edge_and_refuses_a_malformed_line() -> None:
    lifecycle = [
        e
        for record in RECORDS
        if record.machine in ("run", "attempt")
        for e in record.edges
        if e.guard is None
    ]
    assert len(lifecycle) == 28 + 13
    assert [e.show() for e in lifecycle if e.trigger is None] == []
    with pytest.raises(ValueError, match=r"'a -> b queue' is not 'source -> dest : trigger'"):
        trigger_lines("a -> b queue")
    with pytest.raises(ValueError, match=r"'a -> b : go' names a -> b twice"):
        trigger_lines("a -> b : queue\na -> b : go")
    table = (LifecycleRow("a", ("b",)), LifecycleRow("b", ("c",), (("a", "ADR-9"),)))
    lines = "a -> b : go\nb -> c : end\nb -> a : back"
    assert [(e.source, e.dest, e.trigger) for e in lifecycle_edges(table, "ADR-1", lines)] == [
        ("a", "b", "go"),
        ("b", "c", "end"),
        ("b", "a", "back"),
    ]
    with pytest.raises(ValueError) as unnamed:
        lifecycle_edges(table, "ADR-1", "a -> b : go\nb -> c : end\nc -> a : stray")
    assert str(unnamed.value) == (
        "ADR-1: edges without a trigger line ['b -> a'], trigger lines naming no edge ['c -> a']"
    )


def test_a_wrong_guard_label_fails_the_check_naming_that_edge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    right = _edge(RUN_SPEC, "running", "lost", "not_running_after_grace")
    wrong = dataclasses.replace(right, guard="trusted_receipt")
    edges = tuple(wrong if e == right else e for e in RUN_SPEC.edges)
    code, lines = _check_variant(tmp_path, capsys, _with_edges(RUN_SPEC, edges))
    assert code == 1
    assert (
        "run.svg: edge not in any table: running -> lost [trusted_receipt] "
        "(drawn as 'lose_after_grace [trusted_receipt]')"
    ) in lines
    assert (
        "run.svg: missing edge running -> lost [not_running_after_grace] (ADR-0068 row 13)"
    ) in lines


def test_terminal_marks_must_match_the_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Draw the Run's `lost` as terminal and `succeeded` as not: both contradict spec 01.
    wrong = dataclasses.replace(RUN_SPEC, terminal=(RUN_SPEC.terminal - {"succeeded"}) | {"lost"})
    specs = tuple(wrong if s.name == "run" else s for s in ALL_SPECS)
    code, lines = _check_variant(tmp_path, capsys, specs)
    assert code == 1
    for suffix in ("svg", "mmd"):
        assert (
            f"run.{suffix}: terminal state succeeded is not marked terminal "
            "(ADR-0001 Run states (spec 01 §Run))"
        ) in lines
        assert (
            f"run.{suffix}: state lost is marked terminal but is not "
            "(ADR-0001 Run states (spec 01 §Run))"
        ) in lines


def test_states_must_match_the_records_in_both_directions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    states = (*(s for s in ATTEMPT_SPEC.states if s != "timed_out"), "zombie")
    edges = tuple(e for e in ATTEMPT_SPEC.edges if "timed_out" not in (e.source, e.dest))
    wrong = dataclasses.replace(
        ATTEMPT_SPEC,
        states=states,
        terminal=ATTEMPT_SPEC.terminal - {"timed_out"},
        edges=(*edges, Edge("haunt", "running", "zombie")),
    )
    specs = tuple(wrong if s.name == "attempt" else s for s in ALL_SPECS)
    code, lines = _check_variant(tmp_path, capsys, specs)
    assert code == 1
    states_cite = "ADR-0001 Attempt states (spec 01 §Attempt)"
    assert f"attempt.svg: missing state timed_out ({states_cite})" in lines
    assert "attempt.svg: state not in any table: zombie" in lines
    starting = "ADR-0001 Attempt table, row starting"
    assert f"attempt.svg: missing edge starting -> timed_out ({starting})" in lines


# --- The decision machines: every row is a labelled edge of the rendered SVG ----------------


def _edge_group(svg: str, source: str, dest: str, label: str) -> str:
    """The drawn edge (one <g class="edge">) from ``source`` to ``dest`` carrying ``label``."""
    title = escape(f"{source}->{dest}").replace("-", "&#45;")
    found = [
        g
        for g in re.findall(r'<g id="edge\d+" class="edge[^"]*">.*?</g>\n', svg, flags=re.S)
        if f"<title>{title}</title>" in g and f">{escape(label)}</text>" in g
    ]
    assert len(found) == 1, (source, dest, label)
    return str(found[0])


def _cut_edge_with(svg: str, source: str, dest: str, label: str) -> str:
    """The SVG without that drawn edge (all of it: every row it carries goes)."""
    return svg.replace(_edge_group(svg, source, dest, label), "")


def _relabel(svg: str, source: str, dest: str, old: str, new: str) -> str:
    group = _edge_group(svg, source, dest, old)
    return svg.replace(group, group.replace(f">{escape(old)}</text>", f">{escape(new)}</text>"))


def _check_edited(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], machine: str, edit: Callable[[str], str]
) -> tuple[int, list[str]]:
    shutil.copytree(COMMITTED, tmp_path, dirs_exist_ok=True)
    path = tmp_path / f"{machine}.svg"
    path.write_text(edit(path.read_text()))
    code, out, _ = _run(capsys, ["check", "--dir", str(tmp_path)])
    return code, out.splitlines()


def test_cutting_the_edge_of_row_9_of_spec_04_from_the_svg_fails_the_check_naming_row_9(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _check_edited(
        tmp_path,
        capsys,
        "primary_decision",
        lambda svg: _cut_edge_with(svg, "probe", "failed", "row 9 [provider_unavailable]"),
    )
    assert code == 1
    assert (
        "primary_decision.svg: missing edge probe -> failed [provider_unavailable] (ADR-0068 row 9)"
    ) in lines
    # The same drawn edge carried row 14 from `probe`: named too, and nothing else.
    assert lines == [
        "primary_decision.svg: missing edge probe -> failed [provider_unavailable] "
        "(ADR-0068 row 9)",
        "primary_decision.svg: missing edge probe -> failed [error_raised] (ADR-0068 row 14)",
        "diagrams check: 2 difference(s) with the records' tables",
    ]


@pytest.mark.parametrize(
    ("wrong", "drawn"),
    [
        ("row 8 [provider_unavailable]", "probe -> failed [provider_unavailable]"),
        ("row 9 [identity_unknown]", "probe -> failed [identity_unknown]"),
    ],
    ids=["wrong-row", "wrong-guard"],
)
def test_row_9_of_spec_04_with_a_wrong_label_fails_the_check_naming_row_9(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wrong: str, drawn: str
) -> None:
    code, lines = _check_edited(
        tmp_path,
        capsys,
        "primary_decision",
        lambda svg: _relabel(svg, "probe", "failed", "row 9 [provider_unavailable]", wrong),
    )
    assert code == 1
    assert lines == [
        f"primary_decision.svg: edge not in any table: {drawn} (drawn as {wrong!r})",
        "primary_decision.svg: missing edge probe -> failed [provider_unavailable] "
        "(ADR-0068 row 9)",
        "diagrams check: 2 difference(s) with the records' tables",
    ]


def test_cutting_the_edge_of_row_6_of_spec_05_from_the_svg_fails_the_check_naming_row_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = _check_edited(
        tmp_path,
        capsys,
        "legacy_decision",
        lambda svg: _cut_edge_with(
            svg, "read_evidence", "cancelled", "row 6 [stopped_with_finished]"
        ),
    )
    assert code == 1
    assert lines == [
        "legacy_decision.svg: missing edge read_evidence -> cancelled [stopped_with_finished] "
        "(ADR-0448 row 6)",
        "diagrams check: 1 difference(s) with the records' tables",
    ]


@pytest.mark.parametrize(
    ("wrong", "drawn"),
    [
        ("row 7 [stopped_with_finished]", "read_evidence -> cancelled [stopped_with_finished]"),
        (
            "row 6 [unique_finished_evidence]",
            "read_evidence -> cancelled [unique_finished_evidence]",
        ),
    ],
    ids=["wrong-row", "wrong-guard"],
)
def test_row_6_of_spec_05_with_a_wrong_label_fails_the_check_naming_row_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wrong: str, drawn: str
) -> None:
    code, lines = _check_edited(
        tmp_path,
        capsys,
        "legacy_decision",
        lambda svg: _relabel(
            svg, "read_evidence", "cancelled", "row 6 [stopped_with_finished]", wrong
        ),
    )
    assert code == 1
    assert lines == [
        f"legacy_decision.svg: edge not in any table: {drawn} (drawn as {wrong!r})",
        "legacy_decision.svg: missing edge read_evidence -> cancelled [stopped_with_finished] "
        "(ADR-0448 row 6)",
        "diagrams check: 2 difference(s) with the records' tables",
    ]


def test_row_9_relabelled_in_the_mermaid_text_is_named_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(COMMITTED, tmp_path, dirs_exist_ok=True)
    mmd = (tmp_path / "primary_decision.mmd").read_text()
    edited = mmd.replace("row 9 [provider_unavailable]", "row 10 [provider_unavailable]")
    assert edited != mmd
    (tmp_path / "primary_decision.mmd").write_text(edited)
    code, out, _ = _run(capsys, ["check", "--dir", str(tmp_path)])
    assert code == 1
    assert (
        "primary_decision.mmd: missing edge probe -> failed [provider_unavailable] (ADR-0068 row 9)"
    ) in out.splitlines()


DECISION_EDGES: list[tuple[MachineRecord, ExpectedEdge]] = [
    (record, edge)
    for record in (PRIMARY_DECISION_RECORD, LEGACY_DECISION_RECORD)
    for edge in record.edges
]


@pytest.mark.parametrize(
    ("record", "edge"),
    DECISION_EDGES,
    ids=[f"{r.machine}:{e.source}:{e.label}:{e.guard}" for r, e in DECISION_EDGES],
)
def test_any_one_row_cut_or_relabelled_in_a_rendered_svg_is_named_by_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], record: MachineRecord, edge: ExpectedEdge
) -> None:
    label = f"{edge.label} [{edge.guard}]"
    missing = f"{record.machine}.svg: missing edge {edge.show()} ({edge.cites})"
    ends = (edge.source, edge.dest)
    code, lines = _check_edited(
        tmp_path, capsys, record.machine, lambda svg: _cut_edge_with(svg, *ends, label)
    )
    assert code == 1 and missing in lines
    wrong = f"row 99 [{edge.guard}]"
    code, lines = _check_edited(
        tmp_path / "relabelled",
        capsys,
        record.machine,
        lambda svg: _relabel(svg, *ends, label, wrong),
    )
    assert code == 1
    assert lines[:2] == [
        f"{record.machine}.svg: edge not in any table: {edge.show()} (drawn as {wrong!r})",
        missing,
    ]


def test_every_row_of_both_decision_tables_is_an_edge_of_its_decision_machine() -> None:
    rows = {r.row for r in ADR_0068_TABLE}
    drawn = {e.label for e in PRIMARY_DECISION_RECORD.edges}
    assert {f"row {r}" for r in rows} <= drawn
    assert {f"row {r.row}" for r in ADR_0448_TABLE} <= {
        e.label for e in LEGACY_DECISION_RECORD.edges
    }
    committed = parse_svg((COMMITTED / "primary_decision.svg").read_text())
    assert {e.trigger for e in committed.edges} == drawn


# --- The check reads the rendered files, not the Python objects -----------------------------


def test_check_reads_the_svg_itself_an_edge_cut_from_the_picture_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(COMMITTED, tmp_path, dirs_exist_ok=True)
    svg = (tmp_path / "run.svg").read_text()
    cut, n = re.subn(
        r'<g id="edge\d+" class="edge decision">\s*<title>running&#45;&gt;lost</title>.*?</g>\n',
        "",
        svg,
        flags=re.S,
    )
    assert n == 1
    (tmp_path / "run.svg").write_text(cut)
    code, out, _ = _run(capsys, ["check", "--dir", str(tmp_path)])
    assert code == 1
    lines = out.splitlines()
    assert "run.svg: missing edge running -> lost (ADR-0001 Run table, row running)" in lines
    assert "run.svg: missing edge running -> lost [unstarted_claim] (ADR-0068 row 7)" in lines
    assert (
        "run.svg: missing edge running -> lost [not_running_after_grace] (ADR-0068 row 13)"
    ) in lines
    assert not [line for line in lines if line.startswith("run.mmd")]


def test_check_reads_the_mermaid_text_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(COMMITTED, tmp_path, dirs_exist_ok=True)
    mmd = (tmp_path / "legacy_shadow.mmd").read_text()
    edited = mmd.replace("abandon [no_spawn_evidence]", "abandon [no_spawn]")
    assert edited != mmd
    (tmp_path / "legacy_shadow.mmd").write_text(edited)
    code, out, _ = _run(capsys, ["check", "--dir", str(tmp_path)])
    assert code == 1
    assert out.splitlines()[:2] == [
        "legacy_shadow.mmd: edge not in any table: candidate -> abandoned [no_spawn] "
        "(drawn as 'abandon [no_spawn]')",
        "legacy_shadow.mmd: missing edge candidate -> abandoned [no_spawn_evidence] "
        "(ADR-0448 row 9)",
    ]


def test_a_missing_file_and_a_machine_without_a_record_are_differences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(COMMITTED, tmp_path, dirs_exist_ok=True)
    (tmp_path / "attempt.svg").unlink()
    shutil.copy(tmp_path / "run.mmd", tmp_path / "evidence.mmd")
    code, out, _ = _run(capsys, ["check", "--dir", str(tmp_path)])
    assert code == 1
    lines = out.splitlines()
    assert "attempt.svg: missing file (render the attempt machine)" in lines
    assert "evidence.mmd: machine 'evidence' has no record table" in lines


def test_the_parsers_agree_on_what_each_committed_machine_shows() -> None:
    for spec in ALL_SPECS:
        svg = parse_svg((COMMITTED / f"{spec.name}.svg").read_text())
        mmd = parse_mermaid((COMMITTED / f"{spec.name}.mmd").read_text())
        assert sorted(svg.states) == sorted(mmd.states)
        assert svg.terminal == mmd.terminal == set(spec.terminal)
        assert svg.initial == mmd.initial == [spec.initial]
        assert sorted(e.show() for e in svg.edges) == sorted(e.show() for e in mmd.edges)


# --- Command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["check", "--nope"], ["render", "--out"], ["check", "extra"]],
)
def test_usage_errors_are_one_line_on_stderr_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = _run(capsys, argv)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("qlfsm diagrams: error: ")
    assert "Traceback" not in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, ["check", "--help"])
    assert code == 0
    assert "--dir" in out


def test_check_of_a_directory_that_does_not_exist_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, ["check", "--dir", str(tmp_path / "nowhere")])
    assert code == 2
    assert len(err.splitlines()) == 1 and "is not a directory" in err


def test_render_with_a_dot_that_does_not_exist_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QLFSM_DOT", str(tmp_path / "no-such-dot"))
    code, out, err = _run(capsys, ["render", "--out", str(tmp_path / "out")])
    assert code == 1
    assert out == ""
    assert len(err.splitlines()) == 1 and "not found" in err
    assert not (tmp_path / "out").exists()


# --- The records' tables --------------------------------------------------------------------


@pytest.mark.parametrize(
    "module",
    [
        "_records.py",
        "_record_rows.py",
        "_record_adr0001.py",
        "_record_adr0068.py",
        "_record_adr0448.py",
    ],
)
def test_the_records_module_is_transcribed_not_imported_from_fsm(module: str) -> None:
    source = (REPO / "reconciler" / "diagrams" / module).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("fsm"), node.module
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("fsm") for a in node.names)


def test_every_decision_edge_is_a_legal_adr_0001_pair_of_its_machine() -> None:
    legal = {
        "run": {(r.source, d) for r in ADR_0001_RUN_TABLE for d in r.allowed}
        | {(r.source, d) for r in ADR_0001_RUN_TABLE for d, _ in r.amended},
        "attempt": {(r.source, d) for r in ADR_0001_ATTEMPT_TABLE for d in r.allowed},
    }
    for row in ADR_0068_TABLE:
        for e in row.edges:
            assert (e.source, e.dest) in legal[e.machine], (row.row, e)


def test_the_decision_tables_have_every_row_of_the_records_in_order() -> None:
    assert [r.row for r in ADR_0068_TABLE] == [
        "1", "2", "3", "3b", "4", "4b", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14"
    ]  # fmt: skip
    assert [r.row for r in ADR_0448_TABLE] == [
        "1", "2", "2b", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"
    ]  # fmt: skip
    # spec 05: every legacy row ends the candidate in exactly one of the nine outcomes.
    assert all(
        len([e for e in r.edges if e.machine == "legacy_shadow"]) == 1 for r in ADR_0448_TABLE
    )
    # The writing rows also move the Run and the Attempt, each along its own guarded edges.
    writing = {r.row for r in ADR_0448_TABLE if any(e.machine != "legacy_shadow" for e in r.edges)}
    assert writing == {"2", "6", "7", "9", "10"}
    assert all(e.guard == r.edges[0].guard for r in ADR_0448_TABLE for e in r.edges)
    moving = {r.row for r in ADR_0068_TABLE if r.edges}
    assert moving == {"3", "4b", "5", "7", "12", "13"}


def test_the_records_use_the_eight_guard_names_fixed_by_spec_07() -> None:
    fixed = {
        "trusted_receipt",
        "not_running_after_grace",
        "unstarted_claim",
        "stopped_with_finished",
        "unique_finished_evidence",
        "no_spawn_evidence",
        "no_terminal_evidence",
        "unique_terminal_attempt",
    }
    used = {e.guard for r in RECORDS for e in r.edges if e.guard is not None}
    assert fixed <= used


def test_the_two_amendments_of_spec_01_are_the_only_ones_each_marked_with_its_record() -> None:
    # spec 01 (*) lost -> retry_wait (ADR-0380) and (**) dispatching -> timed_out
    # (QingLong's RUN_TRANSITIONS): nothing else is added to ADR-0001's table.
    amended = [e for e in RECORDS_BY_MACHINE["run"].edges if "amendment" in e.cites]
    assert sorted((e.source, e.dest, e.cites) for e in amended) == [
        (
            "dispatching",
            "timed_out",
            "RUN_TRANSITIONS amendment to ADR-0001 Run table, row dispatching",
        ),
        ("lost", "retry_wait", "ADR-0380 amendment to ADR-0001 Run table, row lost"),
    ]
