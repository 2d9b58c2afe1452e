"""pytest plugin of the mutation runs (``[tool.mutmut] pytest_add_cli_args``): every test starts
with the decision memos empty.

mutmut forks each mutant's test run from the process that first ran the whole selection
without a mutant. A memo filled there (the cached decision engines, which own their memos of
choices, the cached machines) would answer the mutant's tests with the
unmutated code's results, and the mutant would survive without ever running: forgetting them
before each test makes every decision be computed again under the mutant. Not used by the
ordinary suite, where a memo is what it is meant to be.
"""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

PACKAGES = ("fsm", "reconciler", "storage")

# Memos that are plain module-level dicts (functools caches are found without a list).
# Named here so a renamed one stops the run instead of silently surviving it.
DICT_MEMOS: dict[str, tuple[str, ...]] = {}


def _ours(name: str, module: ModuleType | None) -> bool:
    return module is not None and name.split(".")[0] in PACKAGES


def forget() -> int:
    """Empty every memo of the project's loaded modules; the number emptied."""
    emptied = 0
    for name, module in list(sys.modules.items()):
        if not _ours(name, module):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and hasattr(value, "cache_info"):
                clear()
                emptied += 1
        for attr in DICT_MEMOS.get(name, ()):
            memo = getattr(module, attr, None)
            if not isinstance(memo, dict):
                raise pytest.UsageError(
                    f"{name}.{attr} is not a dict memo any more: update DICT_MEMOS in "
                    "tests/mutation/fresh_memos.py"
                )
            memo.clear()
            emptied += 1
    return emptied


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    forget()
