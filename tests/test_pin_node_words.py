"""The node's small words: a receipt's repr (the token hidden, every other field shown), the
launch variables taken out of a child's environment, and the process table as a contract: the
real ``/proc`` provider and the in-memory fake answer the probe alike through a process's life
(running, a zombie, reaped); the fake's own moves (spawn, reuse, reboot, an outage) and the stat
line it writes are pinned as the fake documents them."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Protocol

import pytest

from reconciler.node import (
    CaptureFailed,
    Evidence,
    FakeProcessTable,
    ProcessProvider,
    ProcProvider,
    ProviderUnavailable,
    Receipt,
    capture_handle,
    inspect_handle,
    parse_proc_stat,
    without_launch_env,
)

RECEIPT = Receipt(
    1,
    "019f70c0-0000-7000-8000-000000000001",
    "019f70c0-0000-7000-8000-000000000002",
    7,
    "T0k3n_" * 8,
    3,
    8,
    -2,
)


def test_a_receipts_repr_shows_every_field_but_the_token() -> None:
    assert repr(RECEIPT) == (
        "Receipt(schema_version=1, run_id='019f70c0-0000-7000-8000-000000000001', "
        "attempt_id='019f70c0-0000-7000-8000-000000000002', callback_sequence=7, "
        "token=<redacted>, started_at_ms=3, finished_at_ms=8, exit_code=-2)"
    )
    assert "T0k3n" not in repr(RECEIPT)


# -- the process table as a contract -------------------------------------------------------------


class Table(Protocol):
    provider: ProcessProvider

    def spawn(self) -> int: ...

    def exit(self, pid: int) -> None: ...

    def reap(self, pid: int) -> None: ...


class FakeTable:
    def __init__(self) -> None:
        self.table = FakeProcessTable()
        self.provider: ProcessProvider = self.table

    def spawn(self) -> int:
        return self.table.spawn()

    def exit(self, pid: int) -> None:
        self.table.exit(pid)

    def reap(self, pid: int) -> None:
        self.table.reap(pid)


class RealTable:
    """Children of this process, seen through the real ``/proc``."""

    def __init__(self) -> None:
        self.provider: ProcessProvider = ProcProvider()
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(self) -> int:
        child = subprocess.Popen(["sleep", "30"])
        self.children[child.pid] = child
        return child.pid

    def exit(self, pid: int) -> None:
        self.children[pid].kill()  # not waited for: a zombie until reaped
        deadline = time.monotonic() + 5
        while True:
            stat = parse_proc_stat(self.provider.read_stat(pid) or "", pid)
            if stat is not None and stat.state == "Z":
                return
            assert time.monotonic() < deadline
            time.sleep(0.002)

    def reap(self, pid: int) -> None:
        child = self.children[pid]
        child.kill()
        child.wait()

    def close(self) -> None:
        for child in self.children.values():
            child.kill()
            child.wait()


@pytest.fixture(params=["fake", "proc"])
def table(request: pytest.FixtureRequest) -> Iterator[Table]:
    if request.param == "fake":
        yield FakeTable()
        return
    if not sys.platform.startswith("linux"):
        pytest.skip("needs /proc")
    real = RealTable()
    try:
        yield real
    finally:
        real.close()


def test_a_process_table_has_a_steady_boot_id(table: Table) -> None:
    boot = table.provider.boot_id()
    assert re.fullmatch(r"[A-Za-z0-9-]{1,64}", boot)
    assert table.provider.boot_id() == boot


def test_the_probe_follows_a_process_from_running_to_zombie_to_reaped(table: Table) -> None:
    pid = table.spawn()
    handle = capture_handle(pid, table.provider, handle_id="h-1")
    assert inspect_handle(handle, table.provider) == Evidence("running", "identity_matches", pid)
    table.exit(pid)
    assert inspect_handle(handle, table.provider) == Evidence("not_running", "zombie_or_dead", pid)
    table.reap(pid)
    assert table.provider.read_stat(pid) is None
    assert inspect_handle(handle, table.provider) == Evidence("not_running", "pid_absent", pid)
    table.reap(pid)  # reaping twice is harmless
    assert table.provider.read_stat(pid) is None


def test_a_fake_process_table_reaps_an_unknown_pid_as_a_no_op() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    table.reap(pid + 1)
    assert list(table.processes) == [pid]
    table.reuse(pid + 1)  # a PID nobody held: simply taken
    assert list(table.processes) == [pid, pid + 1]


def test_a_fake_reused_pid_is_a_new_process_the_newest_of_the_table() -> None:
    table = FakeProcessTable()
    first, second = table.spawn(), table.spawn()
    before = table.processes[first].start_ticks
    table.reuse(first)
    assert table.processes[first].start_ticks != before
    # reaped, then spawned again: it is listed after every process older than it
    assert list(table.processes) == [second, first]


def test_a_fake_reboot_is_a_new_boot_id_and_an_empty_table() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    handle = capture_handle(pid, table, handle_id="h-1")
    assert table.boot_id() == "00000000-0000-4000-8000-000000000001"
    table.reboot()
    assert table.boots == 2
    assert table.boot_id() == "00000000-0000-4000-8000-000000000002"
    assert table.processes == {}
    assert inspect_handle(handle, table) == Evidence("not_running", "boot_id_differs", pid)
    table.reboot()
    assert table.boot_id() == "00000000-0000-4000-8000-000000000003"


def test_a_fake_process_table_writes_a_stat_line_proc_could_write() -> None:
    # The fake's line parses as /proc's does: same fields, a command name with ") " inside.
    table = FakeProcessTable()
    pid = table.spawn(pgid=77)
    stat = parse_proc_stat(table.read_stat(pid) or "", pid)
    assert stat is not None
    assert (stat.pid, stat.state, stat.pgrp, stat.start_ticks) == (pid, "S", 77, "1001")


def test_an_unavailable_fake_table_says_so_and_counts_no_read() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    table.make_unavailable()
    with pytest.raises(ProviderUnavailable) as boot:
        table.boot_id()
    assert str(boot.value) == "fake provider is unavailable"
    with pytest.raises(ProviderUnavailable) as stat:
        table.read_stat(pid)
    assert str(stat.value) == "fake provider is unavailable"
    with pytest.raises(CaptureFailed) as capture:
        capture_handle(pid, table)
    assert str(capture.value) == "process identity unreadable: fake provider is unavailable"
    assert table.stat_reads == 0


def test_a_fake_table_counts_every_stat_read() -> None:
    table = FakeProcessTable()
    pid = table.spawn()
    table.read_stat(pid)
    table.read_stat(pid + 1)
    table.read_stat(pid)
    assert table.stat_reads == 3


def test_a_fake_stat_line_has_procs_fields_in_procs_places() -> None:
    table = FakeProcessTable()
    pid = table.spawn(pgid=77, state="D")
    rest = ["0"] * 50
    rest[0], rest[1], rest[2], rest[19] = "D", "1", "77", "1001"
    assert table.read_stat(pid) == f"4000 (fake (worker) x) {' '.join(rest)}\n"


def test_a_fake_table_gives_each_spawn_the_next_free_pid() -> None:
    table = FakeProcessTable()
    table.spawn(pid=4001)
    assert [table.spawn(), table.spawn(), table.spawn()] == [4000, 4002, 4003]
    assert list(table.processes) == [4001, 4000, 4002, 4003]


def test_a_fake_process_is_spawned_in_the_state_it_is_given() -> None:
    table = FakeProcessTable()
    pid = table.spawn(state="Z")
    handle = capture_handle(pid, table, handle_id="h-1")
    assert inspect_handle(handle, table) == Evidence("not_running", "zombie_or_dead", pid)


def test_the_launch_environment_is_taken_out_of_a_childs() -> None:
    env = {
        "PATH": "/bin",
        "QL3_RECEIPT_TOKEN": "secret",
        "QL3_RECEIPT_ROOT": "/r",
        "QL3_LAUNCH_ID": "x",
        "ql3_receipt_token": "kept: environment names are case-sensitive",
        "ql3_launch_id": "kept",
        "MY_QL3_RECEIPT_": "kept",
    }
    assert without_launch_env(env) == {
        "PATH": "/bin",
        "ql3_receipt_token": "kept: environment names are case-sensitive",
        "ql3_launch_id": "kept",
        "MY_QL3_RECEIPT_": "kept",
    }


@pytest.mark.parametrize("bad", ["", "../etc", "a" * 200, "ab/cd"])
def test_a_path_for_an_attempt_id_that_is_not_portable_is_refused_in_these_words(
    bad: str,
) -> None:
    from reconciler.node._receipt import receipt_name

    with pytest.raises(ValueError) as refused:
        receipt_name(bad)
    assert str(refused.value) == "attempt id is not a portable execution ID"


@pytest.mark.parametrize(
    "nonce", ["0" * 31, "0" * 33, "g" * 32, "A" * 32, "0" * 31 + "X", "-" * 32]
)
def test_a_temporary_name_refuses_a_nonce_that_is_not_32_lower_case_hex_digits(
    nonce: str,
) -> None:
    from reconciler.node._receipt import temp_name

    with pytest.raises(ValueError) as refused:
        temp_name("at-1", nonce)
    assert str(refused.value) == "temp nonce must be 32 lower-case hex digits"
    assert temp_name("at-1", "0123456789abcdef" * 2) == ".at-1.0123456789abcdef0123456789abcdef.tmp"
