"""Spec 03's receipt v1 at every border: each integer field at its bounds and one past them,
on both sides of the codec; what is not a receipt; and authentication at its equalities."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from reconciler.node import (
    InvalidReceipt,
    Receipt,
    authenticate_receipt,
    decode_receipt,
    encode_receipt,
    token_sha256_hex,
)
from reconciler.node._receipt import MAX_RECEIPT_BYTES, RECEIPT_KEYS

TOKEN = "tok_" + "A1-_" * 10
VALID = Receipt(1, "run-1", "att-1", 1, TOKEN, 3, 8, 0)
SAFE = 2**53 - 1  # JavaScript's Number.MAX_SAFE_INTEGER: the real reader's limit


def canonical(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "schemaVersion": 1,
        "runId": "run-1",
        "attemptId": "att-1",
        "callbackSequence": 1,
        "token": TOKEN,
        "startedAtMs": 3,
        "finishedAtMs": 8,
        "exitCode": 0,
    }
    base.update(fields)
    return json.dumps({k: base[k] for k in RECEIPT_KEYS}, separators=(",", ":")).encode()


def decode_reason(data: bytes) -> str | None:
    try:
        decode_receipt(data)
    except InvalidReceipt as error:
        return error.reason
    return None


def encode_reason(receipt: object) -> str | None:
    try:
        encode_receipt(receipt)  # type: ignore[arg-type]
    except InvalidReceipt as error:
        return error.reason
    return None


# (JSON field, Receipt field, value, reason or None when accepted)
BORDERS: list[tuple[str, str, Any, str | None]] = [
    ("exitCode", "exit_code", 0, None),
    ("exitCode", "exit_code", 1, None),
    ("exitCode", "exit_code", 255, None),
    ("exitCode", "exit_code", 256, "bad_exit_code"),
    ("exitCode", "exit_code", -1, "bad_exit_code"),
    ("exitCode", "exit_code", True, "bad_exit_code"),
    ("exitCode", "exit_code", "0", "bad_exit_code"),
    ("callbackSequence", "callback_sequence", 1, None),
    ("callbackSequence", "callback_sequence", SAFE, None),
    ("callbackSequence", "callback_sequence", SAFE + 1, "bad_callback_sequence"),
    ("callbackSequence", "callback_sequence", 2**53, "bad_callback_sequence"),
    ("callbackSequence", "callback_sequence", 0, "bad_callback_sequence"),
    ("callbackSequence", "callback_sequence", -1, "bad_callback_sequence"),
    ("callbackSequence", "callback_sequence", "1", "bad_callback_sequence"),
    ("startedAtMs", "started_at_ms", 0, None),
    ("startedAtMs", "started_at_ms", 8, None),  # == finishedAtMs
    ("startedAtMs", "started_at_ms", 9, "finished_before_started"),
    ("startedAtMs", "started_at_ms", -1, "bad_started_at_ms"),
    ("startedAtMs", "started_at_ms", 2**53, "bad_started_at_ms"),
    ("startedAtMs", "started_at_ms", True, "bad_started_at_ms"),
    ("finishedAtMs", "finished_at_ms", SAFE, None),
    ("finishedAtMs", "finished_at_ms", 3, None),  # == startedAtMs
    ("finishedAtMs", "finished_at_ms", 2, "finished_before_started"),
    ("finishedAtMs", "finished_at_ms", 2**53, "bad_finished_at_ms"),
    ("finishedAtMs", "finished_at_ms", -1, "bad_finished_at_ms"),
    ("finishedAtMs", "finished_at_ms", False, "bad_finished_at_ms"),
    ("finishedAtMs", "finished_at_ms", "8", "bad_finished_at_ms"),
    ("schemaVersion", "schema_version", 1, None),
    ("schemaVersion", "schema_version", 0, "bad_schema_version"),
    ("schemaVersion", "schema_version", 2, "bad_schema_version"),
    ("schemaVersion", "schema_version", "1", "bad_schema_version"),
    ("runId", "run_id", "a" * 36, None),
    ("runId", "run_id", "a" * 37, "bad_run_id"),
    ("runId", "run_id", 7, "bad_run_id"),
    ("attemptId", "attempt_id", "0:a.b_c-d", None),
    ("attemptId", "attempt_id", "", "bad_attempt_id"),
    ("attemptId", "attempt_id", None, "bad_attempt_id"),
    ("token", "token", "A" * 32, None),
    ("token", "token", "A" * 128, None),
    ("token", "token", "A" * 31, "bad_token"),
    ("token", "token", "A" * 129, "bad_token"),
    ("token", "token", "A" * 31 + ".", "bad_token"),
    ("token", "token", 12345678901234567890123456789012, "bad_token"),
]


@pytest.mark.parametrize(
    ("key", "attr", "value", "reason"), BORDERS, ids=[f"{k}={v!r}" for k, _, v, _ in BORDERS]
)
def test_each_field_is_accepted_up_to_its_bound_and_rejected_past_it_on_both_sides(
    key: str, attr: str, value: Any, reason: str | None
) -> None:
    data = canonical(**{key: value})
    assert decode_reason(data) == reason
    receipt = dataclasses.replace(VALID, **{attr: value})
    assert encode_reason(receipt) == reason
    if reason is None:
        decoded = decode_receipt(data)
        assert getattr(decoded, attr) == value
        assert encode_receipt(decoded) == data


def test_the_largest_safe_integer_is_a_valid_start_and_finish_time() -> None:
    data = canonical(startedAtMs=SAFE, finishedAtMs=SAFE)
    assert decode_receipt(data).started_at_ms == SAFE
    assert encode_receipt(decode_receipt(data)) == data
    assert decode_reason(canonical(startedAtMs=SAFE + 1, finishedAtMs=SAFE + 1)) == (
        "bad_started_at_ms"
    )


def test_exit_code_255_round_trips_and_becomes_the_attempt_s_exit_code() -> None:
    data = canonical(exitCode=255)
    assert data.endswith(b',"exitCode":255}')
    receipt = decode_receipt(data)
    assert receipt.exit_code == 255
    assert encode_receipt(receipt) == data


def test_every_field_of_a_decoded_receipt_comes_from_its_own_key() -> None:
    data = canonical(
        runId="r-9",
        attemptId="a-7",
        callbackSequence=5,
        startedAtMs=11,
        finishedAtMs=13,
        exitCode=17,
    )
    assert decode_receipt(data) == Receipt(1, "r-9", "a-7", 5, TOKEN, 11, 13, 17)
    assert encode_receipt(Receipt(1, "r-9", "a-7", 5, TOKEN, 11, 13, 17)) == data


@pytest.mark.parametrize(
    "thing",
    [
        None,
        b"{}",
        canonical(),
        {"schemaVersion": 1},
        dataclasses.asdict(VALID),
        ("run-1", "att-1"),
    ],
    ids=["none", "bytes", "canonical-bytes", "dict", "receipt-as-dict", "tuple"],
)
def test_encoding_something_that_is_not_a_receipt_is_refused(thing: object) -> None:
    with pytest.raises(InvalidReceipt) as raised:
        encode_receipt(thing)  # type: ignore[arg-type]
    assert raised.value.reason == "not_a_receipt"
    assert str(raised.value) == "not_a_receipt"


def test_a_receipt_like_object_of_another_class_is_not_a_receipt() -> None:
    @dataclasses.dataclass(frozen=True)
    class Lookalike:
        schema_version: int = 1
        run_id: str = "run-1"
        attempt_id: str = "att-1"
        callback_sequence: int = 1
        token: str = TOKEN
        started_at_ms: int = 3
        finished_at_ms: int = 8
        exit_code: int = 0

    assert encode_reason(Lookalike()) == "not_a_receipt"


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_decoding_accepts_any_bytes_like_object(wrap: Any) -> None:
    assert decode_receipt(wrap(canonical())) == VALID


@pytest.mark.parametrize("thing", [canonical().decode(), None, 7, [canonical()]])
def test_decoding_something_that_is_not_bytes_is_refused(thing: object) -> None:
    with pytest.raises(InvalidReceipt) as raised:
        decode_receipt(thing)  # type: ignore[arg-type]
    assert raised.value.reason == "not_bytes"


def test_the_first_broken_rule_in_spec_order_is_the_one_reported() -> None:
    # Every field broken at once: schemaVersion comes first, then each in key order.
    broken = {
        "schemaVersion": 2,
        "runId": "-",
        "attemptId": "-",
        "callbackSequence": 0,
        "token": "x",
        "startedAtMs": -1,
        "finishedAtMs": -1,
        "exitCode": 256,
    }
    reasons = [
        "bad_schema_version",
        "bad_run_id",
        "bad_attempt_id",
        "bad_callback_sequence",
        "bad_token",
        "bad_started_at_ms",
        "bad_finished_at_ms",
        "bad_exit_code",
    ]
    fields = dict(broken)
    for key, reason in zip(RECEIPT_KEYS, reasons, strict=True):
        assert decode_reason(canonical(**fields)) == reason
        fields.pop(key)  # fixed: back to the valid default
    assert decode_reason(canonical(**fields)) is None


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"null", "not_an_object"),
        (b'"receipt"', "not_an_object"),
        (b"7", "not_an_object"),
        (canonical()[:-1] + b',"x":[]}', "nested_value"),
        (canonical().replace(b'"exitCode":0', b'"exitCode":{}'), "nested_value"),
        (canonical().replace(b',"exitCode":0', b""), "missing_key"),
        (canonical().replace(b'"exitCode"', b'"exitcode"'), "unknown_key"),
        (canonical().replace(b":0}", b":Infinity}"), "invalid_json"),
        (canonical().replace(b":0}", b":-Infinity}"), "invalid_json"),
        (b"[" * 100_000, "too_large"),
        (b"[" * 4000, "invalid_json"),
        (b"\xff" + canonical()[1:], "invalid_utf8"),
        (b"\xef\xbb\xbf{}", "bom"),
    ],
)
def test_shapes_that_are_not_a_flat_receipt_object_are_rejected(data: bytes, reason: str) -> None:
    assert decode_reason(data) == reason


def test_the_size_limit_is_4096_bytes() -> None:
    assert MAX_RECEIPT_BYTES == 4096
    padded = b" " * (4096 - len(canonical())) + canonical()
    assert len(padded) == 4096
    assert decode_reason(padded) is None  # within the limit: JSON whitespace, read (D-19)
    assert decode_reason(b" " + padded) == "too_large"


def test_a_duplicate_key_is_found_whichever_value_it_carries() -> None:
    data = canonical().replace(b'"runId":"run-1"', b'"runId":"run-1","runId":"run-1"')
    assert decode_reason(data) == "duplicate_key"


def test_the_invalid_receipt_error_carries_its_reason() -> None:
    error = InvalidReceipt("bad_token")
    assert (error.reason, str(error), error.args) == ("bad_token", "bad_token", ("bad_token",))
    assert isinstance(error, ValueError)


# --- authentication ---------------------------------------------------------------------------


def authenticate(receipt: Receipt = VALID, /, **overrides: Any) -> str | None:
    facts: dict[str, Any] = {
        "run_id": "run-1",
        "execution_owner": "runtime",
        "attempt_id": "att-1",
        "attempt_status": "running",
        "attempt_callback_sequence": 0,
        "attempt_created_at_ms": 3,
        "attempt_started_at_ms": 3,
        "callback_token_hash": token_sha256_hex(TOKEN),
    }
    facts.update(overrides)
    return authenticate_receipt(receipt, **facts)


def test_a_receipt_started_exactly_when_the_attempt_was_created_and_started_is_trusted() -> None:
    assert authenticate() is None  # startedAtMs 3 == created 3 == started 3
    assert authenticate(attempt_created_at_ms=4) == "started_before_attempt_created"
    assert authenticate(attempt_started_at_ms=4) == "started_before_attempt_started"
    assert authenticate(attempt_created_at_ms=0, attempt_started_at_ms=None) is None


@pytest.mark.parametrize(
    ("attempt_status", "run_status", "stored", "sequence", "trusted"),
    [
        ("running", None, 0, 1, True),
        ("running", None, 1, 1, False),  # a replay of the last callback on a live Attempt
        ("running", None, 0, 2, False),
        ("starting", "dispatching", 4, 5, True),
        ("claimed", "running", 4, 4, False),
        *(("running", t, 1, 1, True) for t in ("succeeded", "failed", "cancelled", "timed_out")),
        *((t, None, 1, 1, True) for t in ("succeeded", "failed", "cancelled", "timed_out")),
        ("lost", None, 1, 1, True),
        ("lost", None, 1, 2, True),
        ("lost", None, 1, 3, False),
        ("lost", None, 2, 1, False),
        ("retry_wait", None, 1, 1, False),  # not an Attempt status: not terminal
    ],
)
def test_the_callback_sequence_is_the_next_one_or_for_a_terminal_attempt_the_same_one(
    attempt_status: str, run_status: str | None, stored: int, sequence: int, trusted: bool
) -> None:
    receipt = dataclasses.replace(VALID, callback_sequence=sequence)
    got = authenticate(
        receipt,
        attempt_status=attempt_status,
        run_status=run_status,
        attempt_callback_sequence=stored,
    )
    assert got == (None if trusted else "callback_sequence_mismatch")


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        (token_sha256_hex(TOKEN), None),
        (token_sha256_hex(TOKEN)[:-1], "token_hash_invalid"),
        (token_sha256_hex(TOKEN) + "0", "token_hash_invalid"),
        (token_sha256_hex(TOKEN).upper(), "token_hash_invalid"),
        ("g" * 64, "token_hash_invalid"),
        (b"\x00" * 32, "token_hash_invalid"),
        ("", "token_hash_invalid"),
        ("0" * 64, "token_mismatch"),
        (token_sha256_hex(TOKEN[:-1] + "B"), "token_mismatch"),
    ],
)
def test_the_token_is_compared_by_its_sha256_in_lower_case_hex(
    stored: object, reason: str | None
) -> None:
    assert authenticate(callback_token_hash=stored) == reason


def test_the_authentication_rules_are_checked_in_spec_order() -> None:
    everything_wrong: dict[str, Any] = {
        "execution_owner": "legacy",
        "run_id": "other",
        "attempt_id": "other",
        "attempt_callback_sequence": 7,
        "attempt_created_at_ms": 99,
        "attempt_started_at_ms": 99,
        "callback_token_hash": None,
    }
    order = [
        ("execution_owner", "not_runtime_owned"),
        ("run_id", "run_id_mismatch"),
        ("attempt_id", "attempt_id_mismatch"),
        ("attempt_callback_sequence", "callback_sequence_mismatch"),
        ("attempt_created_at_ms", "started_before_attempt_created"),
        ("attempt_started_at_ms", "started_before_attempt_started"),
        ("callback_token_hash", "token_hash_invalid"),
    ]
    wrong = dict(everything_wrong)
    for key, reason in order:
        assert authenticate(**wrong) == reason
        wrong.pop(key)
    assert authenticate(**wrong) is None


def test_the_token_hash_is_the_sha256_of_the_token_s_utf8_bytes() -> None:
    assert token_sha256_hex("") == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    assert token_sha256_hex("\u00e9") == hashlib.sha256(b"\xc3\xa9").hexdigest()
