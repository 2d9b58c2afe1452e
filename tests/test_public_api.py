"""The public Python API: `reconciler` and each of its subpackages import their public names and
list them in ``__all__``."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = (
    "reconciler",
    "reconciler.node",
    "reconciler.primary",
    "reconciler.shadow",
    "reconciler.ops",
    "reconciler.diagrams",
    "reconciler.cli",
)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_of_a_package_is_imported_by_it_and_listed_once(package: str) -> None:
    pkg = importlib.import_module(package)
    assert len(pkg.__all__) == len(set(pkg.__all__)) > 0
    assert [n for n in pkg.__all__ if n not in vars(pkg)] == []
    # Plain attributes, nothing resolved on first use (issue 28).
    assert "__getattr__" not in vars(pkg)


def test_an_unknown_name_is_an_attribute_error_naming_the_package() -> None:
    import reconciler.shadow

    with pytest.raises(AttributeError, match=r"'reconciler\.shadow' has no attribute 'nope'"):
        reconciler.shadow.nope  # noqa: B018


def test_the_root_exports_the_application_layer_and_each_part_its_own_names() -> None:
    import reconciler
    import reconciler.launcher
    import reconciler.node
    import reconciler.primary
    import reconciler.shadow
    from reconciler import _shadow_entry, _startup
    from reconciler.launcher import _launcher
    from reconciler.node import _identity, _receipt
    from reconciler.primary import _pass as primary_pass
    from reconciler.shadow import _pass

    assert reconciler.primary.reconcile_connection is primary_pass.reconcile_connection
    assert reconciler.reconcile is _startup.reconcile
    assert reconciler.startup is _startup.startup and reconciler.shadow_pass is _startup.shadow_pass
    assert reconciler.run_shadow is _shadow_entry.run_shadow
    assert reconciler.shadow.run_pass is _pass.run_pass
    assert reconciler.launcher.launch is _launcher.launch
    assert not hasattr(reconciler.node, "launch")  # the passes never load the launcher
    assert reconciler.node.encode_receipt is _receipt.encode_receipt
    assert reconciler.node.parse_handle is _identity.parse_handle
    assert issubclass(reconciler.ProfileError, ValueError)


def test_the_readme_python_api_example_runs_and_prints_what_its_comments_say() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API") :]
    start = section.index("```python\n") + len("```python\n")
    example = section[start : section.index("\n```", start)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "QL_DEPLOY"))}
    out = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, check=True, env=env
    )
    assert out.stderr == ""
    first, second = out.stdout.splitlines()
    assert first == "True 0 disabled"
    assert json.loads(second) == {
        "safe": True, "scanned": 0, "recovered": 0, "remaining": 0, "unresolved": 0,
        "failed": 0, "truncated": False, "candidates": [],
    }  # fmt: skip


def test_fsm_imports_every_public_name_plainly_and_lists_it() -> None:
    # In a fresh interpreter: a test elsewhere reloads a table module.
    code = (
        "import fsm\n"
        "missing = [n for n in fsm.__all__ if n not in vars(fsm)]\n"
        "print(len(fsm.__all__), missing, hasattr(fsm, '__getattr__'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    import fsm

    assert out.strip() == f"{len(fsm.__all__)} [] False"


def test_fsm_qinglong_lists_qinglongs_names_and_the_toolkit_lists_none_of_them() -> None:
    import fsm
    import fsm.qinglong

    names = fsm.qinglong.__all__
    assert len(names) == len(set(names)) > 0
    assert [n for n in names if n not in vars(fsm.qinglong)] == []
    assert set(names) & set(fsm.__all__) == set()
    assert {
        "RUN_SPEC", "ATTEMPT_SPEC", "GUARDS", "PRIMARY_GUARDS", "QINGLONG_RULES", "run_machine",
        "PrimaryCore", "LEGACY_TABLE", "ALL_SPECS",
    } <= set(names)  # fmt: skip
    assert {"Lifecycle", "MachineSpec", "Edge", "DecisionEngine", "listen"} <= set(fsm.__all__)
