"""qlfsm's reconcilers, launcher and receipts; the application layer (``startup``,
``reconcile``, ``shadow_pass``: ``reconciler._startup``) a Python service embeds. The command
line is ``reconciler.cli`` (``qlfsm``, ``python -m reconciler``)."""

from __future__ import annotations

from reconciler._errors import FatalError, RetryLater, UsageError
from reconciler._profiles import ProfileError
from reconciler._reports import (
    NormalizeReport,
    ReconcileReport,
    ShadowReport,
    StartupReport,
)
from reconciler._startup import reconcile, shadow_pass, startup
from reconciler.node import (
    Evidence,
    FakeProcessTable,
    FileReceiptStore,
    InvalidReceipt,
    Launched,
    LaunchFailed,
    LaunchRefused,
    MemoryReceiptStore,
    ProcessHandle,
    ProcProvider,
    Receipt,
    ReceiptStore,
    authenticate_receipt,
    capture_handle,
    decode_receipt,
    encode_receipt,
    format_handle,
    inspect_handle,
    launch,
    parse_handle,
    validate_receipt_root,
)
from reconciler.primary import CandidateResult
from reconciler.shadow import PassHooks, PassPorts, ShadowResult, run_pass, run_shadow

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
    "parse_handle",
    "reconcile",
    "run_pass",
    "run_shadow",
    "shadow_pass",
    "startup",
    "validate_receipt_root",
]
