"""The `ql3lp1` handle and the three-valued probe, against real /proc where it works."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.node import (
    CaptureFailed,
    Evidence,
    FakeProcessTable,
    PassProvider,
    ProcessHandle,
    ProcProvider,
    ProviderUnavailable,
    capture_handle,
    format_handle,
    inspect_handle,
    parse_handle,
    parse_proc_stat,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
BOOT = "11111111-2222-3333-4444-555555555555"
HANDLE = ProcessHandle("019f70f0-0000-7000-8000-000000000901", BOOT, 4321, 4321, "987654321")


def encode(payload: object) -> str:
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return "ql3lp1." + base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def test_a_handle_has_the_real_launchers_exact_text() -> None:
    expected = encode(
        {"v": 1, "h": HANDLE.handle_id, "b": BOOT, "p": 4321, "g": 4321, "s": "987654321"}
    )
    assert format_handle(HANDLE) == expected
    assert "=" not in expected


def test_a_handle_round_trips() -> None:
    assert parse_handle(format_handle(HANDLE)) == HANDLE


@pytest.mark.parametrize(
    "text",
    [
        "legacy-uuid-only",
        "ql3lp1.",
        "ql3lp1.not+base64url",
        "ql3lp1." + "a" * 512,
        encode({"v": 2, "h": "h", "b": BOOT, "p": 1, "g": 1, "s": "1"}),
        encode({"v": True, "h": "h", "b": BOOT, "p": 1, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "", "b": BOOT, "p": 1, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "a\0b", "b": BOOT, "p": 1, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "h", "b": BOOT, "p": 0, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "h", "b": BOOT, "p": True, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "h", "b": BOOT, "p": 1.5, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "h", "b": BOOT + "\x85", "p": 1, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "h", "b": BOOT, "p": 1, "g": 1, "s": "0"}),
        encode({"v": 1, "h": "h", "b": BOOT, "p": 1, "g": 1, "s": "\u0661"}),
        encode({"v": 1, "h": "h", "b": BOOT, "p": 1, "g": 1, "s": 1}),
        encode({"v": 1, "h": "x" * 256, "b": BOOT, "p": 1, "g": 1, "s": "1"}),
        encode({"v": 1, "h": "x" * 216 + "😀" * 20, "b": BOOT, "p": 1, "g": 1, "s": "1"}),
        format_handle(HANDLE) + "=",
        format_handle(HANDLE) + "\n",
    ],
)
def test_a_malformed_handle_is_invalid(text: str) -> None:
    assert parse_handle(text) is None
    assert inspect_handle(text, FakeProcessTable()) == Evidence("unknown", "invalid_handle")


def test_a_handle_id_may_hold_255_utf16_units_but_not_more() -> None:
    # 236 code points but 256 UTF-16 units: JavaScript's `length` is what the real one bounds.
    ok = ProcessHandle("x" * 215 + "😀" * 20, BOOT, 1, 1, "1")
    assert parse_handle(format_handle(ok)) == ok
    with pytest.raises(ValueError, match="UTF-16"):
        format_handle(ProcessHandle("x" * 216 + "😀" * 20, BOOT, 1, 1, "1"))


handles = st.builds(
    ProcessHandle,
    st.text(min_size=1, max_size=80).filter(lambda h: "\0" not in h),
    st.from_regex(r"\A[A-Za-z0-9-]{1,64}\Z"),
    st.integers(1, 2**53 - 1),
    st.integers(1, 2**53 - 1),
    st.integers(1, 10**32 - 1).map(str),
)


@settings(max_examples=150)
@given(handles)
def test_every_formattable_handle_round_trips(handle: ProcessHandle) -> None:
    payload = {
        "v": 1,
        "h": handle.handle_id,
        "b": handle.boot_id,
        "p": handle.pid,
        "g": handle.pgid,
        "s": handle.start_ticks,
    }
    if len(handle.handle_id.encode("utf-16-le")) > 510 or len(encode(payload)) > 512:
        with pytest.raises(ValueError):
            format_handle(handle)
        return
    text = format_handle(handle)
    assert text == encode(payload)
    assert parse_handle(text) == handle


def test_formatting_an_invalid_identity_raises() -> None:
    with pytest.raises(ValueError):
        format_handle(ProcessHandle("h", BOOT, 0, 1, "1"))
    with pytest.raises(ValueError):
        format_handle(ProcessHandle("h", "not a boot id", 1, 1, "1"))


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_parsing_arbitrary_text_never_raises(text: str) -> None:
    parse_handle(text)
    parse_handle("ql3lp1." + text)


@settings(max_examples=200)
@given(st.from_regex(r"\A[A-Za-z0-9_-]{1,500}\Z"))
def test_parsing_arbitrary_base64url_never_raises(encoded: str) -> None:
    parse_handle("ql3lp1." + encoded)


@settings(max_examples=100)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=10,
    )
)
def test_parsing_arbitrary_objects_never_raises(value: object) -> None:
    assert parse_handle(value) is None
    if isinstance(value, dict):
        parse_handle(encode(value))


@settings(max_examples=150)
@given(
    st.text(max_size=40).filter(lambda c: "\0" not in c),
    st.sampled_from("RSDZTtXxI"),
    st.integers(1, 2**22),
    st.integers(1, 2**22),
    st.integers(1, 10**30),
)
def test_a_stat_line_parses_whatever_the_command_name_holds(
    comm: str, state: str, pid: int, pgrp: int, ticks: int
) -> None:
    rest = ["0"] * 50
    rest[0], rest[2], rest[19] = state, str(pgrp), str(ticks)
    line = f"{pid} ({comm}) {' '.join(rest)}\n"
    parsed = parse_proc_stat(line, pid)
    assert parsed is not None
    assert (parsed.state, parsed.pgrp, parsed.start_ticks) == (state, pgrp, str(ticks))
    assert parse_proc_stat(line, pid + 1) is None


def test_a_command_name_that_looks_like_fields_does_not_fool_the_parser() -> None:
    line = "77 (evil) Z 1 999 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1) S 1 77 77 " + " ".join(
        ["0"] * 15 + ["5555"] + ["0"] * 30
    )
    parsed = parse_proc_stat(line, 77)
    assert parsed is not None
    assert (parsed.state, parsed.pgrp, parsed.start_ticks) == ("S", 77, "5555")


@pytest.mark.parametrize(
    "line",
    [
        "",
        "77 no parens",
        "(x) S 1 2",
        "77 (x) S 1 2 3",
        "x77 (x) " + "1 " * 30,
        "77 (x) S 1 -3 " + "1 " * 30,
        "77 (x) S 1 3 " + "0 " * 30,
    ],
)
def test_a_malformed_stat_line_is_rejected(line: str) -> None:
    assert parse_proc_stat(line, 77) is None


def handle_for(table: FakeProcessTable, pid: int) -> str:
    return capture_handle(pid, table, handle_id="h-1")


def test_a_handle_of_exactly_512_bytes_is_read_and_513_bytes_are_not() -> None:
    # spec 03: at most 512 bytes. JSON whitespace pads the payload. Unpadded base64url is never
    # 1 more than a multiple of 4 long, so 512 is 511 and one lone last character, which the
    # reader drops as Node's decoder does (no whole byte in it).
    table = FakeProcessTable()
    pid = table.spawn()
    canonical = capture_handle(pid, table, handle_id="h-1")
    payload = base64.urlsafe_b64decode(canonical[len("ql3lp1.") :] + "==")
    sized: dict[int, str] = {}
    for spaces in range(400):
        padded = payload[:1] + b" " * spaces + payload[1:]
        text = "ql3lp1." + base64.urlsafe_b64encode(padded).decode().rstrip("=")
        sized.setdefault(len(text), text)
    assert inspect_handle(sized[511] + "A", table) == Evidence("running", "identity_matches", pid)
    assert inspect_handle(sized[513], table) == Evidence("unknown", "invalid_handle")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("handle_id", "", "handle id must be a non-empty string without NUL"),
        ("handle_id", "h\0", "handle id must be a non-empty string without NUL"),
        ("handle_id", 5, "handle id must be a non-empty string without NUL"),
        ("handle_id", "é\ud800", "handle id must not contain lone surrogates"),
        ("handle_id", "é\udfff", "handle id must not contain lone surrogates"),
        ("handle_id", "x" * 256, "handle id is longer than 255 UTF-16 code units"),
        ("handle_id", "€" * 255, "handle is longer than 512 bytes"),
        ("boot_id", "boot id", "boot id must match [A-Za-z0-9-]{1,64}"),
        ("pid", 0, "pid must be a positive integer"),
        ("pgid", 0, "process group id must be a positive integer"),
        ("start_ticks", "0", "start ticks must be a decimal string >= 1 of at most 32 digits"),
        ("start_ticks", "1e3", "start ticks must be a decimal string >= 1 of at most 32 digits"),
        ("start_ticks", 5, "start ticks must be a decimal string >= 1 of at most 32 digits"),
    ],
)
def test_the_handle_writer_refuses_each_bad_field_in_its_words(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        format_handle(dataclasses.replace(HANDLE, **{field: value}))
    assert str(raised.value) == message


def test_a_handle_is_the_prefix_and_the_unpadded_base64url_of_the_compact_json() -> None:
    # spec 03, computed here from the rule.
    for n in range(64):
        h = dataclasses.replace(HANDLE, handle_id=f"h-{n}")
        text = json.dumps(
            {"v": 1, "h": h.handle_id, "b": h.boot_id, "p": h.pid, "g": h.pgid, "s": h.start_ticks},
            separators=(",", ":"),
        )
        expected = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
        assert format_handle(h) == "ql3lp1." + expected


class GarbledStat:
    """A process table whose stat line no parser can read (a kernel with another format)."""

    def __init__(self, table: FakeProcessTable) -> None:
        self.table = table

    def boot_id(self) -> str:
        return self.table.boot_id()

    def read_stat(self, pid: int) -> str | None:
        return "garbled"


def test_a_stat_line_that_cannot_be_read_is_provider_unavailable_never_gone() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    handle = handle_for(table, pid)
    assert inspect_handle(handle, GarbledStat(table)) == Evidence(
        "unknown", "provider_unavailable", pid
    )


def test_the_fake_table_covers_every_verdict() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    handle = handle_for(table, pid)
    assert inspect_handle(handle, table) == Evidence("running", "identity_matches", pid)
    table.exit(pid)
    assert inspect_handle(handle, table).reason == "zombie_or_dead"
    table.reuse(pid)
    assert inspect_handle(handle, table).reason == "start_ticks_differ"
    table.reuse(pid, pgid=pid + 1)
    assert inspect_handle(handle, table) == Evidence("not_running", "process_group_differs", pid)
    table.reap(pid)
    assert inspect_handle(handle, table) == Evidence("not_running", "pid_absent", pid)
    table.make_unavailable()
    assert inspect_handle(handle, table) == Evidence("unknown", "provider_unavailable", pid)
    table.make_unavailable(False)
    table.reboot()
    assert inspect_handle(handle, table).reason == "boot_id_differs"


def test_an_unsupported_platform_is_unknown_without_any_read() -> None:
    table = FakeProcessTable()
    handle = handle_for(table, table.spawn())
    table.make_unavailable()
    assert inspect_handle(handle, table, platform="darwin") == Evidence(
        "unknown", "unsupported_platform", 4000
    )
    with pytest.raises(
        CaptureFailed, match=r"^this platform cannot prove a durable process identity$"
    ):
        capture_handle(4000, table, platform="darwin")


def test_capture_fails_for_a_vanished_or_unreadable_process() -> None:
    table = FakeProcessTable()
    with pytest.raises(CaptureFailed, match=r"^process 12345 is gone$"):
        capture_handle(12345, table)
    pid = table.spawn()
    table.make_unavailable()
    with pytest.raises(CaptureFailed, match=r"^process identity unreadable: "):
        capture_handle(pid, table)


def test_capture_names_a_bad_pid_a_malformed_stat_and_a_bad_handle_id() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    with pytest.raises(CaptureFailed, match=r"^pid must be a positive integer$"):
        capture_handle(0, table)
    with pytest.raises(CaptureFailed, match=rf"^/proc/{pid}/stat is malformed$"):
        capture_handle(pid, GarbledStat(table))
    with pytest.raises(
        CaptureFailed, match=r"^handle id must be a non-empty string without NUL$"
    ) as raised:
        capture_handle(pid, table, handle_id="h\0")
    assert isinstance(raised.value.__cause__, ValueError)


def test_a_captured_handle_without_an_id_gets_a_fresh_uuid() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    ids = [parse_handle(capture_handle(pid, table)) for _ in range(2)]
    assert ids[0] is not None and ids[1] is not None
    assert ids[0].handle_id != ids[1].handle_id
    assert str(uuid.UUID(ids[0].handle_id, version=4)) == ids[0].handle_id


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "30"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


@linux_only
def test_a_live_child_is_running(sleeper: subprocess.Popen[bytes]) -> None:
    handle = capture_handle(sleeper.pid, ProcProvider())
    parsed = parse_handle(handle)
    assert parsed is not None and parsed.pid == sleeper.pid and parsed.pgid == os.getpgid(0)
    assert inspect_handle(handle, ProcProvider()).verdict == "running"


@linux_only
def test_a_reaped_child_is_not_running(sleeper: subprocess.Popen[bytes]) -> None:
    handle = capture_handle(sleeper.pid, ProcProvider())
    sleeper.kill()
    sleeper.wait()
    assert inspect_handle(handle, ProcProvider()).reason == "pid_absent"


@linux_only
def test_an_unreaped_zombie_is_not_running(sleeper: subprocess.Popen[bytes]) -> None:
    handle = capture_handle(sleeper.pid, ProcProvider())
    sleeper.kill()
    deadline = time.monotonic() + 5
    while ProcProvider().read_stat(sleeper.pid) is not None:  # zombie until waited for
        stat = parse_proc_stat(ProcProvider().read_stat(sleeper.pid) or "", sleeper.pid)
        if stat is not None and stat.state == "Z":
            break
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert inspect_handle(handle, ProcProvider()) == Evidence(
        "not_running", "zombie_or_dead", sleeper.pid
    )


@linux_only
def test_a_reused_pid_with_other_start_ticks_is_not_running(
    sleeper: subprocess.Popen[bytes],
) -> None:
    real = parse_handle(capture_handle(sleeper.pid, ProcProvider()))
    assert real is not None
    earlier = ProcessHandle(
        real.handle_id, real.boot_id, real.pid, real.pgid, str(int(real.start_ticks) - 1 or 2)
    )
    assert inspect_handle(format_handle(earlier), ProcProvider()).reason == "start_ticks_differ"


def fake_proc_root(tmp_path: Path, boot_id: str, pid: int) -> ProcProvider:
    root = tmp_path / "proc"
    (root / "sys/kernel/random").mkdir(parents=True)
    (root / "sys/kernel/random/boot_id").write_text(boot_id + "\n")
    (root / str(pid)).mkdir()
    shutil.copyfile(f"/proc/{pid}/stat", root / str(pid) / "stat")
    return ProcProvider(str(root))


@linux_only
def test_another_boot_is_not_running(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    handle = capture_handle(sleeper.pid, ProcProvider())
    same_boot = fake_proc_root(tmp_path / "a", ProcProvider().boot_id(), sleeper.pid)
    assert inspect_handle(handle, same_boot).verdict == "running"
    other_boot = fake_proc_root(tmp_path / "b", "00000000-0000-0000-0000-000000000000", sleeper.pid)
    assert inspect_handle(handle, other_boot).reason == "boot_id_differs"


@linux_only
def test_an_unreadable_proc_root_is_provider_unavailable(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    handle = capture_handle(sleeper.pid, ProcProvider())
    missing = ProcProvider(str(tmp_path / "absent"))
    assert inspect_handle(handle, missing).reason == "provider_unavailable"
    # A directory where the boot id file should be: unreadable even for root.
    broken = tmp_path / "broken"
    (broken / "sys/kernel/random/boot_id").mkdir(parents=True)
    assert inspect_handle(handle, ProcProvider(str(broken))).verdict == "unknown"
    with pytest.raises(ProviderUnavailable):
        ProcProvider(str(broken)).boot_id()


@linux_only
def test_an_unreadable_stat_is_provider_unavailable_not_gone(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    handle = capture_handle(sleeper.pid, ProcProvider())
    provider = fake_proc_root(tmp_path, ProcProvider().boot_id(), sleeper.pid)
    stat_file = Path(provider.proc_root) / str(sleeper.pid) / "stat"
    stat_file.unlink()
    stat_file.mkdir()
    assert inspect_handle(handle, provider) == Evidence(
        "unknown", "provider_unavailable", sleeper.pid
    )


@linux_only
def test_an_absent_pid_counts_only_while_the_proc_root_itself_is_there(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    # spec 03: unknown is never gone. A /proc that vanished (unmounted) has no <pid>/stat
    # either; that is provider_unavailable, not "no such PID" (docs/decisions.md D-13).
    provider = fake_proc_root(tmp_path, ProcProvider().boot_id(), sleeper.pid)
    assert provider.read_stat(sleeper.pid + 100_000) is None
    assert provider.read_stat(sleeper.pid) is not None
    shutil.rmtree(provider.proc_root)
    with pytest.raises(ProviderUnavailable, match=r"^process table unreadable: FileNotFoundError$"):
        provider.read_stat(sleeper.pid + 100_000)


@linux_only
def test_a_pass_provider_reads_the_boot_id_once_and_a_vanished_proc_is_still_unavailable(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    handle = capture_handle(sleeper.pid, ProcProvider())
    real = fake_proc_root(tmp_path, ProcProvider().boot_id(), sleeper.pid)
    reads: list[str] = []

    class Counting(ProcProvider):
        def boot_id(self) -> str:
            reads.append("boot_id")
            return super().boot_id()

    provider = PassProvider(Counting(real.proc_root))
    assert inspect_handle(handle, provider).verdict == "running"
    assert inspect_handle(handle, provider).verdict == "running"
    assert reads == ["boot_id"]
    # The boot id is kept, /proc goes: the absent stat is not trusted.
    shutil.rmtree(real.proc_root)
    assert inspect_handle(handle, provider) == Evidence(
        "unknown", "provider_unavailable", sleeper.pid
    )


def test_a_pass_provider_does_not_keep_a_failed_boot_id_read() -> None:
    table = FakeProcessTable()
    provider = PassProvider(table)
    table.make_unavailable()
    with pytest.raises(ProviderUnavailable):
        provider.boot_id()
    table.make_unavailable(False)
    assert provider.boot_id() == table.boot


class TableThatForgets:
    """A provider whose table vanishes: the boot id then fails, but a stat reads as absent
    (the shape a cached boot id must not turn into `not_running`)."""

    def __init__(self, table: FakeProcessTable) -> None:
        self.table = table
        self.gone = False

    def boot_id(self) -> str:
        if self.gone:
            raise ProviderUnavailable("table gone")
        return self.table.boot_id()

    def read_stat(self, pid: int) -> str | None:
        return None if self.gone else self.table.read_stat(pid)


def test_a_pass_provider_over_any_other_provider_confirms_an_absent_stat_by_the_boot_id() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    dead = table.spawn()
    handle = capture_handle(pid, table, platform="linux")
    dead_handle = capture_handle(dead, table, platform="linux")
    table.reap(dead)
    forgets = TableThatForgets(table)
    provider = PassProvider(forgets)
    assert inspect_handle(handle, provider, platform="linux").verdict == "running"
    assert inspect_handle(dead_handle, provider, platform="linux").reason == "pid_absent"
    forgets.gone = True
    assert inspect_handle(handle, provider, platform="linux") == Evidence(
        "unknown", "provider_unavailable", pid
    )
    # Still readable, but another boot: not trusted either.
    forgets.gone = False
    table.reboot()
    assert inspect_handle(dead_handle, provider, platform="linux") == Evidence(
        "unknown", "provider_unavailable", dead
    )
    with pytest.raises(ProviderUnavailable, match=r"^boot id changed during the pass$"):
        provider.read_stat(dead)


@linux_only
def test_start_ticks_with_leading_zeros_are_compared_as_a_number_with_proc(
    sleeper: subprocess.Popen[bytes],
) -> None:
    # spec 03 allows "s":"0123"; /proc writes 123. As strings a live process would be
    # `not_running` (and marked lost); as numbers it is running, and other ticks still differ.
    real = parse_handle(capture_handle(sleeper.pid, ProcProvider()))
    assert real is not None
    zeros = ProcessHandle(
        real.handle_id, real.boot_id, real.pid, real.pgid, "00" + real.start_ticks
    )
    assert inspect_handle(format_handle(zeros), ProcProvider()) == Evidence(
        "running", "identity_matches", sleeper.pid
    )
    other = ProcessHandle(
        real.handle_id, real.boot_id, real.pid, real.pgid, "00" + str(int(real.start_ticks) + 1)
    )
    assert inspect_handle(format_handle(other), ProcProvider()).reason == "start_ticks_differ"


# --- the real provider's reads and the stat parser, on files made here ---------------------------

# The fields after the command name: state, ppid, process group, 16 more, start ticks (the 20th).
TAIL = " ".join(["S", "1", "77", *(str(n) for n in range(4, 20)), "4242"])


def test_a_stat_line_is_read_after_the_last_parenthesis_with_its_twenty_fields() -> None:
    parsed = parse_proc_stat(f"5 (a (b) c) {TAIL}\n", 5)
    assert parsed is not None and (parsed.state, parsed.pgrp, parsed.start_ticks) == (
        "S",
        77,
        "4242",
    )
    assert parse_proc_stat(f"5(x) {TAIL}", 5) is not None  # no space before the name
    snug = parse_proc_stat(f"5 (x){TAIL}", 5)  # none after it either
    assert snug is not None and snug.state == "S"


@pytest.mark.parametrize(
    "text",
    [
        f"5 (x) {TAIL.rsplit(' ', 1)[0]}",  # 19 fields
        "5 (x " + " ".join(str(n) for n in range(1, 25)),  # no closing parenthesis
        f"5 (x) {TAIL.replace(' 77 ', ' 7a ')}",  # a process group that is no number
        None,
    ],
    ids=["nineteen fields", "no closing parenthesis", "a process group that is no number", "None"],
)
def test_a_malformed_stat_line_is_none(text: Any) -> None:
    assert parse_proc_stat(text, 5) is None


def proc_root(tmp_path: Path, boot: bytes | None = None, stat: bytes | None = None) -> ProcProvider:
    root = tmp_path / "proc"
    (root / "sys/kernel/random").mkdir(parents=True)
    (root / "5").mkdir()
    if boot is not None:
        (root / "sys/kernel/random/boot_id").write_bytes(boot)
    if stat is not None:
        (root / "5" / "stat").write_bytes(stat)
    return ProcProvider(str(root))


def test_the_boot_id_is_read_from_its_first_256_bytes_and_refused_in_words(
    tmp_path: Path,
) -> None:
    assert proc_root(tmp_path / "a", b"a" * 36 + b" " * 220 + b"zzz").boot_id() == "a" * 36
    with pytest.raises(ProviderUnavailable, match=r"^boot id unreadable: FileNotFoundError$"):
        proc_root(tmp_path / "b").boot_id()
    with pytest.raises(ProviderUnavailable, match=r"^boot id has an invalid format$"):
        proc_root(tmp_path / "c", b"not a boot id\n").boot_id()


def test_a_stat_file_is_read_up_to_its_bound_with_bad_bytes_replaced(tmp_path: Path) -> None:
    big = b"5 (\xff) " + b"x" * (64 * 1024)
    assert proc_root(tmp_path / "a", stat=big).read_stat(5) == big[: 64 * 1024].decode(
        "utf-8", errors="replace"
    )


def test_a_stat_that_cannot_be_read_names_its_error(tmp_path: Path) -> None:
    provider = proc_root(tmp_path)
    (tmp_path / "proc" / "5" / "stat").mkdir()
    with pytest.raises(ProviderUnavailable, match=r"^stat unreadable: IsADirectoryError$"):
        provider.read_stat(5)
