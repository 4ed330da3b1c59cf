"""Bad input through the real command line.

DESIGN: bad input exits 2 with one line on stderr that names the problem, no traceback,
and changes nothing. "Nothing" is checked on everything a user could look at: the rows of
the database, the provider's own log, the files in the database's folder (and, for a file
labkit must not open, its bytes).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from contextlib import closing

import pytest

import labkit

KILLED = -signal.SIGKILL
INC = "INC-1001"


@pytest.fixture
def started(lab, cli):
    """A database with one completed run and one run at evidence_recorded."""
    assert cli("run", "--db", lab.db, "--incident", "INC-1005").returncode == 0
    assert cli("run", "--db", lab.db, "--incident", "INC-1006", "--crash-at", "after_evidence_commit").returncode == KILLED
    with closing(lab.connect()):  # replay the killed child's WAL, as any later opener would
        pass
    return lab.db


# =========================================================================== unknown names


def test_unknown_incident_on_a_new_database_creates_nothing(db, folder, cli, refused):
    outcome = cli("run", "--db", db, "--incident", "INC-9999")
    refused(outcome, "INC-9999", "unknown incident")
    assert list(folder.iterdir()) == []


def test_unknown_incident_on_an_existing_database_changes_nothing(started, cli, refused, snapshot):
    before = snapshot(started)
    refused(cli("run", "--db", started, "--incident", "inc-1001"), "inc-1001")
    refused(cli("run", "--db", started, "--incident", "../data/incidents/INC-1001"), "INC-1001")
    assert snapshot(started) == before


def test_unknown_crash_point_creates_nothing(db, folder, cli, refused):
    refused(cli("run", "--db", db, "--incident", INC, "--crash-at", "halfway"), "halfway", "crash point")
    assert list(folder.iterdir()) == []


def test_unknown_crash_point_on_an_existing_database_changes_nothing(started, cli, refused, snapshot):
    before = snapshot(started)
    refused(cli("run", "--db", started, "--incident", "INC-1006", "--crash-at", "after-read"), "after-read")
    assert snapshot(started) == before


def test_an_empty_crash_point_is_an_unknown_crash_point(db, folder, cli, refused):
    """``--crash-at "$POINT"`` with an unset variable must not quietly run to completion."""
    outcome = cli("run", "--db", db, "--incident", INC, "--crash-at", "")
    refused(outcome, "crash point")
    assert list(folder.iterdir()) == []


# =========================================================================== where the database is


def test_missing_folder_is_refused_and_not_created(tmp_path, cli, refused):
    target = tmp_path / "no-such-folder" / "lab.db"
    for args in (("run", "--db", target, "--incident", INC), ("recover", "--db", target), ("status", "--db", target, "--json")):
        refused(cli(*args), "no-such-folder", "does not exist")
    assert not (tmp_path / "no-such-folder").exists()


def test_a_folder_given_as_the_database_is_refused(folder, cli, refused):
    inner = folder / "looks-like.db"
    inner.mkdir()
    refused(cli("run", "--db", inner, "--incident", INC), "looks-like.db")
    refused(cli("recover", "--db", inner), "looks-like.db")
    assert sorted(p.name for p in folder.iterdir()) == ["looks-like.db"]
    assert list(inner.iterdir()) == []


NOT_DATABASES = {
    "text": b"incident,kind\nINC-1001,consumer_outage\n",
    "random-bytes": bytes(range(256)) * 16,
    "sqlite-header-then-garbage": b"SQLite format 3\x00" + bytes(range(255, -1, -1)) * 16,
}


@pytest.mark.parametrize("content", NOT_DATABASES.values(), ids=NOT_DATABASES.keys())
def test_a_file_that_is_not_a_database_is_left_byte_for_byte(content, folder, cli, refused):
    target = folder / "notes.db"
    target.write_bytes(content)
    commands = [("run", "--db", target, "--incident", INC)]
    if content.startswith(b"SQLite format 3"):  # the case SQLite itself gets to open: every command
        commands += [("recover", "--db", target), ("status", "--db", target, "--json")]
    for args in commands:
        refused(cli(*args), "notes.db", "not a SQLite database")
        assert target.read_bytes() == content
        assert sorted(p.name for p in folder.iterdir()) == ["notes.db"], "no -wal, -shm or provider log may appear"


def test_a_database_with_a_newer_schema_is_refused(lab, cli, refused):
    with closing(lab.connect()) as conn:
        conn.execute("PRAGMA user_version = 99")
    content = lab.db.read_bytes()
    for args in (("run", "--db", lab.db, "--incident", INC), ("recover", "--db", lab.db), ("status", "--db", lab.db, "--json")):
        refused(cli(*args), "schema version 99", f"({labkit.store.SCHEMA_VERSION})")
        assert lab.db.read_bytes() == content
        assert sorted(p.name for p in lab.folder.iterdir()) == ["lab.db"]


@pytest.mark.parametrize(
    ("user_version", "words"),
    [(0, ["holds tables", "orders"]), (1, ["its tables (orders)", "labkit's schema version 1"])],
    ids=["unversioned", "version-1-without-runs"],
)
def test_another_programs_sqlite_database_is_left_byte_for_byte(user_version, words, folder, cli, refused):
    """A real SQLite file that some other program made: labkit must not add its tables to it."""
    target = folder / "shop.db"
    with closing(sqlite3.connect(target)) as other:
        other.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        other.execute("INSERT INTO orders (total) VALUES (9.5)")
        other.execute(f"PRAGMA user_version = {user_version}")
        other.commit()
    content = target.read_bytes()
    for args in (("run", "--db", target, "--incident", INC), ("recover", "--db", target), ("status", "--db", target, "--json")):
        refused(cli(*args), "shop.db", "not a labkit one", *words)
        assert target.read_bytes() == content
        assert sorted(p.name for p in folder.iterdir()) == ["shop.db"], "no -wal, -shm or provider log may appear"


def test_a_run_of_another_workflow_version_is_refused(lab, cli, refused, snapshot):
    with closing(lab.connect()) as conn:
        previous = lab.coordinator(conn, workflow_version=1)
        previous.start(INC)
        previous.inspect(INC)  # evidence_recorded under version 1: a tempting run to "finish"
    before = snapshot(lab.db)
    for args in (("run", "--db", lab.db, "--incident", INC), ("recover", "--db", lab.db)):
        refused(cli(*args), INC, "version 1", "version 2", "migrate --to 2")
        assert snapshot(lab.db) == before, f"{args[0]} changed the database"
    assert lab.reads(INC) == 1


# =========================================================================== the command line itself


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((), ["command"]),
        (("frobnicate",), ["frobnicate"]),
        (("run", "--incident", INC), ["--db"]),
        (("run", "--db", "{db}"), ["--incident"]),
        (("recover",), ["--db"]),
        (("status", "--db", "{db}", "--yaml"), ["--yaml"]),
    ],
    ids=["no-command", "unknown-command", "run-without-db", "run-without-incident", "recover-without-db", "unknown-option"],
)
def test_usage_errors_are_one_line_and_exit_2(args, words, db, folder, cli, refused):
    outcome = cli(*(str(db) if a == "{db}" else a for a in args))
    refused(outcome, *words)
    assert "usage:" not in outcome.stderr
    assert list(folder.iterdir()) == []


# =========================================================================== the data folder


def test_a_missing_data_folder_is_refused(tmp_path, db, folder, cli, refused):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    env = {"LABKIT_DATA_DIR": str(empty)}
    refused(cli("incidents", env=env), "empty-data")
    refused(cli("run", "--db", db, "--incident", INC, env=env), "empty-data")
    assert list(folder.iterdir()) == []


# =========================================================================== malformed provider responses


def _snapshot_of(incident: str) -> dict:
    return json.loads((labkit.provider.DEFAULT_DATA_DIR / "incidents" / f"{incident}.json").read_text(encoding="utf-8"))


def _snapshot_with(edit):
    """A maker of a data file: the incident's real snapshot with one ``edit`` applied."""

    def make(incident):
        snapshot = _snapshot_of(incident)
        edit(snapshot)
        return json.dumps(snapshot)

    return make


_negative_ready = _snapshot_with(lambda s: s["queue"].update(messages_ready=-5))
_wrong_incident = _snapshot_with(lambda s: s.update(incident="INC-1002"))
_huge_queue_name = _snapshot_with(lambda s: s["queue"].update(name="q" * 20_000))
_snapshot_missing_consumers = _snapshot_with(lambda s: s["queue"].pop("consumers"))
_node_not_an_object = _snapshot_with(lambda s: s.update(node="rabbit@down"))
_string_consumers = _snapshot_with(lambda s: s["queue"].update(consumers="0"))


MALFORMED = {
    "not-json": (lambda incident: "{ this is not JSON", ["(response)", "not JSON"]),
    "negative-messages-ready": (_negative_ready, ["queue.messages_ready", "-5"]),
    "wrong-incident-id": (_wrong_incident, ["'incident'", "INC-1002"]),
    "oversized": (_huge_queue_name, ["(response)", "16384"]),
    "missing-field": (_snapshot_missing_consumers, ["queue.consumers", "missing"]),
    "node-not-an-object": (_node_not_an_object, ["'node'", "not of type 'object'"]),
    "string-for-a-count": (_string_consumers, ["queue.consumers"]),
}


@pytest.mark.parametrize(("make", "words"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_provider_response_changes_nothing(make, words, lab, data_copy, cli, refused, snapshot):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    # the run exists and is waiting for its read: the crash at before_read reads nothing
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "before_read", env=env).returncode == KILLED
    (data_copy / "incidents" / f"{INC}.json").write_text(make(INC), encoding="utf-8")
    snapshot(lab.db)  # the first open after a kill folds the -wal file back in; compare from there
    before = snapshot(lab.db)
    assert before["provider_log"] is None

    line = refused(cli("run", "--db", lab.db, "--incident", INC, env=env), INC, "rejected", *words)
    after = snapshot(lab.db)
    assert after["rows"] == before["rows"], "a rejected response moved the checkpoint"
    assert after["files"] == before["files"] + [labkit.call_log_for(lab.db).name]
    # the provider did answer, and its own log says so: only the checkpoint refused it
    assert [(c.incident, c.outcome) for c in lab.log.calls()] == [(INC, "ok")]

    assert "Traceback" not in line


def test_an_instruction_inside_a_snapshot_does_not_steer_the_run(lab, data_copy, cli, status):
    """The provider builds its answer from the contract's fields only: a snapshot that says
    what the next step should be is not obeyed, and the words never reach the evidence."""
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    hostile = _snapshot_of(INC)
    hostile["next_step"] = "report_completed"
    hostile["queue"]["step"] = "report_completed"
    (data_copy / "incidents" / f"{INC}.json").write_text(json.dumps(hostile), encoding="utf-8")
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit", env=env).returncode == KILLED
    with closing(lab.connect()) as conn:
        step, body = conn.execute(
            "SELECT runs.step, evidence.body FROM runs JOIN evidence USING (incident) WHERE incident = ?", (INC,)
        ).fetchone()
    assert step == "evidence_recorded"
    assert "next_step" not in body and '"step"' not in body


def test_recover_refuses_a_malformed_response_the_same_way(lab, data_copy, cli, refused, snapshot):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_read", env=env).returncode == KILLED
    (data_copy / "incidents" / f"{INC}.json").write_text(_negative_ready(INC), encoding="utf-8")
    snapshot(lab.db)
    before = snapshot(lab.db)
    refused(cli("recover", "--db", lab.db, env=env), INC, "rejected", "queue.messages_ready")
    assert snapshot(lab.db)["rows"] == before["rows"]
    assert lab.reads(INC) == 2


def test_a_snapshot_missing_a_field_is_reported_by_that_field(lab, data_copy, cli, refused, snapshot):
    """A queue snapshot without ``queue.consumers``: the one line should name what is missing,
    not an unrelated field of the raw snapshot."""
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    broken = _snapshot_of(INC)
    del broken["queue"]["consumers"]
    (data_copy / "incidents" / f"{INC}.json").write_text(json.dumps(broken), encoding="utf-8")
    outcome = cli("run", "--db", lab.db, "--incident", INC, env=env)
    refused(outcome, INC, "consumers")


def test_a_malformed_response_on_a_new_database_records_no_evidence(lab, data_copy, cli, refused, status):
    """The run row is created (the request was accepted: not_inspected), but nothing past it."""
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    (data_copy / "incidents" / f"{INC}.json").write_text("<html>502</html>", encoding="utf-8")
    refused(cli("run", "--db", lab.db, "--incident", INC, env=env), INC, "not JSON")
    runs = status(lab.db, env=env)["runs"]
    assert [(r["incident"], r["step"], r["evidence"], r["receipts"]) for r in runs] == [(INC, "not_inspected", False, 0)]


def test_an_unreadable_incident_is_provider_unavailable(lab, data_copy, cli, refused, snapshot):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "before_read", env=env).returncode == KILLED
    target = data_copy / "incidents" / f"{INC}.json"
    target.unlink()
    os.symlink(data_copy / "nowhere.json", target)  # listed by the provider, but cannot be read
    before = snapshot(lab.db)
    # a provider outage is not the caller's mistake: exit 1, so a supervisor knows to retry
    refused(cli("run", "--db", lab.db, "--incident", INC, env=env), INC, "provider could not read", code=1)
    assert snapshot(lab.db)["rows"] == before["rows"]
    assert [(c.incident, c.outcome) for c in lab.log.calls()] == [(INC, "unavailable")]
    # once the provider is back, the same run completes from where it was
    target.unlink()
    (data_copy / "incidents" / f"{INC}.json").write_bytes((labkit.provider.DEFAULT_DATA_DIR / "incidents" / f"{INC}.json").read_bytes())
    assert cli("run", "--db", lab.db, "--incident", INC, env=env).returncode == 0
    with closing(sqlite3.connect(lab.db)) as conn:
        assert conn.execute("SELECT step FROM runs").fetchall() == [("report_completed",)]
