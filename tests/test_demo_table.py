"""The demo's result table keeps to start-up's 100 columns with start-up's rules (D-22): the
why of each run on lines of its own under the run, wrapped after a space, at most four lines;
a row whose other cells do not fit in 100 columns in the long form."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reconciler.cli._demo import LEGACY_WHY, PRIMARY_WHY
from reconciler.cli._report import WIDTH, columns, reason_below_table

HEADERS = ["run", "owner", "after start-up", "check", "when the server died", "why"]


def test_the_demo_table_is_at_most_100_columns_and_keeps_every_why_whole(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "demo", "--dir", str(tmp_path / "demo")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    table = out[out.index("run    ") : out.index("\n\n5. why was")].splitlines()
    assert table[0].split("  ")[0] == "run" and table[1].startswith("-----")
    assert max(columns(line) for line in table) <= WIDTH, "\n".join(table)
    # Each of the nine runs: one line with its cells, then its why (wrapped, never cut).
    runs = [ln for ln in table[2:] if not ln.startswith("    ")]
    assert len(runs) == 9 and all(" ok " in ln for ln in runs), "\n".join(table)
    whys = " ".join(ln.strip() for ln in table[2:] if ln.startswith("    ")).split("why: ")[1:]
    assert len(whys) == 9 and "..." not in " ".join(whys)
    # The longest why is wrapped under itself, not cut: its text is all there.
    assert f"{LEGACY_WHY['LEGACY_RECONCILE_OWNER_LOST']} " in " ".join(whys)
    assert f"{PRIMARY_WHY['13']} (process_not_running:" in " ".join(whys)


def test_a_row_too_wide_for_the_table_is_printed_in_the_long_form_with_its_why() -> None:
    rows = [
        ["backup", "runtime", "running", "ok", "still running", "ADR-0068 row 12: alive"],
        ["x" * 60, "runtime", "lost", "UNEXPECTED (wanted running)", "still running " * 3, "w"],
    ]
    lines = reason_below_table(HEADERS, rows)
    assert lines[:4] == [
        "run     owner    after start-up  check  when the server died",
        "------  -------  --------------  -----  --------------------",
        "backup  runtime  running         ok     still running",
        "    why: ADR-0068 row 12: alive",
    ]
    assert lines[4:] == [
        "x" * 60,
        "    owner runtime",
        "    after start-up lost",
        "    check UNEXPECTED (wanted running)",
        "    when the server died " + ("still running " * 3),
        "    why: w",
    ]
    assert max(columns(line) for line in lines) <= WIDTH


def test_a_why_longer_than_four_lines_is_shortened_with_an_ellipsis_as_in_start_up() -> None:
    lines = reason_below_table(HEADERS, [["r", "o", "lost", "ok", "died", "word " * 200]])
    why = lines[3:]
    assert len(why) == 4 and why[-1].endswith("...") and why[0].startswith("    why: word")
    assert all(line.startswith(" " * 9) for line in why[1:])
    assert max(columns(line) for line in lines) <= WIDTH
