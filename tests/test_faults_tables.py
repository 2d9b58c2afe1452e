"""The faults tables (README "Faults", docs/faults.md) name tests that exist: a row whose test
was renamed or removed would claim a protection nobody checks any more."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REF = re.compile(r"(tests/[\w/]+\.py)::(\w+)((?:, ::\w+)*)")


def _references(text: str) -> list[tuple[str, str]]:
    refs: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.startswith("| "):
            continue
        for m in REF.finditer(line):
            refs.append((m.group(1), m.group(2)))
            refs += [(m.group(1), more) for more in re.findall(r"::(\w+)", m.group(3))]
    return refs


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test_")
    }


def test_every_test_a_faults_table_names_exists() -> None:
    missing = []
    count = 0
    for doc in ("README.md", "docs/faults.md"):
        for file, name in _references((REPO / doc).read_text()):
            count += 1
            path = REPO / file
            if not path.is_file() or name not in _test_names(path):
                missing.append(f"{doc}: {file}::{name}")
    assert count >= 50, count  # the tables were read at all
    assert missing == []
