"""The node's ports and adapters: the clock, the receipt codec and its file store, process
identity (`ql3lp1` handles and the `/proc` probe), and the receipt wrapper (the launcher is
``reconciler.launcher``).
"""

from __future__ import annotations

from reconciler._atomic import write_durably
from reconciler._clock import Clock, FakeClock, SystemClock, witness_ms
from reconciler._root_check import ReceiptRootError, check_root_dir, validate_receipt_root
from reconciler.node._attempt_lock import lock_evidence, needs_lock
from reconciler.node._identity import (
    CaptureFailed,
    Evidence,
    FakeProcessTable,
    PassProvider,
    ProcessHandle,
    ProcessProvider,
    ProcProvider,
    ProviderUnavailable,
    capture_handle,
    format_handle,
    inspect_handle,
    parse_handle,
    parse_proc_stat,
)
from reconciler.node._receipt import (
    MAX_SAFE_INTEGER,
    InvalidReceipt,
    Receipt,
    authenticate_receipt,
    decode_receipt,
    encode_receipt,
    receipt_path,
    token_sha256_hex,
    validate_id,
)
from reconciler.node._receipt_store import (
    MAX_QUARANTINE_SLOTS,
    FileReceiptStore,
    Found,
    Invalid,
    MemoryReceiptStore,
    Missing,
    QuarantineNotDone,
    ReadResult,
    ReceiptExists,
    ReceiptStore,
    RootMissing,
    Unusable,
    directory_at,
    parse_quarantine_ref,
    quarantine_ref,
)

__all__ = [
    "MAX_QUARANTINE_SLOTS",
    "MAX_SAFE_INTEGER",
    "CaptureFailed",
    "Clock",
    "Evidence",
    "FakeClock",
    "FakeProcessTable",
    "FileReceiptStore",
    "Found",
    "Invalid",
    "InvalidReceipt",
    "MemoryReceiptStore",
    "Missing",
    "PassProvider",
    "ProcProvider",
    "ProcessHandle",
    "ProcessProvider",
    "ProviderUnavailable",
    "QuarantineNotDone",
    "ReadResult",
    "Receipt",
    "ReceiptExists",
    "ReceiptRootError",
    "ReceiptStore",
    "RootMissing",
    "SystemClock",
    "Unusable",
    "authenticate_receipt",
    "capture_handle",
    "check_root_dir",
    "decode_receipt",
    "directory_at",
    "encode_receipt",
    "format_handle",
    "inspect_handle",
    "lock_evidence",
    "needs_lock",
    "parse_handle",
    "parse_proc_stat",
    "parse_quarantine_ref",
    "quarantine_ref",
    "receipt_path",
    "token_sha256_hex",
    "validate_id",
    "validate_receipt_root",
    "witness_ms",
    "write_durably",
]
