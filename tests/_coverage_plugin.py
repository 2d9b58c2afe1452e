"""The project's pytest plugin for the orderings suite's coverage (docs/orderings.md).

Every test marked ``orderings`` runs with a :class:`_coverage_record.Recording` listening to
the machines (``fsm.listen``), except the deliberate bugs of ``tests/test_mutations.py`` (a
mutated reconciler's path is not the real one's). The crash-injection children record through
``QLFSM_COVERAGE_FILE`` (their test-only ``sitecustomize`` honours it).

``--qlfsm-coverage DIR`` writes ``DIR/coverage.json``, the five diagrams re-drawn with each
edge's count (``DIR/<machine>.dot`` / ``.svg``; never taken: red and dashed) and
``DIR/summary.md``, and prints the summary table at the end of the run. The check that every
part is taken or listed unreachable is ``tests/test_orderings_coverage.py``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _coverage_record import (
    CHILD_ENV,
    TABLES,
    Recording,
    coverage_doc,
    load_unreachable,
    merged,
    read_children,
    recording,
    summary_markdown,
)

from fsm import MachineSpec
from fsm.qinglong import ALL_SPECS

# The two searches whose union the blind-spot check judges (the other orderings files are
# recorded for the report, not relied on).
SEARCH_FILES = ("test_orderings_stateful.py", "test_orderings_exhaustive.py")
CHECK_TEST = "test_orderings_coverage.py"


class Coverage:
    """What this session recorded, test by test."""

    def __init__(self) -> None:
        self.by_test: dict[str, Recording] = {}
        self.passed: set[str] = set()
        # nodeid -> its part of the searches: "stateful", or the exhaustive scope's name.
        self.search_items: dict[str, str] = {}

    def search_parts(self) -> dict[str, Recording] | None:
        """Each part of the two searches, if every one of their tests ran and passed here."""
        if not self.search_items or not set(self.search_items) <= self.passed:
            return None
        return {part: self.by_test[n] for n, part in self.search_items.items()}

    def everything(self) -> Recording:
        return merged(self.by_test.values())


COVERAGE = pytest.StashKey[Coverage]()


def coverage_of(config: pytest.Config) -> Coverage:
    return config.stash[COVERAGE]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--qlfsm-coverage",
        metavar="DIR",
        default=None,
        help="write the orderings suite's coverage (coverage.json, diagrams, summary.md) to DIR",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[COVERAGE] = Coverage()


def _recorded(item: pytest.Item) -> bool:
    return item.get_closest_marker("orderings") is not None and "deliberate_bug" not in item.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The check reads what the searches recorded: it runs after them.
    last = [i for i in items if i.path.name == CHECK_TEST]
    items[:] = [i for i in items if i.path.name != CHECK_TEST] + last
    cov = coverage_of(config)
    cov.search_items = {i.nodeid: _part(i) for i in items if i.path.name in SEARCH_FILES}


def _part(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return "stateful" if callspec is None else str(callspec.params["name"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if not _recorded(item):
        yield
        return
    cov = coverage_of(item.config)
    with tempfile.TemporaryDirectory(prefix="qlfsm-coverage-") as children:
        before = os.environ.get(CHILD_ENV)
        os.environ[CHILD_ENV] = children
        try:
            with recording() as rec:
                outcome = yield
        finally:
            if before is None:
                os.environ.pop(CHILD_ENV, None)
            else:
                os.environ[CHILD_ENV] = before
        rec.merge(read_children(Path(children)))
    cov.by_test[item.nodeid] = rec
    if outcome.excinfo is None:
        cov.passed.add(item.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    config = terminalreporter.config
    out = config.getoption("--qlfsm-coverage")
    if out is None:
        return
    doc = coverage_doc(coverage_of(config).everything(), load_unreachable())
    written = write_report(Path(out), doc)
    terminalreporter.section("qlfsm orderings coverage")
    terminalreporter.write(summary_markdown(doc))
    terminalreporter.write_line(f"written: {', '.join(str(p) for p in written)}")


# --- the report --------------------------------------------------------------------------

_RED = "#c62828"
_FONT_ROW = re.compile(r'<font color="([^"]*)">([^<]*)</font>')
_EDGE_LINE = re.compile(r"^\t(\S+) -> (\S+) \[")


def _counts(doc: dict[str, object], spec: MachineSpec) -> dict[tuple[str, str, str], int]:
    """(source, dest, label as drawn) -> times taken."""
    machines = doc["machines"]
    assert isinstance(machines, dict)
    out: dict[tuple[str, str, str], int] = {}
    for e in machines[spec.name]["edges"]:
        label = e["trigger"] + (f" [{e['guard']}]" if e["guard"] else "")
        out[(e["source"], e["dest"], label)] = e["taken"]
    return out


def coverage_dot(doc: dict[str, object], spec: MachineSpec) -> str:
    """The machine's diagram as ``qlfsm diagrams render`` draws it, each label line with its
    count (``(N)``); a line never taken red, an edge none of whose lines was taken red and
    dashed."""
    from reconciler.diagrams._render import dot_source

    counts = _counts(doc, spec)
    lines = []
    for line in dot_source(spec).splitlines():
        m = _EDGE_LINE.match(line)
        if m is None or "__start__" in line:
            lines.append(line)
            continue
        src, dst = m.group(1), m.group(2)
        seen: list[int] = []

        def count(f: re.Match[str], src: str = src, dst: str = dst, seen: list[int] = seen) -> str:
            n = counts[(src, dst, f.group(2).replace("&amp;", "&"))]
            seen.append(n)
            color = _RED if n == 0 else f.group(1)
            return f'<font color="{color}">{f.group(2)}  ({n})</font>'

        line = _FONT_ROW.sub(count, line)
        if seen and not any(seen):
            line = re.sub(r' color="[^"]*"(?=[^>]*\]$)', f' color="{_RED}" style=dashed', line)
        lines.append(line)
    text = "\n".join(lines) + "\n"
    # The legend says what the marks mean.
    note = (
        f'<tr><td align="left"><font point-size="11" color="{_RED}">'
        "(N): times the orderings suite took it; red, dashed: never taken</font></td></tr>"
    )
    return text.replace("</font></td></tr>", "</font></td></tr>" + note, 1)


def write_report(out: Path, doc: dict[str, object]) -> list[Path]:
    from reconciler.diagrams._dot import find_dot, svg_of

    out.mkdir(parents=True, exist_ok=True)
    written = [out / "coverage.json", out / "summary.md"]
    written[0].write_text(json.dumps(doc, indent=2) + "\n")
    written[1].write_text(summary_markdown(doc))
    dot = find_dot()
    for spec in ALL_SPECS:
        source = coverage_dot(doc, spec)
        (out / f"{spec.name}.dot").write_text(source)
        (out / f"{spec.name}.svg").write_text(svg_of(dot, source, f"{spec.name}.dot"))
        written += [out / f"{spec.name}.dot", out / f"{spec.name}.svg"]
    assert set(TABLES) <= {s.name for s in ALL_SPECS}
    return written
