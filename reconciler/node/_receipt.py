"""Completion receipt v1: the codec, its authentication against the database, and where a
receipt lives (spec 03 "Path": names computed only from a validated Attempt ID).

The format is the one the real QingLong 3.0 launcher writes (spec 03 "Receipt v1"). The two sides
differ on purpose (spec 03; docs/decisions.md D-19): :func:`encode_receipt` writes only the
canonical compact bytes, and :func:`decode_receipt` accepts exactly what QingLong's own reader
(`parseCompletionReceipt`) accepts: any ECMAScript JSON text of a flat object with the eight keys,
in any order and with any JSON whitespace, numbers read as JavaScript reads them (`1.0`, `1e0` are
the safe integer 1), and nothing it refuses (duplicate keys, unknown or missing keys, a BOM, NaN,
more than 4096 bytes, ...).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

SCHEMA_VERSION: Final = 1
MAX_RECEIPT_BYTES: Final = 4096
# The real reader uses JavaScript's Number.isSafeInteger: larger values lose precision there,
# so a receipt carrying one is not a receipt the real implementation would accept.
MAX_SAFE_INTEGER: Final = 2**53 - 1

RECEIPT_KEYS: Final = (
    "schemaVersion",
    "runId",
    "attemptId",
    "callbackSequence",
    "token",
    "startedAtMs",
    "finishedAtMs",
    "exitCode",
)
TERMINAL_STATUSES: Final = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})

# ASCII classes only, and always used with fullmatch: `$` would also match before a final "\n".
# The id rule is checked for every candidate's receipt path; the token and hash rules only for a
# receipt that exists, so those two are compiled on first use (``re``'s own cache), not here.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,35}")
_TOKEN = r"[A-Za-z0-9_-]{32,128}"
_HEX64 = r"[a-f0-9]{64}"
_BOM: Final = b"\xef\xbb\xbf"


class InvalidReceipt(ValueError):
    """The bytes or the fields are not a valid receipt v1; `reason` is a short machine code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# repr=False: the class writes its own (the token redacted), so none is generated to be discarded.
@dataclass(frozen=True, slots=True, repr=False)
class Receipt:
    """A receipt v1's eight fields (spec 03 "Receipt v1"), under their Python names."""

    schema_version: int
    run_id: str
    attempt_id: str
    callback_sequence: int
    token: str
    started_at_ms: int
    finished_at_ms: int
    exit_code: int

    def __repr__(self) -> str:
        # The token is a capability: it must never reach a log through a repr (spec 03).
        shown = {f.name: repr(getattr(self, f.name)) for f in fields(self)}
        shown["token"] = "<redacted>"
        return f"Receipt({', '.join(f'{name}={value}' for name, value in shown.items())})"


# Each JSON key (spec 03 order) to its Receipt field: the dataclass declares them in that order.
_FIELD_NAMES: Final = dict(zip(RECEIPT_KEYS, (f.name for f in fields(Receipt)), strict=True))


def validate_id(value: object) -> bool:
    """True when `value` is a portable execution ID (runId / attemptId rule of spec 03)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def _require_id(attempt_id: str) -> str:
    if not validate_id(attempt_id):
        raise ValueError("attempt id is not a portable execution ID")
    return attempt_id


def receipt_name(attempt_id: str) -> str:
    return f"{_require_id(attempt_id)}.json"


def shard_path(root: str, attempt_id: str) -> str:
    return os.path.join(root, _require_id(attempt_id)[:2])


def receipt_path(root: str, attempt_id: str) -> str:
    """`<root>/<attemptId[0:2]>/<attemptId>.json` (spec 03 "Path")."""
    return os.path.join(shard_path(root, attempt_id), receipt_name(attempt_id))


def temp_name(attempt_id: str, nonce_hex: str | None = None) -> str:
    if nonce_hex is None:
        import secrets  # here: only a publication needs a nonce, never the start-up pass

        nonce_hex = secrets.token_hex(16)
    if len(nonce_hex) != 32 or any(c not in "0123456789abcdef" for c in nonce_hex):
        raise ValueError("temp nonce must be 32 lower-case hex digits")
    return f".{_require_id(attempt_id)}.{nonce_hex}.tmp"


def temp_path(root: str, attempt_id: str, nonce_hex: str | None = None) -> str:
    """`<shard>/.<attemptId>.<32 hex>.tmp`, the private file a publisher links from."""
    return os.path.join(shard_path(root, attempt_id), temp_name(attempt_id, nonce_hex))


def without_launch_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the QL3_RECEIPT_* (callback capability, receipt paths) and QL3_LAUNCH_*
    variables: the launcher's base for the wrapper's environment, and the command's (spec 03)."""
    return {k: v for k, v in env.items() if not k.startswith(("QL3_RECEIPT_", "QL3_LAUNCH_"))}


def _int_in(value: object, low: int, high: int) -> bool:
    # bool is a subclass of int in Python; JSON `true` is never an integer here.
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_fields(fields: Mapping[str, Any]) -> None:
    """InvalidReceipt naming the first schema rule `fields` (keyed by JSON names) breaks."""
    if not _int_in(fields["schemaVersion"], SCHEMA_VERSION, SCHEMA_VERSION):
        raise InvalidReceipt("bad_schema_version")
    if not validate_id(fields["runId"]):
        raise InvalidReceipt("bad_run_id")
    if not validate_id(fields["attemptId"]):
        raise InvalidReceipt("bad_attempt_id")
    if not _int_in(fields["callbackSequence"], 1, MAX_SAFE_INTEGER):
        raise InvalidReceipt("bad_callback_sequence")
    token = fields["token"]
    if not isinstance(token, str) or re.fullmatch(_TOKEN, token) is None:
        raise InvalidReceipt("bad_token")
    started, finished = fields["startedAtMs"], fields["finishedAtMs"]
    if not _int_in(started, 0, MAX_SAFE_INTEGER):
        raise InvalidReceipt("bad_started_at_ms")
    if not _int_in(finished, 0, MAX_SAFE_INTEGER):
        raise InvalidReceipt("bad_finished_at_ms")
    if finished < started:
        raise InvalidReceipt("finished_before_started")
    if not _int_in(fields["exitCode"], 0, 255):
        raise InvalidReceipt("bad_exit_code")


def encode_receipt(receipt: Receipt) -> bytes:
    """The canonical bytes of `receipt`; raises InvalidReceipt if a field breaks spec 03."""
    if not isinstance(receipt, Receipt):
        raise InvalidReceipt("not_a_receipt")
    values = {key: getattr(receipt, name) for key, name in _FIELD_NAMES.items()}
    _check_fields(values)
    # The writer's form (spec 03; D-19): compact, spec 03 key order; every string is ASCII by
    # the field rules, so this equals JavaScript's JSON.stringify output byte for byte.
    data = json.dumps(values, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    if len(data) > MAX_RECEIPT_BYTES:  # unreachable with bounded fields; kept as the spec's rule
        raise InvalidReceipt("too_large")
    return data


class _DuplicateKey(Exception):
    pass


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of duplicate keys silently (spec 03): a key seen twice makes
    # the object smaller than its list of pairs.
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _DuplicateKey
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN / Infinity are not JSON


def _as_javascript_reads_it(value: Any) -> Any:
    """An integral, finite JSON fraction/exponent number as the int JavaScript sees, else as is.

    Python's float() of a JSON number literal is correctly rounded, as JavaScript's Number() is,
    so both see the same double: `1.0000000000000001` is 1 in both, `1.5` stays a fraction and
    `1e400` an infinity (both refused by the field rules). `-0.0` becomes 0, as `-0 < 0` is false
    in JavaScript. Integer literals are already exact ints: beyond 2**53 - 1 they fail the range
    rule here as their rounded double fails Number.isSafeInteger there.
    """
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def decode_receipt(data: bytes) -> Receipt:
    """Parse receipt bytes; what QingLong's `parseCompletionReceipt` refuses raises InvalidReceipt.

    The rules (spec 03; D-19): 1..4096 bytes of strict UTF-8 (no BOM); one JSON text (only space,
    tab, CR, LF as whitespace; no NaN/Infinity; nothing after the object); a flat object without
    duplicate keys (compared after unescaping, as `"\\u0072unId"` is `runId`); exactly the
    eight keys in any order; the rules of :func:`_check_fields` on numbers as JavaScript reads them.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidReceipt("not_bytes")
    raw = bytes(data)
    if not raw:
        raise InvalidReceipt("empty")
    if len(raw) > MAX_RECEIPT_BYTES:
        raise InvalidReceipt("too_large")
    if raw.startswith(_BOM):
        # json.loads on bytes would strip it silently; JSON.parse refuses it (spec 03).
        raise InvalidReceipt("bom")
    try:
        text = raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        # QingLong: the bytes must survive a UTF-8 round trip; surrogates encoded in UTF-8 and
        # overlong forms do not, in either language.
        raise InvalidReceipt("invalid_utf8") from None
    try:
        # json.loads on a str: no encoding sniffing, the same whitespace set as JSON.parse.
        parsed = json.loads(
            text,
            object_pairs_hook=_pairs_without_duplicates,
            parse_constant=_reject_constant,
        )
    except _DuplicateKey:
        raise InvalidReceipt("duplicate_key") from None
    except (ValueError, RecursionError):
        raise InvalidReceipt("invalid_json") from None
    if not isinstance(parsed, dict):
        raise InvalidReceipt("not_an_object")
    if any(isinstance(value, dict | list) for value in parsed.values()):
        raise InvalidReceipt("nested_value")
    if any(key not in RECEIPT_KEYS for key in parsed):
        raise InvalidReceipt("unknown_key")
    if len(parsed) != len(RECEIPT_KEYS):
        raise InvalidReceipt("missing_key")
    # JavaScript reads every JSON number as a double, so `1.0`, `1e0` and `0.1e1` are the number
    # 1 there and pass Number.isSafeInteger / Number.isInteger. A number where a string belongs
    # (runId, attemptId, token) fails its rule whether or not it was converted.
    parsed = {key: _as_javascript_reads_it(value) for key, value in parsed.items()}
    _check_fields(parsed)
    return Receipt(**{name: parsed[key] for key, name in _FIELD_NAMES.items()})


def token_sha256_hex(token: str) -> str:
    """SHA-256 of the token's UTF-8 bytes, 64 lower-case hex: what the database stores."""
    import hashlib  # here, not at import: the start-up pass imports this module (OpenSSL)

    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def authenticate_receipt(
    receipt: Receipt,
    *,
    run_id: str,
    execution_owner: str,
    attempt_id: str,
    attempt_status: str,
    attempt_callback_sequence: int,
    attempt_created_at_ms: int,
    attempt_started_at_ms: int | None,
    callback_token_hash: str | None,
    run_status: str | None = None,
) -> str | None:
    """None when `receipt` is trusted for this Run/Attempt, else the first failed rule.

    Rules of spec 03 "Authentication". As in the real implementation, the Attempt counts as
    terminal when either the Attempt or (if given) the Run is in a terminal status; then the
    receipt's sequence may equal the Attempt's or be one more.
    """
    if execution_owner != "runtime":
        return "not_runtime_owned"
    if receipt.run_id != run_id:
        return "run_id_mismatch"
    if receipt.attempt_id != attempt_id:
        return "attempt_id_mismatch"
    terminal = attempt_status in TERMINAL_STATUSES or run_status in TERMINAL_STATUSES
    sequence = attempt_callback_sequence
    allowed = {sequence, sequence + 1} if terminal else {sequence + 1}
    if receipt.callback_sequence not in allowed:
        return "callback_sequence_mismatch"
    if receipt.started_at_ms < attempt_created_at_ms:
        return "started_before_attempt_created"
    if attempt_started_at_ms is not None and receipt.started_at_ms < attempt_started_at_ms:
        return "started_before_attempt_started"
    if (
        not isinstance(callback_token_hash, str)
        or re.fullmatch(_HEX64, callback_token_hash) is None
    ):
        return "token_hash_invalid"
    import hmac

    # Both sides are 64 lower-case hex digits here: a constant-time compare of the strings.
    if not hmac.compare_digest(token_sha256_hex(receipt.token), callback_token_hash):
        return "token_mismatch"
    return None
