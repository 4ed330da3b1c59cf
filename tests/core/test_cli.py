"""The command line as a contract: what outside checks rely on, run as real child processes."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

import labkit
from labkit.receipts import receipt_id_for

DATA = Path(labkit.__file__).resolve().parent.parent / "data"
INCIDENTS = sorted(path.stem for path in (DATA / "incidents").glob("INC-*.json"))

KILLED = -signal.SIGKILL
INC = "INC-1008"


def test_incidents_prints_the_shipped_ids_one_a_line(cli):
    outcome = cli("incidents")
    assert outcome.returncode == 0 and outcome.stderr == ""
    printed = outcome.stdout.splitlines()
    assert printed == sorted(printed)
    assert printed == sorted(p.stem for p in (DATA / "incidents").glob("*.json")) == INCIDENTS
    assert len(printed) >= 12
    assert outcome.stdout.endswith("\n") and "" not in printed


def test_incidents_follows_the_data_dir(data_copy, cli):
    (data_copy / "incidents" / "INC-1001.json").unlink()
    printed = cli("incidents", env={"LABKIT_DATA_DIR": str(data_copy)}).stdout.splitlines()
    assert printed == [i for i in INCIDENTS if i != "INC-1001"]


def test_crash_points_prints_every_point_in_run_order(cli):
    outcome = cli("crash-points")
    assert outcome.returncode == 0 and outcome.stderr == ""
    assert outcome.stdout.splitlines() == list(labkit.CRASH_POINTS)
    assert outcome.stdout.endswith("\n")


def test_run_creates_a_new_database_and_completes(db, folder, cli, status):
    assert not db.exists()
    outcome = cli("run", "--db", db, "--incident", INC)
    assert outcome.returncode == 0, outcome.stderr
    assert outcome.stderr == ""
    assert db.is_file()
    assert receipt_id_for(INC, labkit.WORKFLOW_VERSION) in outcome.stdout
    assert "report_completed" in outcome.stdout and "read the provider" in outcome.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["lab.db", labkit.call_log_for(db).name]
    [run] = status(db)["runs"]
    assert (run["incident"], run["step"], run["receipts"], run["provider_reads"]) == (INC, "report_completed", 1, 1)


def test_run_twice_reads_once_and_prints_the_same_receipt(lab, cli, snapshot):
    first = cli("run", "--db", lab.db, "--incident", INC)
    assert first.returncode == 0
    before = snapshot(lab.db)
    second = cli("run", "--db", lab.db, "--incident", INC)
    assert second.returncode == 0, second.stderr
    assert "no read needed" in second.stdout
    receipt = receipt_id_for(INC, labkit.WORKFLOW_VERSION)
    assert receipt in first.stdout and receipt in second.stdout
    assert snapshot(lab.db) == before
    assert lab.reads(INC) == 1


def test_status_json_is_one_object_with_the_promised_fields(lab, cli, status):
    assert cli("run", "--db", lab.db, "--incident", "INC-1001").returncode == 0
    assert cli("run", "--db", lab.db, "--incident", "INC-1003", "--crash-at", "after_read").returncode == KILLED
    assert cli("run", "--db", lab.db, "--incident", "INC-1002", "--crash-at", "before_completion_commit").returncode == KILLED
    state = status(lab.db)
    assert isinstance(state["runs"], list)
    runs = {run["incident"]: run for run in state["runs"]}
    assert [run["incident"] for run in state["runs"]] == ["INC-1001", "INC-1002", "INC-1003"]
    for run in state["runs"]:
        for key, kind in (("incident", str), ("workflow_version", int), ("step", str), ("receipts", int), ("provider_reads", int)):
            assert isinstance(run[key], kind) and not isinstance(run[key], bool), (key, run)
        assert run["workflow_version"] == labkit.WORKFLOW_VERSION
    assert (runs["INC-1001"]["step"], runs["INC-1001"]["receipts"], runs["INC-1001"]["provider_reads"]) == ("report_completed", 1, 1)
    assert (runs["INC-1002"]["step"], runs["INC-1002"]["receipts"], runs["INC-1002"]["provider_reads"]) == ("evidence_recorded", 0, 1)
    assert (runs["INC-1003"]["step"], runs["INC-1003"]["receipts"], runs["INC-1003"]["provider_reads"]) == ("not_inspected", 0, 1)


def test_status_json_of_a_new_database_has_no_runs(db, status):
    labkit.connect(db).close()
    assert status(db)["runs"] == []


@pytest.mark.parametrize("command", ["status", "recover"])
def test_a_command_that_only_reads_or_resumes_refuses_a_path_with_no_database(command, db, folder, cli_main, refused):
    refused(cli_main(command, "--db", db), "lab.db", "does not exist")
    assert list(folder.iterdir()) == [], "a mistyped path must not become an empty database"


def test_status_without_json_is_a_table(lab, cli):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    outcome = cli("status", "--db", lab.db)
    assert outcome.returncode == 0
    header, row = outcome.stdout.splitlines()
    assert header.split() == ["incident", "step", "receipts", "reads"]
    assert row.split() == [INC, "report_completed", "1", "1"]


def test_recover_says_what_it_resumed(lab, cli):
    assert cli("run", "--db", lab.db, "--incident", "INC-1001", "--crash-at", "before_read").returncode == KILLED
    assert cli("run", "--db", lab.db, "--incident", "INC-1002", "--crash-at", "after_evidence_commit").returncode == KILLED
    outcome = cli("recover", "--db", lab.db)
    assert outcome.returncode == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert lines[0].startswith("resumed INC-1001 from not_inspected: read the provider")
    assert lines[1].startswith("resumed INC-1002 from evidence_recorded: completed from committed evidence, no read")
    version = labkit.WORKFLOW_VERSION
    assert receipt_id_for("INC-1001", version) in lines[0] and receipt_id_for("INC-1002", version) in lines[1]
    assert lines[-1] == "recovered 2 runs"


def test_recover_on_a_new_database_recovers_nothing(db, cli):
    labkit.connect(db).close()
    outcome = cli("recover", "--db", db)
    assert (outcome.returncode, outcome.stdout) == (0, "recovered 0 runs\n")


def test_run_continues_a_crashed_run_from_its_step(lab, cli):
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    outcome = cli("run", "--db", lab.db, "--incident", INC)
    assert outcome.returncode == 0
    assert f"{INC}: recorded step is evidence_recorded" in outcome.stdout
    assert "no read needed" in outcome.stdout
    assert lab.reads(INC) == 1


def test_crash_at_kills_with_sigkill_and_leaves_no_traceback(lab, cli):
    outcome = cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "before_completion_commit")
    assert outcome.returncode == KILLED
    assert outcome.stderr == "", "SIGKILL runs no handler: nothing may be printed on the way down"
    assert outcome.stdout == f"{INC}: recorded step is not_inspected\n"


def test_status_json_is_stable_for_the_same_state(lab, cli):
    """status --json keys are sorted: the same state always prints the same bytes."""
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    first = cli("status", "--db", lab.db, "--json").stdout
    second = cli("status", "--db", lab.db, "--json").stdout
    assert first == second
    assert first == json.dumps(json.loads(first), sort_keys=True) + "\n"
