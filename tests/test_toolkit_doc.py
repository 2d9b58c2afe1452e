"""docs/toolkit.md's complete example runs exactly as written, says what its comments say,
stays within 50 lines of code, and imports no private name of qlfsm."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "toolkit.md"


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## A complete example") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("\n```", start)] + "\n"


def _code_lines(source: str) -> list[str]:
    # Blank lines and comment-only lines are not code; the record's text lines are.
    return [
        line for line in source.splitlines() if line.strip() and not line.strip().startswith("#")
    ]


def test_the_toolkit_example_runs_as_written_and_prints_what_its_comments_say() -> None:
    example = _example()
    out = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stderr == ""
    said = [line.split("# ", 1)[1] for line in example.splitlines() if "print(" in line]
    assert out.stdout.splitlines() == said == ["succeeded 2", "[]", "() ()"]


def test_the_toolkit_example_has_at_most_50_lines_of_code_and_imports_no_private_name() -> None:
    example = _example()
    assert len(_code_lines(example)) <= 50
    imports = [line for line in example.splitlines() if re.match(r"(from|import) ", line)]
    assert imports and not [line for line in imports if re.search(r"\b_\w", line)]
