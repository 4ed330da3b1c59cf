"""Workflow versions: refused everywhere, moved only by an explicit, logged, atomic migration.

labkit runs workflow version 2; version 1 is the previous release, which lessons and tests
play with ``workflow_version=1`` (``--workflow-version 1``). A version-2 coordinator refuses
a version-1 run in the API, in ``run`` and in ``recover``; ``migrate`` moves what it can map
in one transaction and logs it; what it cannot map it refuses, naming the run, and changes
nothing.
"""

from __future__ import annotations

import json
import signal
from contextlib import closing

import pytest

import labkit
from labkit.steps import Step

KILLED = -signal.SIGKILL


@pytest.fixture
def previous_release(lab, conn):
    """Three runs written by the previous release: not_inspected, evidence_recorded, report_completed."""
    old = lab.coordinator(conn, workflow_version=1)
    old.start("INC-1001")
    old.start("INC-1002")
    old.inspect("INC-1002")
    old.drive("INC-1003")
    return old


def test_version_2_refuses_a_version_1_run_everywhere(lab, conn, previous_release, cli_main, refused, snapshot):
    current = lab.coordinator(conn)
    for call in (current.start, current.inspect, current.complete, current.drive):
        with pytest.raises(labkit.errors.WorkflowVersionMismatch) as caught:
            call("INC-1002")
        assert (caught.value.found, caught.value.expected) == (1, 2)
    conn.close()
    before = snapshot(lab.db)
    for args in (("run", "--db", lab.db, "--incident", "INC-1002"), ("recover", "--db", lab.db)):
        refused(cli_main(*args), "INC-1002" if args[0] == "run" else "INC-10", "workflow version 1", "version 2", "migrate")
        assert snapshot(lab.db) == before


def test_a_paused_run_of_the_old_release_is_refused_after_the_upgrade(lab, cli, cli_main, refused):
    old = cli("run", "--db", lab.db, "--incident", "INC-1004", "--workflow-version", "1", "--crash-at", "after_evidence_commit")
    assert old.returncode == KILLED
    refused(cli_main("run", "--db", lab.db, "--incident", "INC-1004"), "INC-1004", "workflow version 1", "version 2")
    finished = cli("run", "--db", lab.db, "--incident", "INC-1004", "--workflow-version", "1")
    assert finished.returncode == 0 and labkit.receipts.receipt_id_for("INC-1004", 1) in finished.stdout


def test_migrate_refuses_what_it_cannot_map_and_changes_nothing(lab, conn, previous_release, cli, cli_main, refused, snapshot):
    conn.close()
    before = snapshot(lab.db)
    refused(cli_main("migrate", "--db", lab.db, "--to", "2", "--reason", "upgrade to labkit 0.2"),
            "INC-1002", "evidence_recorded", "has none", "nothing was migrated")
    assert snapshot(lab.db) == before
    assert json.loads(cli("migrations", "--db", lab.db, "--json").stdout) == {"migrations": []}


def test_migrate_moves_every_mappable_run_in_one_logged_step(lab, conn, previous_release, cli, status):
    previous_release.complete("INC-1002")           # finish it under the release that started it
    conn.close()
    done = cli("migrate", "--db", lab.db, "--to", "2", "--reason", "upgrade to labkit 0.2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "migrated 3 runs from workflow version 1 to 2: INC-1001, INC-1002, INC-1003",
        "logged as migration 1: upgrade to labkit 0.2",
    ]
    [entry] = json.loads(cli("migrations", "--db", lab.db, "--json").stdout)["migrations"]
    assert (entry["from_version"], entry["to_version"], entry["runs"], entry["reason"]) == (
        1, 2, ["INC-1001", "INC-1002", "INC-1003"], "upgrade to labkit 0.2")
    runs = {run["incident"]: run for run in status(lab.db)["runs"]}
    assert {run["workflow_version"] for run in runs.values()} == {2}
    # steps and state versions are untouched: a migration is not a transition
    assert [(runs[i]["step"], runs[i]["state_version"]) for i in sorted(runs)] == [
        ("not_inspected", 0), ("report_completed", 2), ("report_completed", 2)]
    # the migrated run at not_inspected now goes on under version 2, with an assessment
    assert cli("run", "--db", lab.db, "--incident", "INC-1001").returncode == 0
    assert status(lab.db)["runs"][0]["assessments"] == 1
    again = cli("migrate", "--db", lab.db, "--to", "2", "--reason", "again")
    assert again.stdout == "no run of workflow version 1: nothing migrated, nothing logged\n"
    assert len(labkit.versioning.migration_log(lab.db)) == 1


def test_a_migration_that_fails_half_way_leaves_nothing_half_migrated(lab, conn, previous_release, snapshot):
    previous_release.complete("INC-1002")
    conn.close()
    before = snapshot(lab.db)
    moved = []

    def fail_after_the_first(incident: str) -> None:
        moved.append(incident)
        raise RuntimeError("the disk went away half way")

    with pytest.raises(RuntimeError):
        labkit.versioning.migrate(lab.db, 2, "upgrade", lab.clock, after_each=fail_after_the_first)
    assert moved == ["INC-1001"], "the first run was updated inside the transaction before the failure"
    assert snapshot(lab.db) == before


def test_a_migration_killed_half_way_leaves_nothing_half_migrated(lab, conn, previous_release, snapshot, python_child):
    previous_release.complete("INC-1002")
    conn.close()
    before = snapshot(lab.db)
    killed = python_child(
        "import os, signal, sys, labkit\n"
        "labkit.versioning.migrate(sys.argv[1], 2, 'upgrade', labkit.TickingClock(),"
        " after_each=lambda incident: os.kill(os.getpid(), signal.SIGKILL))\n",
        lab.db,
    )
    assert killed.returncode == KILLED
    assert snapshot(lab.db)["rows"] == before["rows"], "the killed transaction left nothing behind"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--to", "1", "--reason", "x"), ["workflow version 1", "first version"]),
        (("--to", "3", "--reason", "x"), ["workflow version 3", "unknown"]),
        (("--to", "2", "--reason", " "), ["needs a reason"]),
    ],
    ids=["to-the-first", "to-an-unknown", "no-reason"],
)
def test_migrate_refuses_bad_requests(args, words, lab, conn, previous_release, cli_main, refused, snapshot):
    conn.close()
    before = snapshot(lab.db)
    refused(cli_main("migrate", "--db", lab.db, *args), *words)
    assert snapshot(lab.db) == before


def test_migrate_and_its_log_refuse_a_path_with_no_database(db, folder, cli_main, refused):
    refused(cli_main("migrate", "--db", db, "--to", "2", "--reason", "x"), "does not exist")
    refused(cli_main("migrations", "--db", db), "does not exist")
    assert list(folder.iterdir()) == []


def test_the_previous_release_records_no_assessment_and_the_current_one_does(lab, conn):
    lab.coordinator(conn, workflow_version=1).drive("INC-1005")
    lab.coordinator(conn).drive("INC-1006")
    counts = dict(conn.execute("SELECT incident, COUNT(*) FROM assessments GROUP BY incident").fetchall())
    assert counts == {"INC-1006": 1}
    inputs = conn.execute("SELECT provider, rules_revision, contract FROM evidence WHERE incident = 'INC-1006'").fetchone()
    assert tuple(inputs) == ("reference-rules", 1, labkit.CONTRACT)


def test_an_unsupported_workflow_version_is_refused_before_anything_runs(db, folder, cli_main, refused):
    refused(cli_main("run", "--db", db, "--incident", "INC-1001", "--workflow-version", "7"), "workflow version 7")
    assert list(folder.iterdir()) == []
    with closing(labkit.connect(db)) as conn, pytest.raises(labkit.errors.UnsupportedVersion):
        labkit.Coordinator(conn, labkit.ReferenceProvider(labkit.call_log_for(db)), workflow_version=0)


def test_version_2_completes_from_the_latest_assessment(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start("INC-1007")
    coordinator.inspect("INC-1007")
    with labkit.transaction(conn):  # a later assessment, as a re-evaluation would add
        labkit.assessments.record_assessment_txn(
            conn, "INC-1007", "reevaluation", {"kind": "consumer_outage", "summary": "zombie consumers", "signals": []},
            {"provider": "reference-rules", "rules_revision": 2, "contract": labkit.CONTRACT}, lab.clock, reason="test",
        )
    receipt = coordinator.complete("INC-1007")
    assert (receipt.report["kind"], receipt.report["summary"]) == ("consumer_outage", "zombie consumers")
    assert coordinator.drive("INC-1007").read_provider is False
    assert labkit.store.find_run_txn(conn, "INC-1007").step is Step.REPORT_COMPLETED


# =========================================================================== re-evaluation


def test_reevaluation_adds_an_assessment_beside_the_original_and_reads_nothing(lab, cli, status, snapshot):
    assert cli("run", "--db", lab.db, "--incident", "INC-1007").returncode == 0
    before = snapshot(lab.db)
    done = cli("reevaluate", "--db", lab.db, "--incident", "INC-1007", "--reason", "the newest rules see zombie consumers")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "INC-1007: assessment 2 by rules revision 3: consumer_outage (decision inputs changed: rules_revision)\n"
    after = snapshot(lab.db)
    assert after["provider_log"] == before["provider_log"], "a re-evaluation never asks the provider"
    for table in ("runs", "evidence", "receipts", "transitions"):
        assert after["rows"][table] == before["rows"][table], f"{table} changed"
    with closing(labkit.connect_readonly(lab.db)) as conn:
        [original, again] = labkit.assessments.list_assessments_txn(conn, "INC-1007")
    assert (original.origin, original.kind, original.rules_revision, original.reason) == ("inspection", "consumer_lag", 1, None)
    assert (again.origin, again.kind, again.rules_revision, again.changed) == ("reevaluation", "consumer_outage", 3, ["rules_revision"])
    assert again.reason == "the newest rules see zombie consumers"
    assert status(lab.db)["runs"][0]["assessments"] == 2


def test_recovery_and_resume_never_reevaluate(lab, cli, status):
    for incident in ("INC-1007", "INC-1011"):
        assert cli("run", "--db", lab.db, "--incident", incident, "--crash-at", "after_evidence_commit").returncode == KILLED
    assert cli("recover", "--db", lab.db).returncode == 0
    assert cli("recover", "--db", lab.db).returncode == 0
    assert cli("run", "--db", lab.db, "--incident", "INC-1007").returncode == 0
    assert [run["assessments"] for run in status(lab.db)["runs"]] == [1, 1]
    with closing(labkit.connect_readonly(lab.db)) as conn:
        origins = {row[0] for row in conn.execute("SELECT origin FROM assessments")}
        rules = {row[0] for row in conn.execute("SELECT rules_revision FROM assessments")}
    assert (origins, rules) == ({"inspection"}, {1})


def test_reevaluation_of_a_run_of_the_previous_release_records_its_original_first(lab, conn):
    lab.coordinator(conn, workflow_version=1).drive("INC-1011")
    conn.close()
    new = labkit.versioning.reevaluate(lab.db, "INC-1011", "dead-lettering is loss, not redelivery", lab.clock)
    with closing(labkit.connect_readonly(lab.db)) as reader:
        kinds = [(a.seq, a.origin, a.kind) for a in labkit.assessments.list_assessments_txn(reader, "INC-1011")]
    assert kinds == [(1, "inspection", "false_alarm"), (2, "reevaluation", "poison_message")]
    assert new.changed == ["provider", "rules_revision"], "the old row recorded no decision inputs"


def test_a_reevaluated_run_at_evidence_recorded_can_be_migrated_and_completes_from_it(lab, conn, cli, status):
    lab.coordinator(conn, workflow_version=1).start("INC-1007")
    lab.coordinator(conn, workflow_version=1).inspect("INC-1007")
    conn.close()
    assert cli("migrate", "--db", lab.db, "--to", "2", "--reason", "upgrade").returncode == 2
    assert cli("reevaluate", "--db", lab.db, "--incident", "INC-1007", "--reason", "before the upgrade").returncode == 0
    assert cli("migrate", "--db", lab.db, "--to", "2", "--reason", "upgrade").returncode == 0
    finished = cli("run", "--db", lab.db, "--incident", "INC-1007")
    assert finished.returncode == 0
    with closing(labkit.connect_readonly(lab.db)) as reader:
        report = labkit.receipts.find_receipt_txn(reader, "INC-1007").report
    assert report["kind"] == "consumer_outage", "version 2 completes from the latest assessment"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--incident", "INC-1001", "--reason", "x"), ["INC-1001", "not_inspected"]),
        (("--incident", "INC-1999", "--reason", "x"), ["no run", "INC-1999"]),
        (("--incident", "INC-1002", "--reason", "  "), ["needs a reason"]),
        (("--incident", "INC-1002", "--reason", "x", "--rules-revision", "9"), ["rules revision 9"]),
    ],
    ids=["no-evidence", "no-run", "no-reason", "unknown-revision"],
)
def test_reevaluate_refuses_bad_requests(args, words, lab, conn, cli_main, refused, snapshot):
    coordinator = lab.coordinator(conn)
    coordinator.start("INC-1001")
    coordinator.drive("INC-1002")
    conn.close()
    before = snapshot(lab.db)
    refused(cli_main("reevaluate", "--db", lab.db, *args), *words)
    assert snapshot(lab.db) == before
