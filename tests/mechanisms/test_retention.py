"""Bounded evidence, raw diagnostics kept apart, and ``retain``: what stays, what goes, and what never moves.

Retention is checked where it matters to a restarted worker: after it runs (and after it is
killed half way), every run still answers the three restart questions from its rows, an
unfinished run is never touched, and recovery still finishes what a crash left.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
from contextlib import closing

import pytest

import labkit
from labkit.contract import MAX_DIAGNOSTIC_BYTES
from labkit.database import transaction
from labkit.errors import BadRetentionDays
from labkit.evidence import SUMMARY_LIMIT, bound_evidence, check_summary_size, store_bounded_txn
from labkit.lab import capacity
from labkit.lab.lesson import restart_answers
from labkit.lab.naive import TwoCommitCoordinator
from labkit.provider import Reading
from labkit.retention import check_days, diagnostic_of, retain

KILLED = -signal.SIGKILL
LATER = {"LABKIT_CLOCK": "2026-04-15T00:00:00Z"}  # six weeks after the lessons' pinned instant
#: Strings that only the raw diagnostics hold (consumer tags, a pod's name): never the summary.
RAW_ONLY = {"INC-1016": "amq.ctag-6Y1dqk2Kx0bT3nR8vLw4Ag", "INC-1015": "crm-sync-7d9f4"}


def answers(db, incidents):
    return {incident: restart_answers(db, incident).as_row() for incident in incidents}


def rows_of(db, *tables):
    with closing(labkit.connect(db)) as conn:
        snap = labkit.store.snapshot(conn)
    return {table: snap[table] for table in tables}


KEPT_TABLES = ("runs", "transitions", "evidence", "assessments", "receipts", "redactions")


def files_hold(folder, needle: str) -> list[str]:
    return [path.name for path in folder.iterdir() if path.is_file() and needle.encode() in path.read_bytes()]


# =========================================================================== bounded evidence


def test_the_evidence_row_holds_a_bounded_summary_and_a_reference_to_the_raw_diagnostic(lab, conn, provider):
    lab.coordinator(conn).drive("INC-1016")
    row = conn.execute("SELECT body, digest, diagnostic_digest, diagnostic_location, recorded_at FROM evidence").fetchone()
    raw = conn.execute("SELECT incident, digest, body, bytes, kept_at FROM diagnostics").fetchone()
    assert json.loads(row["body"]) == labkit.check_evidence(provider.read("INC-1016"), "INC-1016"), "the summary: the contract's fields"
    assert row["diagnostic_location"] == "diagnostics/INC-1016" and raw["incident"] == "INC-1016"
    assert row["diagnostic_digest"] == raw["digest"] == hashlib.sha256(raw["body"].encode()).hexdigest()
    assert raw["bytes"] == len(raw["body"].encode()) and raw["kept_at"] == row["recorded_at"]
    summary, kept = json.loads(row["body"]), json.loads(raw["body"])
    assert "consumer_details" not in summary["queue"] and len(kept["queue"]["consumer_details"]) == 3
    assert len(row["body"]) < raw["bytes"] < 2 * SUMMARY_LIMIT
    found = diagnostic_of(lab.db, "INC-1016")
    assert (found.state, found.digest, found.text) == ("kept", raw["digest"], raw["body"])


def test_the_summary_limit_holds_at_its_edge(lab, conn):
    """Canonical JSON of {"x": "aa..."} is 8 bytes plus the string: exactly at the limit is kept, one byte over is not."""
    at_limit, over = {"x": "a" * (SUMMARY_LIMIT - 8)}, {"x": "a" * (SUMMARY_LIMIT - 7)}
    assert check_summary_size("INC-1001", at_limit) == SUMMARY_LIMIT
    with pytest.raises(labkit.errors.EvidenceRejected) as refused:
        check_summary_size("INC-1001", over)
    assert (refused.value.field, refused.value.rule) == ("(summary)", "size-limit")
    assert f"{SUMMARY_LIMIT + 1} bytes" in str(refused.value)
    lab.coordinator(conn).start("INC-1001")
    lab.coordinator(conn).start("INC-1002")
    before = labkit.store.snapshot(conn)
    with pytest.raises(labkit.errors.EvidenceRejected), transaction(conn):
        store_bounded_txn(conn, "INC-1001", labkit.CONTRACT, bound_evidence("INC-1001", over, b"{}"), lab.clock)
    assert labkit.store.snapshot(conn) == before, "a refused summary stores nothing"
    with transaction(conn):
        store_bounded_txn(conn, "INC-1002", labkit.CONTRACT, bound_evidence("INC-1002", at_limit, b"{}"), lab.clock)
    assert conn.execute("SELECT length(body) FROM evidence WHERE incident = 'INC-1002'").fetchone()[0] == SUMMARY_LIMIT


def test_the_raw_diagnostic_limit_holds_at_its_edge():
    kept = bound_evidence("INC-1001", {"incident": "INC-1001"}, b"a" * MAX_DIAGNOSTIC_BYTES)
    assert kept.diagnostic_bytes == MAX_DIAGNOSTIC_BYTES
    with pytest.raises(labkit.errors.EvidenceRejected) as refused:
        bound_evidence("INC-1001", {"incident": "INC-1001"}, b"a" * (MAX_DIAGNOSTIC_BYTES + 1))
    assert (refused.value.field, refused.value.rule) == ("(diagnostic)", "size-limit")


class _Dumping:
    """A provider that hands over a raw diagnostic far larger than any queue snapshot."""

    def __init__(self, inner: labkit.ReferenceProvider, diagnostic: bytes):
        self.inner, self.diagnostic = inner, diagnostic

    def incidents(self) -> list[str]:
        return self.inner.incidents()

    def read(self, incident: str) -> bytes:
        return self.inner.read(incident)

    def read_with_diagnostic(self, incident: str) -> Reading:
        return Reading(self.inner.read(incident), self.diagnostic)


def test_a_huge_raw_diagnostic_refuses_the_read_and_stores_nothing(lab, conn, provider):
    coordinator = lab.coordinator(conn, provider=_Dumping(provider, b"x" * (MAX_DIAGNOSTIC_BYTES + 1)))
    coordinator.start("INC-1003")
    before = labkit.store.snapshot(conn)
    with pytest.raises(labkit.errors.EvidenceRejected, match="size-limit"):
        coordinator.drive("INC-1003")
    assert labkit.store.snapshot(conn) == before
    assert lab.reads("INC-1003") == 1, "the provider's own log still shows the read"


def test_a_diagnostic_that_is_not_utf8_is_kept_as_text_with_replacement_characters(lab, conn, provider):
    lab.coordinator(conn, provider=_Dumping(provider, b"dump \xff\xfe from 10.0.0.9\n")).drive("INC-1003")
    assert diagnostic_of(lab.db, "INC-1003").text == "dump \ufffd\ufffd from [redacted:ipv4]\n"


class _ResponseOnly:
    def __init__(self, inner: labkit.ReferenceProvider):
        self.inner = inner

    def incidents(self) -> list[str]:
        return self.inner.incidents()

    def read(self, incident: str) -> bytes:
        return self.inner.read(incident)


def test_an_adapter_that_only_answers_has_its_answer_kept_as_the_raw_diagnostic(lab, conn, provider):
    lab.coordinator(conn, provider=_ResponseOnly(provider)).drive("INC-1004")
    kept = diagnostic_of(lab.db, "INC-1004")
    assert kept.state == "kept" and json.loads(kept.text) == json.loads(provider.read("INC-1004"))
    assert lab.reads("INC-1004") == 2, "one read by the run, one by this test: never a second read to fetch the diagnostic"


# =========================================================================== retain, through the command line


def test_retain_removes_old_raw_diagnostics_and_every_run_still_answers(lab, cli, query):
    incidents = ["INC-1003", "INC-1015", "INC-1016"]
    for incident in incidents:
        assert cli("run", "--db", lab.db, "--incident", incident).returncode == 0
    before_answers, before_rows = answers(lab.db, incidents), rows_of(lab.db, *KEPT_TABLES)
    assert files_hold(lab.folder, RAW_ONLY["INC-1016"]) != []

    young = cli("retain", "--db", lab.db, "--older-than", "30", env={"LABKIT_CLOCK": "2026-03-20T00:00:00Z"})
    assert young.returncode == 0 and "removed 0 raw diagnostics" in young.stdout, "by the pinned clock they are 18 days old"
    assert query(lab.db, "SELECT COUNT(*) FROM diagnostics") == [(3,)]

    done = cli("retain", "--db", lab.db, "--older-than", "30", env=LATER)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("retention 2: removed 3 raw diagnostics kept before 2026-03-16T00:00:00Z")
    sizes = re.fullmatch(r"database ([\d,]+) bytes before, ([\d,]+) bytes after VACUUM", lines[2])
    before_bytes, after_bytes = (int(n.replace(",", "")) for n in sizes.groups())
    assert after_bytes < before_bytes
    assert lab.db.stat().st_size == after_bytes, "VACUUM and the checkpoint gave the space back to the file system"
    assert query(lab.db, "SELECT COUNT(*) FROM diagnostics") == [(0,)]
    assert rows_of(lab.db, *KEPT_TABLES) == before_rows, "checkpoints, summaries, digests, references and receipts stay"
    assert answers(lab.db, incidents) == before_answers
    for incident in incidents:
        gone = diagnostic_of(lab.db, incident)
        assert (gone.state, gone.removed_by, gone.text) == ("removed", 2, None)
    for incident, needle in RAW_ONLY.items():
        assert files_hold(lab.folder, needle) == [], f"{incident}'s raw bytes are overwritten, not left in free pages"
    reevaluated = cli("reevaluate", "--db", lab.db, "--incident", "INC-1016", "--reason", "rules revision 2, after retention")
    assert reevaluated.returncode == 0 and "stuck_consumer" in reevaluated.stdout, "re-evaluation reads the summary, not the raw"
    assert query(lab.db, "SELECT integrity_check FROM pragma_integrity_check") == [("ok",)]


def test_retain_never_touches_an_unfinished_run_and_recovery_finishes_after_it(lab, cli, query, provider):
    assert cli("run", "--db", lab.db, "--incident", "INC-1001", "--crash-at", "after_evidence_commit").returncode == KILLED
    assert cli("run", "--db", lab.db, "--incident", "INC-1002", "--crash-at", "after_read").returncode == KILLED
    assert cli("run", "--db", lab.db, "--incident", "INC-1003").returncode == 0
    # Completed locally, but its ticket could not be sent: it still owes an action, so it is unfinished too.
    assert cli("run", "--db", lab.db, "--incident", "INC-1004", "--tickets", "http://127.0.0.1:9").returncode == 1
    incidents = ["INC-1001", "INC-1002", "INC-1003", "INC-1004"]
    before = answers(lab.db, incidents)
    assert [before[i]["read again?"] for i in incidents] == ["no", "yes", "no", "no"]

    first = cli("retain", "--db", lab.db, "--older-than", "0", env=LATER)
    assert first.returncode == 0, first.stderr
    assert "removed 1 raw diagnostic " in first.stdout and "kept 2 of unfinished runs (INC-1001, INC-1004)" in first.stdout
    assert query(lab.db, "SELECT incident FROM diagnostics ORDER BY incident") == [("INC-1001",), ("INC-1004",)]
    assert answers(lab.db, incidents) == before

    recovered = cli("recover", "--db", lab.db, env=LATER)
    assert recovered.returncode == 0, recovered.stderr
    assert "resumed INC-1001 from evidence_recorded: completed from committed evidence, no read" in recovered.stdout
    assert "resumed INC-1002 from not_inspected: read the provider" in recovered.stdout
    second = cli("retain", "--db", lab.db, "--older-than", "0", env={"LABKIT_CLOCK": "2026-05-01T00:00:00Z"})
    assert "removed 2 raw diagnostics" in second.stdout and "kept 1 of unfinished runs (INC-1004)" in second.stdout
    assert query(lab.db, "SELECT incident FROM diagnostics") == [("INC-1004",)]
    after = answers(lab.db, incidents)
    assert all(after[i]["read again?"] == "no" and after[i]["summary exists?"] == "yes" for i in incidents)
    results = labkit.check_invariants(lab.db, lab.call_log, {"INC-1001": 1, "INC-1002": 2, "INC-1003": 1, "INC-1004": 1}, provider)
    assert [r.number for r in results] == [1, 2, 3, 4, 5, 6, 7]
    assert [r.number for r in results if not r.held] == [], [r.detail for r in results if not r.held]


def test_a_retention_killed_inside_its_transaction_removes_nothing(lab, conn, cli, python_child, query):
    coordinator = lab.coordinator(conn)
    for incident in ("INC-1005", "INC-1006"):
        coordinator.drive(incident)
    before = answers(lab.db, ["INC-1005", "INC-1006"])
    code = ("import os, signal, sys; from labkit.retention import retain; from labkit import TickingClock\n"
            "retain(sys.argv[1], 0, TickingClock('2026-04-15T00:00:00Z'), after_delete=lambda: os.kill(os.getpid(), signal.SIGKILL))")
    killed = python_child(code, lab.db)
    assert killed.returncode == KILLED, killed.stderr
    assert query(lab.db, "SELECT integrity_check FROM pragma_integrity_check") == [("ok",)]
    assert query(lab.db, "SELECT COUNT(*) FROM diagnostics") == [(2,)], "the DELETE was never committed"
    assert query(lab.db, "SELECT COUNT(*) FROM retentions") == [(0,)]
    assert answers(lab.db, ["INC-1005", "INC-1006"]) == before
    again = cli("retain", "--db", lab.db, "--older-than", "0", env=LATER)
    assert again.returncode == 0 and again.stdout.startswith("retention 1: removed 2 raw diagnostics")


def test_a_retention_killed_before_vacuum_keeps_its_removal_and_the_next_reclaims_the_space(lab, conn, cli, python_child, query):
    coordinator = lab.coordinator(conn)
    for incident in ("INC-1015", "INC-1016", "INC-1009"):
        coordinator.drive(incident)
    code = ("import os, signal, sys; from labkit.retention import retain; from labkit import TickingClock\n"
            "retain(sys.argv[1], 0, TickingClock('2026-04-15T00:00:00Z'), before_vacuum=lambda: os.kill(os.getpid(), signal.SIGKILL))")
    assert python_child(code, lab.db).returncode == KILLED
    assert query(lab.db, "SELECT COUNT(*) FROM diagnostics") == [(0,)], "the removal committed before the kill"
    assert query(lab.db, "SELECT seq, removed FROM retentions") == [(1, 3)]
    free = query(lab.db, "SELECT freelist_count FROM pragma_freelist_count")[0][0]
    assert free > 0, "the space is not reclaimed yet"
    assert answers(lab.db, ["INC-1015"])["INC-1015"]["summary exists?"] == "yes"
    again = cli("retain", "--db", lab.db, "--older-than", "0", env=LATER)
    assert again.returncode == 0 and "removed 0 raw diagnostics" in again.stdout
    assert query(lab.db, "SELECT freelist_count FROM pragma_freelist_count") == [(0,)]
    assert diagnostic_of(lab.db, "INC-1015").removed_by == 1
    assert files_hold(lab.folder, RAW_ONLY["INC-1016"]) == [], "after the VACUUM the removed bytes are nowhere in the files"


def test_a_retention_killed_before_vacuum_leaves_no_removed_byte_in_the_file_after_the_next_checkpoint(lab, conn, python_child):
    """secure_delete zeroes the freed space in the removal's own commit: VACUUM is not what erases it (lesson 11).

    A finished run beside an unfinished one, as 11 shows it: the removed raw diagnostic's page
    stays in use for the kept one, so without secure_delete its bytes would stay in the file.
    """
    lab.coordinator(conn).drive("INC-1003")
    lab.coordinator(conn).start("INC-1001")
    lab.coordinator(conn).inspect("INC-1001")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # one copy of each page, in the file itself
    marker = capacity.a_marker_of(lab.db, "INC-1003")
    assert capacity.bytes_found(lab.db, marker) == 1, "the raw diagnostic is in the file before retention"
    code = ("import os, signal, sys; from labkit.retention import retain; from labkit import TickingClock\n"
            "retain(sys.argv[1], 0, TickingClock('2026-04-15T00:00:00Z'), before_vacuum=lambda: os.kill(os.getpid(), signal.SIGKILL))")
    assert python_child(code, lab.db).returncode == KILLED
    with closing(sqlite3.connect(lab.db)) as other:
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # what the next connection does, without any VACUUM
    assert capacity.bytes_found(lab.db, marker) == 0, "the freed space still holds the removed bytes"
    assert diagnostic_of(lab.db, "INC-1003").state == "removed", "removed by retention 1, not missing"
    assert diagnostic_of(lab.db, "INC-1001").state == "kept"


def test_a_vacuum_that_cannot_run_is_a_failure_a_retry_cures(lab, conn, monkeypatch, query):
    """Another writer takes the lock between the removal's commit and VACUUM: exit 1, the removal stays."""
    for incident in ("INC-1014", "INC-1016"):
        lab.coordinator(conn).drive(incident)
    monkeypatch.setenv("LABKIT_BUSY_TIMEOUT_MS", "50")
    clock = labkit.TickingClock("2026-04-15T00:00:00Z")
    with closing(labkit.connect(lab.db)) as other:
        def someone_writes() -> None:
            other.execute("BEGIN IMMEDIATE")

        with pytest.raises(labkit.errors.VacuumFailed) as failed:
            retain(lab.db, 0, clock, before_vacuum=someone_writes)
        other.execute("ROLLBACK")
    assert failed.value.exit_code == 1 and "removed 2 raw diagnostics (committed)" in str(failed.value)
    assert diagnostic_of(lab.db, "INC-1014").state == "removed"
    free = "SELECT freelist_count FROM pragma_freelist_count"
    assert query(lab.db, free)[0][0] > 0, "the space is not reclaimed yet"
    again = retain(lab.db, 0, clock)
    assert again.removed == () and query(lab.db, free) == [(0,)], "the retry reclaims it"


def test_retain_while_a_run_waits_between_its_steps(lab, cli, query):
    with labkit.lab.PausedRun(lab.db, "INC-1007", "after_evidence_commit") as held:
        assert "holding no lock" in held.paused_line
        during = cli("retain", "--db", lab.db, "--older-than", "0", env=LATER)
        assert during.returncode == 0 and "kept 1 of unfinished runs (INC-1007)" in during.stdout
        assert query(lab.db, "SELECT incident FROM diagnostics") == [("INC-1007",)]
    assert held.outcome is not None and held.outcome.returncode == 0
    assert restart_answers(lab.db, "INC-1007").as_row()["summary exists?"] == "yes"
    assert diagnostic_of(lab.db, "INC-1007").state == "kept"


# =========================================================================== states of a reference


def test_a_diagnostic_removed_by_hand_is_missing_and_one_altered_is_refused(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.drive("INC-1008")
    coordinator.drive("INC-1010")
    with closing(sqlite3.connect(lab.db)) as plain:
        plain.execute("DELETE FROM diagnostics WHERE incident = 'INC-1008'")
        plain.execute("UPDATE diagnostics SET body = replace(body, 'RabbitMQ', 'RABBITMQ') WHERE incident = 'INC-1010'")
        plain.commit()
    assert diagnostic_of(lab.db, "INC-1008").state == "missing", "no retention run removed it: not to be called removed"
    with pytest.raises(labkit.errors.InconsistentRun, match="does not match the digest"):
        diagnostic_of(lab.db, "INC-1010")


def test_evidence_stored_without_a_reference_has_no_diagnostic(lab, conn):
    """The deliberately broken variant of 04_rollback stores the response alone: state none, and retain passes it by."""
    broken = TwoCommitCoordinator(conn, lab.provider(), clock=lab.clock)
    broken.drive("INC-1011")
    assert diagnostic_of(lab.db, "INC-1011").state == "none"
    report = retain(lab.db, 0, labkit.TickingClock("2026-04-15T00:00:00Z"))
    assert report.removed == () and report.kept_unfinished == ()
    with pytest.raises(labkit.errors.UnknownRun):
        diagnostic_of(lab.db, "INC-1999")


# =========================================================================== bad input


@pytest.mark.parametrize("days", [-1, -0.001, float("nan"), float("inf"), "nan", "", " ", "thirty", "1e9", 36_501, True, None, [30],
                                  " 7 ", "1_0", "３"])  # a number as typed: ASCII digits, nothing around them (labkit.typed)
def test_days_that_are_not_a_number_of_days_are_refused(days):
    with pytest.raises(BadRetentionDays):
        check_days(days)


@pytest.mark.parametrize("days", [0, 0.5, "30", "7", 36_500])
def test_days_from_0_to_a_century_are_accepted(days):
    assert check_days(days) == float(days)


@pytest.fixture
def completed(lab, conn):
    coordinator = lab.coordinator(conn)
    coordinator.drive("INC-1012")
    coordinator.drive("INC-1013")
    return lab.db


@pytest.mark.parametrize("days", ["-1", "nan", "", "36501"])
def test_retain_with_bad_days_exits_2_and_changes_nothing(completed, cli_main, refused, snapshot, days):
    before = snapshot(completed)
    refused(cli_main("retain", "--db", completed, "--older-than", days, env=LATER), "--older-than", "number of days")
    assert snapshot(completed) == before


def test_retain_refuses_what_is_not_a_labkit_database_and_touches_nothing(folder, cli, cli_main, refused, snapshot):
    missing = folder / "nowhere.db"
    refused(cli_main("retain", "--db", missing, "--older-than", "1"), "does not exist")
    assert not missing.exists()
    text = folder / "notes.db"
    text.write_text("incident,kind\n", encoding="utf-8")
    other = folder / "other.db"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE diagnostics (x)")
        conn.commit()
    fifo = folder / "pipe.db"
    os.mkfifo(fifo)
    link = folder / "link.db"
    link.symlink_to(text)
    before = {path.name: (path.read_bytes() if path.is_file() and not path.is_fifo() else None) for path in folder.iterdir()}
    refused(cli_main("retain", "--db", text, "--older-than", "1"), "not a SQLite database")
    refused(cli_main("retain", "--db", other, "--older-than", "1"), "not a labkit one")
    refused(cli("retain", "--db", fifo, "--older-than", "1"), "not a regular file")
    refused(cli_main("retain", "--db", link, "--older-than", "1"), "not a SQLite database")
    refused(cli_main("retain", "--db", folder, "--older-than", "1"), "folder")
    after = {path.name: (path.read_bytes() if path.is_file() and not path.is_fifo() else None) for path in folder.iterdir()}
    assert after == before


def test_retention_is_recorded_and_a_second_run_removes_nothing_more(completed):
    clock = labkit.TickingClock("2026-04-15T00:00:00Z")
    first = retain(completed, 30, clock)
    assert (first.seq, first.removed, first.kept_unfinished, first.kept_recent) == (1, ("INC-1012", "INC-1013"), (), 0)
    assert first.removed_bytes > 0 and first.cutoff == "2026-03-16T00:00:00Z"
    second = retain(completed, 30, clock)
    assert (second.seq, second.removed, second.removed_bytes) == (2, (), 0)
    log = labkit.retention.retentions_of(completed)
    assert [(r["seq"], r["removed"], r["older_than_days"]) for r in log] == [(1, 2, 30.0), (2, 0, 30.0)]
