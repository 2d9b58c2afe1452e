"""Every command survives its output and signals (spec 06 "Exit codes"; README "Faults"):
a full disk, a closed pipe or a closed descriptor on stdout, and SIGINT/SIGTERM at any moment
once `qlfsm` has started, give one line on stderr, no traceback, a documented exit code and
nothing half-written. All with real `qlfsm` processes, real files, pipes and signals.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from _primary_support import dead_handle, linux_only, make_candidate
from _shadow_support import LegacyDb, bulk_runs

from storage import Repository, connect

QLFSM = [sys.executable, "-m", "reconciler"]
OUTPUT_LOST = "qlfsm: error: the output could not be written to stdout"
ENV = {"PATH": "/usr/bin:/bin"}


def run(
    args: list[str], *, stdout: Any, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*QLFSM, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
        env={**ENV, **(env or {})},
    )


def broken_pipe() -> int:
    """The write end of a pipe whose read end is already closed: every write is EPIPE."""
    r, w = os.pipe()
    os.close(r)
    return w


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def receipts(tmp_path: Path) -> Path:
    root = tmp_path / "receipts"
    root.mkdir(mode=0o700)
    return root


def commands(db: Path, root: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "reconcile": ["reconcile", "--db", str(db), "--receipt-root", str(root), "--json"],
        "startup": ["startup", "--db", str(db), "--receipt-root", str(root), "--origins", "manual"],
        "inspect": ["inspect", "--db", str(db)],
        "db init": ["db", "init", "--db", str(tmp_path / "new.db")],
        "help": ["--help"],
    }


# --- output that cannot be written ------------------------------------------------------------


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("sink", ["/dev/full", "closed pipe"])
@pytest.mark.parametrize("name", ["reconcile", "startup", "inspect", "db init", "help"])
def test_a_command_whose_stdout_cannot_be_written_says_so_in_one_line_and_exits_4(
    db_path: Path, receipts: Path, tmp_path: Path, name: str, sink: str, unbuffered: bool
) -> None:
    args = commands(db_path, receipts, tmp_path)[name]
    env = {"PYTHONUNBUFFERED": "1"} if unbuffered else None
    if sink == "/dev/full":
        with open("/dev/full", "w") as full:
            proc = run(args, stdout=full, env=env)
    else:
        w = broken_pipe()
        try:
            proc = run(args, stdout=w, env=env)
        finally:
            os.close(w)
    assert proc.returncode == 4, proc.stderr
    assert one_line(proc.stderr).startswith(OUTPUT_LOST)
    if name == "db init":  # the command's work is done: the schema is there, whole
        with contextlib.closing(connect(str(tmp_path / "new.db"))) as conn:
            assert tuple(conn.execute('SELECT COUNT(*) FROM "Runs"').fetchone()) == (0,)


def test_a_blocked_verdict_stays_3_when_its_output_is_lost_and_a_safe_one_becomes_4(
    repo: Repository, db_path: Path, receipts: Path
) -> None:
    # Two active Attempts: row 1, unresolved, blocked. One claimed: row 7, recovered.
    make_candidate(repo, "run-1", "at-1", attempt="claimed", run="dispatching")
    args = ["reconcile", "--db", str(db_path), "--receipt-root", str(receipts), "--json"]
    with open("/dev/full", "w") as full:
        proc = run(args, stdout=full)
    assert proc.returncode == 4 and one_line(proc.stderr).startswith(OUTPUT_LOST)
    run_row = repo.get_run("run-1")
    assert run_row is not None and run_row.status == "lost"  # the pass committed before printing
    make_candidate(repo, "run-2", "at-2", attempt="running", run="running")
    repo.conn.execute(
        'INSERT INTO "RunAttempts" (id, run_id, attempt, status, executor_type, '
        "callback_sequence, created_at_ms) VALUES ('at-2b', 'run-2', 2, 'claimed', "
        "'local_process', 0, 1)"
    )
    with open("/dev/full", "w") as full:
        proc = run(args, stdout=full)
    assert proc.returncode == 3 and one_line(proc.stderr).startswith(OUTPUT_LOST)


def test_stderr_that_cannot_be_written_either_never_gives_the_interpreters_exit_120(
    db_path: Path, receipts: Path
) -> None:
    args = ["reconcile", "--db", str(db_path), "--receipt-root", str(receipts), "--json"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*QLFSM, *args], stdout=full, stderr=full, timeout=60, check=False, env=ENV
        )
    assert proc.returncode == 4
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*QLFSM, "reconcile", "--db", "/nonexistent/ql.db", "--receipt-root", str(receipts)],
            stdout=subprocess.PIPE, stderr=full, timeout=60, check=False, env=ENV,
        )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == b""


def test_a_closed_stdout_descriptor_is_never_handed_to_the_database(
    db_path: Path, receipts: Path
) -> None:
    # `qlfsm ... >&-`: descriptor 1 is free, so the next file opened (the database) would get
    # it, and anything written to "stdout" would land in the database file.
    args = ["reconcile", "--db", str(db_path), "--receipt-root", str(receipts), "--json"]
    proc = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *QLFSM, *args],
        stderr=subprocess.PIPE, text=True, timeout=60, check=False, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 4
    assert one_line(proc.stderr) == (
        f"{OUTPUT_LOST} (stdout is closed); the command itself finished - run it again with a "
        "writable stdout to see it"
    )
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("sink", ["/dev/full", "closed pipe"])
def test_shadow_fails_open_when_its_audit_record_cannot_be_written(
    db: LegacyDb, sink: str, unbuffered: bool
) -> None:
    bulk_runs(db.conn, 3, status="dispatching", attempt="claimed")
    args = ["shadow", "--db", db.path, "--origins", "manual", "--json"]
    env = {"PYTHONUNBUFFERED": "1"} if unbuffered else None
    if sink == "/dev/full":
        with open("/dev/full", "w") as full:
            proc = run(args, stdout=full, env=env)
    else:
        w = broken_pipe()
        try:
            proc = run(args, stdout=w, env=env)
        finally:
            os.close(w)
    assert proc.returncode == 0
    assert one_line(proc.stderr).startswith(
        "qlfsm: warning: the audit record could not be written to stdout"
    )
    lost = db.conn.execute("SELECT COUNT(*) FROM \"Runs\" WHERE status = 'lost'").fetchone()[0]
    assert lost == 3  # the pass ran and committed; only its record was lost


# --- signals ----------------------------------------------------------------------------------

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def guards_installed(pid: int) -> bool:
    """qlfsm's entry point has installed its handlers: the process (after exec, so it is no
    longer the forked test process) catches SIGTERM, which Python itself never does."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    if b"reconciler" not in cmdline:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & SIGTERM_BIT)


def in_nanosleep(pid: int) -> bool:
    try:
        return "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def signalled(
    args: list[str], signum: int, delay_s: float = 0.0, *, until: Any = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Start `qlfsm`, wait until its guards are installed, then ``delay_s`` more (or until
    ``until(pid)`` holds), send the signal, and collect what it printed; also how long after
    the guards were installed it ended."""
    proc = subprocess.Popen(
        [*QLFSM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    deadline = time.monotonic() + 30
    while not guards_installed(proc.pid):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the guards were never installed"
        time.sleep(0.0002)
    guarded = time.monotonic()
    if until is None:
        time.sleep(delay_s)
    else:
        while not until(proc.pid) and proc.poll() is None:
            time.sleep(0.0002)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), (
        time.monotonic() - guarded
    )


# The pass's one grace (spec 04 row 13): this hook on the step that pays it says so on a pipe,
# then blocks until the test acts, a readiness signal from the child, not a guess of time (the
# grace's own sleep is skipped when a loaded machine has already spent it since the probe).
AT_GRACE = """
import os, sys
from reconciler.primary import _pass

ready, wait = int(sys.argv[1]), int(sys.argv[2])
pay_grace = _pass.pay_grace

def hooked(ctx, waiting):
    os.write(ready, b"in the grace\\n")
    os.read(wait, 1)  # the test's signal ends this wait (or the test closes the pipe)
    return pay_grace(ctx, waiting)

_pass.pay_grace = hooked
from reconciler.cli._main import main
sys.argv = ["qlfsm", *sys.argv[3:]]
raise SystemExit(main())
"""


def signalled_in_the_grace(args: list[str], signum: int) -> subprocess.CompletedProcess[str]:
    """Start `qlfsm` with the grace hook, wait for its line, send the signal, collect."""
    ready_r, ready_w = os.pipe()
    wait_r, wait_w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", AT_GRACE, str(ready_w), str(wait_r), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        pass_fds=(ready_w, wait_r),
    )  # fmt: skip
    os.close(ready_w)
    os.close(wait_r)
    try:
        with os.fdopen(ready_r, "rb") as ready:
            assert ready.readline() == b"in the grace\n", proc.communicate()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(wait_w)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def spread(length_s: float) -> list[float]:
    """At once (the command module is being imported) and at seeded random-ish moments over
    the whole length of an undisturbed run (so a failure can be replayed)."""
    rng = random.Random(9)
    return [0.0, *sorted(rng.uniform(0, length_s) for _ in range(11))]


@contextlib.contextmanager
def primary_fixture(template: Path, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A database with three candidates: two whose process is dead (probe, ONE grace, lost)
    and one claimed (lost without a probe). Yields its path and the runs."""
    path = tmp_path / "template-primary.db"
    shutil.copyfile(template, path)
    with contextlib.closing(connect(str(path))) as conn:
        repo = Repository(conn)
        for i in (1, 2):
            handle, pid = dead_handle()
            make_candidate(repo, f"run-{i}", f"at-{i}", handle=handle, pid=pid)
        make_candidate(repo, "run-3", "at-3", attempt="claimed", run="dispatching")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    yield path, ["run-1", "run-2", "run-3"]


def aggregates(path: Path) -> set[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return {
            (r[0], r[1])
            for r in conn.execute(
                'SELECT r.status, a.status FROM "Runs" r JOIN "RunAttempts" a ON a.run_id = r.id'
            )
        }
    finally:
        conn.close()


WHOLE = {("running", "running"), ("dispatching", "claimed"), ("lost", "lost")}


@linux_only
@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_reconcile_signalled_at_any_moment_ends_by_the_signal_with_one_line_and_whole_runs(
    template_db: Path, tmp_path: Path, receipts: Path, signum: int
) -> None:
    name = signal.Signals(signum).name
    ended_by_signal = 0
    with primary_fixture(template_db, tmp_path) as (template, _):

        def reconcile(i: int, **kw: Any) -> tuple[Path, subprocess.CompletedProcess[str], float]:
            db = tmp_path / f"ql-{i}.db"
            shutil.copyfile(template, db)
            args = ["reconcile", "--db", str(db), "--receipt-root", str(receipts), "--json"]
            proc, took = signalled(args, signum, **kw)
            return db, proc, took

        _, undisturbed, length = reconcile(-1, until=lambda pid: False)  # it ends first
        assert undisturbed.returncode == 0 and json.loads(undisturbed.stdout)["recovered"] == 3
        for i, delay in enumerate(spread(length)):
            db, proc, _ = reconcile(i, delay_s=delay)
            assert "Traceback" not in proc.stderr, (delay, proc.stderr)
            if proc.returncode == -signum:  # the shell's 128 + n: 130 / 143 / 129
                ended_by_signal += 1
                assert one_line(proc.stderr).startswith(f"qlfsm: interrupted ({name})")
                assert proc.stdout == ""  # no summary at all rather than part of one
            else:  # the signal came after the pass had ended: its verdict stands
                assert proc.returncode == 0, (delay, proc.stderr)
                assert json.loads(proc.stdout)["recovered"] == 3
            # Nothing half-written: every Run and its Attempt moved together or not at all.
            assert aggregates(db) <= WHOLE, (delay, aggregates(db))
        # One moment the child itself reports (it is in the grace, and waits there for the
        # signal): surely mid-pass, however loaded the machine is.
        db = tmp_path / "ql-grace.db"
        shutil.copyfile(template, db)
        args = ["reconcile", "--db", str(db), "--receipt-root", str(receipts), "--json"]
        proc = signalled_in_the_grace(args, signum)
        assert proc.returncode == -signum, proc.stderr
        ended_by_signal += 1
        assert one_line(proc.stderr).startswith(f"qlfsm: interrupted ({name})")
        assert proc.stdout == ""
        assert aggregates(db) <= WHOLE, aggregates(db)
    assert ended_by_signal >= 1


@linux_only
def test_wchan_shows_a_sleeping_process() -> None:
    # What the grace test below relies on to find its moment, checked on its own.
    sleeper = subprocess.Popen(["sleep", "5"])
    try:
        deadline = time.monotonic() + 10
        while not in_nanosleep(sleeper.pid):
            assert time.monotonic() < deadline, Path(f"/proc/{sleeper.pid}/wchan").read_text()
            time.sleep(0.001)
    finally:
        sleeper.kill()
        sleeper.wait()


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_publication_grace_keeps_what_was_committed_and_nothing_else(
    template_db: Path, tmp_path: Path, receipts: Path, signum: int
) -> None:
    with primary_fixture(template_db, tmp_path) as (db, _):
        args = ["reconcile", "--db", str(db), "--receipt-root", str(receipts), "--json"]
        # The only sleep of the pass is the grace (spec 04 row 13): the kernel shows it.
        proc, _ = signalled(args, signum, until=in_nanosleep)
        assert proc.returncode == -signum
        assert one_line(proc.stderr).startswith(
            f"qlfsm: interrupted ({signal.Signals(signum).name})"
        )
        assert proc.stdout == ""
        # Phase 1 committed the claimed run (row 7); the two dead ones still wait for their
        # second receipt read, so they are untouched: never `lost` without it.
        assert sorted(aggregates(db)) == [("lost", "lost"), ("running", "running")]
        again = run(args, stdout=subprocess.PIPE)
        assert again.returncode == 0 and json.loads(again.stdout)["recovered"] == 2


@linux_only
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_shadow_signalled_at_any_moment_still_fails_open_with_its_audit_record(
    tmp_path: Path, signum: int
) -> None:
    template = LegacyDb(tmp_path / "template-shadow.db")
    bulk_runs(template.conn, 128, status="dispatching", attempt="claimed")
    template.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    template.close()
    error_type = "KeyboardInterrupt" if signum == signal.SIGINT else "Terminated"
    audited_failure = 0

    def shadow(i: int, **kw: Any) -> tuple[Path, subprocess.CompletedProcess[str], float]:
        db = tmp_path / f"ql-{i}.db"
        shutil.copyfile(template.path, db)
        args = ["shadow", "--db", str(db), "--origins", "manual", "--json"]
        proc, took = signalled(args, signum, **kw)
        return db, proc, took

    _, undisturbed, length = shadow(-1, until=lambda pid: False)
    assert json.loads(undisturbed.stdout)["summary"]["markedLost"] == 128
    for i, delay in enumerate(spread(length)):
        db, proc, _ = shadow(i, delay_s=delay)
        assert proc.returncode == 0, (delay, proc.stderr)  # fail-open (spec 06)
        if not proc.stderr:  # the signal came after the pass: a whole record
            assert json.loads(proc.stdout)["state"] in ("reconciled", "incomplete")
            continue
        line = one_line(proc.stderr)
        assert line.startswith(f"qlfsm: shadow interrupted ({signal.Signals(signum).name})")
        if proc.stdout:  # the command had started: its record says what happened
            assert json.loads(proc.stdout) == {"state": "failed", "errorType": error_type}
            audited_failure += 1
        # ADR-0448 §6: the Attempt moves first, the Run second; a Run is never ahead.
        with contextlib.closing(sqlite3.connect(db)) as conn:
            ahead = conn.execute(
                'SELECT COUNT(*) FROM "Runs" r JOIN "RunAttempts" a ON a.run_id = r.id '
                "WHERE r.status = 'lost' AND a.status <> 'lost'"
            ).fetchone()[0]
        assert ahead == 0
    assert audited_failure >= 1


class DiesWithASignal:
    """An object whose finalizer receives SIGINT: the handler runs inside ``__del__``, where
    Python cannot raise (it prints "Exception ignored" and drops the exception) - as it does
    when a signal lands in an import lock's weakref callback."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # bytecodes: the Python-level handler runs among them
            pass


def test_an_interrupt_dropped_inside_a_finalizer_is_delivered_again_where_it_can_raise(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from reconciler.cli import _guard as _cliguard

    _cliguard.start(in_process=True)
    try:
        with pytest.raises(KeyboardInterrupt):
            DiesWithASignal()  # dropped at once: __del__ runs here
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.001)
    finally:
        assert _cliguard.finish(0) == 0
    assert "Exception ignored" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_shadow_interrupt_caught_inside_an_exec_still_exits_0(
    db: LegacyDb, tmp_path: Path
) -> None:
    # CPython marks a KeyboardInterrupt that ends an exec() of source text (dataclasses and
    # namedtuple build methods that way) as "unhandled" for the whole process, caught or
    # not; run with `-m` (as `python -m reconciler` is), its exit would then turn shadow's
    # fail-open 0 into 130. The pass is replaced by one that is interrupted inside an exec.
    (tmp_path / "interrupted_in_exec.py").write_text(
        "import sys\n"
        "from reconciler import _shadow_run\n"
        "def interrupted_pass(*args, **kwargs):\n"
        "    exec('import os, signal\\nos.kill(os.getpid(), signal.SIGINT)\\n'\n"
        "         'for _ in range(10000): pass')\n"
        "_shadow_run.run_shadow = interrupted_pass\n"
        "from reconciler.cli._main import main\n"
        f"sys.argv = ['qlfsm', 'shadow', '--db', {db.path!r}, '--origins', 'manual', '--json']\n"
        "raise SystemExit(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "interrupted_in_exec"],
        capture_output=True, text=True, timeout=60, env={**ENV, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "KeyboardInterrupt"}
    assert one_line(proc.stderr).startswith("qlfsm: shadow interrupted (SIGINT)")


def test_an_interrupt_cannot_leave_a_half_written_cursor_file_or_a_stray_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler import _cursor

    cursor = tmp_path / "shadow.cursor"
    _cursor.store_cursor(str(cursor), (5, "run-a"))
    before = cursor.read_bytes()

    def interrupted_fsync(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cursor.os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        _cursor.store_cursor(str(cursor), (9, "run-b"))
    assert cursor.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shadow.cursor"]
    assert _cursor.read_cursor(str(cursor)) == (5, "run-a")


# --- the resume cursor is read only from a regular file, bounded --------------------------


def shadow_with_cursor(db: LegacyDb, cursor: Path) -> subprocess.CompletedProcess[str]:
    return run(
        ["shadow", "--db", db.path, "--origins", "manual", "--resume-cursor", str(cursor),
         "--json"],
        stdout=subprocess.PIPE,
    )  # fmt: skip


def test_a_fifo_as_resume_cursor_fails_open_at_once_instead_of_hanging(
    db: LegacyDb, tmp_path: Path
) -> None:
    fifo = tmp_path / "cursor.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    proc = shadow_with_cursor(db, fifo)
    assert time.monotonic() - started < 30  # the issue: it waited for a writer forever
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "InvalidResumeCursor"}
    assert "names a FIFO, not a regular file" in one_line(proc.stderr)
    assert fifo.exists()  # left alone, never replaced or removed


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.symlink_to("/dev/zero"), "names a symbolic link"),
        (lambda p: p.mkdir(), "names a directory"),
        (lambda p: p.write_bytes(b" " * 5000), "is larger than a cursor"),
        (lambda p: p.write_bytes(b'{"schemaVersion":1,"createdAtMs":true,"runId":"r"}'), "wrote"),
        (lambda p: p.write_bytes(b"\xff\xfe"), "not JSON"),
    ],
    ids=["symlink to /dev/zero", "directory", "oversized", "bool time", "not UTF-8"],
)
def test_a_resume_cursor_that_is_not_a_small_regular_cursor_file_fails_open_in_one_line(
    db: LegacyDb, tmp_path: Path, make: Any, says: str
) -> None:
    cursor = tmp_path / "cursor"
    make(cursor)
    proc = shadow_with_cursor(db, cursor)
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "InvalidResumeCursor"}
    line = one_line(proc.stderr)
    assert says in line and str(tmp_path) not in line


def test_a_character_device_as_resume_cursor_is_refused_without_reading_it(
    db: LegacyDb, tmp_path: Path
) -> None:
    # /dev/zero itself: read, it would never end.
    proc = shadow_with_cursor(db, Path("/dev/zero"))
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"state": "failed", "errorType": "InvalidResumeCursor"}
    assert "names a character device" in one_line(proc.stderr)


def test_a_finished_pass_removes_only_a_regular_cursor_file(tmp_path: Path) -> None:
    from reconciler._cursor import store_cursor

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    store_cursor(str(fifo), None)
    assert fifo.exists()
    regular = tmp_path / "cursor"
    store_cursor(str(regular), (1, "r"))
    assert (regular.stat().st_mode & 0o777) == 0o600
    store_cursor(str(regular), None)
    assert not regular.exists()


def test_a_command_run_in_process_after_another_gets_the_default_advice_and_a_loud_closed_pipe(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `drain` advises where to go on after an interrupt and `inspect | head` ends quietly on a
    # closed pipe; the next command run in the same process (the Python API, tests) must not
    # inherit either.
    from reconciler.cli import _guard as _cliguard

    _cliguard.start(in_process=True)
    _cliguard.advise_after_interrupt("run qlfsm drain again for the rest")
    _cliguard.quiet_on_closed_pipe()
    assert _cliguard.finish(0) == 0
    capsys.readouterr()

    _cliguard.start(in_process=True)
    try:
        assert _cliguard.interrupted(KeyboardInterrupt()) == 130
        sys.stdout.write("x")
        cast(Any, sys.stdout).error = BrokenPipeError(32, "Broken pipe")
    finally:
        code = _cliguard.finish(0)
    err = capsys.readouterr().err
    assert "nothing is half-written - run the command again to finish" in err
    assert "drain again" not in err
    assert code == _cliguard.EXIT_OUTPUT
    assert "the output could not be written to stdout ([Errno 32] Broken pipe)" in err
