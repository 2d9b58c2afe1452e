"""docs/operations.md, run: every command block of the runbook (tagged ``runbook:NAME``) against
a real database holding a real blocked run (a corrupt completion receipt of a job whose process
is gone), with the data directory and the programs' paths replaced, nothing else."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from _support import init_db
from test_primary_support import dead_handle, linux_only, make_candidate
from test_startup_report import pasted

from storage import Repository, connect

RUNBOOK = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
DATA = "/var/lib/qinglong"
TEXTFILE = "/var/lib/node_exporter/textfile"  # the collector's directory in the runbook
QLFSM = "/usr/local/bin/qlfsm"
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
        return text.replace(DATA, str(self.data)).replace(TEXTFILE, str(self.root / "textfile"))

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
    assert found and all(tag for lang, tag, _ in found if lang in ("sh", "ini"))
    assert set(blocks()) == {
        "runbook:env", "runbook:unit-oneshot", "runbook:unit-node", "runbook:unit-execstartpre",
        "runbook:entrypoint", "runbook:json", "runbook:walkthrough-1", "runbook:walkthrough-2",
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


@linux_only
def test_the_container_entrypoint_waits_when_blocked_and_starts_the_node_when_safe(
    site: Site,
) -> None:
    script = site.root / "entrypoint"
    script.write_text(site.local(blocks()["runbook:entrypoint"]))
    script.chmod(0o755)
    env = site.env()
    env.update(DB=str(site.data / "ql.db"), RECEIPTS=str(site.data / "receipts"))
    node = ["sh", "-c", "echo node started"]
    out_file, err_file = site.root / "out", site.root / "err"
    with out_file.open("w") as out, err_file.open("w") as err:
        blocked = subprocess.Popen([str(script), *node], env=env, stdout=out, stderr=err)
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
    site.resolve()
    started = subprocess.run(
        [str(script), *node], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.rstrip().endswith("node started")
    assert "verdict: SAFE to start" in started.stdout


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


def run_exec(site: Site, service: dict[str, list[str]], key: str) -> int:
    """Run the unit's ``key`` command line as systemd would: its Environment=, no shell."""
    env = site.env()
    for assignment in service.get("Environment", []):
        name, _, value = assignment.partition("=")
        env[name] = value
    argv = site.local(service[key][0]).split()
    argv[0] = shutil.which("qlfsm", path=env["PATH"]) or argv[0]
    return subprocess.run(argv, env=env, capture_output=True, timeout=60, check=False).returncode


@linux_only
def test_the_systemd_units_run_the_start_up_and_never_retry_a_blocked_one(site: Site) -> None:
    oneshot = unit(blocks()["runbook:unit-oneshot"])
    node = unit(blocks()["runbook:unit-node"])
    pre = unit(blocks()["runbook:unit-execstartpre"])
    # The oneshot: no Restart= at all; the node requires it and starts after it.
    assert oneshot["Service"]["Type"] == ["oneshot"] and "Restart" not in oneshot["Service"]
    assert node["Unit"]["Requires"] == node["Unit"]["After"] == ["qlfsm-startup.service"]
    # ExecStartPre=: RestartPreventExitStatus= would not cover it; only abnormal endings
    # restart, so exit 3 is never retried.
    assert pre["Service"]["Restart"] == ["on-abnormal"]
    for service, key in ((oneshot["Service"], "ExecStart"), (pre["Service"], "ExecStartPre")):
        assert service[key][0].startswith(f"{QLFSM} startup ")
        assert run_exec(site, service, key) == 3
    site.resolve()
    assert run_exec(site, oneshot["Service"], "ExecStart") == 0
    assert run_exec(site, pre["Service"], "ExecStartPre") == 0


@linux_only
def test_systemd_analyze_accepts_the_units(site: Site) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    qlfsm = shutil.which("qlfsm", path=site.env()["PATH"])
    assert qlfsm is not None
    units = site.root / "units"
    units.mkdir()
    for name, tag in (
        ("qlfsm-startup.service", "unit-oneshot"),
        ("qinglong-node.service", "unit-node"),
        ("qinglong-node-pre.service", "unit-execstartpre"),
    ):
        text = (
            site.local(blocks()[f"runbook:{tag}"]).replace(QLFSM, qlfsm).replace(NODE, "/bin/true")
        )
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
