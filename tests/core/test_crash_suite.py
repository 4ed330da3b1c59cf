"""The crash suite: one contract test, run against every crash point.

For each point in ``labkit.RUN_POINTS`` a real ``python -m labkit run`` child kills
itself with SIGKILL there; ``python -m labkit recover`` then runs in a fresh process, and
the seven invariants of DESIGN.md are checked twice: by ``labkit.check_invariants``, and
by this file's own assertions on ``status --json`` and on the database read with plain
sqlite3. The two must agree; a checker that cannot fail is tested at the end.

1. the run ends at report_completed      5. provider reads = 1 + crashes between read and commit
2. it has exactly one receipt            6. PRAGMA integrity_check answers ok
3. evidence exists past not_inspected     7. running recovery again changes nothing
4. the step never moved backwards
"""

from __future__ import annotations

import hashlib
import json
import signal
from contextlib import closing

import pytest

import labkit
from labkit.database import transaction
from labkit.receipts import receipt_id_for
from labkit.steps import Step

KILLED = -signal.SIGKILL
INC = "INC-1003"

#: Where a run stands right after a crash at each point, before any recovery: (step, reads).
STATE_AT_CRASH = {
    "before_read": ("not_inspected", 0),
    "after_read": ("not_inspected", 1),
    "before_evidence_commit": ("not_inspected", 1),
    "after_evidence_commit": ("evidence_recorded", 1),
    "before_receipt_write": ("evidence_recorded", 1),
    "before_completion_commit": ("evidence_recorded", 1),
    "after_completion_commit": ("report_completed", 1),
}

FULL_HISTORY = [
    (None, "not_inspected", 0),
    ("not_inspected", "evidence_recorded", 1),
    ("evidence_recorded", "report_completed", 2),
]

RECOVER_WITH_CRASH = (
    "import sys, labkit\n"
    "db = sys.argv[1]\n"
    "labkit.recover(db, labkit.ReferenceProvider(labkit.call_log_for(db)), crash=labkit.CrashPlan(sys.argv[2]))\n"
)


def test_the_suite_covers_the_points_the_design_requires():
    """DESIGN: before the read, between read and commit, after the evidence commit, inside
    the completion transaction, after the completion commit, in run order."""
    assert set(STATE_AT_CRASH) == set(labkit.RUN_POINTS)
    assert list(labkit.RUN_POINTS) == sorted(labkit.RUN_POINTS, key=list(STATE_AT_CRASH).index)
    assert labkit.BETWEEN_READ_AND_COMMIT == {"after_read", "before_evidence_commit"}
    assert labkit.BETWEEN_READ_AND_COMMIT <= set(labkit.RUN_POINTS)


def expected_reads(*crash_points: str) -> int:
    return 1 + sum(point in labkit.BETWEEN_READ_AND_COMMIT for point in crash_points)


def assert_all_invariants_held(lab, expected: dict[str, int]) -> None:
    results = labkit.check_invariants(lab.db, lab.call_log, expected, lab.provider())
    assert [r.number for r in results] == [1, 2, 3, 4, 5, 6, 7]
    broken = [f"{r.number} {r.statement}: {r.detail}" for r in results if not r.held]
    assert broken == []


def assert_invariants_directly(lab, status, query, expected: dict[str, int]) -> None:
    """The same seven, checked without labkit's checker (7 is checked by the caller)."""
    runs = {run["incident"]: run for run in status(lab.db)["runs"]}
    assert sorted(runs) == sorted(expected), "a run vanished or appeared"
    for incident, reads in expected.items():
        run = runs[incident]
        assert isinstance(run["workflow_version"], int) and run["workflow_version"] == labkit.WORKFLOW_VERSION
        assert run["step"] == "report_completed"                                  # 1
        assert run["receipts"] == 1                                               # 2
        assert run["evidence"] is True                                            # 3
        assert run["provider_reads"] == reads, f"{incident}: {run['provider_reads']} reads, expected {reads}"  # 5
        assert run["receipt_id"] == receipt_id_for(incident, labkit.WORKFLOW_VERSION)
        history = query(lab.db, "SELECT from_step, to_step, state_version FROM transitions WHERE incident = ? ORDER BY seq", (incident,))
        assert history == FULL_HISTORY                                            # 4
        [(body, digest)] = query(lab.db, "SELECT body, digest FROM evidence WHERE incident = ?", (incident,))
        assert hashlib.sha256(body.encode("utf-8")).hexdigest() == digest
        assert json.loads(body)["incident"] == incident
        assert query(lab.db, "SELECT evidence_digest FROM receipts WHERE incident = ?", (incident,)) == [(digest,)]
    assert query(lab.db, "PRAGMA integrity_check") == [("ok",)]                 # 6
    assert query(lab.db, "SELECT COUNT(*) FROM receipts") == [(len(expected),)]


def assert_nothing_more_happens(lab, cli, snapshot, incidents) -> None:
    """Invariant 7, from the outside: another recover, and another run, change nothing."""
    before = snapshot(lab.db)
    again = cli("recover", "--db", lab.db)
    assert again.returncode == 0, again.stderr
    assert "recovered 0 runs" in again.stdout and "resumed" not in again.stdout
    assert snapshot(lab.db) == before
    for incident in incidents:
        rerun = cli("run", "--db", lab.db, "--incident", incident)
        assert rerun.returncode == 0, rerun.stderr
        assert "no read needed" in rerun.stdout
        assert receipt_id_for(incident, labkit.WORKFLOW_VERSION) in rerun.stdout
    assert snapshot(lab.db) == before


# =========================================================================== one crash, one recovery


@pytest.mark.parametrize("point", labkit.RUN_POINTS)
def test_crash_then_recover_keeps_every_invariant(point, lab, cli, status, query, snapshot):
    crashed = cli("run", "--db", lab.db, "--incident", INC, "--crash-at", point)
    assert crashed.returncode == KILLED, f"{crashed}\n{crashed.stderr}"
    assert "report_completed" not in crashed.stdout, "the child got past its crash point"

    step, reads = STATE_AT_CRASH[point]
    with closing(lab.connect()) as conn:
        run = labkit.store.find_run_txn(conn, INC)
        assert run.step.value == step
        assert (labkit.store.load_evidence_txn(conn, INC) is not None) == (run.step is not Step.NOT_INSPECTED)
        assert conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == (step == "report_completed")
    assert lab.reads(INC) == reads

    recovered = cli("recover", "--db", lab.db)
    assert recovered.returncode == 0, recovered.stderr
    if step == "report_completed":
        assert "recovered 0 runs" in recovered.stdout
    else:
        assert f"resumed {INC} from {step}" in recovered.stdout
        assert ("read the provider" in recovered.stdout) == (step == "not_inspected")
        assert "recovered 1 run" in recovered.stdout

    expected = {INC: expected_reads(point)}
    assert expected[INC] == (2 if point in labkit.BETWEEN_READ_AND_COMMIT else 1)
    assert_invariants_directly(lab, status, query, expected)
    assert_all_invariants_held(lab, expected)
    assert_nothing_more_happens(lab, cli, snapshot, [INC])


def test_every_point_crashed_in_one_database_then_one_recovery(lab, cli, status, query, snapshot):
    """One incident killed at each point, all resumed by a single recover."""
    incidents = ["INC-1001", "INC-1002", "INC-1004", "INC-1005", "INC-1008", "INC-1012", "INC-1014"]
    plan = dict(zip(incidents, labkit.RUN_POINTS, strict=True))
    for incident, point in plan.items():
        assert cli("run", "--db", lab.db, "--incident", incident, "--crash-at", point).returncode == KILLED
    recovered = cli("recover", "--db", lab.db)
    assert recovered.returncode == 0, recovered.stderr
    unfinished = [i for i, p in plan.items() if STATE_AT_CRASH[p][0] != "report_completed"]
    assert f"recovered {len(unfinished)} runs" in recovered.stdout
    assert sorted(line.split()[1] for line in recovered.stdout.splitlines() if line.startswith("resumed")) == sorted(unfinished)

    expected = {incident: expected_reads(point) for incident, point in plan.items()}
    assert_invariants_directly(lab, status, query, expected)
    assert_all_invariants_held(lab, expected)
    # one run that lost a read, one that crashed after its evidence commit
    assert_nothing_more_happens(lab, cli, snapshot, ["INC-1002", "INC-1005"])


# =========================================================================== a crash during recovery


@pytest.mark.parametrize("point", labkit.RUN_POINTS)
def test_a_crash_during_recovery_is_recovered_too(point, lab, cli, status, query, python_child):
    """The first crash falls between read and commit; recovery itself is then killed at
    ``point``; a second recovery finishes. Invariant 5 counts both crashes."""
    assert cli("run", "--db", lab.db, "--incident", "INC-1002", "--crash-at", "after_read").returncode == KILLED
    with closing(lab.connect()) as conn:  # a second run waits at evidence_recorded, read once
        coordinator = lab.coordinator(conn)
        coordinator.start("INC-1009")
        coordinator.inspect("INC-1009")

    crashed = python_child(RECOVER_WITH_CRASH, lab.db, point)
    assert crashed.returncode == KILLED, crashed.stderr

    recovered = cli("recover", "--db", lab.db)
    assert recovered.returncode == 0, recovered.stderr

    # recover takes runs in incident order, so the crash hit INC-1002 and INC-1009 waited
    expected = {"INC-1002": expected_reads("after_read", point), "INC-1009": 1}
    assert_invariants_directly(lab, status, query, expected)
    assert_all_invariants_held(lab, expected)  # its invariant 7 recovers once more, in process


# =========================================================================== the checker can fail


def results_by_number(lab, expected):
    return {r.number: r for r in labkit.check_invariants(lab.db, lab.call_log, expected, lab.provider())}


def test_checker_reports_a_run_left_at_evidence_recorded(lab, cli):
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    results = results_by_number(lab, {INC: 1})
    assert not results[1].held and INC in results[1].detail and "evidence_recorded" in results[1].detail
    assert not results[2].held and INC in results[2].detail
    assert not results[7].held, "recovering 'again' had work to do, so recovery had not finished"
    assert results[3].held and results[4].held and results[5].held and results[6].held


def test_checker_reports_a_deleted_receipt(lab, conn):
    lab.coordinator(conn).drive(INC)
    with transaction(conn):
        conn.execute("DELETE FROM receipts WHERE incident = ?", (INC,))
    results = results_by_number(lab, {INC: 1})
    assert not results[2].held and f"{INC} has 0" in results[2].detail
    assert [n for n, r in results.items() if not r.held] == [2]


def test_checker_reports_missing_evidence(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.inspect(INC)
    coordinator.complete(INC)
    with transaction(conn):
        conn.execute("DELETE FROM evidence WHERE incident = ?", (INC,))
    results = results_by_number(lab, {INC: 1})
    assert not results[3].held and INC in results[3].detail


def test_checker_reports_a_history_that_went_backwards(lab, conn):
    lab.coordinator(conn).drive(INC)
    with transaction(conn):
        conn.execute(
            "INSERT INTO transitions (incident, from_step, to_step, state_version, at)"
            " VALUES (?, 'report_completed', 'not_inspected', 3, 't')",
            (INC,),
        )
    results = results_by_number(lab, {INC: 1})
    assert not results[4].held and INC in results[4].detail


def test_checker_reports_an_unexpected_number_of_reads(lab, conn):
    lab.coordinator(conn).drive(INC)
    results = results_by_number(lab, {INC: 2})
    assert not results[5].held and "read 1 times, expected 2" in results[5].detail
    assert all(r.held for n, r in results.items() if n != 5)


def test_checker_notices_a_run_that_vanished(lab, conn):
    """A run the test expects (it was read once) but that is no longer in the database
    must not pass as 'every run ends at report_completed'."""
    lab.coordinator(conn).drive(INC)
    with transaction(conn):
        for table in ("receipts", "assessments", "redactions", "diagnostics", "evidence", "transitions", "runs"):
            conn.execute(f"DELETE FROM {table} WHERE incident = ?", (INC,))
    results = results_by_number(lab, {INC: 1})
    assert not all(r.held for r in results.values()), "every invariant 'held' for a run that no longer exists"
