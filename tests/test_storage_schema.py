"""`db init` and the schema of spec 02 against the real QingLong 3.0 DDL (real SQLite files)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from _support import SYSTEM, T0

from storage import (
    DatabaseMissing,
    NotAQingLongDatabase,
    Repository,
    RunChange,
    check_schema,
    connect,
    init_schema,
)
from storage._ddl import QL3_HISTORY_DDL, RECEIPT_JOURNAL_0003, RUN_CORE_0001
from storage._schema import QLFSM_MIGRATIONS, checksum

# Transcribed from QingLong 3.0's `ql3-local-sqlite` migrations 0001-run-core and
# 0003-completion-receipt-journal (the DDL fact record), not from storage/_ddl.py.
QL3_TABLES = {
    "QingLong3SchemaMigrations",
    "QingLong3SchemaCapabilities",
    "Runs",
    "RunAttempts",
    "RunEvents",
    "RunRetryPolicies",
    "LocalCompletionReceiptJournal",
}
QL3_INDEXES = {
    "Runs": {
        "ql3_local_runs_project_idempotency_uidx",
        "ql3_local_runs_project_created_idx",
        "ql3_local_runs_task_created_idx",
        "ql3_local_runs_cancel_requested_idx",
        "ql3_local_runs_lost_retry_idx",
    },
    "RunAttempts": {
        "ql3_local_attempts_run_attempt_uidx",
        "ql3_local_attempts_run_status_idx",
        "ql3_local_attempts_lease_idx",
        "ql3_local_attempts_deadline_idx",
    },
    "RunEvents": {
        "ql3_local_events_run_sequence_uidx",
        "ql3_local_events_run_dedupe_uidx",
        "ql3_local_events_run_created_idx",
    },
    "RunRetryPolicies": {"ql3_local_retry_due_idx"},
    "LocalCompletionReceiptJournal": {
        "ql3_local_receipt_journal_scan_idx",
        "ql3_local_receipt_journal_purge_idx",
    },
}
QL3_CONSTRAINTS = {
    "QingLong3SchemaMigrations": {
        "ql3_local_migrations_dialect_check",
        "ql3_local_migrations_checksum_check",
        "ql3_local_migrations_applied_at_check",
    },
    "QingLong3SchemaCapabilities": {
        "ql3_local_capabilities_version_check",
        "ql3_local_capabilities_json_check",
        "ql3_local_capabilities_updated_at_check",
        "ql3_local_capabilities_migration_fk",
    },
    "Runs": {
        "ql3_local_runs_execution_origin_check",
        "ql3_local_runs_execution_owner_check",
        "ql3_local_runs_status_check",
        "ql3_local_runs_version_check",
        "ql3_local_runs_event_sequence_check",
        "ql3_local_runs_cancel_reason_check",
        "ql3_local_runs_time_check",
        "ql3_local_runs_parent_fk",
        "ql3_local_runs_retry_fk",
    },
    "RunAttempts": {
        "ql3_local_attempts_attempt_check",
        "ql3_local_attempts_status_check",
        "ql3_local_attempts_callback_sequence_check",
        "ql3_local_attempts_time_check",
        "ql3_local_attempts_run_fk",
    },
    "RunEvents": {
        "ql3_local_events_sequence_check",
        "ql3_local_events_actor_type_check",
        "ql3_local_events_payload_check",
        "ql3_local_events_created_at_check",
        "ql3_local_events_run_fk",
        "ql3_local_events_attempt_fk",
    },
    "RunRetryPolicies": {
        "ql3_local_retry_max_attempts_check",
        "ql3_local_retry_on_lost_check",
        "ql3_local_retry_safety_check",
        "ql3_local_retry_version_check",
        "ql3_local_retry_backoff_check",
        "ql3_local_retry_time_check",
        "ql3_local_retry_run_fk",
    },
    "LocalCompletionReceiptJournal": {
        "ql3_local_receipt_journal_state_check",
        "ql3_local_receipt_journal_time_check",
        "ql3_local_receipt_journal_shape_check",
        "ql3_local_receipt_journal_attempt_fk",
        "ql3_local_receipt_journal_run_fk",
    },
}
# The column lists of 0001 (same order), per the fact record.
QL3_COLUMNS = {
    "Runs": [
        "id",
        "project_id",
        "task_id",
        "task_revision",
        "task_name",
        "task_snapshot_ref",
        "legacy_cron_id",
        "parent_run_id",
        "retry_of_run_id",
        "trigger_id",
        "trigger_type",
        "execution_origin",
        "execution_owner",
        "triggered_by",
        "request_id",
        "scheduled_for_ms",
        "status",
        "version",
        "event_sequence",
        "priority",
        "idempotency_key",
        "input_ref",
        "output_ref",
        "created_at_ms",
        "queued_at_ms",
        "started_at_ms",
        "finished_at_ms",
        "cancel_requested_at_ms",
        "cancel_reason",
        "error_code",
        "error_summary",
    ],
    "RunAttempts": [
        "id",
        "run_id",
        "step_run_id",
        "attempt",
        "status",
        "executor_type",
        "worker_id",
        "worker_session_id",
        "worker_generation",
        "executor_handle",
        "pid",
        "log_artifact_id",
        "lease_token",
        "lease_token_digest",
        "lease_generation",
        "lease_version",
        "lease_expires_at_ms",
        "offer_id",
        "deadline_at_ms",
        "callback_token_hash",
        "callback_sequence",
        "created_at_ms",
        "started_at_ms",
        "finished_at_ms",
        "exit_code",
        "error_code",
        "error_summary",
    ],
    "RunEvents": [
        "id",
        "run_id",
        "sequence",
        "type",
        "dedupe_key",
        "actor_type",
        "actor_id",
        "attempt_id",
        "step_run_id",
        "payload",
        "created_at_ms",
    ],
}
# What qlfsm adds of its own (spec 02: legacy tables when absent, reconciler indexes).
QLFSM_TABLES = {"QlfsmSchemaMigrations", "Crontabs", "RunningInstances", "sqlite_sequence"}
QLFSM_INDEXES = {
    "running_instances_run_started_idx",
    "running_instances_attempt_uidx",
    "qlfsm_running_instances_cron_idx",
    "qlfsm_runs_legacy_keyset_idx",
    "qlfsm_runs_primary_candidates_idx",
}


def master(path: Path) -> set[tuple[str, str, str, str | None]]:
    conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
    try:
        return {
            (str(t), str(n), str(tbl), s)
            for t, n, tbl, s in conn.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master"
            ).fetchall()
        }
    finally:
        conn.close()


def names(path: Path, kind: str) -> set[str]:
    return {n for t, n, _, sql in master(path) if t == kind and sql is not None}


def init(path: Path) -> list[str]:
    conn = connect(str(path), create=True)
    try:
        return init_schema(conn, path=str(path))
    finally:
        conn.close()


def test_db_init_creates_every_table_of_spec_02_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    init(path)
    assert names(path, "table") | {"sqlite_sequence"} == QL3_TABLES | QLFSM_TABLES


def test_db_init_creates_every_index_of_the_real_ddl_plus_only_qlfsm_named_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.db"
    init(path)
    by_table: dict[str, set[str]] = {}
    for kind, name, table, sql in master(path):
        if kind == "index" and sql is not None:
            by_table.setdefault(table, set()).add(name)
    for table, expected in QL3_INDEXES.items():
        assert by_table.pop(table) - QLFSM_INDEXES == expected, table
    runs_own = {"qlfsm_runs_legacy_keyset_idx", "qlfsm_runs_primary_candidates_idx"}
    assert set().union(*by_table.values()) | runs_own == QLFSM_INDEXES


def test_db_init_creates_every_named_check_and_foreign_key_of_the_real_ddl(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    init(path)
    sql = {name: s for kind, name, _, s in master(path) if kind == "table"}
    for table, constraints in QL3_CONSTRAINTS.items():
        found = set(re.findall(r"CONSTRAINT\s+(\w+)", sql[table] or ""))
        assert found == constraints, table


def test_the_run_tables_have_the_real_ddl_columns_in_order(db_path: Path) -> None:
    conn = sqlite3.connect(str(db_path))
    try:
        for table, columns in QL3_COLUMNS.items():
            got = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            assert got == columns, table
    finally:
        conn.close()


def test_db_init_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    first = init(path)
    assert first == [
        "0001-run-core",
        "0003-completion-receipt-journal",
        *[m for m, _ in QLFSM_MIGRATIONS],
    ]
    schema = master(path)
    assert init(path) == []
    assert init(path) == []
    assert master(path) == schema


def test_db_init_records_its_migrations_in_the_history_tables(db_path: Path) -> None:
    conn = sqlite3.connect(str(db_path))
    try:
        ql3 = conn.execute(
            "SELECT migration_id, stream_id, dialect, checksum, applied_at_ms "
            'FROM "QingLong3SchemaMigrations" ORDER BY migration_id'
        ).fetchall()
        ours = conn.execute(
            'SELECT migration_id, checksum FROM "QlfsmSchemaMigrations" ORDER BY migration_id'
        ).fetchall()
    finally:
        conn.close()
    assert [(m, s, d, c) for m, s, d, c, _ in ql3] == [
        ("0001-run-core", "ql3-local-sqlite", "sqlite", checksum(RUN_CORE_0001)),
        (
            "0003-completion-receipt-journal",
            "ql3-local-sqlite",
            "sqlite",
            checksum(RECEIPT_JOURNAL_0003),
        ),
    ]
    assert all(re.fullmatch(r"[0-9a-f]{64}", c) and at > 0 for _, _, _, c, at in ql3)
    assert ours == [(m, checksum(stmts)) for m, stmts in QLFSM_MIGRATIONS]


def test_the_checksum_follows_qinglongs_rule() -> None:
    import hashlib

    stmts = ("  CREATE TABLE a (x)  ", "\nCREATE INDEX i ON a (x)\n")
    expected = hashlib.sha256(
        b"CREATE TABLE a (x)\n-- ql3-statement-boundary --\nCREATE INDEX i ON a (x)"
    ).hexdigest()
    assert checksum(stmts) == expected


RUN_COLS = (
    "id, project_id, task_id, task_revision, trigger_type, execution_origin, execution_owner, "
    "status, created_at_ms"
)
GOOD_RUN = "'r', 'p', 't', '1', 'manual', 'manual', 'runtime', 'created', 0"


@pytest.mark.parametrize(
    "statement",
    [
        f"INSERT INTO Runs ({RUN_COLS}) VALUES ('r', 'p', 't', '1', 'm', 'manual', 'runtime', "
        "'paused', 0)",
        f"INSERT INTO Runs ({RUN_COLS}) VALUES ('r', 'p', 't', '1', 'm', 'cron', 'runtime', "
        "'created', 0)",
        f"INSERT INTO Runs ({RUN_COLS}) VALUES ('r', 'p', 't', '1', 'm', 'manual', 'nobody', "
        "'created', 0)",
        f"INSERT INTO Runs ({RUN_COLS}) VALUES ('r', 'p', 't', '1', 'm', 'manual', 'runtime', "
        "'created', -1)",
        f"INSERT INTO Runs ({RUN_COLS}, version) VALUES ({GOOD_RUN}, -1)",
        f"INSERT INTO Runs ({RUN_COLS}, event_sequence) VALUES ({GOOD_RUN}, -1)",
        f"INSERT INTO Runs ({RUN_COLS}, cancel_reason) VALUES ({GOOD_RUN}, 'boredom')",
        f"INSERT INTO Runs ({RUN_COLS}, finished_at_ms) VALUES ({GOOD_RUN}, -5)",
        f"INSERT INTO Runs ({RUN_COLS}, parent_run_id) VALUES ({GOOD_RUN}, 'no-such-run')",
        "INSERT INTO RunAttempts (id, run_id, attempt, status, executor_type, created_at_ms) "
        "VALUES ('a', 'r0', 0, 'claimed', 'local_process', 0)",
        "INSERT INTO RunAttempts (id, run_id, attempt, status, executor_type, created_at_ms) "
        "VALUES ('a', 'r0', 1, 'sleeping', 'local_process', 0)",
        "INSERT INTO RunAttempts (id, run_id, attempt, status, executor_type, created_at_ms, "
        "callback_sequence) VALUES ('a', 'r0', 1, 'claimed', 'local_process', 0, -1)",
        "INSERT INTO RunAttempts (id, run_id, attempt, status, executor_type, created_at_ms) "
        "VALUES ('a', 'no-such-run', 1, 'claimed', 'local_process', 0)",
        "INSERT INTO RunEvents (id, run_id, sequence, type, actor_type, payload, created_at_ms) "
        "VALUES ('e', 'r0', 0, 'run.created', 'user', '{}', 0)",
        "INSERT INTO RunEvents (id, run_id, sequence, type, actor_type, payload, created_at_ms) "
        "VALUES ('e', 'r0', 2, 'run.created', 'robot', '{}', 0)",
        "INSERT INTO RunEvents (id, run_id, sequence, type, actor_type, payload, created_at_ms) "
        "VALUES ('e', 'r0', 2, 'run.created', 'user', '[1]', 0)",
        "INSERT INTO RunEvents (id, run_id, sequence, type, actor_type, payload, created_at_ms) "
        "VALUES ('e', 'r0', 2, 'run.created', 'user', 'not json', 0)",
        "INSERT INTO RunEvents (id, run_id, sequence, type, actor_type, payload, created_at_ms) "
        "VALUES ('e', 'r0', 2, 'run.created', 'user', '{}', -1)",
        "INSERT INTO RunEvents (id, run_id, sequence, type, actor_type, payload, created_at_ms) "
        "VALUES ('e', 'r0', 1, 'run.again', 'user', '{}', 0)",
        "INSERT INTO LocalCompletionReceiptJournal (attempt_id, run_id, state, registered_at_ms, "
        "updated_at_ms) VALUES ('a0', 'r0', 'lost', 0, 0)",
        "INSERT INTO LocalCompletionReceiptJournal (attempt_id, run_id, state, registered_at_ms, "
        "updated_at_ms) VALUES ('a0', 'r0', 'pending', 10, 5)",
        "INSERT INTO LocalCompletionReceiptJournal (attempt_id, run_id, state, quarantine_ref, "
        "registered_at_ms, updated_at_ms) VALUES ('a0', 'r0', 'pending', 'q', 0, 0)",
        "INSERT INTO LocalCompletionReceiptJournal (attempt_id, run_id, state, registered_at_ms, "
        "updated_at_ms) VALUES ('a0', 'r0', 'quarantined', 0, 0)",
        "INSERT INTO LocalCompletionReceiptJournal (attempt_id, run_id, state, quarantine_ref, "
        "purge_after_ms, registered_at_ms, updated_at_ms) "
        "VALUES ('a0', 'r0', 'quarantined', 'q', 5, 0, 10)",
    ],
)
def test_check_and_foreign_key_constraints_reject_bad_values(
    repo: Repository, statement: str
) -> None:
    repo.create_run(run_id="r0", at_ms=0)
    repo.create_attempt(run_id="r0", attempt_id="a0", expected_version=1, at_ms=0)
    conn = repo.conn
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(statement)
    assert not conn.in_transaction


def test_the_constraints_accept_the_good_shapes(repo: Repository) -> None:
    repo.create_run(run_id="r0", at_ms=0)
    repo.create_attempt(run_id="r0", attempt_id="a0", expected_version=1, at_ms=0)
    conn = repo.conn
    conn.execute(f"INSERT INTO Runs ({RUN_COLS}, cancel_reason) VALUES ({GOOD_RUN}, 'user')")
    conn.execute(
        "INSERT INTO LocalCompletionReceiptJournal (attempt_id, run_id, state, quarantine_ref, "
        "purge_after_ms, registered_at_ms, updated_at_ms) "
        "VALUES ('a0', 'r0', 'quarantined', 'q', 20, 0, 10)"
    )


# --- a database QingLong itself created ---------------------------------------------------


def qinglong_made(path: Path, *, later: bool = False) -> None:
    """Build the database the way QingLong's migration runner does: the history table first,
    then each migration in one BEGIN IMMEDIATE with its history row, foreign keys off."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(QL3_HISTORY_DDL)
        migrations: list[tuple[str, tuple[str, ...]]] = [
            ("0001-run-core", RUN_CORE_0001),
            (
                "0002-capability",
                (
                    'INSERT INTO "QingLong3SchemaCapabilities" (contract_name, contract_version, '
                    "migration_id, capabilities, updated_at_ms) VALUES ('local-control-core', 1, "
                    "'0001-run-core', '{\"run_core\":1,\"run_retry_policy\":1}', 1700000000000)",
                ),
            ),
            ("0003-completion-receipt-journal", RECEIPT_JOURNAL_0003),
        ]
        if later:
            migrations.append(
                (
                    "0005-local-dispatch-plan",
                    (
                        'CREATE INDEX "ql3_local_runs_dispatch_idx" ON "Runs" ("execution_owner", '
                        '"status", "priority" DESC, "queued_at_ms", "id") WHERE '
                        "\"execution_owner\" = 'runtime' AND \"status\" = 'queued' AND "
                        '"cancel_requested_at_ms" IS NULL',
                    ),
                )
            )
        for mig_id, statements in migrations:
            conn.execute("PRAGMA foreign_keys = OFF")
            conn.execute("BEGIN IMMEDIATE")
            for s in statements:
                conn.execute(s.strip())
            conn.execute(
                'INSERT INTO "QingLong3SchemaMigrations" (migration_id, stream_id, dialect, '
                "checksum, applied_at_ms) VALUES (?, ?, ?, ?, ?)",
                (mig_id, "ql3-local-sqlite", "sqlite", checksum(statements), 1_700_000_000_000),
            )
            conn.execute("COMMIT")
            conn.execute("PRAGMA foreign_keys = ON")
    finally:
        conn.close()


def history(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute(
            'SELECT * FROM "QingLong3SchemaMigrations" ORDER BY migration_id'
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("later", [False, True], ids=["0001+0003", "with-0005-dispatch-index"])
def test_a_database_qinglong_created_is_accepted_unchanged_and_db_init_adds_only_its_own(
    tmp_path: Path, later: bool
) -> None:
    path = tmp_path / "ql3.db"
    qinglong_made(path, later=later)
    before = master(path)
    rows = history(path)
    applied = init(path)
    assert applied == [m for m, _ in QLFSM_MIGRATIONS]
    after = master(path)
    assert before <= after, "db init changed or dropped something QingLong created"
    added = {name for _, name, _, sql in after - before if sql is not None} | {"sqlite_sequence"}
    assert added == QLFSM_TABLES | QLFSM_INDEXES
    assert history(path) == rows, "db init wrote into QingLong's migration history"
    assert init(path) == []

    conn = connect(str(path))
    try:
        repo = Repository(conn)
        repo.create_run(run_id="r1", at_ms=T0)
        repo.advance("r1", 1, [RunChange("queue")], actor=SYSTEM, at_ms=T0)
    finally:
        conn.close()
    second = connect(str(path))
    try:
        run = Repository(second).get_run("r1")
        assert run is not None and (run.status, run.version) == ("queued", 2)
    finally:
        second.close()


def test_a_database_made_by_qlfsm_looks_to_qinglong_like_its_own(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours.db", tmp_path / "theirs.db"
    init(ours)
    qinglong_made(theirs)
    ql3 = QL3_TABLES | set().union(*QL3_INDEXES.values())

    def ql3_sql(path: Path) -> dict[str, str | None]:
        return {n: sql for _, n, _, sql in master(path) if n in ql3}

    assert ql3_sql(ours) == ql3_sql(theirs)


# --- what is not a QingLong database ---------------------------------------------------------


def _plain_sqlite(path: Path, *statements: str) -> Path:
    """A SQLite file at ``path`` holding only what ``statements`` create."""
    other = sqlite3.connect(str(path))
    for statement in statements:
        other.execute(statement)
    other.commit()
    other.close()
    return path


def _why_refused(path: Path) -> str:
    """Why `check_schema` refuses the file at ``path`` as not a QingLong database."""
    conn = connect(str(path))
    try:
        with pytest.raises(NotAQingLongDatabase) as raised:
            check_schema(conn, path=str(path))
    finally:
        conn.close()
    return raised.value.why


def test_a_file_that_is_not_sqlite_is_not_a_qinglong_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"this is not a database, just some text that is long enough " * 20)
    conn = connect(str(path))
    try:
        with pytest.raises(NotAQingLongDatabase):
            check_schema(conn, path=str(path))
        with pytest.raises(NotAQingLongDatabase):
            init_schema(conn, path=str(path))
    finally:
        conn.close()
    assert path.read_bytes().startswith(b"this is not a database")


def test_a_sqlite_file_without_the_tables_is_not_a_qinglong_database(tmp_path: Path) -> None:
    path = _plain_sqlite(
        tmp_path / "other.db", "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"
    )
    assert "Runs" in _why_refused(path)


def test_a_runs_table_without_the_columns_qlfsm_reads_is_refused(tmp_path: Path) -> None:
    path = _plain_sqlite(
        tmp_path / "odd.db",
        *(
            f'CREATE TABLE "{table}" (id TEXT)'
            for table in ("Runs", "RunAttempts", "RunEvents", "LocalCompletionReceiptJournal")
        ),
    )
    assert "lacks columns" in _why_refused(path)


@pytest.mark.parametrize(
    ("table", "column"),
    [("Runs", "finished_at_ms"), ("RunAttempts", "executor_type"), ("RunEvents", "actor_id")],
)
def test_a_table_lacking_any_column_qlfsm_reads_is_refused_up_front(
    db_path: Path, table: str, column: str
) -> None:
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute(f'ALTER TABLE "{table}" RENAME COLUMN {column} TO renamed_{column}')
    conn.close()
    why = _why_refused(db_path)
    assert column in why and table in why


def test_connect_never_creates_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseMissing):
        connect(str(path))
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


# --- connection rules ------------------------------------------------------------------------


def test_the_write_path_runs_wal_synchronous_full_foreign_keys_and_begin_immediate(
    db_path: Path,
) -> None:
    conn = connect(str(db_path))
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        Repository(conn).create_run(run_id="r1", at_ms=T0)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.isolation_level is None
    finally:
        conn.close()
    assert "BEGIN IMMEDIATE" in statements
    assert statements.index("BEGIN IMMEDIATE") < statements.index("COMMIT")
    assert not any(s.upper().startswith("BEGIN") and s != "BEGIN IMMEDIATE" for s in statements)
    second = sqlite3.connect(str(db_path))
    try:
        assert second.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        second.close()


def test_a_foreign_key_violation_is_refused_on_the_write_path(repo: Repository) -> None:
    from storage import transaction

    with pytest.raises(sqlite3.IntegrityError), transaction(repo.conn) as c:
        c.execute(
            "INSERT INTO RunAttempts (id, run_id, attempt, status, executor_type, "
            "created_at_ms) VALUES ('a', 'no-such-run', 1, 'claimed', 'local_process', 0)"
        )
    assert repo.conn.execute("SELECT COUNT(*) FROM RunAttempts").fetchone()[0] == 0


def test_two_db_inits_racing_on_a_new_file_apply_each_migration_once(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "race.db"
    connect(str(path), create=True).close()
    barrier = threading.Barrier(4)
    results: list[list[str] | BaseException] = []

    def init_one() -> None:
        conn = connect(str(path))
        try:
            barrier.wait()
            results.append(init_schema(conn, path=str(path)))
        except BaseException as exc:
            results.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=init_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(isinstance(r, list) for r in results), results
    applied = [m for r in results if isinstance(r, list) for m in r]
    expected = ["0001-run-core", "0003-completion-receipt-journal"]
    expected += [m for m, _ in QLFSM_MIGRATIONS]
    assert sorted(applied) == sorted(expected)
    assert init(path) == []
