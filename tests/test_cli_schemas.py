"""The `--json` output of every command, written down as JSON Schema files shipped with the
package (``reconciler/cli/schemas``), and checked here against the real output of each command
on real databases, receipts and processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from _decisions import lose_after_grace
from jsonschema import Draft202012Validator, ValidationError
from referencing import Registry, Resource
from test_primary_support import dead_handle, linux_only, make_candidate, make_run, qlfsm

from storage import Repository, connect

COMMANDS = (
    "db-init",
    "explain",
    "inspect",
    "launch",
    "reconcile",
    "resolve",
    "shadow",
    "startup",
    "sweep",
)


def schemas() -> dict[str, dict[str, Any]]:
    folder = resources.files("reconciler.cli").joinpath("schemas")
    return {
        entry.name.removesuffix(".json"): json.loads(entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".json")
    }


SCHEMAS = schemas()
REGISTRY: Registry = Registry().with_resources(
    (s["$id"], Resource.from_contents(s)) for s in SCHEMAS.values()
)


def validate(name: str, stdout: str) -> dict[str, Any]:
    """The one JSON object ``stdout`` holds, validated against the ``name`` schema."""
    assert stdout.count("\n") == 1, stdout
    data: dict[str, Any] = json.loads(stdout)
    Draft202012Validator(SCHEMAS[name], registry=REGISTRY).validate(data)
    return data


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    return {**base, **extra}


# --- the files themselves ----------------------------------------------------------------------


def test_every_command_with_json_output_has_a_valid_schema() -> None:
    assert sorted(SCHEMAS) == sorted(COMMANDS)
    for name, schema in SCHEMAS.items():
        Draft202012Validator.check_schema(schema)
        assert schema["$id"] == f"urn:qlfsm:schema:{name}"
        assert schema["title"].startswith("qlfsm ") and schema["description"]


def test_the_schemas_are_package_data() -> None:
    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    assert "schemas/*.json" in config["tool"]["setuptools"]["package-data"]["reconciler.cli"]
    assert "reconciler.cli" in config["tool"]["setuptools"]["packages"]
    assert any(
        d.startswith("jsonschema") for d in config["project"]["optional-dependencies"]["test"]
    )


def test_a_schema_rejects_output_that_lost_a_field() -> None:
    summary = {
        "safe": True, "scanned": 0, "recovered": 0, "remaining": 0, "unresolved": 0,
        "failed": 0, "truncated": False, "candidates": [],
    }  # fmt: skip
    validate("reconcile", json.dumps(summary) + "\n")
    for broken in ({k: v for k, v in summary.items() if k != "safe"}, {**summary, "extra": 1}):
        with pytest.raises(ValidationError):
            validate("reconcile", json.dumps(broken) + "\n")


# --- real output --------------------------------------------------------------------------------


def test_db_init_and_inspect(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    validate("db-init", qlfsm("db", "init", "--db", str(db), "--json").stdout)
    validate("db-init", qlfsm("db", "init", "--db", str(db), "--json").stdout)
    repo_conn = connect(str(db))
    try:
        repo = Repository(repo_conn)
        make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
        make_run(repo, "run-2", "queued")
    finally:
        repo_conn.close()
    validate("inspect", qlfsm("inspect", "--db", str(db), "--json").stdout)
    page = validate("inspect", qlfsm("inspect", "--db", str(db), "--json", "--limit", "1").stdout)
    assert page["truncated"] is True
    validate("inspect", qlfsm("inspect", "--db", str(db), "--run", "run-1", "--json").stdout)


@linux_only
def test_reconcile_startup_shadow_and_sweep(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    root = tmp_path / "r"
    root.mkdir()
    base = ("--db", str(db_path), "--receipt-root", str(root), "--json")
    validate("reconcile", qlfsm("reconcile", *base, env=env()).stdout)  # zero candidates
    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    make_candidate(repo, "run-2", "at-2", handle="ql3lp1.bad", pid=3)
    blocked = validate("startup", qlfsm("startup", *base, env=env()).stdout)
    assert blocked["safe"] is False and blocked["sweep"]["state"] == "skipped"
    validate("reconcile", qlfsm("reconcile", *base, env=env()).stdout)
    for origins in ("", "manual,scheduled_node", "manual,once,Bogus"):
        out = qlfsm("shadow", "--db", str(db_path), "--json", env=env(QL3_SHADOW_ORIGINS=origins))
        validate("shadow", out.stdout)
    for profile in ("worker",):
        out = qlfsm("shadow", "--db", str(db_path), "--origins", "manual", "--profile", profile,
                    "--json")  # fmt: skip
        assert validate("shadow", out.stdout)["state"] == "profile_rejected"
    failed = qlfsm("shadow", "--db", str(tmp_path / "none.db"), "--origins", "manual", "--json")
    assert validate("shadow", failed.stdout)["state"] == "failed"
    qlfsm("resolve", "--db", str(db_path), "--run", "run-2", "--to", "failed", "--reason", "x")
    safe = validate("startup", qlfsm("startup", *base, "--origins", "manual", env=env()).stdout)
    assert safe["safe"] is True and safe["sweep"]["state"] == "done"
    validate("sweep", qlfsm("sweep", *base).stdout)
    missing = ("--db", str(db_path), "--receipt-root", str(tmp_path / "none"), "--json")
    assert validate("sweep", qlfsm("sweep", *missing).stdout)["state"] == "root_missing"


def test_explain_and_resolve(repo: Repository, db_path: Path) -> None:
    make_candidate(repo, "run-1", "at-1", handle="ql3lp1.x", pid=4242)
    lose_after_grace(repo, "run-1", "at-1")
    make_candidate(repo, "run-2", "at-2", attempt="claimed", run="dispatching")
    data = validate(
        "explain", qlfsm("explain", "--db", str(db_path), "--run", "run-1", "--json").stdout
    )
    assert data["steps"][-1]["decision"]["row"] == "13"
    out = qlfsm("resolve", "--db", str(db_path), "--run", "run-2", "--to", "lost", "--reason",
                "never started", "--json")  # fmt: skip
    validate("resolve", out.stdout)
    resolved = qlfsm("explain", "--db", str(db_path), "--run", "run-2", "--json").stdout
    assert validate("explain", resolved)["steps"][-1]["resolution"]["to"] == "lost"


@linux_only
def test_launch(repo: Repository, db_path: Path, tmp_path: Path) -> None:
    version = make_run(repo, "run-1", "queued")
    repo.create_attempt(
        run_id="run-1", attempt_id="at-1", expected_version=version, at_ms=1_700_000_000_000
    )
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "launch", "--db", str(db_path), "--receipt-root",
         str(tmp_path / "r"), "--run-id", "run-1", "--json", "--wait", "--", "true"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    validate("launch", proc.stdout)
