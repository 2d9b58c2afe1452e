"""The receipt and handle readers accept exactly what QingLong's readers accept (spec 03; D-19).

One table per reader: the inputs QingLong's own codec tests use (`parseCompletionReceipt`,
`parseLocalProcessDurableHandle` and their file-store and inspector tests), the six forms a
valid v1 receipt or handle may take besides the launcher's compact one, and the places where
JavaScript's JSON.parse and Python's json differ. Each row: input, accepted (with the fields
read) or refused (with the reason). The writers keep the canonical form: see the last tests.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import _primary_support as support
import pytest

from reconciler.node import (
    FileReceiptStore,
    InvalidReceipt,
    ProcessHandle,
    ProcProvider,
    Receipt,
    decode_receipt,
    encode_receipt,
    format_handle,
    parse_handle,
)
from storage import Repository, journal_get, journal_register

# The values of QingLong's completion-receipt codec test.
RUN_ID = "019f7200-0000-7000-8000-000000000001"
ATTEMPT_ID = "019f7200-0000-7000-8000-000000000002"
TOKEN = "a" * 43
STARTED, FINISHED = 1_750_200_000_000, 1_750_200_000_100
FIELDS: dict[str, Any] = {
    "schemaVersion": 1,
    "runId": RUN_ID,
    "attemptId": ATTEMPT_ID,
    "callbackSequence": 1,
    "token": TOKEN,
    "startedAtMs": STARTED,
    "finishedAtMs": FINISHED,
    "exitCode": 0,
}
COMPACT = json.dumps(FIELDS, separators=(",", ":")).encode()
VALID = Receipt(1, RUN_ID, ATTEMPT_ID, 1, TOKEN, STARTED, FINISHED, 0)
SAFE = 2**53 - 1


def compact(**changes: Any) -> bytes:
    fields = {**FIELDS, **changes}
    return json.dumps(fields, separators=(",", ":")).encode()


def swap(old: bytes, new: bytes) -> bytes:
    assert COMPACT.count(old) == 1, old
    return COMPACT.replace(old, new)


def accepted(**changes: Any) -> Receipt:
    import dataclasses

    return dataclasses.replace(VALID, **changes)


# (name, bytes, the Receipt read or the refusal's reason)
RECEIPT_ROWS: list[tuple[str, bytes, Receipt | str]] = [
    # --- QingLong's codec tests ------------------------------------------------------------
    ("qinglong: the canonical payload round-trips", COMPACT, VALID),
    ("qinglong: an unknown field is refused", compact(command="secret"), "unknown_key"),
    (
        "qinglong: a duplicate key is refused",
        swap(b'"attemptId"', b'"runId":"' + RUN_ID.encode() + b'","attemptId"'),
        "duplicate_key",
    ),
    ("qinglong: finished before started", compact(finishedAtMs=1), "finished_before_started"),
    ("qinglong: exitCode 256", compact(exitCode=256), "bad_exit_code"),
    ("qinglong: 4097 bytes", b"x" * 4097, "too_large"),
    (
        "qinglong: the package test's receipt (token 'A'*32, times 1 and 2)",
        compact(token="A" * 32, startedAtMs=1, finishedAtMs=2),
        accepted(token="A" * 32, started_at_ms=1, finished_at_ms=2),
    ),
    (
        "qinglong: a Workflow portable identity",
        compact(runId="workflow-run-1", attemptId="wta:0123456789abcdef0123456789abcdef"),
        accepted(run_id="workflow-run-1", attempt_id="wta:0123456789abcdef0123456789abcdef"),
    ),
    ("qinglong: attemptId ../attempt-1", compact(attemptId="../attempt-1"), "bad_attempt_id"),
    ("qinglong: attemptId attempt/1", compact(attemptId="attempt/1"), "bad_attempt_id"),
    ("qinglong: attemptId attempt\\1", compact(attemptId="attempt\\1"), "bad_attempt_id"),
    ("qinglong: attemptId of 44 chars", compact(attemptId="attempt-" + "a" * 36), "bad_attempt_id"),
    # --- the six valid forms that are not the launcher's compact one ------------------------
    ("pretty-printed", json.dumps(FIELDS, indent=2).encode() + b"\n", VALID),
    ("keys in another order", json.dumps(dict(reversed(FIELDS.items()))).encode(), VALID),
    ('"exitCode":0.0', swap(b'"exitCode":0', b'"exitCode":0.0'), VALID),
    ('"callbackSequence":1.0', swap(b'"callbackSequence":1', b'"callbackSequence":1.0'), VALID),
    (
        "a time in exponent notation",
        swap(b'"startedAtMs":1750200000000', b'"startedAtMs":1.7502e12'),
        VALID,
    ),
    ("compact, padded with spaces to 4096 bytes", COMPACT + b" " * (4096 - len(COMPACT)), VALID),
    # --- sizes and bytes ---------------------------------------------------------------------
    ("empty", b"", "empty"),
    ("spaces before, up to 4096 bytes", b" " * (4096 - len(COMPACT)) + COMPACT, VALID),
    ("4097 bytes of valid JSON", COMPACT + b" " * (4097 - len(COMPACT)), "too_large"),
    ("a UTF-8 byte-order mark", b"\xef\xbb\xbf" + COMPACT, "bom"),
    ("invalid UTF-8", swap(b'"token"', b'"tok\xffn"'), "invalid_utf8"),
    ("a surrogate encoded in UTF-8", swap(b'"token"', b'"tok\xed\xa0\x80n"'), "invalid_utf8"),
    ("an overlong UTF-8 form", swap(b'"token"', b'"tok\xc0\xafn"'), "invalid_utf8"),
    # --- what JSON.parse takes as whitespace (space, tab, CR, LF) ----------------------------
    ("tabs, CR LF between tokens", COMPACT.replace(b",", b",\r\n\t"), VALID),
    ("a trailing LF", COMPACT + b"\n", VALID),
    ("a trailing form feed", COMPACT + b"\x0c", "invalid_json"),
    ("a leading vertical tab", b"\x0b" + COMPACT, "invalid_json"),
    ("a trailing no-break space", COMPACT + "\u00a0".encode(), "invalid_json"),
    (
        "a LINE SEPARATOR between tokens",
        COMPACT.replace(b",", "\u2028,".encode(), 1),
        "invalid_json",
    ),
    ("something after the object", COMPACT + b"x", "invalid_json"),
    ("two objects", COMPACT + COMPACT, "invalid_json"),
    ("a truncated object", COMPACT[:-1], "invalid_json"),
    # --- keys ----------------------------------------------------------------------------------
    ("an escaped key spelling", swap(b'"runId"', b'"\\u0072unId"'), VALID),
    (
        "a duplicate key spelled two ways",
        swap(b'"exitCode":0', b'"exitCode":0,"\\u0065xitCode":0'),
        "duplicate_key",
    ),
    ("a missing key", swap(b',"exitCode":0', b""), "missing_key"),
    ("a key in another case", swap(b'"exitCode"', b'"exitcode"'), "unknown_key"),
    ("a lone-surrogate key", swap(b"}", b',"\\ud800":1}'), "unknown_key"),
    ("__proto__ as a key", swap(b"}", b',"__proto__":1}'), "unknown_key"),
    ("an empty object", b"{}", "missing_key"),
    ("an array", b"[1]", "not_an_object"),
    ("null", b"null", "not_an_object"),
    ("a nested object", compact(exitCode={"code": 0}), "nested_value"),
    ("a nested array", compact(exitCode=[0]), "nested_value"),
    # --- numbers as JavaScript reads them ----------------------------------------------------
    ('"schemaVersion":1.0', swap(b'"schemaVersion":1', b'"schemaVersion":1.0'), VALID),
    ('"schemaVersion":2', compact(schemaVersion=2), "bad_schema_version"),
    ('"schemaVersion":true', compact(schemaVersion=True), "bad_schema_version"),
    ('"schemaVersion":"1"', compact(schemaVersion="1"), "bad_schema_version"),
    ('"callbackSequence":1e0', swap(b'"callbackSequence":1', b'"callbackSequence":1e0'), VALID),
    ('"callbackSequence":0.1E1', swap(b'"callbackSequence":1', b'"callbackSequence":0.1E1'), VALID),
    (
        '"callbackSequence":1.0000000000000001 (the double 1)',
        swap(b'"callbackSequence":1', b'"callbackSequence":1.0000000000000001'),
        VALID,
    ),
    (
        '"callbackSequence":1.5',
        swap(b'"callbackSequence":1', b'"callbackSequence":1.5'),
        "bad_callback_sequence",
    ),
    ('"callbackSequence":0', compact(callbackSequence=0), "bad_callback_sequence"),
    (
        '"callbackSequence":-0',
        swap(b'"callbackSequence":1', b'"callbackSequence":-0'),
        "bad_callback_sequence",
    ),
    ('"callbackSequence":true', compact(callbackSequence=True), "bad_callback_sequence"),
    ('"callbackSequence":"1"', compact(callbackSequence="1"), "bad_callback_sequence"),
    ("callbackSequence 2**53-1", compact(callbackSequence=SAFE), accepted(callback_sequence=SAFE)),
    (
        "callbackSequence 2**53-1 written 9007199254740991.0",
        swap(b'"callbackSequence":1', b'"callbackSequence":9007199254740991.0'),
        accepted(callback_sequence=SAFE),
    ),
    ("callbackSequence 2**53", compact(callbackSequence=SAFE + 1), "bad_callback_sequence"),
    (
        "callbackSequence 2**53+2 (no double between)",
        compact(callbackSequence=SAFE + 3),
        "bad_callback_sequence",
    ),
    (
        "callbackSequence 1e400 (Infinity in JavaScript)",
        swap(b'"callbackSequence":1', b'"callbackSequence":1e400'),
        "bad_callback_sequence",
    ),
    (
        "startedAtMs -0 is 0",
        compact(startedAtMs=0).replace(b'"startedAtMs":0', b'"startedAtMs":-0'),
        accepted(started_at_ms=0),
    ),
    (
        "startedAtMs 1e-400 is 0",
        swap(b'"startedAtMs":1750200000000', b'"startedAtMs":1e-400'),
        accepted(started_at_ms=0),
    ),
    ("startedAtMs -1", compact(startedAtMs=-1), "bad_started_at_ms"),
    ("startedAtMs 2**53", compact(startedAtMs=SAFE + 1), "bad_started_at_ms"),
    ("finishedAtMs 8.5", compact(finishedAtMs=FINISHED + 0.5), "bad_finished_at_ms"),
    ("finishedAtMs null", compact(finishedAtMs=None), "bad_finished_at_ms"),
    ('"exitCode":-0.0 is 0', swap(b'"exitCode":0', b'"exitCode":-0.0'), VALID),
    ('"exitCode":2.55e2', swap(b'"exitCode":0', b'"exitCode":2.55e2'), accepted(exit_code=255)),
    ('"exitCode":255.5', swap(b'"exitCode":0', b'"exitCode":255.5'), "bad_exit_code"),
    ('"exitCode":-1', compact(exitCode=-1), "bad_exit_code"),
    ('"exitCode":false', compact(exitCode=False), "bad_exit_code"),
    ('"exitCode":NaN', swap(b'"exitCode":0', b'"exitCode":NaN'), "invalid_json"),
    ('"exitCode":Infinity', swap(b'"exitCode":0', b'"exitCode":Infinity'), "invalid_json"),
    ('"exitCode":-Infinity', swap(b'"exitCode":0', b'"exitCode":-Infinity'), "invalid_json"),
    ('"exitCode":01', swap(b'"exitCode":0', b'"exitCode":01'), "invalid_json"),
    ('"exitCode":+1', swap(b'"exitCode":0', b'"exitCode":+1'), "invalid_json"),
    ('"exitCode":1.', swap(b'"exitCode":0', b'"exitCode":1.'), "invalid_json"),
    ('"exitCode":.5', swap(b'"exitCode":0', b'"exitCode":.5'), "invalid_json"),
    ("an Arabic-Indic digit", swap(b'"exitCode":0', '"exitCode":\u0661'.encode()), "invalid_json"),
    # --- strings ---------------------------------------------------------------------------------
    ("an escaped runId", swap(RUN_ID.encode(), b"\\u0030" + RUN_ID[1:].encode()), VALID),
    ("an escaped slash makes a bad id", compact(runId="a/b").replace(b"/", b"\\/"), "bad_run_id"),
    ("a lone surrogate in the token", swap(b'"token":"a', b'"token":"\\ud800'), "bad_token"),
    ("a raw control character", swap(b'"token":"a', b'"token":"\x01'), "invalid_json"),
    ("a runId with a final newline", compact(runId=RUN_ID + "\n"), "bad_run_id"),
    ("a non-ASCII digit in a runId", compact(runId="run-\u0661"), "bad_run_id"),
    ("a token of 31 characters", compact(token="a" * 31), "bad_token"),
    ("a token of 129 characters", compact(token="a" * 129), "bad_token"),
    ("a token as a number", swap(b'"' + TOKEN.encode() + b'"', b"1" * 40), "bad_token"),
]


@pytest.mark.parametrize(
    ("name", "data", "expected"), RECEIPT_ROWS, ids=[row[0] for row in RECEIPT_ROWS]
)
def test_the_receipt_reader_accepts_and_refuses_what_qinglong_s_reader_does(
    name: str, data: bytes, expected: Receipt | str
) -> None:
    try:
        got: Receipt | str = decode_receipt(data)
    except InvalidReceipt as error:
        got = error.reason
    assert got == expected


# --- the handle -------------------------------------------------------------------------------

BOOT = "11111111-2222-3333-4444-555555555555"
PAYLOAD: dict[str, Any] = {
    "v": 1,
    "h": "handle-1",
    "b": BOOT,
    "p": 4321,
    "g": 4321,
    "s": "987654321",
}
HANDLE = ProcessHandle("handle-1", BOOT, 4321, 4321, "987654321")


def b64(data: bytes) -> str:
    return "ql3lp1." + base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def text(json_text: str) -> str:
    return b64(json_text.encode())


def payload(**changes: Any) -> str:
    return text(json.dumps({**PAYLOAD, **changes}, separators=(",", ":"), ensure_ascii=False))


def read(**changes: Any) -> ProcessHandle:
    fields = {"handle_id": "handle-1", "boot_id": BOOT, "pid": 4321, "pgid": 4321}
    fields["start_ticks"] = "987654321"
    fields.update(changes)
    return ProcessHandle(**fields)


CANONICAL_HANDLE = payload()
COMPACT_PAYLOAD = json.dumps(PAYLOAD, separators=(",", ":"))
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def with_a_dangling_character() -> str:
    """A valid handle plus one base64url character that carries no whole byte (Node drops it)."""
    json_text = COMPACT_PAYLOAD + " " * (-len(COMPACT_PAYLOAD) % 3)
    return text(json_text) + "A"


def with_unused_bits_set() -> str:
    """A valid handle whose last base64url character has its unused low bits set."""
    json_text = COMPACT_PAYLOAD + " " * ((1 - len(COMPACT_PAYLOAD)) % 3)  # a 2-character tail
    handle = text(json_text)
    last = _ALPHABET.index(handle[-1])
    assert last & 0b1111 == 0
    return handle[:-1] + _ALPHABET[last | 0b1111]


# (name, handle text, the ProcessHandle read or, when refused, why)
HANDLE_ROWS: list[tuple[str, str, ProcessHandle | str]] = [
    # --- QingLong's handle tests -----------------------------------------------------------------
    ("qinglong: the canonical handle round-trips", CANONICAL_HANDLE, HANDLE),
    ("qinglong: 'invalid'", "invalid", "no ql3lp1. prefix"),
    ("qinglong: 'legacy-uuid-only'", "legacy-uuid-only", "no ql3lp1. prefix"),
    ("qinglong: 'not-a-durable-handle'", "not-a-durable-handle", "no ql3lp1. prefix"),
    ("qinglong: not base64url", "ql3lp1.not+base64url", "not base64url"),
    ("qinglong: over 512 bytes", "ql3lp1." + "a" * 512, "longer than 512 bytes"),
    (
        "qinglong: the package test's identity (pid 123, ticks 456)",
        payload(p=123, g=123, s="456", h="h-1", b="boot-1"),
        read(handle_id="h-1", boot_id="boot-1", pid=123, pgid=123, start_ticks="456"),
    ),
    # --- the forms of a valid handle besides the launcher's compact one ---------------------------
    ("keys in another order", text(json.dumps(dict(reversed(PAYLOAD.items())))), HANDLE),
    ("an extra key", payload(x={"nested": [1, None]}), HANDLE),
    ("spaces", text(json.dumps(PAYLOAD, indent=1)), HANDLE),
    (
        "a duplicate key: the last one counts",
        text(COMPACT_PAYLOAD.replace('"p":4321', '"p":1,"p":4321')),
        HANDLE,
    ),
    ('"p":4321.0', text(COMPACT_PAYLOAD.replace('"p":4321', '"p":4321.0')), HANDLE),
    ('"g":4.321e3', text(COMPACT_PAYLOAD.replace('"g":4321', '"g":4.321e3')), HANDLE),
    ('"v":1.0', text(COMPACT_PAYLOAD.replace('"v":1', '"v":1.0')), HANDLE),
    ('start ticks "0987654321"', payload(s="0987654321"), read(start_ticks="0987654321")),
    ("a boot id between spaces (trimmed)", payload(b=f" {BOOT}\n"), HANDLE),
    ("a boot id after a BOM and NBSP (trimmed)", payload(b=f"\ufeff\u00a0{BOOT}"), HANDLE),
    ("a last lone base64url character is dropped", with_a_dangling_character(), HANDLE),
    ("unused base64url bits set", with_unused_bits_set(), HANDLE),
    (
        "a lone surrogate in the handle id",
        text(COMPACT_PAYLOAD.replace('"handle-1"', '"\\ud800"')),
        read(handle_id="\ud800"),
    ),
    (
        "invalid UTF-8 in the handle id (read as U+FFFD)",
        b64(COMPACT_PAYLOAD.replace("handle-1", "h\udcff").encode("utf-8", "surrogateescape")),
        read(handle_id="h\ufffd"),
    ),
    (
        "255 UTF-16 units of handle id",
        payload(h="x" * 215 + "\U0001f600" * 20, p=1, g=1, s="1"),
        read(handle_id="x" * 215 + "\U0001f600" * 20, pid=1, pgid=1, start_ticks="1"),
    ),
    # --- refused ---------------------------------------------------------------------------------
    ("the prefix alone", "ql3lp1.", "nothing encoded"),
    ("a padding =", CANONICAL_HANDLE + "=", "not base64url"),
    ("a final newline", CANONICAL_HANDLE + "\n", "not base64url"),
    ("a BOM before the JSON", b64(b"\xef\xbb\xbf" + COMPACT_PAYLOAD.encode()), "not JSON"),
    ("NaN in an extra key", text(COMPACT_PAYLOAD[:-1] + ',"x":NaN}'), "not JSON"),
    ("a JSON array", text("[1]"), "not an object"),
    ("JSON null", text("null"), "not an object"),
    ('"v":2', payload(v=2), "v is not 1"),
    ('"v":true', payload(v=True), "v is not 1"),
    ('"v":"1"', payload(v="1"), "v is not 1"),
    ("no v", text(json.dumps({k: v for k, v in PAYLOAD.items() if k != "v"})), "v is not 1"),
    ("an empty handle id", payload(h=""), "empty handle id"),
    ("a NUL in the handle id", payload(h="a\0b"), "NUL in the handle id"),
    (
        "256 UTF-16 units of handle id",
        payload(h="x" * 216 + "\U0001f600" * 20, p=1, g=1, s="1"),
        "handle id too long",
    ),
    ("a handle id as a number", payload(h=7), "handle id not a string"),
    ("a boot id with a space inside", payload(b="not a boot id"), "bad boot id"),
    ("a boot id after NEL (JavaScript does not trim it)", payload(b=f"\x85{BOOT}"), "bad boot id"),
    ("an empty boot id", payload(b=" "), "bad boot id"),
    ('"p":0', payload(p=0), "pid not positive"),
    ('"p":-1', payload(p=-1), "pid not positive"),
    ('"p":true', payload(p=True), "pid not a number"),
    ('"p":"4321"', payload(p="4321"), "pid not a number"),
    ('"p":1.5', payload(p=1.5), "pid not an integer"),
    ('"p":2**53', payload(p=2**53), "pid not a safe integer"),
    ('"g":null', payload(g=None), "process group not a number"),
    ('start ticks "0"', payload(s="0"), "start ticks below 1"),
    ('start ticks "000"', payload(s="000"), "start ticks below 1"),
    ("start ticks of 33 digits", payload(s="1" * 33), "start ticks too long"),
    ("start ticks with an Arabic-Indic digit", payload(s="\u0661"), "start ticks not ASCII digits"),
    ("start ticks with a final newline", payload(s="1\n"), "start ticks not digits"),
    ("start ticks as a number", payload(s=987654321), "start ticks not a string"),
    ("a boot id over 64 characters", payload(b="a" * 65), "bad boot id"),
]


@pytest.mark.parametrize(
    ("name", "handle", "expected"), HANDLE_ROWS, ids=[row[0] for row in HANDLE_ROWS]
)
def test_the_handle_reader_accepts_and_refuses_what_qinglong_s_reader_does(
    name: str, handle: str, expected: ProcessHandle | str
) -> None:
    got = parse_handle(handle)
    if isinstance(expected, ProcessHandle):
        assert got == expected
    else:
        assert got is None, expected


# --- the writers keep the canonical form -------------------------------------------------------


def test_the_receipt_writer_keeps_the_launcher_s_compact_form_whatever_form_was_read() -> None:
    for _, data, expected in RECEIPT_ROWS:
        if isinstance(expected, Receipt) and expected == VALID:
            assert encode_receipt(decode_receipt(data)) == COMPACT


def test_the_handle_writer_keeps_the_launcher_s_compact_form_whatever_form_was_read() -> None:
    for _, handle, expected in HANDLE_ROWS:
        if expected == HANDLE:
            read_back = parse_handle(handle)
            assert read_back is not None and format_handle(read_back) == CANONICAL_HANDLE


# --- end to end: real SQLite, real receipt files, real processes ---------------------------------


def receipt_forms() -> list[tuple[str, bytes]]:
    """The six valid v1 forms of the receipt `_primary_support.receipt("run-1", "at-1")`."""
    good = encode_receipt(support.receipt("run-1", "at-1"))
    fields = json.loads(good)
    started = str(fields["startedAtMs"]).encode()
    exponent = f"{fields['startedAtMs'] / 10**12!r}e12".encode()
    assert float(exponent) == fields["startedAtMs"]
    return [
        ("pretty-printed", json.dumps(fields, indent=2).encode() + b"\n"),
        ("keys in another order", json.dumps(dict(reversed(fields.items()))).encode()),
        ('"exitCode":0.0', good.replace(b'"exitCode":0', b'"exitCode":0.0')),
        (
            '"callbackSequence":1.0',
            good.replace(b'"callbackSequence":1', b'"callbackSequence":1.0'),
        ),
        (
            "a time in exponent notation",
            good.replace(b":" + started + b",", b":" + exponent + b",", 1),
        ),
        ("padded with spaces to 4096 bytes", good + b" " * (4096 - len(good))),
    ]


@support.linux_only
@pytest.mark.parametrize(("form", "data"), receipt_forms(), ids=[f for f, _ in receipt_forms()])
def test_a_valid_receipt_in_any_json_form_completes_the_run_and_is_not_quarantined(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore, form: str, data: bytes
) -> None:
    assert data != encode_receipt(support.receipt("run-1", "at-1"))
    handle, pid = support.dead_handle()
    support.make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    journal_register(conn, "at-1", "run-1", support.T0)
    path = Path(store.root) / "at" / "at-1.json"
    path.parent.mkdir(mode=0o700)
    path.write_bytes(data)
    summary = support.run_pass(conn, store, support.ForbiddenProvider())
    assert support.only(summary) == {
        "run_id": "run-1",
        "attempt_id": "at-1",
        "row": "5",
        "outcome": "recovered",
        "reason": "receipt_succeeded",
    }
    assert summary["safe"] is True
    assert read_back(db_path, "run-1", "at-1") == ("succeeded", "succeeded", 0, 1)
    assert not path.exists() and journal_get(conn, "at-1") is None
    assert not (Path(store.root) / ".quarantine").exists()


def read_back(db_path: Path, run_id: str, attempt_id: str) -> tuple[Any, ...]:
    """Run status, Attempt status, exit code and callback sequence, read through a SECOND
    connection (what was committed, not what the writer holds)."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        run = db.execute('SELECT status FROM "Runs" WHERE id = ?', (run_id,)).fetchone()
        att = db.execute(
            'SELECT status, exit_code, callback_sequence FROM "RunAttempts" WHERE id = ?',
            (attempt_id,),
        ).fetchone()
    finally:
        db.close()
    return (run[0], *att)


@support.linux_only
def test_the_cli_completes_a_run_from_a_pretty_printed_receipt(
    repo: Repository, db_path: Path, tmp_path: Path
) -> None:
    handle, pid = support.dead_handle()
    support.make_candidate(repo, "run-1", "at-1", handle=handle, pid=pid)
    root = tmp_path / "r"
    (root / "at").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    fields = json.loads(encode_receipt(support.receipt("run-1", "at-1", 3)))
    (root / "at" / "at-1.json").write_bytes(json.dumps(fields, indent=4).encode())
    out = support.qlfsm("reconcile", "--db", str(db_path), "--receipt-root", str(root), "--json")
    assert out.returncode == 0, out.stderr
    [entry] = json.loads(out.stdout)["candidates"]
    assert (entry["row"], entry["outcome"], entry["reason"]) == ("5", "recovered", "receipt_failed")
    assert read_back(db_path, "run-1", "at-1") == ("failed", "failed", 3, 1)
    assert not (root / ".quarantine").exists()


def handle_forms(real: str) -> list[tuple[str, str]]:
    """A live process's handle `real` written in the forms QingLong reads as the same identity."""
    parsed = parse_handle(real)
    assert parsed is not None
    fields = {
        "v": 1,
        "h": parsed.handle_id,
        "b": parsed.boot_id,
        "p": parsed.pid,
        "g": parsed.pgid,
        "s": parsed.start_ticks,
    }
    return [
        (
            "keys in another order",
            text(json.dumps(dict(reversed(fields.items())), separators=(",", ":"))),
        ),
        ("an extra key", text(json.dumps({**fields, "x": "extra"}, separators=(",", ":")))),
        ("spaces", text(json.dumps(fields, indent=1))),
        (
            "start ticks with leading zeros",
            text(json.dumps({**fields, "s": "000" + parsed.start_ticks}, separators=(",", ":"))),
        ),
        (
            "a boot id between whitespace",
            text(json.dumps({**fields, "b": f" {parsed.boot_id}\n"}, separators=(",", ":"))),
        ),
    ]


@support.linux_only
@pytest.mark.parametrize(
    "form",
    [0, 1, 2, 3, 4],
    ids=["reordered", "extra_key", "spaces", "leading_zeros", "padded_boot_id"],
)
def test_a_live_process_s_handle_in_another_json_form_is_verified_running_not_invalid(
    repo: Repository, conn: Any, db_path: Path, store: FileReceiptStore, form: int
) -> None:
    with support.sleepers() as [s]:
        name, handle = handle_forms(s.handle)[form]
        assert handle != s.handle
        support.make_candidate(repo, "run-1", "at-1", handle=handle, pid=s.pid)
        before = support.last_sequence(repo, "run-1")
        summary = support.run_pass(conn, store, ProcProvider())
        alive = s.proc.poll() is None
    assert alive
    assert support.only(summary) == {
        "run_id": "run-1",
        "attempt_id": "at-1",
        "row": "12",
        "outcome": "remaining",
        "reason": "process_running",
    }, name
    assert summary["safe"] is True
    assert read_back(db_path, "run-1", "at-1")[:2] == ("running", "running")
    assert support.recovery_events(repo, "run-1", before) == []
