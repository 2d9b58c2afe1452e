"""The node's ports and adapters: the clock, the receipt codec and its file store, process
identity (`ql3lp1` handles and the `/proc` probe), the launcher and the receipt wrapper.

The public names are exported lazily: importing the package loads none of its modules.
"""

from __future__ import annotations

from reconciler._lazy import lazy_exports

# No `typing` at run time (see reconciler/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from reconciler.node._attempt_lock import lock_evidence as lock_evidence
    from reconciler.node._attempt_lock import needs_lock as needs_lock
    from reconciler.node._clock import Clock as Clock
    from reconciler.node._clock import FakeClock as FakeClock
    from reconciler.node._clock import SystemClock as SystemClock

    # used by the passes and the command line
    from reconciler.node._clock import witness_ms as witness_ms
    from reconciler.node._identity import CaptureFailed as CaptureFailed
    from reconciler.node._identity import Evidence as Evidence
    from reconciler.node._identity import FakeProcessTable as FakeProcessTable
    from reconciler.node._identity import PassProvider as PassProvider
    from reconciler.node._identity import ProcessHandle as ProcessHandle
    from reconciler.node._identity import ProcessProvider as ProcessProvider
    from reconciler.node._identity import ProcProvider as ProcProvider
    from reconciler.node._identity import ProviderUnavailable as ProviderUnavailable
    from reconciler.node._identity import capture_handle as capture_handle
    from reconciler.node._identity import format_handle as format_handle
    from reconciler.node._identity import inspect_handle as inspect_handle
    from reconciler.node._identity import parse_handle as parse_handle
    from reconciler.node._identity import parse_proc_stat as parse_proc_stat
    from reconciler.node._launcher import Launched as Launched
    from reconciler.node._launcher import LaunchFailed as LaunchFailed
    from reconciler.node._launcher import LaunchRefused as LaunchRefused
    from reconciler.node._launcher import launch as launch
    from reconciler.node._launcher import new_token as new_token
    from reconciler.node._receipt import MAX_SAFE_INTEGER as MAX_SAFE_INTEGER
    from reconciler.node._receipt import InvalidReceipt as InvalidReceipt
    from reconciler.node._receipt import Receipt as Receipt
    from reconciler.node._receipt import authenticate_receipt as authenticate_receipt
    from reconciler.node._receipt import decode_receipt as decode_receipt
    from reconciler.node._receipt import encode_receipt as encode_receipt
    from reconciler.node._receipt import token_sha256_hex as token_sha256_hex
    from reconciler.node._receipt import validate_id as validate_id
    from reconciler.node._receipt_store import MAX_QUARANTINE_SLOTS as MAX_QUARANTINE_SLOTS
    from reconciler.node._receipt_store import FileReceiptStore as FileReceiptStore
    from reconciler.node._receipt_store import Found as Found
    from reconciler.node._receipt_store import Invalid as Invalid
    from reconciler.node._receipt_store import MemoryReceiptStore as MemoryReceiptStore
    from reconciler.node._receipt_store import Missing as Missing
    from reconciler.node._receipt_store import QuarantineNotDone as QuarantineNotDone
    from reconciler.node._receipt_store import ReadResult as ReadResult
    from reconciler.node._receipt_store import ReceiptExists as ReceiptExists
    from reconciler.node._receipt_store import ReceiptStore as ReceiptStore
    from reconciler.node._receipt_store import RootMissing as RootMissing
    from reconciler.node._receipt_store import Unusable as Unusable
    from reconciler.node._receipt_store import directory_at as directory_at
    from reconciler.node._receipt_store import parse_quarantine_ref as parse_quarantine_ref
    from reconciler.node._receipt_store import quarantine_ref as quarantine_ref
    from reconciler.node._receipt_store import receipt_path as receipt_path
    from reconciler.node._root_check import ReceiptRootError as ReceiptRootError
    from reconciler.node._root_check import check_root_dir as check_root_dir
    from reconciler.node._root_check import validate_receipt_root as validate_receipt_root

_EXPORTS: dict[str, str] = {
    "Clock": "reconciler.node._clock",
    "FakeClock": "reconciler.node._clock",
    "SystemClock": "reconciler.node._clock",
    "InvalidReceipt": "reconciler.node._receipt",
    "MAX_SAFE_INTEGER": "reconciler.node._receipt",
    "Receipt": "reconciler.node._receipt",
    "authenticate_receipt": "reconciler.node._receipt",
    "decode_receipt": "reconciler.node._receipt",
    "encode_receipt": "reconciler.node._receipt",
    "token_sha256_hex": "reconciler.node._receipt",
    "validate_id": "reconciler.node._receipt",
    "FileReceiptStore": "reconciler.node._receipt_store",
    "Found": "reconciler.node._receipt_store",
    "Invalid": "reconciler.node._receipt_store",
    "MAX_QUARANTINE_SLOTS": "reconciler.node._receipt_store",
    "MemoryReceiptStore": "reconciler.node._receipt_store",
    "Missing": "reconciler.node._receipt_store",
    "QuarantineNotDone": "reconciler.node._receipt_store",
    "ReadResult": "reconciler.node._receipt_store",
    "ReceiptExists": "reconciler.node._receipt_store",
    "ReceiptRootError": "reconciler.node._root_check",
    "ReceiptStore": "reconciler.node._receipt_store",
    "RootMissing": "reconciler.node._receipt_store",
    "Unusable": "reconciler.node._receipt_store",
    "parse_quarantine_ref": "reconciler.node._receipt_store",
    "quarantine_ref": "reconciler.node._receipt_store",
    "receipt_path": "reconciler.node._receipt_store",
    "validate_receipt_root": "reconciler.node._root_check",
    "CaptureFailed": "reconciler.node._identity",
    "Evidence": "reconciler.node._identity",
    "FakeProcessTable": "reconciler.node._identity",
    "PassProvider": "reconciler.node._identity",
    "ProcProvider": "reconciler.node._identity",
    "ProcessHandle": "reconciler.node._identity",
    "ProcessProvider": "reconciler.node._identity",
    "ProviderUnavailable": "reconciler.node._identity",
    "capture_handle": "reconciler.node._identity",
    "format_handle": "reconciler.node._identity",
    "inspect_handle": "reconciler.node._identity",
    "parse_handle": "reconciler.node._identity",
    "parse_proc_stat": "reconciler.node._identity",
    "LaunchFailed": "reconciler.node._launcher",
    "LaunchRefused": "reconciler.node._launcher",
    "Launched": "reconciler.node._launcher",
    "launch": "reconciler.node._launcher",
    "new_token": "reconciler.node._launcher",
    # used by the passes and the command line
    "witness_ms": "reconciler.node._clock",
    "directory_at": "reconciler.node._receipt_store",
    "check_root_dir": "reconciler.node._root_check",
    "lock_evidence": "reconciler.node._attempt_lock",
    "needs_lock": "reconciler.node._attempt_lock",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
