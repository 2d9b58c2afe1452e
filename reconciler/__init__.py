"""qlfsm's reconcilers, launcher and command line; the application layer (``startup``,
``reconcile``, ``shadow_pass``: ``reconciler._startup``) a Python service embeds.

Kept light on purpose: importing :mod:`reconciler` loads nothing else, so the wrapper that
publishes receipts and the zero-candidate start-up path stay cheap. The public API is
re-exported lazily from the private modules.
"""

from __future__ import annotations

from reconciler._lazy import lazy_exports

# No `typing` at run time: `qlfsm` installs its signal handlers right after this package is
# imported, and everything imported before that is a window they do not cover.
_EXPORTS: dict[str, str] = {
    "Receipt": "reconciler.node._receipt",
    "InvalidReceipt": "reconciler.node._receipt",
    "encode_receipt": "reconciler.node._receipt",
    "decode_receipt": "reconciler.node._receipt",
    "authenticate_receipt": "reconciler.node._receipt",
    "FileReceiptStore": "reconciler.node._receipt_store",
    "MemoryReceiptStore": "reconciler.node._receipt_store",
    "ReceiptStore": "reconciler.node._receipt_store",
    "validate_receipt_root": "reconciler.node._receipt_store",
    "ProcessHandle": "reconciler.node._identity",
    "ProcProvider": "reconciler.node._identity",
    "FakeProcessTable": "reconciler.node._identity",
    "Evidence": "reconciler.node._identity",
    "inspect_handle": "reconciler.node._identity",
    "capture_handle": "reconciler.node._identity",
    "format_handle": "reconciler.node._identity",
    "parse_handle": "reconciler.node._identity",
    "launch": "reconciler.node._launcher",
    "Launched": "reconciler.node._launcher",
    "LaunchRefused": "reconciler.node._launcher",
    "LaunchFailed": "reconciler.node._launcher",
    "startup": "reconciler._startup",
    "reconcile": "reconciler._startup",
    "shadow_pass": "reconciler._startup",
    "StartupReport": "reconciler._reports",
    "ReconcileReport": "reconciler._reports",
    "ShadowReport": "reconciler._reports",
    "NormalizeReport": "reconciler._reports",
    "CandidateResult": "reconciler._reports",
    "UsageError": "reconciler._errors",
    "FatalError": "reconciler._errors",
    "RetryLater": "reconciler._errors",
    "run_shadow": "reconciler.shadow._entry",
    "ShadowResult": "reconciler.shadow._entry",
    "run_pass": "reconciler.shadow._pass",
    "PassPorts": "reconciler.shadow._ports",
    "PassHooks": "reconciler.shadow._ports",
    "ProfileError": "reconciler._profiles",
    "main": "reconciler.cli._main",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
