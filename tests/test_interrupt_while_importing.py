"""A signal that reaches the `qlfsm` program while it still imports its package ends the command
with the one line, by that signal, nothing written (spec 06), as one that comes later does; an
ignored one stays ignored; a process that only imports the package is left as it was
(reconciler/_interrupt.py). The signal is sent by the process itself from an import hook, while
`storage` is being imported: deterministic, the real program and real signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_snapshot

from reconciler._interrupt import is_program
from storage import connect, init_schema

# Installed by the interpreter's `site` from PYTHONPATH: sends TRIP_SIGNAL to its own process
# when the module TRIP_ON is first imported.
SITECUSTOMIZE = """\
import os, sys
class _Trip:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("TRIP_ON"):
            sys.meta_path.remove(self)
            os.kill(os.getpid(), int(os.environ["TRIP_SIGNAL"]))
        return None
if os.environ.get("TRIP_ON"):
    sys.meta_path.insert(0, _Trip())
"""
PROGRAMS = {"python -m reconciler": [sys.executable, "-m", "reconciler"]}
if (Path(sys.executable).parent / "qlfsm").exists():  # installed as a node installs it
    PROGRAMS["the qlfsm console script"] = [str(Path(sys.executable).parent / "qlfsm")]


def startup(
    tmp_path: Path, program: list[str], signum: int | None, *, ignore_sigint: bool = False
) -> tuple[subprocess.CompletedProcess[str], Path]:
    db = tmp_path / "ql.db"
    if not db.exists():
        conn = connect(str(db), create=True)
        init_schema(conn, path=str(db))
        conn.close()
    (tmp_path / "hook").mkdir(exist_ok=True)
    (tmp_path / "hook" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    root = tmp_path / "receipts"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "hook")}
    if signum is not None:
        env |= {"TRIP_ON": "storage", "TRIP_SIGNAL": str(signum)}

    def sigint_ignored() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    done = subprocess.run(
        [*program, "startup", "--db", str(db), "--receipt-root", str(root), "--json"],
        capture_output=True, text=True, check=False, timeout=60, env=env,
        preexec_fn=sigint_ignored if ignore_sigint else None,
    )  # fmt: skip
    return done, db


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_while_the_program_imports_ends_it_with_one_line_by_that_signal(
    tmp_path: Path, program: str, name: str
) -> None:
    signum = signal.Signals[name]
    _, db = startup(tmp_path, PROGRAMS[program], None)  # a first start: the schema is whole
    before = read_snapshot(db)
    done, _ = startup(tmp_path, PROGRAMS[program], signum)
    assert done.returncode == -signum, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        f"qlfsm: interrupted ({name}): stopped; each database change commits whole or not at "
        "all, so nothing is half-written - run the command again to finish\n"
    )
    assert read_snapshot(db) == before


def test_an_ignored_sigint_stays_ignored_while_the_program_imports(tmp_path: Path) -> None:
    done, _ = startup(tmp_path, PROGRAMS["python -m reconciler"], signal.SIGINT, ignore_sigint=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["safe"] is True


def test_a_process_that_only_imports_the_package_keeps_its_own_handlers() -> None:
    code = (
        "import signal, reconciler; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
        "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "True True\n"


@pytest.mark.parametrize(
    ("argv0", "orig_argv", "program"),
    [
        ("/opt/venv/bin/qlfsm", ["/opt/venv/bin/python", "/opt/venv/bin/qlfsm", "startup"], True),
        ("-m", ["python3", "-m", "reconciler", "startup"], True),
        ("-m", ["python3", "-X", "importtime", "-m", "reconciler"], True),
        ("-m", ["python3", "-mreconciler", "startup"], True),
        ("-m", ["python3", "-m", "mytool"], False),  # another program importing the package
        ("-m", ["python3", "-mmytool"], False),
        ("-c", ["python3", "-c", "import reconciler"], False),
        ("/srv/app.py", ["python3", "/srv/app.py"], False),
        ("", ["python3"], False),
    ],
)
def test_only_the_console_script_and_python_m_reconciler_are_the_program(
    argv0: str, orig_argv: list[str], program: bool
) -> None:
    assert is_program(argv0, orig_argv) is program
