"""Several processes, or connections, on one database at once.

What belongs here: races between real processes (openers of a new database, first runs,
completions of one run, recovery workers), a lock held by another connection, and readers
beside a writer. Every racer is a real child process; ``labkit.lab.race`` starts them together.

Fast by default. The soak variant runs the races many more times::

    LABKIT_SOAK=1 .venv/bin/python -m pytest tests/core/test_concurrency.py -k "fault1 or fault11"

``LABKIT_SOAK_ROUNDS`` sets the rounds of the library opening race (30, or 300 under
``LABKIT_SOAK``); the command-line variant runs a tenth as many rounds (at least 3), and the
completion race is repeated 10 times under ``LABKIT_SOAK`` instead of twice. (The names
``fault1`` and ``fault11`` are the numbers of the faults of issue 5 these tests pin down.)
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import time
from contextlib import closing
from pathlib import Path

import pytest

import labkit

KILLED = -signal.SIGKILL
INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5
SOAK = os.environ.get("LABKIT_SOAK", "") not in ("", "0")
ROUNDS = int(os.environ.get("LABKIT_SOAK_ROUNDS", "300" if SOAK else "30"))
CLI_ROUNDS = max(3, ROUNDS // 10)
RACE_REPEATS = 10 if SOAK else 2


#: What these races test is the first open, not patience. labkit's 10 s busy timeout is the right
#: answer for a person at a terminal (a command that waits longer is better told it could not
#: get the lock), but with three CPU burners a core (`make test-under-load`) eight openers
#: queued for one write lock can wait longer than that, and the test then failed with
#: "another process held the write lock for over 10 s". Two minutes lets a slow machine
#: through; a hang still ends at the tests' own timeouts.
PATIENT = {"LABKIT_BUSY_TIMEOUT_MS": "120000"}


def _open_once(path: str, barrier, results) -> None:
    os.environ.update(PATIENT)  # this forked child's own environment
    try:
        barrier.wait(timeout=30)
        labkit.connect(path).close()
        results.put(None)
    except BaseException as error:  # every failure is the finding
        results.put(f"{type(error).__name__}: {error}")


def open_together(path: Path, processes: int = 8) -> list[str]:
    """``processes`` forked processes released by one barrier, each opening ``path`` once."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_open_once, args=(str(path), barrier, results)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    errors = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0, f"an opener died: exit {worker.exitcode}"
    return [error for error in errors if error is not None]


def test_fault1_eight_processes_opening_one_new_database_at_once_never_fail(folder):
    """N=8 processes open one brand-new database at the same instant, ROUNDS times: no error.

    Before the fix: 13 to 25 of the 240 opens failed in each of 6 runs, with NotALabDatabase
    ("is a SQLite database, but not a labkit one") or DatabaseUnavailable "database is locked".
    """
    failures = []
    for round_ in range(ROUNDS):
        db = folder / f"new-{round_}.db"
        failures += [f"round {round_}: {error}" for error in open_together(db)]
        with closing(labkit.connect(db)) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == labkit.store.SCHEMA_VERSION
    assert failures == [], f"{len(failures)} of {8 * ROUNDS} opens failed:\n" + "\n".join(failures[:10])


def test_fault1_eight_first_runs_on_one_new_database_all_exit_0(folder, status):
    """Eight ``run`` children, each on its own incident, started together on a new database.

    Before the fix: passes in most runs (the open-time window is hit in about 1 % of opens);
    the library test above is the one that reliably fails.
    """
    incidents = [f"INC-{1001 + i}" for i in range(8)]
    # Eight whole runs queue for one write lock: as patient as the library openers (PATIENT).
    for round_ in range(CLI_ROUNDS):
        db = folder / f"cli-{round_}.db"
        outcomes = labkit.lab.race(*[("run", "--db", str(db), "--incident", incident) for incident in incidents], env=PATIENT, timeout=300)
        bad = [f"{o}: {o.stderr.strip()}" for o in outcomes if o.returncode != 0]
        assert bad == [], f"round {round_}: " + "; ".join(bad)
        runs = status(db)["runs"]
        assert sorted(run["incident"] for run in runs) == incidents
        assert {(run["step"], run["receipts"]) for run in runs} == {("report_completed", 1)}


def assert_one_completer(outcomes) -> None:
    """Every racer exits 0; exactly one says it completed the run, every other one found it
    completed; all print the same receipt id."""
    report = "\n".join(f"{o}\n  stdout: {o.stdout.strip()!r}\n  stderr: {o.stderr.strip()!r}" for o in outcomes)
    assert [o.returncode for o in outcomes] == [0] * len(outcomes), report
    winners = [o for o in outcomes if "; completed it)" in o.stdout]
    losers = [o for o in outcomes if "found it already completed" in o.stdout]
    assert len(winners) == 1, f"{len(winners)} racers say they completed the run:\n{report}"
    assert len(losers) == len(outcomes) - 1, report
    receipts = [re.findall(r"rcpt-[0-9a-f]+", o.stdout) for o in outcomes]
    assert all(len(found) == 1 for found in receipts) and len({found[0] for found in receipts}) == 1, report


def completion_race(db: Path, *extra: str, racers: int = 6):
    """Kill a run right after its evidence commit, then race ``racers`` runs to complete it,
    each paused inside its completion transaction until the gate lets them on."""
    assert labkit.lab.labkit_cli("run", "--db", str(db), "--incident", INC2, "--crash-at", "after_evidence_commit").returncode == KILLED
    command = ("run", "--db", str(db), "--incident", INC2, *extra)
    return labkit.lab.race(*[command] * racers, gate=db, pause_at="before_receipt_write", timeout=60)


def test_fault11_racing_completions_give_one_completer_and_one_receipt(folder, status):
    """Before the fix: TypeError, race() has no pause_at (and no before_receipt_write point)."""
    for repeat in range(RACE_REPEATS):
        db = folder / f"race-{repeat}.db"
        assert_one_completer(completion_race(db))
        [run] = status(db)["runs"]
        assert (run["step"], run["receipts"], run["provider_reads"]) == ("report_completed", 1, 1)


def test_fault11_the_race_catches_a_check_then_act_completion_every_time(folder):
    """The deliberately broken completion (decide in one transaction, write in another) must
    fail the race check, three times out of three.

    Before the fix: TypeError from race(pause_at=...), not the AssertionError expected.
    """
    for repeat in range(3):
        outcomes = completion_race(folder / f"bug-{repeat}.db", "--bug", "check_then_act_completion")
        with pytest.raises(AssertionError):
            assert_one_completer(outcomes)


def test_fault11_the_broken_completion_is_switched_on_by_name_and_harmless_alone(db, cli, status):
    """``--bug check_then_act_completion`` is a known name; one run on its own still completes.

    Before the fix: exit 2, ``--bug`` is not an option.
    """
    outcome = cli("run", "--db", db, "--incident", INC2, "--bug", "check_then_act_completion")
    assert outcome.returncode == 0, outcome.stderr
    assert "; completed it)" in outcome.stdout
    [run] = status(db)["runs"]
    assert (run["step"], run["receipts"]) == ("report_completed", 1)


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


def test_recover_reports_each_run_a_lock_holds_back_and_goes_on(lab, conn, cli):
    coordinator = lab.coordinator(conn)
    for incident in ("INC-1001", "INC-1002"):
        coordinator.start(incident)
    with labkit.database.write_lock(conn):
        started = time.monotonic()
        outcome = cli("recover", "--db", lab.db, env={"LABKIT_BUSY_TIMEOUT_MS": "200"})
    assert outcome.returncode == 1
    assert outcome.stdout.splitlines()[-1] == "recovered 0 runs, 2 failed"
    assert [line.count("write lock") for line in outcome.stderr.splitlines()] == [1, 1]
    assert time.monotonic() - started < 30  # two 0.2 s busy timeouts; 30 s only tells them from a hang


def test_a_reader_does_not_wait_for_an_open_write(lab, conn):
    """WAL: status and the display tables must answer while a worker holds the write lock."""
    lab.coordinator(conn).drive(INC)
    conn.execute("BEGIN IMMEDIATE")
    try:
        assert labkit.status_of(lab.db)["runs"][0]["step"] == "report_completed"
    finally:
        conn.execute("ROLLBACK")
