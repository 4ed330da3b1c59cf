"""The checkpoint store: connection settings, schema version, the database's own guards."""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing

import pytest

import labkit
from labkit.database import BUSY_TIMEOUT_MS, transaction
from labkit.steps import Step
from labkit.store import advance_txn, find_run_txn

INC = "INC-1004"


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- settings


def test_connection_uses_the_lab_settings(conn):
    assert conn.isolation_level is None, "Python's implicit transactions must be off"
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_MS > 0
    assert conn.execute("PRAGMA user_version").fetchone()[0] == labkit.store.SCHEMA_VERSION >= 1


def test_settings_hold_on_every_reopen(lab):
    for _ in range(2):
        with closing(lab.connect()) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
            assert conn.execute("PRAGMA user_version").fetchone()[0] == labkit.store.SCHEMA_VERSION


def test_new_database_has_the_lab_tables(conn):
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"runs", "evidence", "receipts", "transitions"} <= tables
    triggers = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert "runs_step_moves_one_forward" in triggers


# --------------------------------------------------------------------------- schema version


def test_newer_schema_is_refused_and_the_file_left_alone(lab):
    with closing(lab.connect()) as conn:
        conn.execute("PRAGMA user_version = 99")
    before = _digest(lab.db)
    with pytest.raises(labkit.errors.SchemaVersionMismatch) as caught:
        labkit.connect(lab.db)
    assert (caught.value.found, caught.value.expected) == (99, labkit.store.SCHEMA_VERSION)
    assert "99" in str(caught.value)
    assert _digest(lab.db) == before
    assert sorted(p.name for p in lab.folder.iterdir()) == ["lab.db"]


def test_newer_schema_in_a_rollback_journal_file_is_left_alone(lab):
    """A file written by someone else's SQLite (not in WAL mode) must not be converted either."""
    with closing(sqlite3.connect(lab.db)) as conn:
        conn.execute("CREATE TABLE future (x)")
        conn.execute(f"PRAGMA application_id = {labkit.store.APPLICATION_ID}")  # a newer labkit's file
        conn.execute("PRAGMA user_version = 99")
        conn.commit()
    before = _digest(lab.db)
    with pytest.raises(labkit.errors.SchemaVersionMismatch):
        labkit.connect(lab.db)
    assert _digest(lab.db) == before
    assert sorted(p.name for p in lab.folder.iterdir()) == ["lab.db"]


def test_a_file_that_is_not_a_database_is_refused_byte_for_byte(lab):
    lab.db.write_text("incident,kind\nINC-1001,consumer_outage\n", encoding="utf-8")
    before = _digest(lab.db)
    with pytest.raises(labkit.errors.NotADatabase):
        labkit.connect(lab.db)
    assert _digest(lab.db) == before
    assert sorted(p.name for p in lab.folder.iterdir()) == ["lab.db"]


def test_a_missing_folder_is_refused_and_not_created(tmp_path):
    target = tmp_path / "nowhere" / "lab.db"
    with pytest.raises(labkit.errors.DatabaseFolderMissing):
        labkit.connect(target)
    assert not (tmp_path / "nowhere").exists()


def test_a_folder_is_not_a_database(folder):
    with pytest.raises(labkit.errors.NotADatabase):
        labkit.connect(folder)


# --------------------------------------------------------------------------- transactions


def test_transaction_rolls_back_on_any_base_exception(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    before = labkit.store.snapshot(conn)
    with pytest.raises(KeyboardInterrupt):
        with transaction(conn):
            conn.execute("UPDATE runs SET step = 'evidence_recorded', version = version + 1 WHERE incident = ?", (INC,))
            raise KeyboardInterrupt
    assert not conn.in_transaction
    assert labkit.store.snapshot(conn) == before
    with closing(lab.connect()) as fresh:
        assert find_run_txn(fresh, INC).step is Step.NOT_INSPECTED


def test_compare_and_set_refuses_a_stale_transition(lab, conn):
    coordinator = lab.coordinator(conn)
    stale = coordinator.start(INC)
    # another worker, on its own connection, moves the run first
    with closing(lab.connect()) as other:
        with transaction(other):
            advance_txn(other, find_run_txn(other, INC), Step.EVIDENCE_RECORDED, lab.clock)
    before = labkit.store.snapshot(conn)
    with pytest.raises(labkit.errors.StaleTransition) as caught:
        with transaction(conn):
            advance_txn(conn, stale, Step.EVIDENCE_RECORDED, lab.clock)
    assert (caught.value.incident, caught.value.expected_step, caught.value.expected_version) == (INC, "not_inspected", 0)
    assert f"run '{INC}' is no longer at step 'not_inspected' version 0" in str(caught.value)
    assert labkit.store.snapshot(conn) == before  # no second transition row, no version bump
    run = find_run_txn(conn, INC)
    assert (run.step, run.version) == (Step.EVIDENCE_RECORDED, 1)


def test_compare_and_set_checks_the_version_not_only_the_step(lab, conn):
    run = lab.coordinator(conn).start(INC)
    with transaction(conn):
        conn.execute("UPDATE runs SET version = version + 1 WHERE incident = ?", (INC,))
    with pytest.raises(labkit.errors.StaleTransition):
        with transaction(conn):
            advance_txn(conn, run, Step.EVIDENCE_RECORDED, lab.clock)
    assert find_run_txn(conn, INC).step is Step.NOT_INSPECTED


# --------------------------------------------------------------------------- the database's own guards


def test_trigger_refuses_a_backwards_step(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.inspect(INC)
    before = labkit.store.snapshot(conn)
    with pytest.raises(sqlite3.IntegrityError, match="one step forward"):
        conn.execute("UPDATE runs SET step = 'not_inspected', version = version + 1 WHERE incident = ?", (INC,))
    coordinator.complete(INC)
    with pytest.raises(sqlite3.IntegrityError, match="one step forward"):
        conn.execute("UPDATE runs SET step = 'evidence_recorded', version = version + 1 WHERE incident = ?", (INC,))
    assert find_run_txn(conn, INC).step is Step.REPORT_COMPLETED
    assert before["evidence"] == labkit.store.snapshot(conn)["evidence"]


def test_step_column_accepts_only_the_three_steps(lab, conn):
    lab.coordinator(conn).start(INC)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE runs SET step = 'done' WHERE incident = ?", (INC,))


def test_evidence_and_receipts_must_belong_to_a_run(conn):
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO evidence (incident, contract, body, digest, recorded_at) VALUES ('INC-1001', 'c', '{}', 'd', 't')"
        )
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO receipts (incident, receipt_id, evidence_digest, report, issued_at) VALUES ('INC-1001', 'r', 'd', '{}', 't')"
        )
    assert conn.execute("SELECT COUNT(*) FROM evidence").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == 0


def test_canonical_json_is_one_spelling_per_value():
    from labkit.jsontext import canonical_json

    assert canonical_json({"b": 1, "a": [1, 2]}) == canonical_json({"a": [1, 2], "b": 1}) == '{"a":[1,2],"b":1}'


# --------------------------------------------------------------------------- the schema's history


#: sha256 of each entry of labkit.schema.MIGRATIONS (its statements joined by NUL). A labkit
#: database is recognised by the SQL text SQLite stored from these statements, so an edited
#: entry would make every database an older labkit made look foreign: append, never edit.
MIGRATION_DIGESTS = (
    "9acc71b58bdce1fd", "8f2be6034992afb8", "29356a9d77b95342", "d1311705b653e5c1", "b6c9be4b5fd425a3", "b88ee7d069519620",
    "b5f34b9458a0094c", "3d57cfbdafc41a39",
)


def test_no_migration_was_edited():
    from labkit.schema import MIGRATIONS

    found = tuple(hashlib.sha256("\x00".join(step).encode()).hexdigest()[:16] for step in MIGRATIONS)
    assert found[: len(MIGRATION_DIGESTS)] == MIGRATION_DIGESTS


@pytest.mark.parametrize("version", range(1, labkit.store.SCHEMA_VERSION))
def test_a_database_of_every_older_schema_version_is_accepted_and_migrated(folder, version):
    from labkit.schema import MIGRATIONS

    db = folder / f"v{version}.db"
    with closing(sqlite3.connect(db, isolation_level=None)) as old:  # what the labkit of that version left
        for statement in (statement for step in MIGRATIONS[:version] for statement in step):
            old.execute(statement)
        old.execute(f"PRAGMA user_version = {version}")
    with closing(labkit.connect(db)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == labkit.store.SCHEMA_VERSION
        stored = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    assert [tuple(row) for row in stored] == labkit.store.expected_schema(labkit.store.SCHEMA_VERSION)


def test_transitions_keep_their_rows_and_order_through_the_rebuild_without_autoincrement(folder):
    """Schema version 8 rebuilt transitions without AUTOINCREMENT: the rows and keys a version 7 file held stay,
    and the next transition is keyed above the largest, so seq is still commit order."""
    from labkit.schema import MIGRATIONS

    db = folder / "v7-with-runs.db"
    with closing(sqlite3.connect(db, isolation_level=None)) as old:  # what labkit 7 left: a run and two transitions
        for statement in (statement for step in MIGRATIONS[:7] for statement in step):
            old.execute(statement)
        old.execute("PRAGMA user_version = 7")
        old.execute("INSERT INTO runs (incident, workflow_version, step, version, created_at, updated_at)"
                    " VALUES ('INC-1001', 2, 'not_inspected', 0, '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')")
        old.execute("INSERT INTO transitions (seq, incident, from_step, to_step, state_version, at)"
                    " VALUES (7, 'INC-1001', NULL, 'not_inspected', 0, '2026-01-01T00:00:00Z')")
        before = old.execute("SELECT * FROM transitions ORDER BY seq").fetchall()
    with closing(labkit.connect(db)) as conn:
        assert [tuple(row) for row in conn.execute("SELECT * FROM transitions ORDER BY seq")] == before
        with transaction(conn):
            run = find_run_txn(conn, "INC-1001")
            assert run is not None
            advance_txn(conn, run, Step.EVIDENCE_RECORDED, labkit.TickingClock())
        assert [row[0] for row in conn.execute("SELECT seq FROM transitions ORDER BY seq")] == [7, 8]
        assert conn.execute("SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'transitions'").fetchone()[0] == 0
