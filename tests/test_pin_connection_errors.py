"""Every SQLite failure named (``storage.database_error``, ``storage.connect``): which storage
error each driver error becomes, and the exact one-line message the operator reads, on real
files in the state that decides it (read-only, immutable, unreadable, full, a hot journal).

The driver's errors are real where SQLite gives them cheaply in process (a lock held by a
second connection, a write on a read-only connection, a hot rollback journal, a file that is
not a database, a text value that is not UTF-8); elsewhere they are built as the driver builds
them (``sqlite_errorcode``/``sqlite_errorname``), since only the code and the file are read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _primary_support import ForbiddenProvider, make_candidate
from _support import read_only

from reconciler.node import FakeClock, FileReceiptStore
from reconciler.primary import reconcile_connection
from storage import (
    LOCK_BUDGET_ENV,
    Busy,
    DatabaseCorrupt,
    DatabaseFull,
    DatabaseMissing,
    DatabaseReadOnly,
    DatabaseUnusable,
    HotJournal,
    LockBudget,
    NotAQingLongDatabase,
    NotARegularFile,
    Repository,
    busy_wait_s,
    connect,
    database_error,
    in_transaction,
    lock_budget,
    lock_budget_from_env,
    write_blocker,
)

READ_ONLY_FIX = (
    "make that writable for this user and run again (SQLite writes the database and the -wal "
    "and -shm files beside it)"
)
CHECK = "check the file, its directory and their permissions, and run again"
NOBODY = 65534


def sqlite_error(message: str, code: int, name: str) -> sqlite3.OperationalError:
    """An error as the driver raises it: the message, the extended code and its name."""
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code
    error.sqlite_errorname = name
    return error


def readonly_error() -> sqlite3.OperationalError:
    return sqlite_error(
        "attempt to write a readonly database", sqlite3.SQLITE_READONLY, "SQLITE_READONLY"
    )


def cantopen_error() -> sqlite3.OperationalError:
    return sqlite_error("unable to open database file", sqlite3.SQLITE_CANTOPEN, "SQLITE_CANTOPEN")


def io_error() -> sqlite3.OperationalError:
    return sqlite_error("disk I/O error", sqlite3.SQLITE_IOERR_SHMSIZE, "SQLITE_IOERR_SHMSIZE")


def a_database(path: Path) -> Path:
    """A small real SQLite file (no -wal/-shm beside it)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
    return path


@contextlib.contextmanager
def unreadable(path: Path) -> Iterator[None]:
    """``path`` not readable by this user: mode 0, and for root a real uid of nobody for the
    block (``access(2)`` checks the real uid, which root's capabilities would otherwise pass;
    the effective uid stays root's, so the uid is given back after)."""
    mode = path.stat().st_mode
    path.chmod(0)
    try:
        if os.getuid() != 0:
            yield
            return
        os.setresuid(NOBODY, -1, -1)
        try:
            yield
        finally:
            os.setresuid(0, -1, -1)
    finally:
        path.chmod(mode)


def hot_journal(path: Path) -> Path:
    """``path`` with a real hot rollback journal beside it: the database and the journal of a
    writer in mid-transaction, copied while its lock held them (as a crash leaves them)."""
    scratch = path.with_name("writer.db")
    with contextlib.closing(sqlite3.connect(scratch, isolation_level=None)) as writer:
        writer.execute("PRAGMA journal_mode=DELETE")
        writer.execute("CREATE TABLE t (x)")
        writer.execute("PRAGMA cache_size=1")  # the change spills into the file mid-transaction
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO t SELECT zeroblob(3000) FROM (WITH RECURSIVE n(i) AS "
            "(SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) SELECT i FROM n)"
        )
        shutil.copyfile(scratch, path)
        shutil.copyfile(f"{scratch}-journal", f"{path}-journal")
        writer.execute("ROLLBACK")
    return path


def hot_journal_error(path: Path) -> sqlite3.OperationalError:
    """The real error of a read-only connection reading ``path`` with its hot journal."""
    with (
        contextlib.closing(connect(str(path), read_only=True)) as reader,
        pytest.raises(sqlite3.OperationalError) as raised,
    ):
        reader.execute("SELECT COUNT(*) FROM t").fetchall()
    assert raised.value.sqlite_errorcode == sqlite3.SQLITE_READONLY_ROLLBACK
    return raised.value


def hot_journal_message(path: str, unwritable: str | None) -> str:
    fix = (
        f"open it once with write access so SQLite rolls the crashed transaction back, e.g. "
        f"`qlfsm inspect --db {path}` (it only reads; the rollback restores the last commit), "
        "then run again; never delete the -journal file (the database would stay half-written)"
    )
    if unwritable is not None:
        fix = f"{unwritable}: make it writable for this user, then {fix}"
    return (
        f"database {path!r} cannot be read yet: a writer crashed mid-transaction and left "
        f"{path + '-journal'!r} (a hot rollback journal); {fix}"
    )


def named_read_only(path: Path) -> str:
    error = database_error(str(path), readonly_error())
    assert type(error) is DatabaseReadOnly
    return str(error)


def read_only_message(path: Path, what: str) -> str:
    return f"database {str(path)!r} cannot be written: {what}; {READ_ONLY_FIX}"


# --- locked ------------------------------------------------------------------------------------


def test_a_lock_held_by_another_connection_is_named_busy_after_one_try_with_the_wait(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with (
            contextlib.closing(connect(str(path), busy_timeout_s=0)) as conn,
            pytest.raises(sqlite3.OperationalError) as raised,
        ):
            conn.execute("BEGIN IMMEDIATE")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    error = database_error(str(path), raised.value)
    assert type(error) is Busy
    assert (error.tries, error.waited_s, error.path) == (1, 0.0, str(path))
    assert str(error) == (
        f"database {str(path)!r} is locked by another process (waited 0.0 s); try again when "
        "that process has finished writing"
    )
    waited = database_error(str(path), raised.value, waited_s=2.5)
    assert isinstance(waited, Busy)
    assert (waited.tries, waited.waited_s) == (1, 2.5)
    assert "(waited 2.5 s)" in str(waited)


def test_the_wait_of_a_busy_statement_is_the_timeout_a_lock_budget_lowered_it_to(
    db_path: Path,
) -> None:
    with contextlib.closing(connect(str(db_path), busy_timeout_s=5.0)) as conn:
        assert busy_wait_s(conn) == 5.0
        with lock_budget(conn, LockBudget(1.0)):
            in_transaction(conn, lambda c: None)  # the first try fits the timeout to the budget
            assert busy_wait_s(conn) == 1.0
        assert busy_wait_s(conn) == 5.0
    with contextlib.closing(sqlite3.connect(db_path)) as plain:
        assert busy_wait_s(plain) is None


# --- read-only: which part cannot be written -----------------------------------------------------


def test_a_write_on_a_read_only_connection_to_a_writable_file_says_sqlite_reports_it(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db")
    with (
        contextlib.closing(connect(str(path), read_only=True)) as conn,
        pytest.raises(sqlite3.OperationalError) as raised,
    ):
        conn.execute("CREATE TABLE other (y)")
    assert raised.value.sqlite_errorcode == sqlite3.SQLITE_READONLY
    error = database_error(str(path), raised.value)
    assert type(error) is DatabaseReadOnly
    assert error.what == "SQLite reports it read-only"
    assert str(error) == read_only_message(path, "SQLite reports it read-only")


def test_a_read_only_error_for_a_path_that_is_no_file_says_sqlite_reports_it(
    tmp_path: Path,
) -> None:
    assert named_read_only(tmp_path / "gone.db") == read_only_message(
        tmp_path / "gone.db", "SQLite reports it read-only"
    )


def test_a_read_only_database_file_is_named_as_the_file(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db")
    with read_only(path):
        got = named_read_only(path)
    assert got == read_only_message(path, "the file is read-only")


def test_a_database_in_a_read_only_directory_names_the_directory(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = a_database(folder / "ql.db")
    with read_only(folder):
        got = named_read_only(path)
    assert got == read_only_message(path, f"its directory {str(folder)!r} is read-only")


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_read_only_wal_or_shm_file_beside_the_database_is_named(
    tmp_path: Path, suffix: str
) -> None:
    path = a_database(tmp_path / "ql.db")
    for each in ("-wal", "-shm"):
        Path(f"{path}{each}").write_bytes(b"")
    side = Path(f"{path}{suffix}")
    with read_only(side):
        got = named_read_only(path)
    assert got == read_only_message(path, f"{str(side)!r} is read-only")


def test_writable_wal_and_shm_files_beside_the_database_are_not_blamed(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db")
    for each in ("-wal", "-shm"):
        Path(f"{path}{each}").write_bytes(b"")
    assert named_read_only(path) == read_only_message(path, "SQLite reports it read-only")


# --- a hot rollback journal a read-only connection cannot roll back ------------------------------


def test_a_hot_journal_on_a_writable_file_names_the_crashed_writer_and_the_writable_open(
    tmp_path: Path,
) -> None:
    path = hot_journal(tmp_path / "ql.db")
    error = database_error(str(path), hot_journal_error(path))
    assert type(error) is HotJournal
    assert str(error) == hot_journal_message(str(path), None)
    assert error.what == f"the hot journal {str(path) + '-journal'!r} must be rolled back first"


def test_a_hot_journal_on_a_read_only_file_says_first_to_make_the_file_writable(
    tmp_path: Path,
) -> None:
    path = hot_journal(tmp_path / "ql.db")
    exc = hot_journal_error(path)
    with read_only(path):
        error = database_error(str(path), exc)
    assert type(error) is HotJournal
    assert str(error) == hot_journal_message(str(path), "the file is read-only")


# --- cannot be opened ----------------------------------------------------------------------------


def test_a_database_that_cannot_be_created_names_the_directory_it_would_be_created_in(
    tmp_path: Path,
) -> None:
    path = tmp_path / "missing" / "ql.db"
    with pytest.raises(sqlite3.OperationalError) as raised:
        sqlite3.connect(f"file:{path}?mode=rwc", uri=True)
    assert raised.value.sqlite_errorcode == sqlite3.SQLITE_CANTOPEN
    error = database_error(str(path), raised.value)
    assert type(error) is DatabaseUnusable
    assert str(error) == (
        f"database {str(path)!r} cannot be opened: it cannot be created in "
        f"{str(tmp_path / 'missing')!r} (is that directory writable?); {CHECK}"
    )


def test_a_readable_file_in_a_writable_directory_that_sqlite_cannot_open_says_so(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db")
    error = database_error(str(path), cantopen_error())
    assert type(error) is DatabaseUnusable
    assert str(error) == f"database {str(path)!r} cannot be opened: SQLite cannot open it; {CHECK}"


def test_a_readable_file_in_a_read_only_directory_is_read_only_for_want_of_wal_and_shm(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = a_database(folder / "ql.db")
    with read_only(folder):
        error = database_error(str(path), cantopen_error())
    assert type(error) is DatabaseReadOnly
    assert str(error) == read_only_message(
        path, f"its directory {str(folder)!r} is read-only (no -wal/-shm files there)"
    )


def test_a_file_this_user_cannot_read_is_named_unreadable_not_read_only(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = a_database(folder / "ql.db")
    with read_only(folder), unreadable(path):
        error = database_error(str(path), cantopen_error())
    assert type(error) is DatabaseUnusable
    assert str(error) == (
        f"database {str(path)!r} cannot be opened: the file is not readable by this user; {CHECK}"
    )


def test_connect_names_a_missing_directory_as_a_file_that_cannot_be_created(
    tmp_path: Path,
) -> None:
    path = tmp_path / "missing" / "ql.db"
    with pytest.raises(DatabaseUnusable) as raised:
        connect(str(path), create=True)
    assert str(raised.value) == (
        f"database {str(path)!r} cannot be opened: it cannot be created in "
        f"{str(tmp_path / 'missing')!r} (is that directory writable?); {CHECK}"
    )


# --- corrupt, full, I/O ----------------------------------------------------------------------


def test_a_corrupt_database_is_named_corrupt_with_sqlites_words_and_the_restore_advice(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "ql.db")
    exc = sqlite_error("database disk image is malformed", sqlite3.SQLITE_CORRUPT, "SQLITE_CORRUPT")
    error = database_error(path, exc)
    assert type(error) is DatabaseCorrupt
    assert error.why == "database disk image is malformed"
    assert str(error) == (
        f"database {path!r} is corrupt or truncated (database disk image is malformed); stop "
        "and restore it from a backup (or repair it with the sqlite3 `.recover` command); do "
        "not replace it with a new database, its runs would be forgotten"
    )


def full_message(path: Path) -> str:
    return (
        f"database {str(path)!r} cannot be written: the filesystem holding "
        f"{str(path.parent)!r} is full; free space there and run again (nothing was "
        "half-written: each change is one transaction)"
    )


def test_sqlite_full_is_named_full_with_the_directory(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"
    exc = sqlite_error("database or disk is full", sqlite3.SQLITE_FULL, "SQLITE_FULL")
    error = database_error(str(path), exc)
    assert type(error) is DatabaseFull
    assert str(error) == full_message(path)


def fake_statvfs(monkeypatch: pytest.MonkeyPatch, free_blocks: int) -> None:
    """The filesystem's free blocks as ``free_blocks`` (a fault injected at ``os.statvfs``)."""
    real = os.statvfs

    def statvfs(path: str) -> Any:
        got = real(path)
        return type("Vfs", (), {"f_bavail": free_blocks, "f_frsize": got.f_frsize})()

    monkeypatch.setattr(os, "statvfs", statvfs)


def io_message(path: Path) -> str:
    return f"database {str(path)!r} hit an I/O error (disk I/O error); check the disk"


def test_an_io_error_with_room_left_is_named_an_io_error(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"  # tmp_path's real filesystem has room
    error = database_error(str(path), io_error())
    assert type(error) is DatabaseUnusable
    assert str(error) == io_message(path)


@pytest.mark.parametrize(("free_blocks", "full"), [(0, True), (1, False)])
def test_an_io_error_is_named_full_only_when_no_block_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free_blocks: int, full: bool
) -> None:
    path = tmp_path / "ql.db"
    fake_statvfs(monkeypatch, free_blocks)
    error = database_error(str(path), io_error())
    assert str(error) == (full_message(path) if full else io_message(path))
    assert isinstance(error, DatabaseFull) is full


def test_an_io_error_whose_filesystem_cannot_be_examined_is_an_io_error(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "ql.db"  # statvfs of a missing directory fails
    error = database_error(str(path), io_error())
    assert type(error) is DatabaseUnusable
    assert str(error) == io_message(path)


# --- a bad row, or not QingLong's --------------------------------------------------------------


def test_a_text_value_that_is_not_utf8_is_a_bad_row_not_a_foreign_file(tmp_path: Path) -> None:
    path = a_database(tmp_path / "ql.db")
    with (
        contextlib.closing(connect(str(path))) as conn,
        pytest.raises(sqlite3.OperationalError) as raised,
    ):
        conn.execute("SELECT CAST(x'ff' AS TEXT)").fetchall()
    error = database_error(str(path), raised.value)
    assert type(error) is DatabaseUnusable
    assert str(error) == (
        f"database {str(path)!r} holds a row this command cannot read ({raised.value}); repair "
        "or remove that row"
    )
    assert str(raised.value).startswith("Could not decode to UTF-8 column ")


def test_a_file_that_is_not_a_database_is_not_qinglongs(tmp_path: Path) -> None:
    path = tmp_path / "ql.db"
    path.write_bytes(b"not a database " * 300)
    with (
        contextlib.closing(connect(str(path))) as conn,
        pytest.raises(sqlite3.DatabaseError) as raised,
    ):
        conn.execute("SELECT name FROM sqlite_master").fetchall()
    error = database_error(str(path), raised.value)
    assert type(error) is NotAQingLongDatabase
    assert error.why == "file is not a database"
    assert str(error) == (
        f"{str(path)!r} is not a QingLong 3.0 database (file is not a database); point --db at "
        "the node's SQLite file"
    )


def test_a_driver_error_without_a_code_is_not_qinglongs_rather_than_a_bad_row(
    tmp_path: Path,
) -> None:
    path = str(a_database(tmp_path / "ql.db"))
    conn = connect(path)
    conn.close()
    with pytest.raises(sqlite3.ProgrammingError) as raised:
        conn.execute("SELECT 1")
    assert getattr(raised.value, "sqlite_errorcode", None) is None
    error = database_error(path, raised.value)
    assert type(error) is NotAQingLongDatabase
    assert str(error) == (
        f"{path!r} is not a QingLong 3.0 database (Cannot operate on a closed database.); point "
        "--db at the node's SQLite file"
    )


# --- not a regular file: named by its kind ---------------------------------------------------


def refused_kind(path: str) -> str:
    with pytest.raises(NotARegularFile) as raised:
        connect(path)
    assert str(raised.value) == (
        f"database {path!r} is a {raised.value.kind}, not a regular file; point --db at the "
        "node's SQLite file"
    )
    return raised.value.kind


def test_connect_names_a_directory_a_fifo_and_a_character_device_by_their_kind(
    tmp_path: Path,
) -> None:
    (tmp_path / "dir.db").mkdir()
    os.mkfifo(tmp_path / "fifo.db")
    assert refused_kind(str(tmp_path / "dir.db")) == "directory"
    assert refused_kind(str(tmp_path / "fifo.db")) == "FIFO (named pipe)"
    assert refused_kind("/dev/null") == "character device"


def test_connect_names_a_socket_by_its_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a socket's path must be short
    with contextlib.closing(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)) as server:
        server.bind("sock.db")
        assert refused_kind("sock.db") == "socket"


def a_block_device(tmp_path: Path) -> str:
    made = tmp_path / "blk.db"
    try:
        os.mknod(made, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    except OSError:
        pass
    else:
        return str(made)
    with os.scandir("/dev") as entries:
        for entry in entries:
            if stat.S_ISBLK(entry.stat(follow_symlinks=False).st_mode):
                return entry.path
    pytest.skip("no block device here, and none can be made")


def test_connect_names_a_block_device_by_its_kind(tmp_path: Path) -> None:
    assert refused_kind(a_block_device(tmp_path)) == "block device"


def test_a_file_of_no_known_kind_is_a_special_file() -> None:
    # Not reachable through connect on Linux (os.stat follows links; every other kind is
    # named above), so the fallback is asked directly: a mode with no file type bits.
    from storage._connection import file_kind

    assert file_kind(0) == "special file"


# --- which errors stop a pass's writes ---------------------------------------------------------


def test_a_full_filesystem_stops_every_later_write_whether_named_or_from_the_driver(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "ql.db")
    full = sqlite_error("database or disk is full", sqlite3.SQLITE_FULL, "SQLITE_FULL")
    assert write_blocker(full) == "database_full"
    assert write_blocker(DatabaseFull(path)) == "database_full"
    assert write_blocker(database_error(path, full)) == "database_full"


def test_only_the_drivers_operational_errors_are_read_for_their_code(tmp_path: Path) -> None:
    # The driver raises every SQLITE_READONLY and SQLITE_FULL as an OperationalError; an error
    # of another class is one candidate's, whatever code it carries.
    for code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_FULL):
        other = sqlite3.DatabaseError("not the driver's")
        other.sqlite_errorcode = code
        assert write_blocker(other) is None
    assert write_blocker(readonly_error()) == "database_read_only"
    corrupt = sqlite_error("database disk image is malformed", sqlite3.SQLITE_CORRUPT, "X")
    assert write_blocker(corrupt) is None


# --- opening: what connect refuses, and the connection it returns --------------------------------


def test_connect_never_creates_a_missing_database_unless_asked(tmp_path: Path) -> None:
    (tmp_path / "file.db").write_bytes(b"")
    for missing in (tmp_path / "ql.db", tmp_path / "file.db" / "ql.db"):
        with pytest.raises(DatabaseMissing) as raised:
            connect(str(missing))
        assert str(raised.value) == (
            f"database {str(missing)!r} does not exist; create it with "
            f"`qlfsm db init --db {missing}`"
        )
        assert raised.value.path == str(missing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.db"]
    made = tmp_path / "ql.db"
    with contextlib.closing(connect(str(made), create=True)) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert made.is_file()


def test_a_database_removed_between_the_check_and_the_open_is_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file is examined first, then opened: SQLite itself must refuse to create it if it
    # went in between (mode=rw, not rwc), or start-up would run on an empty database.
    path = a_database(tmp_path / "ql.db")
    real = sqlite3.connect

    def removing_first(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        path.unlink()
        return real(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", removing_first)
    with pytest.raises(DatabaseUnusable):
        connect(str(path))
    assert list(tmp_path.iterdir()) == []


def test_the_database_is_named_to_sqlite_as_a_uri_on_every_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only a SQLite compiled with SQLITE_USE_URI (as this one is) reads a `file:` name as a URI
    # unasked; elsewhere the mode would be ignored and a file named "file:..." opened.
    path = a_database(tmp_path / "ql.db")
    real = sqlite3.connect
    uri_flags: list[object] = []

    def spy(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        uri_flags.append(kwargs.get("uri"))
        return real(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", spy)
    for kwargs in ({}, {"read_only": True}, {"create": True}):
        with contextlib.closing(connect(str(path), **kwargs)):
            pass
    assert uri_flags == [True, True, True]


def test_a_path_that_cannot_be_examined_says_why(tmp_path: Path) -> None:
    loop = tmp_path / "loop.db"
    loop.symlink_to(loop)
    with pytest.raises(DatabaseUnusable) as raised:
        connect(str(loop))
    assert str(raised.value) == (
        f"database {str(loop)!r} cannot be examined (Too many levels of symbolic links); check "
        "the path and its permissions"
    )


def test_a_path_with_uri_characters_opens_that_very_file(tmp_path: Path) -> None:
    # `%`, `?` and `#` mean something in a SQLite URI; "%41" would otherwise open "A".
    for name in ("p%41q.db", "p?q.db", "p#q.db", "a%25b?c#d.db"):
        path = a_database(tmp_path / name)
        with contextlib.closing(connect(str(path))) as conn:
            assert [tuple(r) for r in conn.execute("SELECT x FROM t")] == [(1,)]
            conn.execute("INSERT INTO t VALUES (2)")
        with contextlib.closing(connect(str(path), read_only=True)) as conn:
            assert [tuple(r) for r in conn.execute("SELECT x FROM t")] == [(1,), (2,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["p%41q.db", "p?q.db", "p#q.db", "a%25b?c#d.db"]
    )


def test_a_connection_has_the_busy_timeout_asked_for_and_no_implicit_transactions(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db")
    with contextlib.closing(connect(str(path), busy_timeout_s=0.25)) as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 250
        assert busy_wait_s(conn) == 0.25
        assert conn.isolation_level is None
        conn.execute("INSERT INTO t VALUES (2)")
        assert not conn.in_transaction  # autocommit: written at once
        row = conn.execute("SELECT x FROM t ORDER BY x DESC").fetchone()
        assert row["x"] == 2


# --- the lock budget ---------------------------------------------------------------------------


def test_a_lock_budget_starts_unspent_and_untried() -> None:
    for seconds in (0, 2):
        budget = LockBudget(seconds)
        assert type(budget.seconds) is float and budget.seconds == seconds
        assert type(budget.spent) is float and budget.spent == 0.0
        assert type(budget.tries) is int and budget.tries == 0
        assert budget.blocked is False
        assert budget.remaining() == seconds


def test_what_is_left_of_a_budget_is_never_below_zero() -> None:
    budget = LockBudget(2.0)
    budget.spent = 0.5
    assert budget.remaining() == 1.5
    budget.spent = 2.5
    assert budget.remaining() == 0.0


@pytest.mark.parametrize("seconds", [-1, -0.5, float("nan"), float("inf"), "5", None])
def test_a_lock_budget_is_a_finite_number_of_seconds_at_least_zero(seconds: Any) -> None:
    with pytest.raises(ValueError) as raised:
        LockBudget(seconds)
    assert str(raised.value) == "a lock budget is a finite number of seconds >= 0"


def test_the_lock_budget_comes_from_the_given_environment_else_the_processs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LOCK_BUDGET_ENV, raising=False)
    assert lock_budget_from_env({}).seconds == 5.0
    assert lock_budget_from_env({LOCK_BUDGET_ENV: "  "}).seconds == 5.0
    assert lock_budget_from_env({LOCK_BUDGET_ENV: " 1.5 "}).seconds == 1.5
    assert lock_budget_from_env({LOCK_BUDGET_ENV: "0"}).seconds == 0.0
    assert lock_budget_from_env().seconds == 5.0
    monkeypatch.setenv(LOCK_BUDGET_ENV, "0.25")
    assert lock_budget_from_env().seconds == 0.25
    assert lock_budget_from_env({}).seconds == 5.0  # the given environment, not the process's


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf"])
def test_a_bad_lock_budget_in_the_environment_says_how_to_fix_it(value: str) -> None:
    with pytest.raises(ValueError) as raised:
        lock_budget_from_env({LOCK_BUDGET_ENV: value})
    assert str(raised.value) == (
        "$QLFSM_LOCK_BUDGET_S must be a number of seconds >= 0 (default 5); fix or unset it"
    )


def test_a_budget_lowers_the_busy_timeout_to_what_is_left_and_only_beyond_the_slack(
    tmp_path: Path,
) -> None:
    path = a_database(tmp_path / "ql.db")

    def timeout_ms(c: sqlite3.Connection) -> int:
        return int(c.execute("PRAGMA busy_timeout").fetchone()[0])

    with contextlib.closing(connect(str(path), busy_timeout_s=5.0)) as conn:
        with lock_budget(conn, LockBudget(1.0)):
            assert in_transaction(conn, timeout_ms) == 1000
            assert busy_wait_s(conn) == 1.0
            # Less than the slack spent since: the timeout is not lowered again.
            assert in_transaction(conn, timeout_ms) == 1000
            assert busy_wait_s(conn) == 1.0
        assert timeout_ms(conn) == 5000 and busy_wait_s(conn) == 5.0
        with lock_budget(conn, LockBudget(9.0)):  # more than the timeout: left as it is
            assert in_transaction(conn, timeout_ms) == 5000
            assert busy_wait_s(conn) == 5.0
    # Exactly the slack below the timeout: not lowered.
    with (
        contextlib.closing(connect(str(path), busy_timeout_s=0.1)) as conn,
        lock_budget(conn, LockBudget(0.05)),
    ):
        assert in_transaction(conn, timeout_ms) == 100
        assert busy_wait_s(conn) == 0.1


def test_a_connection_remembers_its_path_so_a_pass_names_the_file_it_cannot_write(
    repo: Repository, db_path: Path, store: FileReceiptStore
) -> None:
    make_candidate(repo, "run-0", "at-0", attempt="claimed", run="dispatching")
    repo.conn.close()
    with contextlib.closing(connect(str(db_path), read_only=True)) as conn:
        summary = reconcile_connection(conn, store, ForbiddenProvider(), FakeClock())
    (only,) = summary["candidates"]
    assert only["reason"].startswith(
        f"error:DatabaseReadOnly: database {str(db_path)!r} cannot be written: SQLite reports "
        "it read-only; "
    )
