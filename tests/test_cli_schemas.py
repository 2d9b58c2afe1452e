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
from _primary_support import (
    dead_handle,
    insert_bare_runs,
    linux_only,
    make_candidate,
    make_run,
    qlfsm,
)
from jsonschema import Draft202012Validator, ValidationError
from referencing import Registry, Resource

from storage import Repository, connect

TYPE_CHECKING = False
if TYPE_CHECKING:
    from _shadow_support import LegacyDb

COMMANDS = (
    "db-init",
    "drain",
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
    # A package of its own: setuptools warns about a data folder that is importable but not
    # listed among the packages.
    assert "*.json" in config["tool"]["setuptools"]["package-data"]["reconciler.cli.schemas"]
    assert "reconciler.cli.schemas" in config["tool"]["setuptools"]["packages"]
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


# --- every mode of every command -----------------------------------------------------------------
#
# Each scenario is a table of (schema, argv, exit codes) run in order on one real node; the
# placeholders are its paths. The last test checks that the tables together use every flag
# each command's --help lists, so a new flag (a new mode) must be added here to be validated.

Mode = tuple[str, list[str], frozenset[int]]
OK, BLOCKED, OK_OR_BLOCKED = frozenset({0}), frozenset({3}), frozenset({0, 3})
R = ["--db", "{db}", "--receipt-root", "{root}", "--json"]

EMPTY: list[Mode] = [
    ("reconcile", ["reconcile", *R], OK),
    ("reconcile", ["reconcile", *R, "--dry-run"], OK),
    ("reconcile", ["reconcile", *R, "--profile", "edge"], OK),
    ("startup", ["startup", *R], OK),
    ("startup", ["startup", *R, "--legacy-normalize"], OK),
    ("startup", ["startup", *R, "--dry-run"], OK),
    ("startup", ["startup", *R, "--dry-run", "--legacy-normalize"], OK),
    ("startup", ["startup", *R, "--origins", "manual,once,Bogus", "--profile", "edge"], OK),
    ("startup", ["startup", *R, "--metrics-file", "{tmp}/qlfsm.prom"], OK),
    (
        "startup",
        [
            "startup",
            "--db",
            "{tmp}/fresh.db",
            "--receipt-root",
            "{root}",
            "--json",
            "--first-boot",
            "--dry-run",
        ],
        OK,
    ),
    (
        "startup",
        ["startup", "--db", "{tmp}/fresh.db", "--receipt-root", "{root}", "--json", "--first-boot"],
        OK,
    ),
    ("sweep", ["sweep", *R], OK),
    ("sweep", ["sweep", "--db", "{db}", "--receipt-root", "{tmp}/none", "--json"], OK),
    ("shadow", ["shadow", "--db", "{db}", "--json"], OK),
    ("shadow", ["shadow", "--db", "{db}", "--json", "--origins", "manual,scheduled_node"], OK),
    (
        "shadow",
        ["shadow", "--db", "{db}", "--json", "--origins", "manual", "--profile", "worker"],
        OK,
    ),
    (
        "shadow",
        [
            "shadow",
            "--db",
            "{db}",
            "--json",
            "--origins",
            "manual",
            "--resume-cursor",
            "{tmp}/cursor",
        ],
        OK,
    ),
    ("shadow", ["shadow", "--db", "{tmp}/none.db", "--json", "--origins", "manual"], OK),
    ("inspect", ["inspect", "--db", "{db}", "--json"], OK),
    ("drain", ["drain", *R], OK),
]

BLOCKED_NODE: list[Mode] = [
    ("reconcile", ["reconcile", *R, "--dry-run"], BLOCKED),
    ("startup", ["startup", *R, "--dry-run"], BLOCKED),
    ("startup", ["startup", *R, "--dry-run", "--legacy-normalize"], BLOCKED),
    ("explain", ["explain", "--db", "{db}", "--run", "run-2", "--json"], OK),
    (
        "explain",
        ["explain", "--db", "{db}", "--run", "run-2", "--json", "--receipt-root", "{root}"],
        OK,
    ),
    (
        "explain",
        [
            "explain",
            "--db",
            "{db}",
            "--run",
            "run-2",
            "--json",
            "--receipt-root",
            "{root}",
            "--profile",
            "edge",
        ],
        OK,
    ),
    (
        "explain",
        [
            "explain",
            "--db",
            "{db}",
            "--run",
            "run-2",
            "--json",
            "--svg",
            "{tmp}/r.svg",
            "--dot",
            "{dot}",
        ],
        OK,
    ),
    ("reconcile", ["reconcile", *R], BLOCKED),
    ("startup", ["startup", *R], BLOCKED),
    ("startup", ["startup", *R, "--legacy-normalize", "--origins", "manual"], BLOCKED),
    ("explain", ["explain", "--db", "{db}", "--run", "run-1", "--json"], OK),
    ("explain", ["explain", "--db", "{db}", "--run", "run-1", "--json", "--all-events"], OK),
    ("inspect", ["inspect", "--db", "{db}", "--json"], OK),
    ("inspect", ["inspect", "--db", "{db}", "--json", "--limit", "1"], OK),
    ("inspect", ["inspect", "--db", "{db}", "--json", "--run", "run-1"], OK),
    ("inspect", ["inspect", "--db", "{db}", "--json", "--run", "run-1", "--after", "1"], OK),
    ("inspect", ["inspect", "--db", "{db}", "--json", "--status", "running"], OK),
    ("inspect", ["inspect", "--db", "{db}", "--json", "--after", "run-1"], OK),
    (
        "resolve",
        [
            "resolve",
            "--db",
            "{db}",
            "--run",
            "run-2",
            "--to",
            "failed",
            "--reason",
            "bad handle",
            "--dry-run",
            "--json",
        ],
        OK,
    ),
    (
        "resolve",
        [
            "resolve",
            "--db",
            "{db}",
            "--run",
            "run-2",
            "--to",
            "failed",
            "--reason",
            "bad handle",
            "--operator",
            "alice",
            "--json",
        ],
        OK,
    ),
    (
        "resolve",
        [
            "resolve",
            "--db",
            "{db}",
            "--run",
            "run-3",
            "--to",
            "failed",
            "--reason",
            "stop waiting",
            "--force",
            "--json",
        ],
        OK,
    ),
    ("startup", ["startup", *R, "--origins", "manual"], OK),
    ("startup", ["startup", *R, "--dry-run"], OK),
    ("sweep", ["sweep", *R], OK),
]

LEGACY: list[Mode] = [
    (
        "explain",
        ["explain", "--db", "{db}", "--run", "{legacy}", "--json", "--origins", "manual"],
        OK,
    ),
    ("shadow", ["shadow", "--db", "{db}", "--json", "--origins", "manual"], OK),
]

TRUNCATED: list[Mode] = [
    ("reconcile", ["reconcile", *R], BLOCKED),
    ("reconcile", ["reconcile", *R, "--dry-run"], BLOCKED),
    ("startup", ["startup", *R, "--dry-run"], BLOCKED),
    ("startup", ["startup", *R], BLOCKED),
    ("drain", ["drain", *R, "--dry-run"], BLOCKED),
    ("drain", ["drain", *R, "--profile", "edge"], BLOCKED),
]

LAUNCH: list[Mode] = [
    (
        "launch",
        [
            "launch",
            "--db",
            "{db}",
            "--receipt-root",
            "{root}",
            "--run-id",
            "run-w",
            "--json",
            "--wait",
            "--",
            "true",
        ],
        OK,
    ),
    (
        "launch",
        [
            "launch",
            "--db",
            "{db}",
            "--receipt-root",
            "{root}",
            "--run-id",
            "run-l",
            "--json",
            "--log",
            "{tmp}/job.log",
            "--",
            "sleep",
            "30",
        ],
        OK,
    ),
    (
        "launch",
        [
            "launch",
            "--db",
            "{db}",
            "--receipt-root",
            "{root}",
            "--run-id",
            "run-c",
            "--create",
            "--attempt-id",
            "at-c",
            "--operator",
            "alice",
            "--json",
            "--wait",
            "--",
            "true",
        ],
        OK,
    ),
]

DB_INIT: list[Mode] = [
    ("db-init", ["db", "init", "--db", "{tmp}/new.db", "--json"], OK),
    ("db-init", ["db", "init", "--db", "{tmp}/new.db", "--json"], OK),
    ("db-init", ["db", "init", "--db", "{tmp}/ql2.db", "--json"], OK),
    ("db-init", ["db", "init", "--db", "{tmp}/users.db", "--json", "--force"], OK),
]

SCENARIOS = {
    "empty": EMPTY,
    "blocked": BLOCKED_NODE,
    "legacy": LEGACY,
    "truncated": TRUNCATED,
    "launch": LAUNCH,
    "db-init": DB_INIT,
}


def run_modes(modes: list[Mode], **paths: str) -> list[dict[str, Any]]:
    """Run every mode in order; each stdout validated against its schema."""
    got = []
    for schema, template, codes in modes:
        argv = [word.format(**paths) for word in template]
        out = qlfsm(*argv, env=env())
        assert out.returncode in codes, (argv, out.returncode, out.stderr)
        try:
            got.append(validate(schema, out.stdout))
        except ValidationError as exc:
            raise AssertionError(f"{' '.join(template)}: {exc.message}") from exc
    return got


def node_paths(db: Path, tmp_path: Path) -> dict[str, str]:
    root = tmp_path / "r"
    root.mkdir(exist_ok=True)
    return {"db": str(db), "root": str(root), "tmp": str(tmp_path)}


@linux_only
def test_every_mode_on_an_empty_node_matches_its_schema(db_path: Path, tmp_path: Path) -> None:
    got = run_modes(EMPTY, **node_paths(db_path, tmp_path))
    dry = got[5]
    assert dry["dry_run"] is True and dry["primary"]["dry_run"] is True
    assert dry["shadow"] == {"state": "skipped", "reason": "dry_run"}
    assert dry["sweep"]["state"] == "skipped"  # the same keys as a real start-up
    assert "dry_run" not in got[3] and got[1]["dry_run"] is True


@linux_only
def test_every_mode_on_a_blocked_node_matches_its_schema(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    from _primary_support import sleepers

    from reconciler.diagrams import find_dot

    handle, pid = dead_handle()
    make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)  # row 13: lost
    make_candidate(repo, "run-2", "at-2", handle="ql3lp1.bad", pid=3)  # row 10: blocked
    with sleepers() as [live]:
        make_candidate(repo, "run-3", "at-3", handle=live.handle, pid=live.pid)  # row 12
        got = run_modes(BLOCKED_NODE, **node_paths(db_path, tmp_path), dot=find_dot())
    assert got[1]["dry_run"] is True and got[1]["safe"] is False
    assert got[4]["now"] is not None  # --receipt-root: what start-up would decide now
    assert got[8]["sweep"]["state"] == "skipped" and got[-3]["sweep"]["state"] == "done"


@linux_only
def test_every_mode_on_a_legacy_run_matches_its_schema(db: LegacyDb, tmp_path: Path) -> None:
    made = db.run(origin="manual", status="running")
    run_modes(LEGACY, **node_paths(Path(db.path), tmp_path), legacy=made.run_id)


def test_every_mode_on_a_truncated_page_matches_its_schema(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    insert_bare_runs(repo.conn, 257)
    got = run_modes(TRUNCATED, **node_paths(db_path, tmp_path))
    assert [g["truncated"] for g in got[:2]] == [True, True]
    assert got[2]["primary"]["truncated"] is True and got[2]["dry_run"] is True
    # `drain` walks both pages (D-26); a Run without an Attempt blocks (spec 04 row 2).
    assert [p["scanned"] for p in got[4]["pages"]] == [256, 1] and got[4]["dry_run"] is True
    assert got[5]["unresolved"] == 257 and got[5]["left"] == 257 and got[5]["truncated"]


@linux_only
def test_every_mode_of_launch_matches_its_schema(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    import signal

    for run_id in ("run-w", "run-l"):
        version = make_run(repo, run_id, "queued")
        repo.create_attempt(run_id=run_id, attempt_id=f"at-{run_id}", expected_version=version,
                            at_ms=1_700_000_000_000)  # fmt: skip
    got = run_modes(LAUNCH, **node_paths(db_path, tmp_path))
    os.killpg(got[1]["pid"], signal.SIGKILL)


def test_every_mode_of_db_init_matches_its_schema(tmp_path: Path) -> None:
    from test_foreign_database import legacy_only, users_only

    legacy_only(tmp_path / "ql2.db")
    users_only(tmp_path / "users.db")
    got = run_modes(DB_INIT, **node_paths(tmp_path / "new.db", tmp_path))
    assert len(got) == 4


HELP_ONLY = {"--debug", "--help"}


def help_flags(*command: str) -> set[str]:
    out = qlfsm(*command, "--help")
    assert out.returncode == 0, out.stderr
    import re

    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out.stdout)) - HELP_ONLY


def test_the_scenarios_use_every_flag_of_every_command_with_json_output() -> None:
    used: dict[str, set[str]] = {}
    for modes in SCENARIOS.values():
        for schema, argv, _ in modes:
            used.setdefault(schema, set()).update(w for w in argv if w.startswith("--"))
    commands = {name: name.split("-") if name == "db-init" else [name] for name in COMMANDS}
    for name, command in commands.items():
        assert "--json" in help_flags(*command), name
        missing = help_flags(*command) - used.get(name, set()) - {"--"}
        assert missing == set(), f"qlfsm {' '.join(command)}: {sorted(missing)} never validated"
    # `diagrams` prints no JSON: nothing of it to validate.
    for sub in ("render", "check"):
        assert "--json" not in help_flags("diagrams", sub)
