"""Mutation testing of the decision cores with mutmut, and the per-module killed/total table.

    pip install -e '.[mutation]'
    python tests/mutation/run.py                    # every module of [tool.mutmut] only_mutate
    python tests/mutation/run.py fsm/qinglong/_legacy.py     # some of them
    python tests/mutation/run.py --report           # the table of the last run, nothing re-run

What is mutated is ``[tool.mutmut] only_mutate`` in pyproject.toml: add a module there and it is
measured. Each mutant runs against the tests of ``pytest_add_cli_args_test_selection`` that call
the mutated function (mutmut records which test calls which function in a first, clean run).
The run is niced and uses one worker by default: the machine is shared.

Survivors that no test can kill are listed in docs/mutation.md, one table row each:
``| `<mutant name>` | equivalent | <reason> |`` (no input tells it from the original) or
``| `<mutant name>` | import-time | <reason> |`` (see docs/mutation.md). They are excluded from
the score; a listed one that is killed or no longer exists is reported as stale.
Everything mutmut writes stays in ``mutants/`` (ignored by git). Not part of .ci/run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "mutation.md"
MUTANTS = ROOT / "mutants"
# mutmut's exit codes (mutmut/stats.py): 1 and 3 are a failed test run, i.e. killed.
KILLED = {1, 3}
TIMEOUT = {36, -24, 24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}
# A row of docs/mutation.md that excludes a survivor: `| `<name>` | equivalent | <reason> |`
# (no input tells it from the original) or `| `<name>` | import-time | <reason> |` (the mutated
# code runs only while the module is imported, before mutmut switches a mutant on).
_EXCLUDED_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*(equivalent|import-time)\s*\|\s*(.+?)\s*\|\s*$")


@dataclass
class Tally:
    module: str
    total: int = 0
    killed: int = 0
    timeout: int = 0
    survived: list[str] = field(default_factory=list)
    no_tests: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # suspicious, segfault, not checked
    equivalent: list[str] = field(default_factory=list)

    @property
    def counted(self) -> int:
        return self.total - len(self.equivalent)

    @property
    def detected(self) -> int:
        return self.killed + self.timeout

    @property
    def score(self) -> float:
        return 100.0 * self.detected / self.counted if self.counted else 100.0


def modules_from_pyproject() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    modules = config.get("tool", {}).get("mutmut", {}).get("only_mutate", [])
    if not modules:
        raise SystemExit("error: pyproject.toml has no [tool.mutmut] only_mutate: list modules")
    return [str(m) for m in modules]


def missing_listed(modules: list[str]) -> list[str]:
    """Listed modules with no such file (deleted since they were listed): skipped, said so."""
    return [m for m in modules if not (ROOT / m).is_file()]


def missing_tests() -> list[str]:
    """Test files of the selection that do not exist: mutmut would stop in its first run."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    selection = (
        config.get("tool", {}).get("mutmut", {}).get("pytest_add_cli_args_test_selection", [])
    )
    paths = [str(a).split("::")[0] for a in selection if not str(a).startswith("-")]
    return [p for p in paths if not (ROOT / p).exists()]


def dotted(module: str) -> str:
    """mutmut's name prefix for a module path: fsm/qinglong/_legacy.py -> fsm.qinglong._legacy"""
    name = module.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def equivalents() -> dict[str, str]:
    if not DOC.exists():
        return {}
    found: dict[str, str] = {}
    for line in DOC.read_text("utf-8").splitlines():
        m = _EXCLUDED_ROW.match(line)
        if m:
            found[m.group(1)] = f"{m.group(2)}: {m.group(3)}"
    return found


def mutmut() -> str:
    """The mutmut of the Python running this script (a virtual environment's, even when it is
    not activated and its bin/ is not on PATH), else the one on PATH."""
    beside = Path(sys.executable).parent / "mutmut"
    found = str(beside) if beside.exists() else shutil.which("mutmut")
    if found is None:
        raise SystemExit("error: mutmut is not installed; run: pip install -e '.[mutation]'")
    return found


def run_mutmut(modules: list[str], jobs: int, keep: bool) -> int:
    tool = mutmut()
    if not keep and MUTANTS.exists():
        # mutmut copies a source file only when its copy is missing: a stale copy of an
        # unmutated module (a table, say) would be tested instead of the current one.
        shutil.rmtree(MUTANTS)
    MUTANTS.mkdir(exist_ok=True)
    log = MUTANTS / "run.log"
    argv = [tool, "run", "--max-children", str(jobs), *(f"{dotted(m)}.*" for m in modules)]
    print(f"$ nice -n 10 mutmut {' '.join(argv[1:])}   (output: mutants/{log.name})", flush=True)
    with log.open("w") as out:
        return subprocess.run(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode


def tally(module: str, listed: dict[str, str]) -> Tally:
    t = Tally(module)
    meta = MUTANTS / f"{module}.meta"
    if not meta.exists():
        return t
    codes: dict[str, int | None] = json.loads(meta.read_text("utf-8"))["exit_code_by_key"]
    prefix = f"{dotted(module)}."
    for name, code in sorted(codes.items(), key=lambda kv: _natural(kv[0])):
        if not name.startswith(prefix):
            continue
        t.total += 1
        if code in KILLED:
            t.killed += 1
        elif code in TIMEOUT:
            t.timeout += 1
        elif name in listed:
            t.equivalent.append(name)
        elif code in SURVIVED:
            t.survived.append(name)
        elif code in NO_TESTS:
            t.no_tests.append(name)
        else:
            t.other.append(f"{name} (exit {code})")
    return t


def _natural(name: str) -> tuple[str, int]:
    head, _, number = name.rpartition("_")
    return (head, int(number)) if number.isdigit() else (name, 0)


def report(modules: list[str], fail_under: float, show_diffs: bool) -> int:
    listed = equivalents()
    tallies = [tally(m, listed) for m in modules]
    print()
    print(
        "| module | mutants | killed | timeout | survived | no tests | other | excluded "
        "| killed % | raw % |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t in tallies:
        score = f"{t.score:.1f}" if t.total else "no results"
        raw = f"{100.0 * t.detected / t.total:.1f}" if t.total else "-"
        print(
            f"| `{t.module}` | {t.total} | {t.killed} | {t.timeout} | {len(t.survived)} | "
            f"{len(t.no_tests)} | {len(t.other)} | {len(t.equivalent)} | {score} | {raw} |"
        )
    print("\nkilled % = (killed + timeout) / (mutants - excluded); raw % without excluding")
    print("other = not run or crashed; excluded = listed in docs/mutation.md")
    prefixes = tuple(f"{dotted(t.module)}." for t in tallies)
    excluded = {name for t in tallies for name in t.equivalent}
    stale = sorted(n for n in listed if n.startswith(prefixes) and n not in excluded)
    rc = 0
    if stale:
        # The list must stay true: a killed or vanished mutant is no longer excused.
        print("\nstale rows in docs/mutation.md (killed now, or no such mutant): remove them")
        for name in stale:
            print(f"  {name}")
        rc = 1
    for t in tallies:
        if t.total == 0:
            print(f"\n{t.module}: no results (run without --report first)")
            rc = 1
            continue
        left = t.survived + t.no_tests + t.other
        if left:
            print(f"\n{t.module}: {len(left)} not killed, not listed as equivalent:")
            for name in left:
                print(f"  {name}")
                if show_diffs:
                    _show(name.split(" ")[0])
        if t.score < fail_under:
            rc = 1
    if rc:
        print(f"\nbelow {fail_under:.0f} % killed (or no results) for at least one module")
    return rc


def _show(name: str) -> None:
    shown = subprocess.run(
        [mutmut(), "show", name], cwd=ROOT, capture_output=True, text=True, check=False
    )
    diff = [line for line in shown.stdout.splitlines() if line.startswith(("+ ", "- ", "-", "+"))]
    for line in diff:
        if not line.startswith(("---", "+++")):
            print(f"      {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="paths from [tool.mutmut] only_mutate")
    parser.add_argument("--report", action="store_true", help="only print the last results")
    parser.add_argument("--jobs", type=int, default=1, help="mutmut workers (default 1)")
    parser.add_argument("--keep", action="store_true", help="reuse mutants/ (mutmut's cache)")
    parser.add_argument("--diffs", action="store_true", help="print each survivor's diff")
    parser.add_argument("--fail-under", type=float, default=90.0, metavar="PERCENT")
    args = parser.parse_args(argv)
    configured = modules_from_pyproject()
    unknown = [m for m in args.modules if m not in configured]
    if unknown:
        parser.error(
            f"{', '.join(unknown)} not in [tool.mutmut] only_mutate; add it there first "
            f"(configured: {', '.join(configured)})"
        )
    modules = args.modules or configured
    for module in missing_listed(modules):
        # A module deleted after it was listed: nothing to mutate, which is not a failure.
        print(
            f"skipped {module}: listed in [tool.mutmut] only_mutate, but there is no such file "
            "(remove it from the list)"
        )
    modules = [m for m in modules if m not in missing_listed(modules)]
    if not modules:
        print("error: none of the modules to measure exists", file=sys.stderr)
        return 2
    gone = missing_tests()
    if gone and not args.report:
        print(
            f"error: {', '.join(gone)} in [tool.mutmut] pytest_add_cli_args_test_selection "
            "does not exist; remove it from the list",
            file=sys.stderr,
        )
        return 2
    if not args.report:
        os.nice(10)  # the machine is shared; mutmut's children inherit this
        rc = run_mutmut(modules, args.jobs, args.keep)
        if rc != 0:
            print(f"mutmut exited {rc}; see mutants/run.log", file=sys.stderr)
            return rc
    return report(modules, args.fail_under, args.diffs)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; the results so far: python tests/mutation/run.py --report")
        sys.exit(130)
    except BrokenPipeError:  # `... | head`: the reader left, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
