"""docs/operations.md, run: every command block of the runbook (tagged ``runbook:NAME``) against
a real database holding a real blocked run (a corrupt completion receipt of a job whose process
is gone), with the data directory and the programs' paths replaced, nothing else."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from _primary_support import dead_handle, linux_only, make_candidate
from _support import init_db
from test_startup_report import pasted

from storage import Repository, check_schema, connect

RUNBOOK = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
DEPLOY = RUNBOOK.parent / "deploy"  # the unit files and the entrypoint people copy
DATA = "/var/lib/qinglong"
TEXTFILE = "/var/lib/node_exporter/textfile"  # the collector's directory in the runbook
QLFSM_BIN = "/opt/qlfsm/bin"
NODE = "/opt/qinglong/bin/qinglong-node"
RUN = "01934f5e-7c2a-7b61-9d0e-5a1f2c3b4d5e"  # the blocked run the walk-through names
ATTEMPT = "01934f5e-7c2b-7c3d-8e4f-6a7b8c9d0e1f"
FENCE = re.compile(r"^```(\w+)(?: (runbook:[\w-]+))?\n(.*?)^```$", re.M | re.S)


def blocks() -> dict[str, str]:
    """runbook:NAME -> the block's text, for every tagged block of the runbook."""
    return {tag: body for _, tag, body in FENCE.findall(RUNBOOK.read_text()) if tag}


@dataclass
class Site:
    """A node's data directory with a blocked run, and how to run the runbook's shell there."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "var-lib-qinglong"

    def local(self, text: str) -> str:
        text = text.replace(DATA, str(self.data)).replace(QLFSM_BIN, str(self.bin))
        return text.replace(TEXTFILE, str(self.root / "textfile"))

    @property
    def bin(self) -> Path:
        """/opt/qlfsm/bin as the runbook installs it: qlfsm-startup (the file of docs/deploy,
        copied byte for byte) beside qlfsm (the console script of this interpreter)."""
        made = self.root / "opt-qlfsm-bin"
        if not made.exists():
            made.mkdir()
            shutil.copy2(DEPLOY / "qlfsm-startup", made / "qlfsm-startup")
            qlfsm = shutil.which("qlfsm", path=str(Path(sys.executable).parent))
            assert qlfsm is not None
            (made / "qlfsm").symlink_to(qlfsm)
        return made

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
        # `qlfsm` is the console script installed beside this interpreter.
        base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', '/usr/bin:/bin')}"
        return base

    def sh(self, *names: str) -> dict[str, str]:
        """Run the named blocks, in order, in ONE shell (the env block first); the output of
        each, stdout and stderr together."""
        parts = [self.local(blocks()["runbook:env"])]
        for name in names:
            parts.append(f"echo '@@{name}'")
            parts.append(self.local(blocks()[f"runbook:{name}"]))
        proc = subprocess.run(
            ["bash", "-c", "\n".join(parts)],
            capture_output=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=self.env(), cwd=self.root, timeout=120, check=False,
        )  # fmt: skip
        out: dict[str, str] = {}
        for chunk in proc.stdout.split("@@")[1:]:
            name, _, text = chunk.partition("\n")
            out[name] = text
        return out

    def resolve(self) -> None:
        subprocess.run(
            ["qlfsm", "resolve", "--db", str(self.data / "ql.db"), "--run", RUN, "--to",
             "failed", "--reason", "checked"],
            env=self.env(), check=True, capture_output=True, timeout=60,
        )  # fmt: skip


@pytest.fixture
def site(tmp_path: Path) -> Site:
    made = Site(tmp_path)
    made.data.mkdir()
    db = init_db(made.data / "ql.db")
    handle, pid = dead_handle()
    with connect(str(db)) as conn:
        make_candidate(Repository(conn), RUN, ATTEMPT, handle=handle, pid=pid)
    conn.close()
    shard = made.data / "receipts" / ATTEMPT[:2]
    shard.mkdir(parents=True)
    (shard / f"{ATTEMPT}.json").write_bytes(b'{"schemaVersion":1,"runId":"truncated')
    return made


def test_every_command_block_of_the_runbook_is_tagged_and_run_here() -> None:
    found = FENCE.findall(RUNBOOK.read_text())
    assert found and all(tag for lang, tag, _ in found if lang in ("sh", "ini", "dockerfile"))
    assert set(blocks()) == {
        "runbook:env", "runbook:install", "runbook:first-boot", "runbook:systemd",
        "runbook:dockerfile", "runbook:json", "runbook:walkthrough-1", "runbook:walkthrough-2",
        "runbook:walkthrough-3", "runbook:walkthrough-4", "runbook:sweep", "runbook:metrics",
    }  # fmt: skip


@linux_only
def test_the_blocked_start_up_walk_through_runs_end_to_end(site: Site) -> None:
    db = site.data / "ql.db"
    out = site.sh("walkthrough-1", "walkthrough-2", "walkthrough-3", "walkthrough-4", "sweep")
    first = out["walkthrough-1"]
    assert "blocked by 1 run(s):" in first and "invalid_receipt:" in first
    # What happened to the run in plain words, and the explain command with the receipt root
    # (wrapped at 100 columns with `\` continuations: joined, it is one command; D-22).
    assert re.search(rf"^{RUN}\s+6\s+blocked\s+invalid_receipt:", first, re.M), first
    explain = ["qlfsm", "explain", "--db", str(db), "--run", RUN, "--receipt-root"]
    assert pasted(first) == [[*explain, str(site.data / "receipts")]], first
    assert "verdict: start-up BLOCKED" in first and "startup exit 3" in first
    explained = out["walkthrough-2"]
    assert f"run {RUN} (runtime, manual): now running" in explained
    assert f"receipt journal of attempt {ATTEMPT}: quarantined" in explained
    # The pass wrote nothing for it; the dry run names the row that blocks it.
    assert "start-up now (ADR-0068, nothing written): row 6 -> unresolved" in explained
    resolved = out["walkthrough-3"]
    assert f"resolved: run {RUN} running -> failed; attempt {ATTEMPT} running -> failed" in resolved
    assert "operator's decision -> failed" in resolved and "receipt corrupt" in resolved
    # The quarantined row outlives the decision for the sweep, and explain says it no longer
    # blocks (docs/decisions.md D-12).
    assert f"receipt journal of attempt {ATTEMPT}: quarantined" in resolved
    assert "no longer blocks start-up (the Attempt is failed)" in resolved
    again = out["walkthrough-4"]
    assert "verdict: SAFE to start" in again and "startup exit 0" in again
    assert out["sweep"].startswith("sweep: ")
    assert (site.data / "receipts" / ".quarantine" / ATTEMPT[:2] / f"{ATTEMPT}.json").exists()


@linux_only
def test_the_json_of_a_blocked_start_up_is_read_by_the_script(site: Site) -> None:
    out = site.sh("json")["json"]
    lines = out.splitlines()
    assert lines[0] == "startup exit 3"
    assert re.fullmatch(rf"{RUN} row 6 invalid_receipt:\S+", lines[1]), lines
    assert lines[2] == "safe=false sweep=skipped"


def entrypoint_env(site: Site, volume: Path | None = None) -> dict[str, str]:
    env = site.env()
    data = site.data if volume is None else volume
    env.update(DB=str(data / "ql.db"), RECEIPTS=str(data / "receipts"), QLFSM_BIN=str(site.bin))
    return env


ENTRYPOINT = str(DEPLOY / "qinglong-entrypoint")


@linux_only
def test_the_container_entrypoint_waits_when_blocked_and_starts_the_node_when_safe(
    site: Site,
) -> None:
    env = entrypoint_env(site)
    node = ["sh", "-c", "echo node started"]
    out_file, err_file = site.root / "out", site.root / "err"
    with out_file.open("w") as out, err_file.open("w") as err:
        blocked = subprocess.Popen([ENTRYPOINT, *node], env=env, stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and blocked.poll() is None:
            if "start-up is blocked" in err_file.read_text():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        # Waiting for an operator, not exiting into an orchestrator's restart loop.
        assert blocked.poll() is None, (out_file.read_text(), err_file.read_text())
        blocked.send_signal(signal.SIGTERM)
        assert blocked.wait(timeout=10) == 3
    finally:
        if blocked.poll() is None:
            blocked.kill()
            blocked.wait()
    assert "verdict: start-up BLOCKED" in out_file.read_text()
    assert "node started" not in out_file.read_text()
    assert "start-up is blocked: resolve the runs above" in err_file.read_text()
    assert "qlfsm-startup:" not in err_file.read_text()  # exit 3 is never retried
    site.resolve()
    started = subprocess.run(
        [ENTRYPOINT, *node], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.rstrip().endswith("node started")
    assert "verdict: SAFE to start" in started.stdout


def fake_service(site: Site) -> tuple[list[str], Path]:
    """A shell script standing in for QingLong's server: it records that it started."""
    marker = site.root / "service-started"
    script = site.root / "fake-qinglong"
    script.write_text(f'#!/bin/sh\necho "fake qinglong up: $*" > {marker}\necho "server up"\n')
    script.chmod(0o755)
    return [str(script), "--port", "5700"], marker


@linux_only
def test_on_an_empty_volume_the_entrypoint_creates_the_database_and_starts_the_service(
    site: Site,
) -> None:
    volume = site.root / "empty-volume"
    volume.mkdir()
    service, marker = fake_service(site)
    proc = subprocess.run([ENTRYPOINT, *service], env=entrypoint_env(site, volume),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        lines[0] == f"first boot: created database {volume / 'ql.db'} (the `qlfsm db init` schema)"
    )
    assert "verdict: SAFE to start" in lines and lines[-1] == "server up"
    assert marker.read_text() == "fake qinglong up: --port 5700\n"
    conn = connect(str(volume / "ql.db"))  # read back through a second connection
    try:
        check_schema(conn, path=str(volume / "ql.db"))
    finally:
        conn.close()
    # The next start of the same volume is a normal start-up.
    marker.unlink()
    again = subprocess.run([ENTRYPOINT, *service], env=entrypoint_env(site, volume),
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert again.returncode == 0 and "first boot" not in again.stdout and marker.exists()


@linux_only
def test_a_wrong_db_path_stops_the_entrypoint_in_one_line_and_never_starts_the_service(
    site: Site,
) -> None:
    volume = site.root / "var-lib-qinglnog"  # a typo: this directory does not exist
    service, marker = fake_service(site)
    proc = subprocess.run([ENTRYPOINT, *service], env=entrypoint_env(site, volume),
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "neither does its directory" in proc.stderr
    assert proc.stdout == "" and not marker.exists() and not volume.exists()


def fake_qlfsm(site: Site, codes: list[int]) -> tuple[Path, Path]:
    """/opt/qlfsm/bin with the real qlfsm-startup beside a fake `qlfsm` that exits with
    ``codes`` in turn (the last one from then on) and logs each call."""
    made = site.root / "fake-bin"
    made.mkdir()
    shutil.copy2(DEPLOY / "qlfsm-startup", made / "qlfsm-startup")
    calls = site.root / "calls"
    table = " ".join(str(c) for c in codes)
    (made / "qlfsm").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f"n=$(wc -l < {calls}); set -- {table}; i=1\n"
        'while [ "$i" -lt "$n" ] && [ "$#" -gt 1 ]; do shift; i=$((i + 1)); done\n'
        'echo "fake qlfsm exits $1"; exit "$1"\n'
    )
    (made / "qlfsm").chmod(0o755)
    return made, calls


@linux_only
@pytest.mark.parametrize(
    ("codes", "rc", "calls", "started"),
    [
        ([75, 75, 0], 0, 3, True),  # a lock that goes away: the third start-up is SAFE
        ([75], 75, 4, False),  # a lock that stays: 4 start-ups (QLFSM_STARTUP_TRIES), then 75
        ([75, 3], 3, 2, False),  # BLOCKED after a retry: never retried again
        ([1], 1, 1, False),  # fatal: never retried
    ],
)
def test_the_entrypoint_retries_exit_75_a_bounded_number_of_times_and_nothing_else(
    site: Site, codes: list[int], rc: int, calls: int, started: bool
) -> None:
    fake_bin, log = fake_qlfsm(site, codes)
    service, marker = fake_service(site)
    env = {**entrypoint_env(site), "QLFSM_BIN": str(fake_bin), "QLFSM_STARTUP_TRIES": "4",
           "QLFSM_STARTUP_PAUSE_S": "0"}  # fmt: skip
    proc = subprocess.Popen([ENTRYPOINT, *service], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        if rc == 3:  # blocked: the entrypoint waits for an operator; a stop ends it with 3
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (
                not log.exists() or log.read_text().count("\n") < calls
            ):
                time.sleep(0.1)
            time.sleep(0.5)
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == rc, err
    made = log.read_text().splitlines()
    assert len(made) == calls
    assert set(made) == {
        f"startup --first-boot --db {site.data / 'ql.db'} --receipt-root "
        f"{site.data / 'receipts'} --legacy-normalize"
    }
    retries = [
        line
        for line in err.splitlines()
        if line.startswith("qlfsm-startup: the database is locked")
    ]
    assert len(retries) == calls - 1  # one line per start-up started again
    assert marker.exists() is started
    if rc == 75:
        assert "still locked after 4 start-up(s)" in err


@linux_only
def test_a_database_held_by_another_writer_is_retried_then_exits_75(site: Site) -> None:
    """The real qlfsm on a database whose write lock another process holds past the budget."""
    env = {**entrypoint_env(site), "QLFSM_LOCK_BUDGET_S": "0.3", "QLFSM_STARTUP_TRIES": "2",
           "QLFSM_STARTUP_PAUSE_S": "0"}  # fmt: skip
    volume = site.root / "locked-volume"
    (volume / "receipts").mkdir(parents=True)
    db = init_db(volume / "ql.db")
    handle, pid = dead_handle()  # a dead run: start-up must WRITE its `lost`
    conn = connect(str(db))
    try:
        make_candidate(Repository(conn), "run-dead", "at-dead", handle=handle, pid=pid)
    finally:
        conn.close()
    holder = sqlite3.connect(str(db), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        proc = subprocess.run(
            [str(site.bin / "qlfsm-startup"), "--db", str(db), "--receipt-root",
             str(volume / "receipts")],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == 75, (proc.stdout, proc.stderr)
    assert "start-up 1 of 2" in proc.stderr and "still locked after 2 start-up(s)" in proc.stderr


def unit(text: str) -> dict[str, dict[str, list[str]]]:
    """A unit file's sections -> key -> every value (keys may repeat, as systemd allows)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


UNITS = ("qlfsm-startup.service", "qinglong.service")


def run_exec(site: Site, service: dict[str, list[str]], key: str, **extra: str) -> int:
    """Run the unit's ``key`` command line as systemd would: its Environment=, no shell."""
    env = site.env()
    for assignment in service.get("Environment", []):
        name, _, value = assignment.partition("=")
        env[name] = value
    env.update(extra)
    argv = site.local(service[key][0]).split()
    return subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False).returncode


@linux_only
def test_the_systemd_units_run_the_start_up_first_and_never_retry_a_blocked_one(
    site: Site,
) -> None:
    oneshot = unit((DEPLOY / "qlfsm-startup.service").read_text())
    node = unit((DEPLOY / "qinglong.service").read_text())
    # The oneshot: no Restart= (exit 75 is retried inside its one start, by qlfsm-startup).
    assert oneshot["Service"]["Type"] == ["oneshot"] and "Restart" not in oneshot["Service"]
    assert oneshot["Service"]["KillMode"] == ["mixed"]
    assert oneshot["Service"]["ExecStart"][0].startswith(
        f"{QLFSM_BIN}/qlfsm-startup --first-boot --db {DATA}/ql.db "
    )
    # The node requires it, starts after it, and can be enabled.
    assert node["Unit"]["Requires"] == node["Unit"]["After"] == ["qlfsm-startup.service"]
    assert node["Install"]["WantedBy"] == ["multi-user.target"]
    service = oneshot["Service"]
    assert run_exec(site, service, "ExecStart", QLFSM_STARTUP_PAUSE_S="0") == 3
    site.resolve()
    assert run_exec(site, service, "ExecStart") == 0
    # First boot: the unit on an empty data directory creates the database.
    (site.data / "ql.db").unlink()
    assert run_exec(site, service, "ExecStart") == 0
    assert (site.data / "ql.db").stat().st_size > 0


def test_the_runbook_installs_what_the_units_and_the_entrypoint_name() -> None:
    install = blocks()["runbook:install"]
    assert "python3 -m venv /opt/qlfsm\n" in install
    assert f"install -m 0755 docs/deploy/qlfsm-startup {QLFSM_BIN}/qlfsm-startup" in install
    systemd = blocks()["runbook:systemd"]
    assert all(f"docs/deploy/{name}" in systemd for name in UNITS)
    assert "systemctl enable --now qinglong.service" in systemd
    docker = blocks()["runbook:dockerfile"]
    assert 'ENTRYPOINT ["/usr/local/bin/qinglong-entrypoint"]' in docker
    assert "docs/deploy/qinglong-entrypoint /usr/local/bin/qinglong-entrypoint" in docker
    root = RUNBOOK.parents[1]
    for line in (install + systemd + docker).splitlines():
        for word in line.split():
            if word.startswith(("docs/deploy/", "/src/qlfsm/docs/deploy/")):
                assert (root / word.removeprefix("/src/qlfsm/")).is_file(), word
    for name in ("qlfsm-startup", "qinglong-entrypoint"):
        assert os.access(DEPLOY / name, os.X_OK)
        assert f"QLFSM_BIN:-{QLFSM_BIN}" in (DEPLOY / "qinglong-entrypoint").read_text()


@linux_only
def test_the_install_block_run_as_written_gives_the_qlfsm_and_wrapper_the_units_name(
    tmp_path: Path,
) -> None:
    # The block itself, from a copy of this checkout, with /opt/qlfsm moved into tmp_path: a
    # real venv, a real `pip install .` (build isolation: setuptools from the package index).
    root = RUNBOOK.parents[1]
    src = tmp_path / "src"
    keep = ("pyproject.toml", "README.md", "fsm", "reconciler", "storage", "docs")
    for name in keep:
        if (root / name).is_dir():
            shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(root / name, src / name)
    prefix = tmp_path / "opt-qlfsm"
    script = blocks()["runbook:install"].replace("/opt/qlfsm", str(prefix))
    script = script.replace("python3 -m venv", f"{sys.executable} -m venv")
    out = subprocess.run(["sh", "-e", "-c", script], cwd=src, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().startswith("qlfsm "), out.stdout
    wrapper = prefix / "bin" / "qlfsm-startup"
    assert wrapper.read_bytes() == (DEPLOY / "qlfsm-startup").read_bytes()
    assert os.access(wrapper, os.X_OK) and os.access(prefix / "bin" / "qlfsm", os.X_OK)


@linux_only
def test_the_runbook_first_boot_block_creates_the_database(site: Site) -> None:
    shutil.rmtree(site.data)
    out = site.sh("first-boot")["first-boot"]
    assert f"first boot: created database {site.data / 'ql.db'}" in out
    assert "verdict: SAFE to start" in out and "startup exit 0" in out


@linux_only
def test_systemd_analyze_accepts_the_units(site: Site) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        # .ci/run installs it (package `systemd`) wherever apt-get can.
        pytest.skip("systemd-analyze is not installed on this machine")
    units = site.root / "units"
    units.mkdir()
    for name in UNITS:
        text = site.local((DEPLOY / name).read_text()).replace(NODE, "/bin/true")
        (units / name).write_text(text)
    proc = subprocess.run(
        [analyze, "verify", *sorted(str(p) for p in units.iterdir())],
        capture_output=True, text=True, timeout=60, check=False, cwd=units,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


@linux_only
def test_the_metrics_block_writes_a_file_the_textfile_collector_parses(site: Site) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    out = site.sh("metrics")["metrics"]
    assert "startup exit 3" in out, out
    assert 'run_reconcile_total{executor="local_process",result="unresolved"} 1.0' in out
    text = (site.root / "textfile" / "qlfsm.prom").read_text()
    parsed = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert parsed["qlfsm_startup_safe"] == 0 and parsed["qlfsm_startup_primary_scanned"] == 1
