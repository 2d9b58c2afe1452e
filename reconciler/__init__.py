"""qlfsm's reconcilers, launcher and command line; the application layer (``startup``,
``reconcile``, ``shadow_pass``: ``reconciler._startup``) a Python service embeds.
"""

from __future__ import annotations

from reconciler._errors import FatalError, RetryLater, UsageError
from reconciler._profiles import ProfileError
from reconciler._reports import (
    CandidateResult,
    NormalizeReport,
    ReconcileReport,
    ShadowReport,
    StartupReport,
)
from reconciler._startup import reconcile, shadow_pass, startup
from reconciler.cli._main import main
from reconciler.node._identity import (
    Evidence,
    FakeProcessTable,
    ProcessHandle,
    ProcProvider,
    capture_handle,
    format_handle,
    inspect_handle,
    parse_handle,
)
from reconciler.node._launcher import Launched, LaunchFailed, LaunchRefused, launch
from reconciler.node._receipt import (
    InvalidReceipt,
    Receipt,
    authenticate_receipt,
    decode_receipt,
    encode_receipt,
)
from reconciler.node._receipt_store import (
    FileReceiptStore,
    MemoryReceiptStore,
    ReceiptStore,
    validate_receipt_root,
)
from reconciler.shadow._entry import ShadowResult, run_shadow
from reconciler.shadow._pass import run_pass
from reconciler.shadow._ports import PassHooks, PassPorts

__all__ = [
    "CandidateResult",
    "Evidence",
    "FakeProcessTable",
    "FatalError",
    "FileReceiptStore",
    "InvalidReceipt",
    "LaunchFailed",
    "LaunchRefused",
    "Launched",
    "MemoryReceiptStore",
    "NormalizeReport",
    "PassHooks",
    "PassPorts",
    "ProcProvider",
    "ProcessHandle",
    "ProfileError",
    "Receipt",
    "ReceiptStore",
    "ReconcileReport",
    "RetryLater",
    "ShadowReport",
    "ShadowResult",
    "StartupReport",
    "UsageError",
    "authenticate_receipt",
    "capture_handle",
    "decode_receipt",
    "encode_receipt",
    "format_handle",
    "inspect_handle",
    "launch",
    "main",
    "parse_handle",
    "reconcile",
    "run_pass",
    "run_shadow",
    "shadow_pass",
    "startup",
    "validate_receipt_root",
]
