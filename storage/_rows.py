"""Typed rows read back from the node's tables."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any, NamedTuple


class RunRow(NamedTuple):
    """A Runs row as selected by ``RUN_COLUMNS``: a row is read by position, so it is a tuple."""

    id: str
    project_id: str
    task_id: str
    task_name: str | None
    legacy_cron_id: int | None
    execution_origin: str
    execution_owner: str
    status: str
    version: int
    event_sequence: int
    created_at_ms: int
    queued_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    cancel_requested_at_ms: int | None
    cancel_reason: str | None
    error_code: str | None
    error_summary: str | None


class AttemptRow(NamedTuple):
    """An Attempts row as selected by ``ATTEMPT_COLUMNS`` (a tuple, like every row read)."""

    id: str
    run_id: str
    attempt: int
    status: str
    executor_type: str
    executor_handle: str | None
    pid: int | None
    log_artifact_id: str | None
    callback_token_hash: str | None
    callback_sequence: int
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    exit_code: int | None
    error_code: str | None
    error_summary: str | None


# One RunEvents row's columns as SQLite returns them, in ``EventRow``'s field order (the payload
# is its JSON text): id, run_id, sequence, type, dedupe_key, actor_type, actor_id, attempt_id,
# payload, created_at_ms.
EventColumns = tuple[str, str, int, str, "str | None", str, "str | None", "str | None", str, int]


class EventRow(NamedTuple):
    """A RunEvents row as selected by ``EVENT_COLUMNS``, its payload parsed."""

    id: str
    run_id: str
    sequence: int
    type: str
    dedupe_key: str | None
    actor_type: str
    actor_id: str | None
    attempt_id: str | None
    payload: dict[str, Any]
    created_at_ms: int

    @classmethod
    def of_columns(cls, row: sqlite3.Row | EventColumns, payload: Any = None) -> EventRow:
        """A row selected as ``EVENT_COLUMNS``, by position (the columns are the fields, in
        order): what a long history's pages are read with. ``payload``: the payload already
        parsed from ``row``'s text (it is parsed here when None)."""
        if payload is None:
            payload = json.loads(row[8])
        return cls(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], payload, row[9])


def columns(row: type[Any]) -> tuple[str, ...]:
    """A row type's columns: its fields, in the order every SELECT of it lists them."""
    return tuple(row._fields)


RUN_COLUMNS = ", ".join(columns(RunRow))
ATTEMPT_COLUMNS = ", ".join(columns(AttemptRow))
EVENT_COLUMNS = ", ".join(columns(EventRow))


def uuid7() -> str:
    """A UUIDv7 (time-ordered), the identifier shape QingLong uses."""
    ms = int(time.time() * 1000) & ((1 << 48) - 1)
    r = os.urandom(10)
    # 48 bits of milliseconds, version 7 over 12 random bits, variant 0b10 over 62 random bits.
    marked = bytes((0x70 | r[0] & 0x0F, r[1], 0x80 | r[2] & 0x3F))
    h = (ms.to_bytes(6, "big") + marked + r[3:]).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
