"""Exercise 14.1's check (14_choosing_an_engine): the record_evidence step of the DBOS workflow, written by hand.

The check runs the learner's function as DBOS's record_evidence step in forked children, once
cleanly and once killed at after_evidence_commit and recovered (the step then runs twice), and
compares the rows with labkit's own write_evidence_once. Each shortcut a learner might take
fails with feedback of its own; tests/lab/test_exercises.py applies the same shortcuts through the
notebook, these tests say which feedback each one gets. The lesson's section 4 shows the claim
the check relies on, and the last test holds it without the notebook.
"""

from __future__ import annotations

import os

import pytest

import labkit.engines.dbos
from labkit.database import transaction
from labkit.lab import exercises
from labkit.steps import Step

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the check forks DBOS processes")


def solution(coordinator, incident, reading):
    with transaction(coordinator.conn):
        run = coordinator.load_txn(incident)
        if run.step is Step.NOT_INSPECTED:
            run = coordinator.record_reading_txn(run, reading)
        return run.step.value


def writes_every_time(coordinator, incident, reading):
    with transaction(coordinator.conn):
        run = coordinator.record_reading_txn(coordinator.load_txn(incident), reading)
    return run.step.value


def looks_never_writes(coordinator, incident, reading):
    with transaction(coordinator.conn):
        return coordinator.load_txn(incident).step.value


def constant(coordinator, incident, reading):
    return "evidence_recorded"


def outside_a_transaction(coordinator, incident, reading):
    run = coordinator.load_txn(incident)
    if run.step is Step.NOT_INSPECTED:
        coordinator.record_reading_txn(run, reading)
    return "evidence_recorded"


def calls_labkits_own(coordinator, incident, reading):
    return labkit.engines.dbos.write_evidence_once(coordinator, incident, reading)


def imports_labkits_own(coordinator, incident, reading):
    from labkit.engines.dbos import write_evidence_once as write

    return write(coordinator, incident, reading)


def returns_nothing(coordinator, incident, reading):
    with transaction(coordinator.conn):
        run = coordinator.load_txn(incident)
        if run.step is Step.NOT_INSPECTED:
            coordinator.record_reading_txn(run, reading)


def swallows_every_error(coordinator, incident, reading):
    try:
        with transaction(coordinator.conn):
            coordinator.record_reading_txn(coordinator.load_txn(incident), reading)
    except Exception:
        pass
    return "evidence_recorded"


def looks_outside_then_writes(coordinator, incident, reading):
    run = coordinator.load_txn(incident)  # the look, outside the write transaction: check-then-act
    if run.step is Step.NOT_INSPECTED:
        with transaction(coordinator.conn):
            run = coordinator.record_reading_txn(run, reading)
    return run.step.value


def reaches_labkits_own_under_another_name(coordinator, incident, reading):
    return helper(coordinator, incident, reading)


helper = labkit.engines.dbos.write_evidence_once


def builds_its_name(coordinator, incident, reading):
    return getattr(labkit.engines.dbos, "write_evidence" + "_once")(coordinator, incident, reading)


def test_the_solution_passes_after_a_kill_and_says_so(capsys):
    exercises.check_evidence_step(solution)
    printed = capsys.readouterr().out
    assert printed.count("✓") == 4
    assert "a replay whose database fails for real: your step raised DatabaseError, workflow ERROR" in printed
    assert "two executions at once: one evidence row, one move" in printed
    assert "a run killed at after_evidence_commit, then recovered (your step ran 2 times)" in printed


SHORTCUTS = {
    # the naive step of section 4: fine on a clean run, refused on the replay after the kill
    "writes every time": (writes_every_time, r"recovered \(your step ran 2 times\): the recovery ran your step a second time, "
                                             r"and it raised IntegrityError"),
    "looks, never writes": (looks_never_writes, r"a clean run .*left no evidence row \(the run is at not_inspected\)"),
    "returns a constant": (constant, r"a clean run .*left no evidence row"),
    "outside a transaction": (outside_a_transaction, r"a clean run .*raised NotInTransaction"),
    "calls labkit's own": (calls_labkits_own, "write it yourself"),
    "imports labkit's own": (imports_labkits_own, "write it yourself"),
    "is labkit's own": (labkit.engines.dbos.write_evidence_once, "write it yourself"),
    "returns nothing": (returns_nothing, r"your step returned None; return the step the run is at"),
    "swallows every error": (swallows_every_error, r"database refused every statement \(a real error\)"),
    "looks outside, then writes": (looks_outside_then_writes, r"two executions of your step at once .*raised"),
    "labkit's own under another name": (reaches_labkits_own_under_another_name, "write it yourself"),
    "labkit's own by a built name": (builds_its_name, "your answer called labkit's own"),
}


@pytest.mark.parametrize("name", SHORTCUTS)
def test_each_shortcut_fails_with_its_own_feedback(name):
    answer, feedback = SHORTCUTS[name]
    with pytest.raises(AssertionError, match=feedback):
        exercises.check_evidence_step(answer)


def test_a_blank_answer_waits_and_a_non_function_is_refused():
    with pytest.raises(AssertionError, match="waiting for your answer"):
        exercises.waiting_for("14.1", my_write_evidence=None)
    with pytest.raises(AssertionError, match="should be a function"):
        exercises.check_evidence_step("evidence_recorded")


def test_a_dbos_step_killed_after_its_commit_runs_again_and_labkits_step_keeps_one_row():
    """Section 4's claim: the recovery runs record_evidence a second time (DBOS attempt 2); looking first keeps one row."""
    kept = exercises.evidence_step_trial(labkit.engines.dbos.write_evidence_once, killed=True)
    assert kept.ends == ("killed", "exit 0")
    assert kept.calls == ("returned 'evidence_recorded'", "returned 'evidence_recorded'")
    assert (kept.status, kept.attempts, kept.evidence_rows, kept.step) == ("SUCCESS", 2, 1, "report_completed")
    assert kept.transitions.count(("not_inspected", "evidence_recorded")) == 1 and kept.receipt is not None
    naive = exercises.evidence_step_trial(writes_every_time, killed=True)
    assert (naive.status, naive.receipt, naive.evidence_rows) == ("ERROR", None, 1)
