"""What goes wrong around the workflow: odd paths, a damaged log, a partial recovery, several
recovery workers at once. Each case gets one clear line and leaves the database correct."""

from __future__ import annotations

import os

import pytest

import labkit
from labkit.database import transaction

INC = "INC-1001"
KILLED = -9


def test_recover_finishes_the_other_runs_when_one_fails(lab, data_copy, cli, status):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    incidents = ["INC-1001", "INC-1002", "INC-1003"]
    for incident in incidents:
        assert cli("run", "--db", lab.db, "--incident", incident, "--crash-at", "before_read", env=env).returncode == KILLED
    (data_copy / "incidents" / "INC-1002.json").write_text("{ broken", encoding="utf-8")

    outcome = cli("recover", "--db", lab.db, env=env)

    assert outcome.returncode == 2, "a rejected provider answer is bad data: exit 2"
    assert outcome.stderr.splitlines() == [outcome.stderr.strip()] and "INC-1002" in outcome.stderr
    assert "Traceback" not in outcome.stderr
    lines = outcome.stdout.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == ["INC-1001", "INC-1003"], "the run after the failure was skipped"
    assert lines[-1] == "recovered 2 runs, 1 failed"
    steps = {run["incident"]: run["step"] for run in status(lab.db, env=env)["runs"]}
    assert steps == {"INC-1001": "report_completed", "INC-1002": "not_inspected", "INC-1003": "report_completed"}


def test_recover_exits_1_when_the_provider_is_down(lab, data_copy, cli):
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "before_read", env=env).returncode == KILLED
    target = data_copy / "incidents" / f"{INC}.json"
    target.unlink()
    os.symlink(data_copy / "nowhere.json", target)
    outcome = cli("recover", "--db", lab.db, env=env)
    assert (outcome.returncode, outcome.stdout) == (1, "recovered 0 runs, 1 failed\n")
    assert "provider could not read" in outcome.stderr


def test_concurrent_recovery_workers_complete_each_run_once_and_say_so(lab, cli, status):
    incidents = labkit.list_incidents()[:7]
    for incident in incidents:
        assert cli("run", "--db", lab.db, "--incident", incident, "--crash-at", "after_evidence_commit").returncode == KILLED
    outcomes = labkit.lab.race(*[("recover", "--db", lab.db)] * 3)
    assert [o.returncode for o in outcomes] == [0, 0, 0], [o.stderr for o in outcomes]
    claimed = [line.split()[1] for o in outcomes for line in o.stdout.splitlines() if "completed from committed evidence" in line]
    assert sorted(claimed) == incidents, "each run must be reported as completed by exactly one worker"
    totals = [int(o.stdout.splitlines()[-1].split()[1]) for o in outcomes]
    assert sum(totals) == len(incidents)
    assert {(r["step"], r["receipts"], r["provider_reads"]) for r in status(lab.db)["runs"]} == {("report_completed", 1, 1)}


def test_a_database_reached_through_a_symlink_shares_one_provider_log(lab, cli, status):
    link = lab.folder / "link.db"
    link.symlink_to(lab.db)
    assert cli("run", "--db", link, "--incident", INC, "--crash-at", "after_read").returncode == KILLED
    assert cli("recover", "--db", lab.db).returncode == 0
    [run] = status(lab.db)["runs"]
    assert run["provider_reads"] == 2, "the read made through the link must be counted"
    assert sorted(p.name for p in lab.folder.glob("*.jsonl")) == ["lab.db.provider-calls.jsonl"]


@pytest.mark.parametrize(("where", "words"), [(".", "not a SQLite database"), ("/", "names a folder"), ("", "empty"),
                                              ("./", "names a folder")])
def test_a_folder_given_as_the_database_is_refused(where, words, cli, refused, tmp_path):
    for args in (("run", "--db", where, "--incident", INC), ("recover", "--db", where), ("status", "--db", where, "--json")):
        refused(cli(*args), words)


def test_a_fifo_given_as_the_database_is_refused_without_hanging(folder, cli, refused):
    fifo = folder / "pipe.db"
    os.mkfifo(fifo)
    refused(cli("status", "--db", fifo, "--json"), "pipe.db", "not a regular file")


def test_a_malformed_lesson_clock_is_refused_before_any_file_is_made(folder, cli, refused):
    db = folder / "new.db"
    refused(cli("run", "--db", db, "--incident", INC, env={"LABKIT_CLOCK": "yesterday"}), "LABKIT_CLOCK", "yesterday")
    assert not db.exists()


def test_a_damaged_provider_log_is_named(lab, cli, refused):
    assert cli("run", "--db", lab.db, "--incident", INC).returncode == 0
    with open(lab.call_log, "a", encoding="utf-8") as log:
        log.write('{"incident": "INC-10\n')  # a line someone cut short, followed by more
        log.write('{"incident": "INC-1001", "outcome": "ok", "response_bytes": 1}\n')
    refused(cli("status", "--db", lab.db, "--json"), "provider-calls.jsonl", "line 2")


def test_an_option_must_be_spelled_out(lab, cli, refused):
    refused(cli("run", "--db", lab.db, "--inc", INC), "--inc")
    assert not lab.db.exists()


def test_a_huge_unknown_id_gives_a_short_message(lab, cli, refused):
    line = refused(cli("run", "--db", lab.db, "--incident", "X" * 100_000), "unknown incident")
    assert len(line) < 300


def test_a_completed_run_without_its_receipt_is_reported_not_crashed_on(lab, conn, cli, refused):
    lab.coordinator(conn).drive(INC)
    with transaction(conn):
        conn.execute("DELETE FROM receipts WHERE incident = ?", (INC,))  # someone edited the file by hand
    refused(cli("run", "--db", lab.db, "--incident", INC), INC, "inconsistent", "no receipt")


def test_a_read_only_database_file_is_named(lab, conn, cli, refused):
    lab.coordinator(conn).drive(INC)
    conn.close()
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions")
    lab.db.chmod(0o444)
    try:
        outcome = cli("run", "--db", lab.db, "--incident", "INC-1002")
        assert outcome.returncode == 1 and "lab.db" in outcome.stderr and "Traceback" not in outcome.stderr
    finally:
        lab.db.chmod(0o644)


def test_a_reader_does_not_wait_for_an_open_write(lab, conn):
    """WAL: status and the display tables must answer while a worker holds the write lock."""
    lab.coordinator(conn).drive(INC)
    conn.execute("BEGIN IMMEDIATE")
    try:
        assert labkit.status_of(lab.db)["runs"][0]["step"] == "report_completed"
    finally:
        conn.execute("ROLLBACK")


def test_the_two_commit_draft_leaves_rows_that_contradict_and_the_coordinator_refuses_them(lab, conn):
    """Why inspect is one transaction: the naive draft, failing between its commits, leaves
    evidence beside a step that says nothing was read; the coordinator will not guess."""
    from labkit.lab.naive import two_commit_inspect

    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    with pytest.raises(labkit.errors.InjectedFailure):
        two_commit_inspect(conn, lab.provider(), INC, lab.clock, fail_between=True)
    [run] = labkit.status_of(lab.db)["runs"]
    assert (run["step"], run["evidence"]) == ("not_inspected", True)
    with pytest.raises(labkit.errors.InconsistentRun, match="not_inspected but already has evidence"):
        coordinator.drive(INC)
    assert lab.reads(INC) == 1, "the coordinator refused before asking the provider again"


def test_the_two_commit_draft_works_when_nothing_fails(lab, conn):
    from labkit.lab.naive import two_commit_inspect

    lab.coordinator(conn).start(INC)
    two_commit_inspect(conn, lab.provider(), INC, lab.clock)
    assert labkit.status_of(lab.db)["runs"][0]["step"] == "evidence_recorded"


def test_a_malformed_setting_is_refused_before_any_file_is_made(db, folder, cli, refused):
    refused(cli("run", "--db", db, "--incident", INC, env={"LABKIT_BUSY_TIMEOUT_MS": "soon"}), "LABKIT_BUSY_TIMEOUT_MS")
    refused(cli("run", "--db", db, "--incident", INC, env={"LABKIT_PROVIDER_DELAY": "nan"}), "LABKIT_PROVIDER_DELAY")
    assert list(folder.iterdir()) == []
