"""The collector around the console script's imports (reconciler._collector): off while the
pass loads, on again (what was loaded frozen) before the first candidate; never touched in a
caller's interpreter."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _primary_support import dead_handle, linux_only, make_candidate

from reconciler import _collector
from reconciler.cli._main import main
from storage import Repository


@pytest.fixture
def collector_restored() -> Iterator[None]:
    was_on, frozen = gc.isenabled(), gc.get_freeze_count()
    yield
    _collector._held = False
    if gc.get_freeze_count() > frozen:
        gc.unfreeze()
    (gc.enable if was_on else gc.disable)()


def test_release_without_hold_leaves_the_callers_collector_alone(
    collector_restored: None,
) -> None:
    frozen = gc.get_freeze_count()
    gc.disable()  # a caller that switched it off itself keeps it off
    _collector.release()
    assert not gc.isenabled() and gc.get_freeze_count() == frozen
    gc.enable()
    _collector.release()
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_hold_switches_the_collector_off_and_release_freezes_and_switches_it_on(
    collector_restored: None,
) -> None:
    gc.enable()
    frozen = gc.get_freeze_count()
    _collector.hold()
    assert not gc.isenabled()
    _collector.release()
    assert gc.isenabled() and gc.get_freeze_count() > frozen
    _collector.release()  # once only
    assert gc.isenabled()


def test_hold_does_nothing_when_the_collector_is_already_off(collector_restored: None) -> None:
    gc.disable()
    _collector.hold()
    _collector.release()
    assert not gc.isenabled()  # it was not ours to switch on


@linux_only
@pytest.mark.parametrize("command", ["reconcile", "startup"])
def test_the_console_script_runs_each_pass_with_the_collector_on_and_its_imports_frozen(
    repo: Repository, db_path: Path, tmp_path: Path, command: str
) -> None:
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    (tmp_path / "r").mkdir()
    # The process's own command line (argv None), as the console script runs it. The primary
    # pass's first candidate, and (startup, with an origin enabled) the shadow pass's start,
    # see the collector's state.
    code = (
        "import gc, json, sys\n"
        "import reconciler.primary._gather as g\n"
        "import reconciler.shadow._pass as s\n"
        "seen = []\n"
        "def spy(name, real):\n"
        "    def call(*args, **kwargs):\n"
        "        seen.append([name, gc.isenabled(), gc.get_freeze_count() > 0])\n"
        "        return real(*args, **kwargs)\n"
        "    return call\n"
        "g.read_run = spy('primary', g.read_run)\n"
        "s.run_pass = spy('shadow', s.run_pass)\n"
        "from reconciler.cli._main import main\n"
        f"sys.argv = ['qlfsm', {command!r}, '--db', {str(db_path)!r}, '--receipt-root', "
        f"{str(tmp_path / 'r')!r}, '--profile', 'edge', '--json']\n"
        "rc = main()\n"
        "sys.stderr.write(json.dumps([rc, seen]))\n"
    )
    env = {**os.environ, "QL3_SHADOW_ORIGINS": "scheduled_node"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    rc, seen = json.loads(out.stderr.strip().splitlines()[-1])
    assert rc == 0, out.stderr
    shadow = [["shadow", True, True]] if command == "startup" else []
    assert seen == [*shadow, ["primary", True, True]], out.stderr


def test_main_run_in_process_never_touches_the_callers_collector(
    db_path: Path, tmp_path: Path, collector_restored: None
) -> None:
    gc.enable()
    frozen = gc.get_freeze_count()
    assert main(["reconcile", "--db", str(db_path), "--receipt-root", str(tmp_path / "r")]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen
