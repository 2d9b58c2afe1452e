"""A planned edge of any lifecycle, committed on the caller's own table: one compare-and-set
transaction, as the Run and Attempt writes do (spec 01 rule 5), offered for any machine.

The row moves from the edge's source status to its destination only if it still has the
version the caller read: the compare is in the UPDATE's WHERE and checked by the row count;
anything else is the named :class:`Conflict` and nothing is written. An event row, if given,
is inserted in the same transaction. The transaction is the one helper of this package
(:func:`storage.in_transaction`: ``BEGIN IMMEDIATE``, rollback on any error, a bounded retry
on a busy database; it prepares the connection as every QingLong write does: WAL, foreign keys).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from typing import Protocol

from ._connection import in_transaction
from ._errors import Conflict, InvalidField, RowNotInserted

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PlannedEdge(Protocol):
    """What is committed: a planned edge (``fsm.Step`` is one)."""

    @property
    def source(self) -> str: ...

    @property
    def dest(self) -> str: ...


def _name(what: str, name: str) -> str:
    # Table and column names go into the SQL text: only plain identifiers, quoted.
    if not _NAME.fullmatch(name):
        raise InvalidField(
            f"{what} {name!r} is not a plain SQL name; use letters, digits and '_' only"
        )
    return f'"{name}"'


def commit_edge(
    conn: sqlite3.Connection,
    step: PlannedEdge,
    *,
    table: str,
    key: object,
    version: int,
    key_column: str = "id",
    status_column: str = "status",
    version_column: str = "version",
    event_table: str | None = None,
    event: Mapping[str, object] | None = None,
) -> int:
    """Move row ``key`` of ``table`` from ``step.source`` to ``step.dest`` if it is still at
    ``version``, and insert ``event`` (column -> value) into ``event_table`` in the same
    transaction. Returns the row's new version (``version + 1``); Conflict if the row is not
    at ``step.source`` and ``version`` any more (re-read, plan again)."""
    t, k = _name("table", table), _name("key column", key_column)
    s, v = _name("status column", status_column), _name("version column", version_column)
    if (event is None) != (event_table is None):
        raise InvalidField("an event row needs both event_table and event; give both or neither")
    insert: tuple[str, tuple[object, ...]] | None = None
    if event is not None and event_table is not None:
        if not event:
            raise InvalidField("the event row has no columns; give at least one column")
        columns = ", ".join(_name("event column", c) for c in event)
        marks = ", ".join("?" for _ in event)
        sql = f"INSERT INTO {_name('event table', event_table)} ({columns}) VALUES ({marks})"
        insert = (sql, tuple(event.values()))

    def work(c: sqlite3.Connection) -> int:
        moved = c.execute(
            f"UPDATE {t} SET {s} = ?, {v} = {v} + 1 WHERE {k} = ? AND {s} = ? AND {v} = ?",
            (step.dest, key, step.source, version),
        ).rowcount
        if moved != 1:
            raise Conflict(f"row of {table}", str(key), f"{step.source} at version {version}")
        if insert is not None and c.execute(*insert).rowcount != 1:
            raise RowNotInserted(str(event_table), f"the event of {step.source} -> {step.dest}")
        return version + 1

    return in_transaction(conn, work)
