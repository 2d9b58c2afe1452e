"""Receipt v1 codec and authentication (spec 03 "Receipt v1")."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reconciler.node import (
    MAX_SAFE_INTEGER,
    InvalidReceipt,
    Receipt,
    authenticate_receipt,
    decode_receipt,
    encode_receipt,
    token_sha256_hex,
    validate_id,
)

TOKEN = "A" * 43
VALID = Receipt(
    1,
    "019f70c0-0000-7000-8000-000000000001",
    "019f70c0-0000-7000-8000-000000000002",
    1,
    TOKEN,
    3,
    8,
    0,
)
CANONICAL = (
    b'{"schemaVersion":1,"runId":"019f70c0-0000-7000-8000-000000000001",'
    b'"attemptId":"019f70c0-0000-7000-8000-000000000002","callbackSequence":1,'
    b'"token":"' + TOKEN.encode() + b'","startedAtMs":3,"finishedAtMs":8,"exitCode":0}'
)


def with_field(**changes: object) -> bytes:
    fields = json.loads(CANONICAL)
    fields.update(changes)
    return json.dumps(fields, separators=(",", ":")).encode()


def reason_of(data: bytes) -> str:
    with pytest.raises(InvalidReceipt) as caught:
        decode_receipt(data)
    return caught.value.reason


def test_a_receipt_encodes_to_the_exact_bytes_the_real_launcher_writes() -> None:
    assert encode_receipt(VALID) == CANONICAL


def test_the_canonical_bytes_decode_to_the_same_receipt() -> None:
    assert decode_receipt(CANONICAL) == VALID


def test_the_token_never_appears_in_a_receipt_repr() -> None:
    assert TOKEN not in repr(VALID)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\xef\xbb\xbf" + CANONICAL, "bom"),
        (CANONICAL[:-1] + b" " * 4097, "too_large"),
        (CANONICAL.replace(b'"token"', b'"tok\xffn"'), "invalid_utf8"),
        (CANONICAL.replace(b"}", b',"exitCode":0}'), "duplicate_key"),
        (CANONICAL[:-1], "invalid_json"),
        (b"[1]", "not_an_object"),
        (with_field(exitCode={"code": 0}), "nested_value"),
        (with_field(exitCode=[0]), "nested_value"),
        (with_field(extra=1), "unknown_key"),
        (b'{"schemaVersion":1}', "missing_key"),
        (with_field(schemaVersion=2), "bad_schema_version"),
        (with_field(schemaVersion=True), "bad_schema_version"),
        (with_field(runId="-starts-with-dash"), "bad_run_id"),
        (with_field(runId="x" * 37), "bad_run_id"),
        (with_field(attemptId="a/b"), "bad_attempt_id"),
        (with_field(attemptId="abc\n"), "bad_attempt_id"),
        (with_field(callbackSequence=0), "bad_callback_sequence"),
        (with_field(callbackSequence=True), "bad_callback_sequence"),
        (with_field(callbackSequence=1.5), "bad_callback_sequence"),
        (with_field(callbackSequence=MAX_SAFE_INTEGER + 1), "bad_callback_sequence"),
        (with_field(token="short"), "bad_token"),
        (with_field(token="A" * 31 + "="), "bad_token"),
        (with_field(startedAtMs="3"), "bad_started_at_ms"),
        (with_field(startedAtMs=-1), "bad_started_at_ms"),
        (with_field(finishedAtMs=8.5), "bad_finished_at_ms"),
        (with_field(finishedAtMs=2), "finished_before_started"),
        (with_field(exitCode=256), "bad_exit_code"),
        (with_field(exitCode=False), "bad_exit_code"),
        (with_field(exitCode=None), "bad_exit_code"),
        (CANONICAL.replace(b":0}", b":NaN}"), "invalid_json"),
        (CANONICAL.replace(b'"exitCode":0', b'"exitCode":0.5'), "bad_exit_code"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_malformed_receipt_is_rejected_with_a_machine_reason(data: bytes, reason: str) -> None:
    assert reason_of(data) == reason


def test_a_receipt_with_a_duplicate_key_is_rejected() -> None:
    twice = CANONICAL.replace(b'"exitCode":0', b'"exitCode":0,"exitCode":1')
    assert reason_of(twice) == "duplicate_key"


@pytest.mark.parametrize(
    "data",
    [
        CANONICAL + b"\n",
        CANONICAL.replace(b",", b", "),
        CANONICAL.replace(b'"exitCode":0', b'"exitCode":0.0'),
        CANONICAL.replace(b'"exitCode":0', b'"exitCode":0e0'),
        CANONICAL.replace(b'"callbackSequence":1', b'"callbackSequence":1.0'),
        CANONICAL.replace(b'"runId"', b'"\\u0072unId"'),
    ],
)
def test_a_valid_receipt_in_another_json_form_reads_as_the_same_receipt(data: bytes) -> None:
    # QingLong's parseCompletionReceipt accepts these (spec 03; docs/decisions.md D-19).
    assert decode_receipt(data) == VALID


def test_a_receipt_with_another_key_order_reads_as_the_same_receipt() -> None:
    fields = json.loads(CANONICAL)
    reordered = json.dumps(dict(reversed(list(fields.items()))), separators=(",", ":")).encode()
    assert decode_receipt(reordered) == VALID


def test_exactly_4096_bytes_is_the_largest_accepted_size() -> None:
    # Field bounds keep a real receipt far below the limit; the limit is checked first anyway.
    assert reason_of(b" " * 4096) == "invalid_json"
    assert reason_of(b" " * 4097) == "too_large"


def test_encoding_an_invalid_receipt_raises() -> None:
    with pytest.raises(InvalidReceipt, match="finished_before_started"):
        encode_receipt(dataclasses.replace(VALID, finished_at_ms=1))
    with pytest.raises(InvalidReceipt, match="bad_exit_code"):
        encode_receipt(dataclasses.replace(VALID, exit_code=True))


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("a", True),
        ("A" * 36, True),
        ("0.1:-_Z", True),
        ("A" * 37, False),
        ("", False),
        (".a", False),
        ("a\n", False),
        ("a b", False),
        ("é", False),
        (7, False),
    ],
)
def test_an_id_is_portable_only_when_it_fully_matches_the_rule(value: object, ok: bool) -> None:
    assert validate_id(value) is ok


ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,35}\Z")
receipts = st.builds(
    lambda run, attempt, seq, token, start, span, code: Receipt(
        1, run, attempt, seq, token, start, start + span, code
    ),
    ids,
    ids,
    st.integers(1, MAX_SAFE_INTEGER),
    st.from_regex(r"\A[A-Za-z0-9_-]{32,128}\Z"),
    st.integers(0, MAX_SAFE_INTEGER // 2),
    st.integers(0, MAX_SAFE_INTEGER // 2),
    st.integers(0, 255),
)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(receipts)
def test_every_valid_receipt_round_trips_through_its_canonical_bytes(receipt: Receipt) -> None:
    data = encode_receipt(receipt)
    assert len(data) <= 4096
    assert decode_receipt(data) == receipt
    assert encode_receipt(decode_receipt(data)) == data


@settings(max_examples=300)
@given(st.binary(max_size=600))
@example(CANONICAL)
@example(b"\xef\xbb\xbf" + CANONICAL)
def test_arbitrary_bytes_are_accepted_only_when_they_are_json_of_a_valid_receipt(
    data: bytes,
) -> None:
    try:
        receipt = decode_receipt(data)
    except InvalidReceipt as error:
        assert error.reason
    else:
        assert_is_json_of(receipt, data)


def assert_is_json_of(receipt: Receipt, data: bytes) -> None:
    """`data` is a JSON object of exactly the eight keys whose values equal `receipt`'s, and
    the writer's canonical bytes of `receipt` read back as the same receipt."""
    fields = json.loads(data.decode("utf-8"))
    assert sorted(fields) == sorted(json.loads(CANONICAL))
    assert fields == json.loads(encode_receipt(receipt))  # 1.0 == 1: numbers compare by value
    assert decode_receipt(encode_receipt(receipt)) == receipt


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(receipts, st.integers(0, 400), st.binary(min_size=1, max_size=3))
def test_a_mutated_canonical_receipt_is_accepted_only_if_still_json_of_a_valid_receipt(
    receipt: Receipt, at: int, junk: bytes
) -> None:
    data = encode_receipt(receipt)
    at = at % (len(data) + 1)
    mutated = data[:at] + junk + data[at:]
    try:
        decoded = decode_receipt(mutated)
    except InvalidReceipt:
        return
    assert_is_json_of(decoded, mutated)


def authenticate(receipt: Receipt = VALID, /, **overrides: object) -> str | None:
    facts: dict[str, object] = {
        "run_id": VALID.run_id,
        "execution_owner": "runtime",
        "attempt_id": VALID.attempt_id,
        "attempt_status": "running",
        "attempt_callback_sequence": 0,
        "attempt_created_at_ms": 1,
        "attempt_started_at_ms": 2,
        "callback_token_hash": token_sha256_hex(TOKEN),
    }
    facts.update(overrides)
    return authenticate_receipt(receipt, **facts)  # type: ignore[arg-type]


def test_a_receipt_matching_every_durable_fact_is_trusted() -> None:
    assert authenticate() is None


def test_the_token_hash_is_lower_case_hex_sha256_of_the_token() -> None:
    assert token_sha256_hex("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"execution_owner": "legacy"}, "not_runtime_owned"),
        ({"run_id": "other-run"}, "run_id_mismatch"),
        ({"attempt_id": "other-attempt"}, "attempt_id_mismatch"),
        ({"attempt_callback_sequence": 1}, "callback_sequence_mismatch"),
        ({"attempt_callback_sequence": 5}, "callback_sequence_mismatch"),
        ({"attempt_created_at_ms": 4}, "started_before_attempt_created"),
        ({"attempt_started_at_ms": 4}, "started_before_attempt_started"),
        ({"callback_token_hash": None}, "token_hash_invalid"),
        ({"callback_token_hash": token_sha256_hex(TOKEN).upper()}, "token_hash_invalid"),
        ({"callback_token_hash": token_sha256_hex("B" * 43)}, "token_mismatch"),
    ],
)
def test_a_receipt_breaking_one_authentication_rule_is_not_trusted(
    overrides: dict[str, object], reason: str
) -> None:
    assert authenticate(**overrides) == reason


def test_an_unset_attempt_start_time_is_not_checked() -> None:
    assert authenticate(attempt_started_at_ms=None) is None


def test_a_terminal_attempt_accepts_the_same_or_the_next_sequence() -> None:
    assert authenticate(attempt_status="succeeded", attempt_callback_sequence=1) is None
    assert authenticate(attempt_status="lost", attempt_callback_sequence=0) is None
    assert authenticate(attempt_status="failed", attempt_callback_sequence=2) == (
        "callback_sequence_mismatch"
    )


def test_a_terminal_run_also_allows_the_same_sequence() -> None:
    assert authenticate(attempt_callback_sequence=1, run_status="cancelled") is None
    assert authenticate(attempt_callback_sequence=1, run_status="running") == (
        "callback_sequence_mismatch"
    )
