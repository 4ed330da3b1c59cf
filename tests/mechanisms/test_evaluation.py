"""The evaluation layer (13_evaluation): the task scorecard and the recovery scorecard, scored apart.

Real checkpoint databases, the real provider with its own call log, the real command line in
child processes (crashes are real SIGKILLs), and a real ticket service on 127.0.0.1 where a
duplicated ticket is needed. The numbers are worked out by hand from data/ground_truth.csv:
rules revision 1 (the CLI's default provider) misdiagnoses INC-1007 (a consumer outage read as
consumer lag) and INC-1011 (poison messages read as a false alarm); revision 2 misreads INC-1007 too,
at the capacity a live broker reports for zombies (about 1e-7, not 0); revision 3 is right on all 16.

The separation is tested three ways: the authorizer refuses a read outside a scorer's tables
(directly, and when a scorer's own query is changed to read one); changing one side's data in
a real database leaves the other score byte for byte the same; and the two failures that the
separation exists for are each scored on the right card only.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit import evaluation
from labkit.errors import BadGroundTruth, BadScenarioRow, ScorerReadRefused
from labkit.evaluation import (
    RECOVERY_TABLES,
    TASK_TABLES,
    load_ground_truth,
    recovery_from_scenarios,
    recovery_score,
    scoped_connection,
    task_score,
)
from labkit.lab.ticket_service import SLOW, TicketService
from labkit.ticket_client import post_ticket

# Not imported from conftest: tests/browser has a conftest of its own, and which one "conftest"
# names depends on collection order.
DATA = Path(__file__).resolve().parents[2] / "data"
INCIDENTS = sorted(path.stem for path in (DATA / "incidents").glob("INC-*.json"))
TRUTH_CSV = (DATA / "ground_truth.csv").read_text(encoding="utf-8")

#: Revision 1 against the ground truth, by hand: 4 consumer outages (one read as lag), 3 lags,
#: 2 poison messages (one read as a false alarm), 3 stuck consumers, 2 memory alarms, 2 false alarms.
CONFUSION_REVISION_1 = {
    "consumer_lag": {"consumer_lag": 3},
    "consumer_outage": {"consumer_lag": 1, "consumer_outage": 3},
    "false_alarm": {"false_alarm": 2},
    "memory_alarm": {"memory_alarm": 2},
    "poison_message": {"false_alarm": 1, "poison_message": 1},
    "stuck_consumer": {"stuck_consumer": 3},
}
PRECISION_RECALL_REVISION_1 = {
    "consumer_lag": (3 / 4, 3 / 3),      # 4 predicted (INC-1007 among them), all 3 true ones found
    "consumer_outage": (3 / 3, 3 / 4),   # INC-1007 missed
    "false_alarm": (2 / 3, 2 / 2),       # INC-1011 wrongly called one
    "memory_alarm": (1.0, 1.0),
    "poison_message": (1 / 1, 1 / 2),    # INC-1011 missed
    "stuck_consumer": (1.0, 1.0),
}


# --------------------------------------------------------------------------- helpers


def drive(lab, incidents: list[str], rules_revision: int = 1) -> None:
    """Run each incident to report_completed in this process, the provider under ``rules_revision``."""
    provider = labkit.ReferenceProvider(lab.call_log, rules_revision=rules_revision)
    with closing(lab.connect()) as conn:
        coordinator = lab.coordinator(conn, provider=provider)
        for incident in incidents:
            coordinator.drive(incident)


def evaluated(cli, db: Path, *extra: str | Path, env: dict[str, str] | None = None) -> dict:
    """``evaluate --json`` through the real command line: exit 0 and exactly one JSON object."""
    done = cli("evaluate", "--db", db, "--json", *extra, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1, f"evaluate --json printed more than one line: {done.stdout!r}"
    return json.loads(done.stdout)


def canonical(part: dict) -> str:
    return json.dumps(part, sort_keys=True)


@pytest.fixture
def services(tmp_path: Path):
    """Ticket services on stores outside the lab's folder; every one is stopped afterwards."""
    started: list[TicketService] = []
    (tmp_path / "service").mkdir()

    def start(fault: str | None = None, times: int | None = None) -> TicketService:
        service = TicketService(tmp_path / "service" / f"tickets{len(started)}.db", fault=fault, fault_times=times)
        started.append(service)
        return service.start()

    yield start
    for service in started:
        service.stop()


# =========================================================================== the task scorecard


def test_revision_1_scores_14_of_16_with_the_two_known_misdiagnoses(lab, cli):
    drive(lab, INCIDENTS, rules_revision=1)
    scores = evaluated(cli, lab.db)

    # the contract's keys, exactly as DESIGN.md names them
    assert {"task", "recovery"} <= set(scores)
    assert {"accuracy", "per_class", "confusion"} <= set(scores["task"])
    assert {"runs", "completed", "duplicate_receipts", "duplicate_effects", "rereads"} <= set(scores["recovery"])
    assert all(set(row) >= {"precision", "recall"} for row in scores["task"]["per_class"].values())

    task = scores["task"]
    assert (task["scored"], task["correct"], task["accuracy"]) == (16, 14, 14 / 16)
    assert task["confusion"] == CONFUSION_REVISION_1
    assert {kind: (row["precision"], row["recall"]) for kind, row in task["per_class"].items()} == PRECISION_RECALL_REVISION_1
    assert task["misdiagnosed"] == [
        {"incident": "INC-1007", "truth": "consumer_outage", "predicted": "consumer_lag"},
        {"incident": "INC-1011", "truth": "poison_message", "predicted": "false_alarm"},
    ]
    assert task["unscored"] == {"no_assessment": [], "not_in_ground_truth": []}
    assert scores["task_original"] is None  # nothing was re-evaluated
    assert scores["recovery"] == {
        "runs": 16, "completed": 16, "duplicate_receipts": 0, "duplicate_effects": None, "uncertain_effects": 0,
        "rereads": 0, "unfinished": [],
    }


def test_the_human_output_is_two_titled_tables(lab, cli, snapshot):
    drive(lab, ["INC-1007", "INC-1011", "INC-1012"], rules_revision=1)
    before = snapshot(lab.db)
    done = cli("evaluate", "--db", lab.db)
    assert done.returncode == 0, done.stderr
    assert snapshot(lab.db) == before  # read only: no row, file or provider call added
    assert done.stdout.splitlines() == [
        "Task (diagnosis vs data/ground_truth.csv)",
        "accuracy 0.333: 1 of 3 runs scored right (latest assessment of each run)",
        "kind             truth predicted correct precision recall",
        "consumer_lag         0         1       0     0.000      -",
        "consumer_outage      2         1       1     1.000  0.500",
        "false_alarm          0         1       0     0.000      -",
        "poison_message       1         0       0         -  0.000",
        "wrong: INC-1007 is consumer_outage, diagnosed consumer_lag",
        "wrong: INC-1011 is poison_message, diagnosed false_alarm",
        "",
        "Recovery",
        "runs                   3",
        "completed              3",
        "duplicate_receipts     0",
        "duplicate_effects      -  (no destination given: add --ticket-store PATH)",
        "uncertain_effects      0",
        "rereads                0",
    ]
    # precision is undefined (null, shown "-") for a kind never predicted, recall for a kind that never occurs
    per_class = evaluated(cli, lab.db)["task"]["per_class"]
    assert per_class["poison_message"]["precision"] is None and per_class["consumer_lag"]["recall"] is None
    frame = evaluation.per_class_frame(task_score(lab.db)).set_index("kind")  # the notebooks' view: undefined is NaN, not 0
    assert frame.loc["poison_message", "precision"] != frame.loc["poison_message", "precision"]
    assert frame.loc["consumer_outage"].tolist() == [2, 1, 1, 1.0, 0.5]


def test_revision_3_scores_every_incident_right(lab):
    drive(lab, INCIDENTS, rules_revision=3)
    score = task_score(lab.db)
    assert (score.scored, score.correct, score.accuracy) == (16, 16, 1.0)
    assert score.misdiagnosed == []
    assert all(list(row) == [kind] for kind, row in score.confusion.items()), score.confusion
    assert all(row["precision"] == row["recall"] == 1.0 for row in score.per_class.values())
    frame = evaluation.confusion_frame(score)  # the notebooks' view: a square table, zeros filled
    assert list(frame.index) == list(frame.columns) == sorted(score.per_class)
    assert int(frame.to_numpy().trace()) == 16 and int(frame.to_numpy().sum()) == 16


def test_reevaluated_runs_are_scored_beside_their_originals_and_recovery_does_not_move(lab, cli):
    drive(lab, INCIDENTS, rules_revision=1)
    before = evaluated(cli, lab.db)
    for incident in ("INC-1007", "INC-1011"):
        done = cli("reevaluate", "--db", lab.db, "--incident", incident, "--reason", "rules revision 2 reads zombie consumers")
        assert done.returncode == 0, done.stderr
    after = evaluated(cli, lab.db)

    assert (after["task"]["accuracy"], after["task"]["misdiagnosed"]) == (1.0, [])
    assert after["task"]["reevaluated"] == ["INC-1007", "INC-1011"]
    original = after["task_original"]
    assert original["assessments"] == "original"
    assert {k: original[k] for k in ("accuracy", "per_class", "confusion", "misdiagnosed")} == {
        k: before["task"][k] for k in ("accuracy", "per_class", "confusion", "misdiagnosed")
    }
    # the task side changed; the recovery score, computed from other data, did not move a byte
    assert canonical(after["recovery"]) == canonical(before["recovery"])

    text = cli("evaluate", "--db", lab.db).stdout
    assert "Task, original assessments (before re-evaluation of INC-1007, INC-1011)" in text


def test_a_reevaluation_to_a_wrong_kind_lowers_only_the_task_score(lab, cli):
    drive(lab, INCIDENTS, rules_revision=3)
    before = evaluated(cli, lab.db)
    done = cli("reevaluate", "--db", lab.db, "--incident", "INC-1011", "--reason", "back to the old rules", "--rules-revision", "1")
    assert done.returncode == 0 and "false_alarm" in done.stdout, done.stderr
    after = evaluated(cli, lab.db)
    assert (before["task"]["accuracy"], after["task"]["accuracy"]) == (1.0, 15 / 16)
    assert after["task"]["confusion"]["poison_message"] == {"false_alarm": 1, "poison_message": 1}
    assert after["task_original"]["accuracy"] == 1.0
    assert canonical(after["recovery"]) == canonical(before["recovery"])


def test_runs_without_an_assessment_or_ground_truth_are_listed_not_counted_wrong(lab, cli, data_copy):
    # A copy of data/ with one incident more, which the answer key does not list.
    extra = json.loads((data_copy / "incidents" / "INC-1003.json").read_text(encoding="utf-8"))
    extra["incident"] = "INC-2001"
    (data_copy / "incidents" / "INC-2001.json").write_text(json.dumps(extra), encoding="utf-8")
    (data_copy / "ground_truth.csv").write_text(TRUTH_CSV, encoding="utf-8")
    env = {"LABKIT_DATA_DIR": str(data_copy)}
    assert cli("run", "--db", lab.db, "--incident", "INC-2001", env=env).returncode == 0
    assert cli("run", "--db", lab.db, "--incident", "INC-1004", env=env).returncode == 0
    # Under workflow version 1 a run records no assessment at all.
    assert cli("run", "--db", lab.db, "--incident", "INC-1006", "--workflow-version", "1", env=env).returncode == 0
    crashed = cli("run", "--db", lab.db, "--incident", "INC-1001", "--crash-at", "before_read", env=env)
    assert crashed.killed_by == "SIGKILL"

    task = evaluated(cli, lab.db, env=env)["task"]
    assert task["unscored"] == {"no_assessment": ["INC-1001", "INC-1006"], "not_in_ground_truth": ["INC-2001"]}
    assert (task["scored"], task["correct"], task["accuracy"]) == (1, 1, 1.0)
    text = cli("evaluate", "--db", lab.db, env=env).stdout
    assert "not scored, no assessment yet: INC-1001, INC-1006" in text
    assert "not scored, not in the ground truth: INC-2001" in text


# =========================================================================== the recovery scorecard


def test_a_crash_between_read_and_commit_costs_one_reread_and_nothing_on_the_task_card(lab, cli, tmp_path):
    crashed = cli("run", "--db", lab.db, "--incident", "INC-1003", "--crash-at", "after_read")
    assert crashed.killed_by == "SIGKILL"
    halfway = evaluated(cli, lab.db)
    assert halfway["recovery"] | {"unfinished": None} == {
        "runs": 1, "completed": 0, "duplicate_receipts": 0, "duplicate_effects": None, "uncertain_effects": 0,
        "rereads": 0, "unfinished": None,
    }
    assert halfway["recovery"]["unfinished"] == ["INC-1003"]
    assert halfway["task"]["unscored"]["no_assessment"] == ["INC-1003"] and halfway["task"]["accuracy"] is None

    assert cli("recover", "--db", lab.db).returncode == 0
    recovered = evaluated(cli, lab.db)
    assert (recovered["recovery"]["completed"], recovered["recovery"]["rereads"]) == (1, 1)

    # The same incident run once without a crash: the re-read is recovery's data only, so the
    # task score is byte for byte the same.
    clean_db = tmp_path / "clean" / "lab.db"
    clean_db.parent.mkdir()
    assert cli("run", "--db", clean_db, "--incident", "INC-1003").returncode == 0
    clean = evaluated(cli, clean_db)
    assert clean["recovery"]["rereads"] == 0
    assert canonical(recovered["task"]) == canonical(clean["task"])

    # The explorer's path to the same card gives the same numbers from the same facts.
    status = labkit.status_of(lab.db)
    rows = [{"name": r["incident"], "provider_reads": r["provider_reads"], "receipts": r["receipts"],
             "completed": r["step"] == "report_completed", "uncertain": False} for r in status["runs"]]
    assert recovery_from_scenarios(rows).as_json() == recovery_score(lab.db).as_json()


def test_a_perfectly_recovered_run_can_still_be_diagnosed_wrongly(lab, cli):
    crashed = cli("run", "--db", lab.db, "--incident", "INC-1007", "--crash-at", "after_evidence_commit")
    assert crashed.killed_by == "SIGKILL"
    assert cli("recover", "--db", lab.db).returncode == 0
    scores = evaluated(cli, lab.db)
    recovery = scores["recovery"]
    assert recovery["completed"] == recovery["runs"] == 1
    assert (recovery["duplicate_receipts"], recovery["rereads"], recovery["unfinished"]) == (0, 0, [])
    assert scores["task"]["accuracy"] == 0.0
    assert scores["task"]["misdiagnosed"] == [{"incident": "INC-1007", "truth": "consumer_outage", "predicted": "consumer_lag"}]


def test_a_right_diagnosis_can_hide_a_duplicated_ticket(lab, cli, services, tmp_path):
    service = services(SLOW, 1)  # the first answer comes after the client gave up waiting
    naive = cli("run", "--db", lab.db, "--incident", "INC-1003", "--tickets", service.url, "--bug", "retry_without_key")
    assert naive.returncode == 0, naive.stderr  # it looks like a success
    with_store = evaluated(cli, lab.db, "--ticket-store", service.store)
    assert with_store["task"]["accuracy"] == 1.0
    assert with_store["recovery"]["duplicate_effects"] == 1
    assert with_store["recovery"]["completed"] == with_store["recovery"]["runs"] == 1

    without = cli("evaluate", "--db", lab.db)
    assert without.returncode == 0, without.stderr
    assert "duplicate_effects      -  (no destination given: add --ticket-store PATH)" in without.stdout
    assert evaluated(cli, lab.db)["recovery"]["duplicate_effects"] is None

    # A second ticket is the recovery card's data: the task score equals that of a clean run.
    clean_db = tmp_path / "clean" / "lab.db"
    clean_db.parent.mkdir()
    assert cli("run", "--db", clean_db, "--incident", "INC-1003").returncode == 0
    assert canonical(with_store["task"]) == canonical(evaluated(cli, clean_db)["task"])


def test_more_reads_and_tickets_in_the_same_database_leave_the_task_score_byte_identical(lab, cli, services):
    service = services()
    done = cli("run", "--db", lab.db, "--incident", "INC-1003", "--tickets", service.url)
    assert done.returncode == 0, done.stderr
    before = evaluated(cli, lab.db, "--ticket-store", service.store)
    assert (before["recovery"]["duplicate_effects"], before["recovery"]["rereads"]) == (0, 0)

    # The outside world changes: the provider logs another read of the incident, and the
    # destination gets a second ticket for it under another key.
    lab.provider_log.append("INC-1003", "ok", 100)
    request = {"incident": "INC-1003", "title": "a second ticket", "summary": "opened by someone else"}
    assert post_ticket(service.url, "someone-elses-key", request, 5.0).outcome == "created"

    after = evaluated(cli, lab.db, "--ticket-store", service.store)
    assert (after["recovery"]["duplicate_effects"], after["recovery"]["rereads"]) == (1, 1)
    assert canonical(after["task"]) == canonical(before["task"])
    assert after["task_original"] == before["task_original"] is None


def test_recovery_from_scenarios_counts_what_each_row_says():
    import pandas as pd

    rows = [
        {"name": "after_read", "provider_reads": 2, "receipts": 1, "tickets": 1, "completed": True},
        {"name": "double", "provider_reads": 3, "receipts": 2, "tickets": 3, "completed": True, "uncertain": True},
        {"name": "stuck", "provider_reads": 1, "receipts": 0, "tickets": None, "completed": False},
    ]
    score = recovery_from_scenarios(rows)
    assert score.as_json() == {
        "runs": 3, "completed": 2, "duplicate_receipts": 1, "duplicate_effects": 2, "uncertain_effects": 1,
        "rereads": 3, "unfinished": ["stuck"],
    }
    # A pandas table's records (numpy numbers, NaN for a gap) give the same card.
    records = pd.DataFrame(rows).to_dict("records")
    assert recovery_from_scenarios(records).as_json() == score.as_json()
    frame = evaluation.recovery_frame(score)
    assert list(frame["tickets"].astype("object").where(frame["tickets"].notna(), None)) == [1, 3, None]
    # No row says anything about tickets: not measured, not zero.
    assert recovery_from_scenarios([{"provider_reads": 1, "receipts": 1, "completed": True}]).duplicate_effects is None


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ({"receipts": 1, "completed": True}, "no 'provider_reads'"),
        ({"provider_reads": -1, "receipts": 1, "completed": True}, "provider_reads is -1"),
        ({"provider_reads": float("nan"), "receipts": 1, "completed": True}, "provider_reads is nan"),
        ({"provider_reads": 1.5, "receipts": 1, "completed": True}, "provider_reads is 1.5"),
        ({"provider_reads": True, "receipts": 1, "completed": True}, "provider_reads is True"),
        ({"provider_reads": 1, "receipts": "1", "completed": True}, "receipts is '1'"),
        ({"provider_reads": 1, "receipts": 1, "completed": "yes"}, "completed is 'yes'"),
        ("not a row", "expected a mapping"),
    ],
)
def test_a_malformed_scenario_row_is_refused_by_name(row, words):
    with pytest.raises(BadScenarioRow, match=words) as refused:
        recovery_from_scenarios([{"provider_reads": 1, "receipts": 1, "completed": True}, row])
    assert refused.value.index == 1 and refused.value.exit_code == 2


# =========================================================================== the fence between the scorers


@pytest.mark.parametrize(
    ("scorer", "tables", "forbidden"),
    [("task", TASK_TABLES, ["receipts", "effects", "evidence", "transitions"]),
     ("recovery", RECOVERY_TABLES, ["assessments", "evidence", "transitions"])],
)
def test_each_scorers_connection_refuses_every_table_outside_its_list(lab, scorer, tables, forbidden):
    drive(lab, ["INC-1003"])
    for table in tables:  # its own tables read as usual (no effects: the run opened no ticket)
        with scoped_connection(lab.db, scorer, tables) as conn:
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == (0 if table == "effects" else 1)
    for table in forbidden:
        for sql in (f"SELECT * FROM {table}", f"SELECT COUNT(*) FROM {table}",
                    f"SELECT incident FROM runs WHERE incident IN (SELECT incident FROM {table})"):
            with pytest.raises(ScorerReadRefused) as refused:
                with scoped_connection(lab.db, scorer, tables) as conn:
                    conn.execute(sql).fetchall()
            assert (refused.value.scorer, refused.value.table) == (scorer, table), sql
    with pytest.raises(ScorerReadRefused):  # and it writes nothing, whatever it is asked
        with scoped_connection(lab.db, scorer, tables) as conn:
            conn.execute("DELETE FROM runs")


def test_a_scorer_edited_to_read_the_other_sides_table_fails_loudly(lab, monkeypatch):
    drive(lab, ["INC-1003"])
    task_score(lab.db), recovery_score(lab.db)  # as shipped, both read only their own tables
    with monkeypatch.context() as patch:
        patch.setattr(evaluation, "TASK_ASSESSMENTS_SQL",
                      "SELECT incident, seq, kind FROM assessments WHERE incident IN (SELECT incident FROM receipts)")
        with pytest.raises(ScorerReadRefused, match="the task scorer may read only runs, assessments; it tried to read 'receipts'"):
            task_score(lab.db)
    with monkeypatch.context() as patch:
        patch.setattr(evaluation, "RECOVERY_RUNS_SQL",
                      "SELECT incident, step, 1 AS receipts, (SELECT COUNT(*) FROM assessments) AS uncertain FROM runs")
        with pytest.raises(ScorerReadRefused, match="'assessments'"):
            recovery_score(lab.db)


def test_each_scorer_works_without_the_other_sides_files(lab, cli, tmp_path, monkeypatch):
    drive(lab, ["INC-1003"])
    lab.call_log.write_text("{not json}\n", encoding="utf-8")  # recovery's outside record, damaged
    assert task_score(lab.db).accuracy == 1.0
    with pytest.raises(labkit.errors.CorruptCallLog):
        recovery_score(lab.db)
    lab.call_log.unlink()
    monkeypatch.setenv("LABKIT_DATA_DIR", str(tmp_path / "no-data"))  # the task's answer key, gone
    assert recovery_score(lab.db).completed == 1
    with pytest.raises(BadGroundTruth, match="does not exist"):
        task_score(lab.db)


# =========================================================================== bad input


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, ["does not exist"]),
        ("incident;kind\nINC-1001;consumer_outage\n", ["lacks the column 'incident'"]),
        ("incident,kind\nINC-1001,consumer_outage\nINC-1002,queue_on_fire\n", ["line 3", "unknown kind 'queue_on_fire'"]),
        ("incident,kind\nINC-1001,consumer_outage\nINC-1001,false_alarm\n", ["line 3 lists INC-1001 again"]),
        ("incident,kind,explanation\nINC-1001,consumer_outage\n", ["line 2 has 2 fields, the header 3"]),
        ("incident,kind\n INC-1001,consumer_outage\n", ["spaces around it"]),
        ("incident,kind\n", ["lists no incidents"]),
        ("", ["it is empty"]),
        (b"incident,kind\nINC-1001,consumer_\xff\n", ["not UTF-8"]),
        ("incident,kind\nINC-\x001001,consumer_outage\n", ["line 2", "control characters"]),
        ('incident,kind\nINC-1001,"' + "x" * 200_000 + '"\n', ["line 2 is not CSV", "field larger than field limit"]),
        ("incident,kind\n" + "INC-1,false_alarm," * 100_000, ["larger than"]),
        ("fifo", ["not a regular file"]),
        ("folder", ["not a regular file"]),
    ],
    ids=["missing", "bad-header", "unknown-kind", "duplicate", "short-row", "padded-id", "no-rows", "empty", "not-utf8",
         "nul", "huge-field", "huge", "fifo", "folder"],
)
def test_a_bad_ground_truth_is_refused_in_one_line(tmp_path, content, words):
    path = tmp_path / "ground_truth.csv"
    if content == "fifo":
        os.mkfifo(path)  # would block a plain open() for ever
    elif content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(BadGroundTruth) as refused:
        load_ground_truth(path)
    message = str(refused.value)
    assert refused.value.exit_code == 2 and "\n" not in message
    for word in words:
        assert word in message


def test_the_shipped_ground_truth_loads_every_incident():
    truth = load_ground_truth()
    assert sorted(truth) == INCIDENTS and truth["INC-1007"] == "consumer_outage"


@pytest.mark.parametrize("case", ["missing", "unknown-kind"])
def test_the_command_refuses_a_bad_ground_truth_and_changes_nothing(lab, cli_main, refused, snapshot, data_copy, case):
    drive(lab, ["INC-1003"])
    if case == "unknown-kind":
        (data_copy / "ground_truth.csv").write_text(TRUTH_CSV.replace("INC-1003,poison_message", "INC-1003,gremlins"), encoding="utf-8")
    before = snapshot(lab.db)
    outcome = cli_main("evaluate", "--db", lab.db, "--json", env={"LABKIT_DATA_DIR": str(data_copy)})
    refused(outcome, "ground truth", "ground_truth.csv", "does not exist" if case == "missing" else "'gremlins'")
    assert outcome.stdout == "" and snapshot(lab.db) == before


def test_a_path_that_is_not_a_labkit_database_is_refused_and_left_as_it_was(folder, cli, cli_main, refused):
    missing = folder / "typo.db"
    refused(cli_main("evaluate", "--db", missing), "typo.db", "does not exist")
    refused(cli_main("evaluate", "--db", folder), "it is a folder")
    fifo = folder / "pipe.db"
    os.mkfifo(fifo)
    refused(cli("evaluate", "--db", fifo), "pipe.db", "not a regular file")
    notes = folder / "notes.db"
    notes.write_bytes(b"not a database at all\n")
    refused(cli_main("evaluate", "--db", notes), "notes.db", "not a SQLite database")
    shop = folder / "shop.db"
    with closing(sqlite3.connect(shop)) as other:
        other.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        other.commit()
    shop_bytes = shop.read_bytes()
    refused(cli_main("evaluate", "--db", shop, "--json"), "shop.db", "not a labkit one")
    assert shop.read_bytes() == shop_bytes and notes.read_bytes() == b"not a database at all\n"
    assert sorted(p.name for p in folder.iterdir()) == ["notes.db", "pipe.db", "shop.db"], "nothing created"


def test_a_newer_schema_a_damaged_call_log_and_a_bad_ticket_store_are_refused(lab, cli_main, refused, snapshot):
    drive(lab, ["INC-1003"])
    before = snapshot(lab.db)
    refused(cli_main("evaluate", "--db", lab.db, "--ticket-store", lab.folder / "nowhere.db"), "ticket store", "does not exist")
    refused(cli_main("evaluate", "--db", lab.db, "--ticket-store", lab.db), "not a ticket service store")
    refused(cli_main("evaluate", "--db", lab.db, "--ticket-store", "a.db", "--ticket-store", "b.db"), "more than once")
    assert snapshot(lab.db) == before

    log_text = lab.call_log.read_text(encoding="utf-8")
    lab.call_log.write_text(log_text + "{not json}\n", encoding="utf-8")
    refused(cli_main("evaluate", "--db", lab.db), "provider call log", "line 2")
    lab.call_log.write_text(log_text, encoding="utf-8")

    with closing(lab.connect()) as conn:
        conn.execute(f"PRAGMA user_version = {labkit.store.SCHEMA_VERSION + 1}")
    content = lab.db.read_bytes()
    refused(cli_main("evaluate", "--db", lab.db, "--json"), f"schema version {labkit.store.SCHEMA_VERSION + 1}")
    assert lab.db.read_bytes() == content


# --------------------------------------------------------------------------- the rules on labelled sets, no database


def write_capture(folder: Path, incident: str, situation: str, expected: str, snapshot: dict) -> None:
    capture = {"incident": incident, "situation": situation, "expected_kind": expected,
               **{key: value for key, value in snapshot.items() if key != "incident"}}
    (folder / f"{incident}-{situation}.json").write_text(json.dumps(capture), encoding="utf-8")


def test_the_rules_are_scored_on_the_lab_incidents_as_the_lessons_say():
    scores = evaluation.compare_rules([evaluation.incident_set()])
    name = evaluation.incident_set().name
    assert [(scores[(name, revision)].correct, scores[(name, revision)].scored) for revision in (1, 2, 3)] == [(14, 16), (15, 16), (16, 16)]
    wrong = {(w["incident"], w["truth"], w["predicted"]) for w in scores[(name, 1)].misdiagnosed}
    assert wrong == {("INC-1007", "consumer_outage", "consumer_lag"), ("INC-1011", "poison_message", "false_alarm")}
    assert scores[(name, 2)].misdiagnosed == [{"incident": "INC-1007", "truth": "consumer_outage", "predicted": "consumer_lag"}]


def test_a_capture_a_revision_cannot_read_counts_as_wrong_not_as_left_out(tmp_path):
    snapshot = json.loads((labkit.provider.data_dir() / "incidents" / "INC-1013.json").read_text(encoding="utf-8"))
    del snapshot["queue"]["message_stats"]  # never published to: a live broker sends no message_stats
    write_capture(tmp_path, "INC-9081", "idle", "false_alarm", snapshot)
    burst = json.loads((labkit.provider.data_dir() / "incidents" / "INC-1006.json").read_text(encoding="utf-8"))
    burst["queue"]["messages_details"]["rate"] = -268.0  # rates sampled at different instants disagree by 19/s
    write_capture(tmp_path, "INC-9061", "drained-burst", "false_alarm", burst)
    captures = evaluation.capture_set(tmp_path, "two captures")
    assert sorted(captures.truth) == ["INC-9061 drained-burst", "INC-9081 idle"]
    scores = evaluation.compare_rules([captures])
    assert [(scores[("two captures", r)].correct, scores[("two captures", r)].scored) for r in (1, 2, 3)] == [(1, 2), (0, 2), (2, 2)]
    assert {w["predicted"] for w in scores[("two captures", 2)].misdiagnosed} == {evaluation.CANNOT_READ, "unknown"}
    frame = evaluation.rules_comparison_frame(scores)
    assert list(frame["cannot_read"]) == [1, 1, 0] and list(frame["correct"]) == [1, 0, 2], "revision 1 calls anything unmatched healthy"
    assert "false_alarm -> unknown x1" in frame["misses"][1]
    text = evaluation.rules_comparison_text(scores)
    assert "rules 2, two captures: INC-9061 drained-burst is false_alarm, said unknown" in text.splitlines()


def test_a_capture_without_an_answer_is_refused(tmp_path):
    snapshot = json.loads((labkit.provider.data_dir() / "incidents" / "INC-1013.json").read_text(encoding="utf-8"))
    write_capture(tmp_path, "INC-9081", "idle", "all_good", snapshot)
    with pytest.raises(BadGroundTruth):
        evaluation.capture_set(tmp_path)
    with pytest.raises(BadGroundTruth):
        evaluation.capture_set(tmp_path / "nothing-here")


def test_the_rules_on_captures_from_a_live_broker_they_were_not_written_from(tmp_path):
    """The held-out set: 51 captures of 16 situations on RabbitMQ 3.10.8 (data/captures/, scripts/broker_situations.py).

    Contract revision 3 accepts every one with revision 3's diagnosis. Revisions 1 and 2 cannot read the
    captures whose counters never moved, nor a queue on a stopped cluster node (no counts), and revision 2
    not even a healthy queue beside that node (a stopped node has no memory fields); revision 3 reads them
    all, calls the queue on the stopped node unknown and the one beside it healthy, and is right on 41; what it still
    gets wrong is listed here, not hidden: a requeue loop read as stuck (every message held, acks zero in the
    sample), a slow consumer unknown, a drained burst caught mid-drain as stuck, a stream (its counts say
    nothing), zombies that stop acking mid-sample, and a memory alarm on a queue with no consumers.
    """
    captures = evaluation.capture_set()
    assert len(captures.snapshots) == 51 and len({key.split(" ", 1)[1] for key in captures.snapshots}) == 16
    for key, snapshot in captures.snapshots.items():
        raw = json.dumps(snapshot).encode("utf-8")
        assert labkit.check_evidence(labkit.provider.answer(raw, 3), snapshot["incident"])["contract"] == "queue-evidence/3", key
    scores = evaluation.compare_rules([captures])
    tally = [(scores[(captures.name, r)].correct, sum(1 for w in scores[(captures.name, r)].misdiagnosed
                                                      if w["predicted"] == evaluation.CANNOT_READ)) for r in (1, 2, 3)]
    assert tally == [(30, 11), (26, 17), (41, 0)]
    still_wrong = {(w["incident"].split(" ", 1)[1], w["predicted"]) for w in scores[(captures.name, 3)].misdiagnosed}
    assert still_wrong == {("requeue-loop", "stuck_consumer"), ("consumer-lag", "unknown"), ("drained-burst", "stuck_consumer"),
                           ("stream-with-reader", "unknown"), ("zombie-consumers", "unknown"), ("memory-alarm", "consumer_outage")}
