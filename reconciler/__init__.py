"""qlfsm's reconcilers, launcher and command line.

Kept light on purpose: importing :mod:`reconciler` loads nothing else, so the wrapper that
publishes receipts and the zero-candidate start-up path stay cheap. The public API is
re-exported lazily from the private modules.
"""

from __future__ import annotations

# No `typing` at run time: `qlfsm` installs its signal handlers right after this package is
# imported, and everything imported before that is a window they do not cover.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_EXPORTS: dict[str, str] = {
    "Receipt": "reconciler._receipt",
    "InvalidReceipt": "reconciler._receipt",
    "encode_receipt": "reconciler._receipt",
    "decode_receipt": "reconciler._receipt",
    "authenticate_receipt": "reconciler._receipt",
    "FileReceiptStore": "reconciler._receipt_store",
    "MemoryReceiptStore": "reconciler._receipt_store",
    "ReceiptStore": "reconciler._receipt_store",
    "validate_receipt_root": "reconciler._receipt_store",
    "ProcessHandle": "reconciler._identity",
    "ProcProvider": "reconciler._identity",
    "FakeProcessTable": "reconciler._identity",
    "Evidence": "reconciler._identity",
    "inspect_handle": "reconciler._identity",
    "capture_handle": "reconciler._identity",
    "format_handle": "reconciler._identity",
    "parse_handle": "reconciler._identity",
    "main": "reconciler._cli",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reconciler' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
