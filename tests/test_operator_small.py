"""The smaller rough edges of the operator's commands (docs/decisions.md D-23): a mistyped
command, an echoed profile value, one error prefix, and the demo on a closed pipe or an
interrupt. The real CLI in a child process each time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from _primary_support import linux_only, qlfsm


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    env.update(extra)
    return env


def test_a_mistyped_command_is_answered_with_the_command_it_is_close_to() -> None:
    out = qlfsm("statup")
    assert out.returncode == 2
    assert out.stderr.startswith("qlfsm: error: unknown command 'statup'; did you mean ")
    assert "`qlfsm startup`?" in out.stderr and out.stderr.count("\n") == 1
    far = qlfsm("zzzz")
    assert far.returncode == 2 and "did you mean" not in far.stderr


def test_a_profile_with_a_trailing_space_is_echoed_escaped_with_the_valid_ones(
    db_path: Path, tmp_path: Path
) -> None:
    env = _env(QL_DEPLOYMENT_PROFILE="standalone \x1b[31m")
    out = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(tmp_path), env=env)
    assert out.returncode == 2
    assert "$QL_DEPLOYMENT_PROFILE: unknown deployment profile 'standalone \\x1b[31m'" in (
        out.stderr
    )
    assert "\x1b" not in out.stderr
    assert "edge, standalone, cluster-control, worker" in out.stderr


def test_an_error_line_has_one_prefix() -> None:
    out = qlfsm("resolve", "--db", "x.db")
    assert out.returncode == 2
    assert out.stderr.startswith("qlfsm: error: the following arguments are required: ")
    assert "(see `qlfsm resolve --help`)" in out.stderr
    assert out.stderr.count("qlfsm") == 2


@linux_only
def test_the_demo_read_through_head_ends_quietly_with_its_own_code(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "demo", "--dir", str(tmp_path / "d")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`: the reader goes away
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=180) == 0, err
    assert "could not be written" not in err and "Broken pipe" not in err


@linux_only
def test_an_interrupted_demo_says_to_give_a_new_dir_and_a_rerun_there_is_refused_as_said(
    tmp_path: Path,
) -> None:
    target = tmp_path / "d"
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "demo", "--dir", str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()  # the demo directory is made
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    proc.wait(timeout=60)
    assert "interrupted (SIGINT)" in err
    assert f"the demo's directory {target} is left as it is" in err
    assert "give a new --dir" in err and "run the command again" not in err
    assert target.is_dir()  # never deleted
    again = qlfsm("demo", "--dir", str(target), env=_env())
    assert again.returncode == 2 and "is not empty" in again.stderr


def test_an_unknown_origin_is_placed_and_matched_to_the_one_it_is_close_to_never_echoed(
    db_path: Path, tmp_path: Path
) -> None:
    # spec 05: an unknown item may be a secret pasted by mistake, so it is never shown; the
    # operator still learns which item it was and what it is close to.
    secret = "hunter2-token"
    out = qlfsm("shadow", "--db", str(db_path), "--origins", f"manaul,scheduled_node,{secret}",
                env=_env())  # fmt: skip
    assert out.returncode == 0
    assert out.stderr.splitlines() == [
        "qlfsm: warning: --origins item 1 ignored, not a reviewed origin (text not shown); "
        "did you mean manual?",
        "qlfsm: warning: --origins item 3 ignored, not a reviewed origin (text not shown); "
        "--help lists the reviewed ones",
    ]
    assert "2 unknown" in out.stdout and secret not in out.stdout + out.stderr
    root = tmp_path / "r"
    root.mkdir(mode=0o700)
    env = _env(QL3_SHADOW_ORIGINS="bot")
    started = qlfsm("startup", "--db", str(db_path), "--receipt-root", str(root), env=env)
    assert started.returncode == 0, started.stderr
    assert "qlfsm: warning: $QL3_SHADOW_ORIGINS item 1 ignored, not a reviewed origin (text " \
        "not shown); did you mean boot?" in started.stderr.splitlines()  # fmt: skip
    quiet = qlfsm("shadow", "--db", str(db_path), "--origins", "manual", env=_env())
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_every_command_with_a_profile_lists_the_same_profiles_in_its_help() -> None:
    from reconciler._profiles import PROFILES

    for command in ("reconcile", "startup", "shadow", "explain"):
        out = qlfsm(command, "--help")
        assert out.returncode == 0, (command, out.stderr)
        text = " ".join(out.stdout.split())  # argparse wraps the help
        assert all(p in text for p in PROFILES), (command, text)
