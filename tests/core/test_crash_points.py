"""The crash and pause points the command line offers: where they sit, and how a pause waits.

What belongs here: the list of crash points and their order, a crash at a point being
recovered, and ``--pause-at``: it holds inside the open transaction until a line arrives on
stdin, and goes on when stdin is closed or absent (real child processes: stdin is the
point). The contract suite over every point is test_crash_suite.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import labkit
from labkit.lab.processes import child_env
from labkit.lab.ticket_service import TicketService

KILLED = -signal.SIGKILL
INC = "INC-1001"
INC2 = "INC-1002"  # the incident of the tests that pinned the faults of issue 5


def test_fault11_the_new_crash_point_sits_inside_the_completion_transaction(cli):
    """Before the fix: no before_receipt_write in ``crash-points``; no labkit.CrashPoint."""
    listed = cli("crash-points").stdout.split()
    assert "before_receipt_write" in listed
    position = listed.index("before_receipt_write")
    assert listed[position - 1 : position + 2] == ["after_evidence_commit", "before_receipt_write", "before_completion_commit"]
    assert issubclass(labkit.CrashPoint, str)
    assert [point.value for point in labkit.CrashPoint] == listed


def test_fault11_a_crash_before_the_receipt_write_is_recovered_with_one_receipt(db, cli, status):
    """Before the fix: exit 2 "unknown crash point 'before_receipt_write'"."""
    outcome = cli("run", "--db", db, "--incident", INC2, "--crash-at", "before_receipt_write")
    assert outcome.returncode == KILLED, outcome.stderr
    assert cli("recover", "--db", db).returncode == 0
    [run] = status(db)["runs"]
    assert (run["step"], run["receipts"], run["provider_reads"]) == ("report_completed", 1, 1)


@pytest.fixture
def at_evidence(db, cli) -> Path:
    """A database whose run INC-1002 is at evidence_recorded (its process was killed there)."""
    assert cli("run", "--db", db, "--incident", INC2, "--crash-at", "after_evidence_commit").returncode == KILLED
    return db


def test_fault11_pause_at_waits_for_a_line_inside_the_completion_transaction(at_evidence, query):
    """``--pause-at POINT`` prints a line starting ``paused at POINT`` and holds there until a line (or EOF)
    arrives; while it waits, the receipt is not written and readers still answer.

    Before the fix: exit 2, ``--pause-at`` is not an option.
    """
    command = [sys.executable, "-m", "labkit", "run", "--db", str(at_evidence), "--incident", INC2, "--pause-at", "before_receipt_write"]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    watchdog = threading.Timer(30, child.kill)  # a pause that never comes must fail the test, not hang it
    watchdog.start()
    assert child.stdout is not None and child.stderr is not None
    try:
        seen = []
        while (line := child.stdout.readline()) and not line.startswith("paused at before_receipt_write"):
            seen.append(line)
        assert line.startswith("paused at before_receipt_write"), f"never paused; printed {seen!r}, stderr {child.stderr.read()!r}"
        assert child.poll() is None, "it must wait for a line on stdin"
        assert query(at_evidence, "SELECT COUNT(*) FROM receipts") == [(0,)]
        assert labkit.status_of(at_evidence)["runs"][0]["step"] == "evidence_recorded"
        stdout, stderr = child.communicate("\n", timeout=30)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, stderr
    assert "; completed it)" in stdout
    assert query(at_evidence, "SELECT COUNT(*) FROM receipts") == [(1,)]
    # EOF on stdin releases it too: a pause never waits on a closed pipe.
    again = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), timeout=30)
    assert again.returncode == 0, again.stderr
    assert "found it already completed" in again.stdout


def test_pause_at_with_no_stdin_goes_on(lab):
    done = subprocess.run(
        [sys.executable, "-m", "labkit", "run", "--db", str(lab.db), "--incident", INC, "--pause-at", "after_read"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=child_env(), timeout=60,
    )
    assert done.returncode == 0, done.stderr
    closed = subprocess.run(  # started with no fd 0 at all, as `<&-` in a shell does: sys.stdin is None
        [sys.executable, "-m", "labkit", "run", "--db", str(lab.db.with_name("b.db")), "--incident", INC, "--pause-at", "after_read"],
        capture_output=True, text=True, env=child_env(), timeout=60, stdin=None, preexec_fn=lambda: os.close(0),
    )
    assert closed.returncode == 0 and "paused at after_read" in closed.stdout, closed.stderr


@pytest.mark.parametrize("point", ["before_read", "after_evidence_commit", "after_completion_commit", "before_receipt_write"])
def test_a_crash_point_behind_the_recorded_step_is_refused_before_anything_is_done(point, db, cli, snapshot):
    """Before the fix: `run --crash-at before_read` on a completed run exited 0 without the kill it
    asked for (found by the hostile review of issue 19). Now: exit 2, one line, nothing changed."""
    assert cli("run", "--db", db, "--incident", INC).returncode == 0  # report_completed
    before = snapshot(db)
    asked = cli("run", "--db", db, "--incident", INC, "--crash-at", point)
    assert (asked.returncode, asked.stdout) == (2, ""), asked.stderr
    assert asked.stderr == f"labkit: error: crash point '{point}' is never reached: the run of '{INC}' is already at report_completed\n"
    assert snapshot(db) == before


def test_a_point_of_the_completion_is_still_ahead_of_a_run_at_evidence_recorded(db, cli):
    assert cli("run", "--db", db, "--incident", INC, "--crash-at", "after_evidence_commit").returncode == KILLED
    assert cli("run", "--db", db, "--incident", INC, "--crash-at", "before_read").returncode == 2
    assert cli("run", "--db", db, "--incident", INC, "--crash-at", "before_completion_commit").returncode == KILLED


def test_a_send_point_not_reached_because_nothing_was_sent_is_a_failure_not_exit_0(db, cli, tmp_path):
    """A run whose ticket is already open sends nothing: `--crash-at before_send` cannot fire, and
    the command says so (exit 1: the run's own work stands) instead of exiting 0."""
    with TicketService(tmp_path / "tickets.db") as service:
        assert cli("run", "--db", db, "--incident", INC, "--tickets", service.url).returncode == 0
        asked = cli("run", "--db", db, "--incident", INC, "--tickets", service.url, "--crash-at", "before_send")
    assert asked.returncode == 1, asked.stderr
    assert asked.stderr.startswith("labkit: failed: crash point 'before_send' was not reached, so nothing was killed: "
                                   "no ticket request was sent this time (the effect is done"), asked.stderr
