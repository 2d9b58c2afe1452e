"""The shadow pass's resume cursor file (``reconciler._cursor``, spec 05 "Supervisor") on real
files, in process: what is read and refused, each refusal's exact words (the command prints
them after ``--resume-cursor``), and what is written or removed (issue 28)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from reconciler._cursor import MAX_CURSOR_BYTES, InvalidResumeCursor, read_cursor, store_cursor


def refusal(path: Path | str) -> str:
    with pytest.raises(InvalidResumeCursor) as raised:
        read_cursor(str(path))
    return str(raised.value)


def cursor_bytes(created: Any = 5, run: Any = "run-a", version: Any = 1) -> bytes:
    return json.dumps({"schemaVersion": version, "createdAtMs": created, "runId": run}).encode()


def test_no_file_is_no_cursor(tmp_path: Path) -> None:
    assert read_cursor(str(tmp_path / "missing")) is None


def test_a_cursor_written_is_read_back_as_the_same_key(tmp_path: Path) -> None:
    path = tmp_path / "c"
    store_cursor(str(path), (1_700_000_000_123, "019f-run"))
    assert path.read_bytes() == (
        b'{"schemaVersion": 1, "createdAtMs": 1700000000123, "runId": "019f-run"}'
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_cursor(str(path)) == (1_700_000_000_123, "019f-run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_the_cursor_is_renamed_into_place_from_a_temporary_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renames: list[tuple[str, str]] = []
    real = os.replace

    def recording(src: str, dst: str) -> None:
        renames.append((src, dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", recording)
    path = str(tmp_path / "c")
    store_cursor(path, (1, "r"))
    [(tmp, dst)] = renames
    assert dst == path
    assert re.fullmatch(re.escape(f"{path}.{os.getpid()}.") + r"[0-9a-f]{8}\.tmp", tmp)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: os.mkfifo(p), "names a FIFO, not a regular file"),
        (lambda p: p.mkdir(), "names a directory, not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "names a symbolic link, not a regular file"),
    ],
    ids=["FIFO", "directory", "symbolic link"],
)
def test_what_is_not_a_regular_file_is_refused_naming_what_it_is(
    tmp_path: Path, make: Any, says: str
) -> None:
    path = tmp_path / "c"
    make(path)
    assert refusal(path) == says


def test_a_character_device_is_refused_before_it_is_read() -> None:
    assert refusal("/dev/zero") == "names a character device, not a regular file"


def test_a_special_file_put_in_place_after_the_lstat_is_refused_by_the_fstat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "c"
    os.mkfifo(fifo)
    regular = os.lstat(tmp_path)  # a stat result to stand in for a small regular file
    fake = os.stat_result((stat.S_IFREG | 0o600, *regular[1:6], 10, *regular[7:]))
    monkeypatch.setattr(os, "lstat", lambda path: fake)
    assert refusal(fifo) == "names a FIFO, not a regular file"


def test_a_cursor_of_exactly_the_largest_size_is_read_and_one_byte_more_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c"
    data = cursor_bytes()
    path.write_bytes(data + b" " * (MAX_CURSOR_BYTES - len(data)))
    assert read_cursor(str(path)) == (5, "run-a")
    path.write_bytes(data + b" " * (MAX_CURSOR_BYTES + 1 - len(data)))
    assert refusal(path) == "is larger than a cursor (4096 bytes at most)"


def test_a_cursor_that_grew_after_its_lstat_is_refused_as_too_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c"
    data = cursor_bytes()
    path.write_bytes(data + b" " * (MAX_CURSOR_BYTES + 1 - len(data)))
    real = os.lstat
    small = real(path)
    fake = os.stat_result((*small[:6], 100, *small[7:]))
    monkeypatch.setattr(os, "lstat", lambda p: fake if str(p) == str(path) else real(p))
    assert refusal(path) == "is larger than a cursor (4096 bytes at most)"
    path.write_bytes(data + b" " * (MAX_CURSOR_BYTES - len(data)))
    assert read_cursor(str(path)) == (5, "run-a")


def test_a_path_that_cannot_be_looked_at_is_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    assert refusal(tmp_path / "file" / "c") == "cannot be read (Not a directory)"


@pytest.mark.parametrize(
    "data", [b"\xff\xfe", b"{not json", b""], ids=["not UTF-8", "bad", "empty"]
)
def test_what_is_not_json_is_refused_as_such(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "c"
    path.write_bytes(data)
    assert refusal(path) == "is not a cursor qlfsm wrote (not JSON)"


@pytest.mark.parametrize(
    "data",
    [
        b"[1, 2]",
        cursor_bytes(version=2),
        cursor_bytes(version="1"),
        cursor_bytes(created=True),
        cursor_bytes(created=5.0),
        cursor_bytes(created="5"),
        cursor_bytes(run=7),
        cursor_bytes(run=None),
        b'{"createdAtMs": 5, "runId": "r"}',
    ],
    ids=[
        "a list",
        "schema 2",
        "schema as text",
        "bool time",
        "float time",
        "text time",
        "number run",
        "null run",
        "no schema",
    ],
)
def test_json_that_is_not_a_cursor_of_this_schema_is_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "c"
    path.write_bytes(data)
    assert refusal(path) == "is not a cursor qlfsm wrote (unknown fields)"


def test_no_cursor_left_removes_a_regular_cursor_file_and_nothing_else(tmp_path: Path) -> None:
    store_cursor(str(tmp_path / "missing"), None)  # nothing there: nothing to do
    regular = tmp_path / "c"
    store_cursor(str(regular), (1, "r"))
    store_cursor(str(regular), None)
    assert not regular.exists()
    fifo, directory, link = tmp_path / "fifo", tmp_path / "dir", tmp_path / "link"
    os.mkfifo(fifo)
    directory.mkdir()
    (tmp_path / "target").write_bytes(b"kept")
    link.symlink_to(tmp_path / "target")
    for path in (fifo, directory, link):
        store_cursor(str(path), None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "link", "target"]
    assert (tmp_path / "target").read_bytes() == b"kept"


def test_a_symbolic_link_put_in_place_after_the_lstat_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(cursor_bytes())
    link = tmp_path / "c"
    link.symlink_to(target)
    regular = os.stat(target)  # what the lstat saw before the link was put there
    monkeypatch.setattr(os, "lstat", lambda path: regular)
    assert refusal(link) == "cannot be read (Too many levels of symbolic links)"
