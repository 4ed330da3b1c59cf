"""G1, G2, G3 and N1 of DESIGN.md, and the recovery worker's promises.

G1  reopening the same database retains a completed evidence checkpoint
G2  a failed local transaction does not advance the state
G3  repeated completion leaves one local receipt
N1  a crash after the read and before the commit means the read happens again (shown)
"""

from __future__ import annotations

import json
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit.jsontext import canonical_json
from labkit.provider import CallLog, list_incidents
from labkit.receipts import find_receipt_txn, receipt_id_for
from labkit.report import build_report
from labkit.steps import Step
from labkit.store import evidence_digest, find_run_txn, load_evidence_txn
from labkit.store import snapshot as table_rows

INC = "INC-1002"
KILLED = -signal.SIGKILL


def expected_evidence(tmp_path: Path, incident: str) -> dict:
    """What the contract accepts for ``incident``, read through a throwaway provider log."""
    scratch = labkit.ReferenceProvider(tmp_path / "scratch-calls.jsonl")
    return labkit.check_evidence(scratch.read(incident), incident)


class ScriptedProvider:
    """A read adapter that logs like the real one but answers what a test tells it to."""

    def __init__(self, call_log: Path, response: bytes | None = None, error: Exception | None = None):
        self.log = CallLog(call_log)
        self.response, self.error = response, error

    def incidents(self) -> list[str]:
        return list_incidents()

    def read(self, incident: str) -> bytes:
        self.log.append(incident, "error" if self.error else "ok", len(self.response or b""))
        if self.error:
            raise self.error
        return self.response


class NoReadProvider:
    """Knows the incidents, but a read is a test failure: recovery must not need one."""

    def incidents(self) -> list[str]:
        return list_incidents()

    def read(self, incident: str) -> bytes:
        raise AssertionError(f"the provider was read for {incident} although its evidence is committed")


class DownProvider:
    """The provider is wholly unreachable: listing and reading both fail."""

    def incidents(self) -> list[str]:
        raise labkit.errors.ProviderUnavailable("*", "connection refused")

    def read(self, incident: str) -> bytes:
        raise labkit.errors.ProviderUnavailable(incident, "connection refused")


# =========================================================================== G1


def test_g1_evidence_survives_closing_and_reopening(lab, tmp_path):
    with closing(lab.connect()) as conn:
        coordinator = lab.coordinator(conn)
        coordinator.start(INC)
        coordinator.inspect(INC)
    with closing(lab.connect()) as fresh:
        run = find_run_txn(fresh, INC)
        evidence = load_evidence_txn(fresh, INC)
    assert run.step is Step.EVIDENCE_RECORDED
    assert evidence is not None
    assert evidence.body == expected_evidence(tmp_path, INC)
    assert evidence.digest == evidence_digest(evidence.body)
    assert evidence.contract == labkit.CONTRACT


def test_g1_evidence_survives_a_killed_process(lab, cli, status, tmp_path):
    """SIGKILL right after the evidence commit: a fresh process still sees step and evidence."""
    crashed = cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit")
    assert crashed.returncode == KILLED
    [run] = status(lab.db)["runs"]
    assert (run["incident"], run["step"], run["evidence"], run["receipts"]) == (INC, "evidence_recorded", True, 0)
    with closing(lab.connect()) as fresh:
        assert load_evidence_txn(fresh, INC).body == expected_evidence(tmp_path, INC)
    assert lab.reads(INC) == 1


def test_g1_completing_after_reopen_uses_the_kept_evidence(lab):
    with closing(lab.connect()) as conn:
        coordinator = lab.coordinator(conn)
        coordinator.start(INC)
        coordinator.inspect(INC)
        digest = load_evidence_txn(conn, INC).digest
    with closing(lab.connect()) as fresh:
        receipt = lab.coordinator(fresh, provider=NoReadProvider()).complete(INC)
    assert receipt.evidence_digest == digest
    assert lab.reads(INC) == 1


# =========================================================================== G2

ROLLBACK_POINTS = ["before_read", "after_read", "before_evidence_commit"]


@pytest.mark.parametrize("point", ROLLBACK_POINTS)
def test_g2_injected_failure_while_inspecting_changes_nothing(lab, conn, point):
    lab.coordinator(conn).start(INC)
    before = table_rows(conn)
    failing = lab.coordinator(conn, crash=labkit.CrashPlan(point, mode="raise"))
    with pytest.raises(labkit.errors.InjectedFailure) as caught:
        failing.inspect(INC)
    assert caught.value.point == point
    assert not conn.in_transaction
    assert table_rows(conn) == before
    with closing(lab.connect()) as fresh:
        assert table_rows(fresh) == before
        assert find_run_txn(fresh, INC).step is Step.NOT_INSPECTED
        assert load_evidence_txn(fresh, INC) is None
    # the connection is usable and the run completes afterwards
    result = lab.coordinator(conn).drive(INC)
    assert result.read_provider and find_run_txn(conn, INC).step is Step.REPORT_COMPLETED


def test_g2_injected_failure_before_completion_commit_changes_nothing(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.inspect(INC)
    before = table_rows(conn)
    failing = lab.coordinator(conn, crash=labkit.CrashPlan("before_completion_commit", mode="raise"))
    with pytest.raises(labkit.errors.InjectedFailure):
        failing.complete(INC)
    with closing(lab.connect()) as fresh:
        after = table_rows(fresh)
        assert find_receipt_txn(fresh, INC) is None
        assert find_run_txn(fresh, INC).step is Step.EVIDENCE_RECORDED
    assert after == before
    assert len(after["transitions"]) == 2 and after["receipts"] == []


@pytest.mark.parametrize(
    ("point", "step"), [("after_evidence_commit", Step.EVIDENCE_RECORDED), ("after_completion_commit", Step.REPORT_COMPLETED)]
)
def test_g2_a_failure_after_the_commit_does_not_undo_it(lab, conn, point, step):
    """The contrast: a failure past COMMIT cannot roll back what is already durable."""
    coordinator = lab.coordinator(conn, crash=labkit.CrashPlan(point, mode="raise"))
    coordinator.start(INC)
    with pytest.raises(labkit.errors.InjectedFailure):
        coordinator.drive(INC)
    with closing(lab.connect()) as fresh:
        assert find_run_txn(fresh, INC).step is step
        assert load_evidence_txn(fresh, INC) is not None


def _with_next_step(body: dict) -> dict:
    return dict(body, next_step="report_completed")


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda body: "<html>502 Bad Gateway</html>", "(response)"),
        (_with_next_step, "next_step"),  # a response that tries to steer the workflow
    ],
    ids=["error-page", "next-step-instruction"],
)
def test_g2_contract_rejection_changes_nothing(lab, conn, tmp_path, make, field):
    made = make(expected_evidence(tmp_path, INC))
    response = (made if isinstance(made, str) else json.dumps(made)).encode("utf-8")
    lab.coordinator(conn).start(INC)
    before = table_rows(conn)
    scripted = ScriptedProvider(lab.call_log, response=response)
    with pytest.raises(labkit.errors.EvidenceRejected) as caught:
        lab.coordinator(conn, provider=scripted).inspect(INC)
    assert caught.value.field == field
    with closing(lab.connect()) as fresh:
        assert table_rows(fresh) == before
    assert lab.reads(INC) == 1  # the provider was asked; the checkpoint did not move


def test_g2_provider_unavailable_changes_nothing(lab, conn):
    lab.coordinator(conn).start(INC)
    before = table_rows(conn)
    scripted = ScriptedProvider(lab.call_log, error=labkit.errors.ProviderUnavailable(INC, "timed out"))
    with pytest.raises(labkit.errors.ProviderUnavailable):
        lab.coordinator(conn, provider=scripted).drive(INC)
    with closing(lab.connect()) as fresh:
        assert table_rows(fresh) == before
        assert find_run_txn(fresh, INC).step is Step.NOT_INSPECTED


def test_g2_contract_rejection_leaves_evidence_recorded_runs_alone(lab, conn):
    """A run past the read is never re-inspected, so a now-broken provider cannot touch it."""
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.inspect(INC)
    before = table_rows(conn)
    scripted = ScriptedProvider(lab.call_log, response=b"garbage")
    assert lab.coordinator(conn, provider=scripted).inspect(INC).step is Step.EVIDENCE_RECORDED
    assert table_rows(conn) == before
    assert lab.reads(INC) == 1


# =========================================================================== G3


def test_g3_repeated_completion_returns_the_same_receipt_and_writes_nothing(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.inspect(INC)
    first = coordinator.complete(INC)
    before, changes = table_rows(conn), conn.total_changes
    again = [coordinator.complete(INC) for _ in range(3)]
    again.append(lab.coordinator(conn).drive(INC).receipt)
    assert all(receipt == first for receipt in again)
    assert conn.total_changes == changes
    assert table_rows(conn) == before
    assert conn.execute("SELECT COUNT(*) FROM receipts").fetchone()[0] == 1


def test_g3_the_primary_key_refuses_a_raw_second_receipt(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.drive(INC)
    before = table_rows(conn)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO receipts (incident, receipt_id, evidence_digest, report, issued_at) VALUES (?, ?, ?, ?, ?)",
            (INC, "rcpt-another-one", "0" * 64, "{}", "2026-03-02T10:00:00Z"),
        )
    assert table_rows(conn) == before


def test_g3_a_receipt_for_other_evidence_is_a_conflict(lab, conn):
    from labkit.database import transaction
    from labkit.receipts import issue_receipt_txn

    coordinator = lab.coordinator(conn)
    coordinator.drive(INC)
    stored = find_receipt_txn(conn, INC)
    before = table_rows(conn)
    other = dict(stored.report, evidence_digest="f" * 64)
    with pytest.raises(labkit.errors.ReceiptConflict):
        with transaction(conn):
            issue_receipt_txn(conn, INC, labkit.WORKFLOW_VERSION, other, lab.clock)
    with transaction(conn):
        assert issue_receipt_txn(conn, INC, labkit.WORKFLOW_VERSION, stored.report, lab.clock) == stored
    assert table_rows(conn) == before


def test_g3_a_race_of_run_processes_leaves_one_receipt(lab, cli, status, query):
    crashed = cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit")
    assert crashed.returncode == KILLED
    outcomes = labkit.lab.race(*[("run", "--db", str(lab.db), "--incident", INC)] * 8, gate=lab.db)
    assert [o.returncode for o in outcomes] == [0] * 8, [o.stderr for o in outcomes]
    # the gate makes it a real race: every worker saw the run unfinished before any could finish it
    assert [o.stdout.splitlines()[0] for o in outcomes] == [f"{INC}: recorded step is evidence_recorded"] * 8
    assert sum("; completed it)" in o.stdout for o in outcomes) == 1
    printed = {word for o in outcomes for word in o.stdout.split() if word.startswith("rcpt-")}
    assert printed == {receipt_id_for(INC, labkit.WORKFLOW_VERSION)}
    assert query(lab.db, "SELECT COUNT(*) FROM receipts") == [(1,)]
    assert query(lab.db, "SELECT COUNT(*) FROM transitions WHERE to_step = 'report_completed'") == [(1,)]
    [run] = status(lab.db)["runs"]
    assert (run["step"], run["receipts"], run["provider_reads"]) == ("report_completed", 1, 1)


def test_g3_a_race_of_run_and_recover_on_a_fresh_database(lab, status, query):
    """Even the first open (schema creation) is raced: still one read, one receipt.

    The file exists but is empty (0 bytes). Every `run` may make it a database; a `recover`
    that opens it before the first `run` has committed the schema finds nothing to resume and
    refuses it as empty (it must not be the one to initialise it), and one that comes later
    finds the run to resume or finds it completed.
    """
    lab.db.touch()
    run = ("run", "--db", str(lab.db), "--incident", INC)
    recover = ("recover", "--db", str(lab.db))
    outcomes = labkit.lab.race(run, recover, run, recover, run, run)
    runs, recovers = [outcomes[i] for i in (0, 2, 4, 5)], [outcomes[i] for i in (1, 3)]
    assert [o.returncode for o in runs] == [0] * 4, [o.stderr for o in runs]
    for o in recovers:
        assert o.returncode == 0 or (o.returncode == 2 and "it is empty" in o.stderr), o.stderr
    printed = {word for o in outcomes for word in o.stdout.split() if word.startswith("rcpt-")}
    assert len(printed) == 1
    assert query(lab.db, "SELECT incident, receipt_id FROM receipts") == [(INC, printed.pop())]
    [state] = status(lab.db)["runs"]
    assert (state["step"], state["receipts"], state["provider_reads"]) == ("report_completed", 1, 1)


# =========================================================================== N1


def test_n1_a_crash_between_read_and_commit_means_a_second_read(lab, cli, status):
    crashed = cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_read")
    assert crashed.returncode == KILLED
    assert lab.reads(INC) == 1, "the provider served the read before the crash"
    [run] = status(lab.db)["runs"]
    assert (run["step"], run["evidence"]) == ("not_inspected", False), "the database cannot know about that read"
    recovered = cli("recover", "--db", lab.db)
    assert recovered.returncode == 0
    assert f"resumed {INC} from not_inspected: read the provider" in recovered.stdout
    assert lab.reads(INC) == 2
    assert [call.outcome for call in lab.log.calls()] == ["ok", "ok"]


def test_n1_contrast_a_crash_after_the_commit_means_no_second_read(lab, cli):
    assert cli("run", "--db", lab.db, "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    recovered = cli("recover", "--db", lab.db)
    assert recovered.returncode == 0
    assert f"resumed {INC} from evidence_recorded: completed from committed evidence, no read" in recovered.stdout
    assert lab.reads(INC) == 1


# =========================================================================== recovery


def test_recovery_never_rereads_committed_evidence(lab, conn):
    coordinator = lab.coordinator(conn)
    for incident in ("INC-1001", "INC-1002", "INC-1003"):
        coordinator.start(incident)
        coordinator.inspect(incident)
    results = labkit.recover(lab.db, NoReadProvider(), clock=lab.clock)
    assert [(r.incident, r.from_step, r.read_provider) for r in results] == [
        ("INC-1001", Step.EVIDENCE_RECORDED, False),
        ("INC-1002", Step.EVIDENCE_RECORDED, False),
        ("INC-1003", Step.EVIDENCE_RECORDED, False),
    ]
    assert all(find_run_txn(conn, r.incident).step is Step.REPORT_COMPLETED for r in results)


def test_recovery_of_committed_evidence_does_not_need_the_provider(lab, conn):
    """DESIGN: completion is built from stored evidence, never by reading again. A run at
    evidence_recorded needs nothing from the outside world, so recovery must finish it even
    while the provider is down."""
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.inspect(INC)
    [result] = labkit.recover(lab.db, DownProvider(), clock=lab.clock)
    assert (result.incident, result.read_provider) == (INC, False)
    assert find_run_txn(conn, INC).step is Step.REPORT_COMPLETED


def test_recovery_resumes_each_run_from_its_recorded_step(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.start("INC-1001")                              # not_inspected
    coordinator.start("INC-1002")
    coordinator.inspect("INC-1002")                            # evidence_recorded
    coordinator.start("INC-1003")
    coordinator.drive("INC-1003")                              # report_completed
    results = labkit.recover(lab.db, lab.provider(), clock=lab.clock)
    assert [(r.incident, r.from_step, r.read_provider) for r in results] == [
        ("INC-1001", Step.NOT_INSPECTED, True),
        ("INC-1002", Step.EVIDENCE_RECORDED, False),
    ]
    assert {i: lab.reads(i) for i in ("INC-1001", "INC-1002", "INC-1003")} == {"INC-1001": 1, "INC-1002": 1, "INC-1003": 1}


def test_recovery_twice_changes_nothing(lab, conn, snapshot):
    coordinator = lab.coordinator(conn)
    coordinator.start("INC-1001")
    coordinator.start("INC-1002")
    coordinator.inspect("INC-1002")
    conn.close()
    assert len(labkit.recover(lab.db, lab.provider(), clock=lab.clock)) == 2
    before = snapshot(lab.db)
    assert labkit.recover(lab.db, lab.provider(), clock=lab.clock) == []
    assert snapshot(lab.db) == before


def test_recovery_refuses_another_workflow_version_before_touching_anything(lab, conn, snapshot):
    lab.coordinator(conn).start("INC-1001")                              # version 2 (current), unfinished
    lab.coordinator(conn, workflow_version=1).start("INC-1002")         # version 1, unfinished
    conn.close()
    before = snapshot(lab.db)
    with pytest.raises(labkit.errors.WorkflowVersionMismatch) as caught:
        labkit.recover(lab.db, lab.provider(), clock=lab.clock)
    assert (caught.value.incident, caught.value.found, caught.value.expected) == ("INC-1002", 1, 2)
    assert snapshot(lab.db) == before


# =========================================================================== receipts and reports


def test_receipt_ids_are_derived_and_stable(tmp_path):
    ids = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        with closing(labkit.connect(folder / "lab.db")) as conn:
            coordinator = labkit.Coordinator(conn, labkit.ReferenceProvider(folder / "calls.jsonl"), clock=labkit.TickingClock())
            ids.append(coordinator.drive(INC).receipt.receipt_id)
    assert ids[0] == ids[1] == receipt_id_for(INC, labkit.WORKFLOW_VERSION)
    assert ids[0].startswith("rcpt-") and len(ids[0]) == len("rcpt-") + 12
    assert receipt_id_for("INC-1001", 1) != receipt_id_for("INC-1002", 1)
    assert receipt_id_for(INC, 1) != receipt_id_for(INC, 2)


def test_report_is_deterministic_and_built_from_evidence(lab, conn, tmp_path):
    coordinator = lab.coordinator(conn)
    coordinator.start(INC)
    coordinator.inspect(INC)
    evidence = load_evidence_txn(conn, INC)
    receipt = coordinator.complete(INC)
    assert receipt.report == build_report(evidence) == build_report(load_evidence_txn(conn, INC))
    assert canonical_json(build_report(evidence)) == canonical_json(receipt.report)
    assert receipt.evidence_digest == evidence.digest == receipt.report["evidence_digest"]
    assert receipt.report["kind"] == evidence.body["diagnosis"]["kind"]
    assert receipt.report["incident"] == INC and receipt.report["queue"] == evidence.body["queue"]["name"]
    stored = json.loads(conn.execute("SELECT report FROM receipts WHERE incident = ?", (INC,)).fetchone()[0])
    assert stored == receipt.report


def test_same_incident_in_two_databases_gives_identical_rows(tmp_path):
    """With an injected clock the whole run is reproducible, row for row."""
    snapshots = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        with closing(labkit.connect(folder / "lab.db")) as conn:
            labkit.Coordinator(conn, labkit.ReferenceProvider(folder / "calls.jsonl"), clock=labkit.TickingClock()).drive(INC)
            snapshots.append(table_rows(conn))
    assert snapshots[0] == snapshots[1]
