"""Refused: runs whose rows contradict the step order, and the rules that keep them from arising.

What belongs here: a run labkit will not continue although the database is its own: a step
moved sideways or skipped (refused by the code and by the database's trigger), a receipt
beside evidence_recorded or missing beside report_completed, a row edited by hand, a run of
another workflow version; and why such rows cannot arise from labkit itself (write helpers
need an open transaction, only labkit/database.py begins one, inspect is one transaction).
"""

from __future__ import annotations

import io
import json
import re
import signal
import sqlite3
import tokenize
from contextlib import closing
from pathlib import Path

import pytest

import labkit
from labkit.database import transaction

KILLED = -signal.SIGKILL
INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5

PACKAGE = Path(labkit.__file__).resolve().parent


@pytest.fixture
def at_evidence(db, cli) -> Path:
    """A database whose run INC-1002 is at evidence_recorded (its process was killed there)."""
    assert cli("run", "--db", db, "--incident", INC2, "--crash-at", "after_evidence_commit").returncode == KILLED
    return db


@pytest.fixture
def at_start(db, cli) -> Path:
    """A database whose run INC-1002 is at not_inspected."""
    assert cli("run", "--db", db, "--incident", INC2, "--crash-at", "before_read").returncode == KILLED
    return db


def _try_advance(db: Path, to: str, *, in_transaction: bool = True) -> None:
    """Call ``advance_txn`` on INC-1002, inside ``labkit.transaction`` or not; whatever it
    raises is re-raised after checking that no row changed."""
    raised = None
    with closing(labkit.connect(db)) as conn:
        before = labkit.store.snapshot(conn)
        run = labkit.store.find_run_txn(conn, INC2)
        assert run is not None
        try:
            if in_transaction:
                with labkit.transaction(conn):
                    labkit.store.advance_txn(conn, run, labkit.Step(to), labkit.TickingClock())
            else:
                labkit.store.advance_txn(conn, run, labkit.Step(to), labkit.TickingClock())
        except Exception as error:  # re-raised below, after the rows are checked
            raised = error
        assert labkit.store.snapshot(conn) == before, "the refused transition changed rows"
    if raised is not None:
        raise raised


def test_fault10_a_sideways_move_is_refused_by_the_code(at_evidence):
    """evidence_recorded -> evidence_recorded. Before the fix: accepted and committed (the rows
    changed: version bumped, a transition row added)."""
    with pytest.raises(labkit.errors.StepOrderError):
        _try_advance(at_evidence, "evidence_recorded")


def test_fault10_a_skipped_step_is_refused_by_the_code(at_start):
    """not_inspected -> report_completed. Before the fix: accepted and committed (the rows changed)."""
    with pytest.raises(labkit.errors.StepOrderError):
        _try_advance(at_start, "report_completed")


@pytest.mark.parametrize(
    ("setup", "to"), [("at_evidence", "evidence_recorded"), ("at_start", "report_completed")], ids=["sideways", "skip"]
)
def test_fault10_the_database_refuses_a_sideways_or_skipping_update(setup, to, request):
    """Raw SQL through plain sqlite3, bypassing labkit. Before the fix: the trigger only refuses
    backward moves, so the UPDATE succeeds (DID NOT RAISE)."""
    db = request.getfixturevalue(setup)
    with closing(labkit.connect(db)) as conn:
        before = labkit.store.snapshot(conn)
    with closing(sqlite3.connect(db)) as raw:
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute("UPDATE runs SET step = ?, version = version + 1 WHERE incident = ?", (to, INC2))
        raw.rollback()
    with closing(labkit.connect(db)) as conn:
        assert labkit.store.snapshot(conn) == before


def test_fault10_a_run_at_evidence_recorded_with_a_receipt_is_inconsistent(at_evidence, cli_main, refused, snapshot):
    """A receipt inserted by hand beside evidence_recorded: ``run`` refuses like the other two
    contradictory states, and changes nothing.

    Before the fix: exit 0, the hand-made receipt adopted and the run advanced.
    """
    with closing(sqlite3.connect(at_evidence)) as raw:
        [(evidence_digest,)] = raw.execute("SELECT digest FROM evidence WHERE incident = ?", (INC2,)).fetchall()
        raw.execute(
            "INSERT INTO receipts (incident, receipt_id, evidence_digest, report, issued_at) VALUES (?, ?, ?, ?, ?)",
            (INC2, "rcpt-byhand000000", evidence_digest, json.dumps({"evidence_digest": evidence_digest}), "2026-03-02T09:00:30Z"),
        )
        raw.commit()
    before = snapshot(at_evidence)
    refused(cli_main("run", "--db", at_evidence, "--incident", INC2), INC2, "inconsistent")
    assert snapshot(at_evidence) == before


def test_a_completed_run_without_its_receipt_is_reported_not_crashed_on(lab, conn, cli_main, refused):
    lab.coordinator(conn).drive(INC)
    with transaction(conn):
        conn.execute("DELETE FROM receipts WHERE incident = ?", (INC,))  # someone edited the file by hand
    refused(cli_main("run", "--db", lab.db, "--incident", INC), INC, "inconsistent", "no receipt")


@pytest.mark.parametrize(
    ("table", "column", "value", "words"),
    [
        ("evidence", "body", "x", ["evidence row is damaged"]),
        ("evidence", "body", "[" * 100_000 + "]" * 100_000, ["nested deeper"]),
        ("evidence", "body", "{}", ["does not match its digest"]),
        ("receipts", "report", "x", ["receipt row is damaged"]),
    ],
    ids=["evidence-not-json", "evidence-deep", "evidence-edited", "report-not-json"],
)
def test_a_row_edited_by_hand_is_named_and_recovery_goes_on(table, column, value, words, lab, conn, cli, cli_main, refused, snapshot):
    coordinator = lab.coordinator(conn)
    coordinator.drive("INC-1001")          # completed: its receipt can be damaged
    coordinator.start("INC-1002")
    coordinator.inspect("INC-1002")        # at evidence_recorded: its evidence can be damaged
    coordinator.start("INC-1003")          # at not_inspected: recovery must still finish it
    target = "INC-1001" if table == "receipts" else "INC-1002"
    with labkit.transaction(conn):
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE incident = ?", (value, target))
    conn.close()
    assert cli("status", "--db", lab.db, "--json").returncode == 0, "status reads steps and counts, never the bodies"
    before = snapshot(lab.db)
    refused(cli_main("run", "--db", lab.db, "--incident", target), target, "inconsistent", *words)
    assert snapshot(lab.db) == before
    recovered = cli("recover", "--db", lab.db)
    assert "resumed INC-1003 from not_inspected: read the provider" in recovered.stdout, "one damaged run must not stop the others"


def test_a_run_of_another_workflow_version_is_refused(lab, cli_main, refused, snapshot):
    with closing(lab.connect()) as conn:
        previous = lab.coordinator(conn, workflow_version=1)
        previous.start(INC)
        previous.inspect(INC)  # evidence_recorded under version 1: a tempting run to "finish"
    before = snapshot(lab.db)
    for args in (("run", "--db", lab.db, "--incident", INC), ("recover", "--db", lab.db)):
        refused(cli_main(*args), INC, "version 1", "version 2", "migrate --to 2")
        assert snapshot(lab.db) == before, f"{args[0]} changed the database"
    assert lab.reads(INC) == 1


def test_fault10_a_write_helper_outside_a_transaction_raises_and_writes_nothing(at_evidence):
    """Before the fix: AttributeError (no labkit.errors.NotInTransaction); the helper commits on its own."""
    with pytest.raises(labkit.errors.NotInTransaction):
        _try_advance(at_evidence, "report_completed", in_transaction=False)


def test_fault10_only_the_database_module_begins_transactions():
    """No module but ``labkit/database.py`` has ``BEGIN`` in a string of its code (comments and
    docstrings mentioning it are fine; a trigger's ``... BEGIN SELECT ...`` body is fine).

    Before the fix: store.py (``"BEGIN IMMEDIATE"``, ``"BEGIN DEFERRED"``) and processes.py
    (the race's own ``"BEGIN IMMEDIATE"``).
    """
    starts = re.compile(r"""^[rRbBuUfF]*("{3}|'{3}|"|')\s*BEGIN\b""")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        # bench.py's floor is bare sqlite3 on purpose: what SQLite alone costs, without labkit.
        if path.relative_to(PACKAGE).as_posix() in ("database.py", "lab/bench.py"):
            continue
        previous = None
        for token in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
            text = token.string
            if token.type == tokenize.STRING and starts.match(text):
                found.append(f"{path.name}:{token.start[0]}")
            # Python 3.12+ splits f-strings into FSTRING_START, FSTRING_MIDDLE, ...
            elif previous is not None and previous.type == getattr(tokenize, "FSTRING_START", -1) and re.match(r"\s*BEGIN\b", text):
                found.append(f"{path.name}:{token.start[0]}")
            previous = token
    assert found == [], "BEGIN outside labkit/database.py: " + ", ".join(found)


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
