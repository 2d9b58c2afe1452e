"""`qlfsm startup --first-boot`: the node's first start creates its database (docs/decisions.md
D-21).

Without the flag a missing database stays a fatal error (exit 1): an empty new database would
make start-up "safe" and forget every crashed run of the real one, so only the operator's
explicit first-boot choice creates it, and only as a FILE in a directory that exists (a typo'd
``--db`` names a directory that does not).

The new database is built beside its final name and appears there only complete: a private
file in the same directory gets the `qlfsm db init` schema (``storage.init_schema``), is
closed (its WAL checkpointed into it), synced, and hard-linked to the final name. ``link(2)``
never replaces an existing name, so of two start-ups racing on an empty volume exactly one
creates the database and reports `first boot`; the other finds it already there (EEXIST) and
is a normal start-up on that complete file. A start-up without the flag never sees a
half-initialized schema either (``init_schema`` is several transactions).
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import TYPE_CHECKING

from reconciler._atomic import fsync_dir, fsync_file
from reconciler._errors import FatalError

if TYPE_CHECKING:
    from storage import LockBudget

# What SQLite may leave beside a database file it had open.
SIDE_FILES = ("", "-wal", "-shm", "-journal")


def check_directory(db: str) -> str:
    """The directory of ``db``; FatalError (exit 1, one line) when it does not exist."""
    parent = os.path.dirname(os.path.abspath(db)) or "/"
    if not os.path.isdir(parent):
        raise FatalError(
            f"database {db!r} does not exist and neither does its directory {parent!r}: "
            "--first-boot creates the database file, never a directory; check --db (a typo?) "
            "or create the directory first"
        )
    return parent


def create_database(db: str, lock: LockBudget) -> bool:
    """Create ``db``, missing when the caller looked (`startup`), with the `db init` schema.
    True: this call created it (the first boot); False: the name exists by now (another
    start-up created it first): the caller goes on with a normal start-up."""
    parent = check_directory(db)
    from storage import StorageError, connect, init_schema, lock_budget

    tmp = os.path.join(
        parent, f".{os.path.basename(db)}.first-boot.{os.getpid()}.{os.urandom(4).hex()}"
    )
    try:
        try:
            with contextlib.closing(connect(tmp, create=True)) as conn:
                with lock_budget(conn, lock):
                    init_schema(conn, path=db)
                # The schema goes into the main file before it gets its final name: a -wal
                # beside the private name would not follow the link.
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            fsync_file(tmp)
        except StorageError as exc:
            raise FatalError(f"first boot: cannot create database {db!r}: {exc}") from exc
        except OSError as exc:
            raise FatalError(
                f"first boot: cannot create database {db!r} in {parent!r} ({exc.strerror}); "
                "make the directory writable for this user and run again"
            ) from exc
        try:
            os.link(tmp, db)
        except FileExistsError:
            return False  # another start-up's first boot won the race: its file is complete
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                raise FatalError(
                    f"first boot: cannot create database {db!r}: the filesystem of {parent!r} "
                    f"refuses a hard link ({exc.strerror}); create it with "
                    f"`qlfsm db init --db {db}` and start again"
                ) from exc
            raise FatalError(
                f"first boot: cannot create database {db!r} ({exc.strerror}); make {parent!r} "
                "writable for this user and run again"
            ) from exc
        fsync_dir(parent)
        return True
    finally:
        for suffix in SIDE_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp + suffix)
