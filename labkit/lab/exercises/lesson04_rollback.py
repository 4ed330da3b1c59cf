"""Lesson 04 (04_rollback): evidence and step committed in one transaction, killed between them.
"""

from __future__ import annotations

from collections.abc import Callable

from ...invariants import check_invariants
from ..lesson import restart_answers
from .runner import clear_trials, labkit_cli_forked, new_trial, one_line, own_work, run_answer_once


@one_line
def check_single_transaction_inspect(inspect_fn: Callable) -> None:
    """``inspect_fn(conn, provider, incident, clock)``: evidence and step committed together.

    1. run cleanly in a child: the run must end at evidence_recorded with its evidence;
    2. killed in a child at the moment it moves the step (just before ``advance_txn``):
       then ``recover`` must finish the run, and all seven invariants must hold.
    """
    clear_trials()
    own_work(inspect_fn, "Coordinator", "two_commit_inspect", "naive")
    trial = new_trial("04-exercise")
    started = labkit_cli_forked("run", "--db", trial.db, "--incident", "INC-1003", "--crash-at", "before_read")
    assert started.killed_by == "SIGKILL", f"could not prepare the run: {started.stderr.strip()}"
    clean = run_answer_once(inspect_fn, "inspect", trial.db, "INC-1003")
    assert clean.returncode == 0, f"your function failed on a plain run: {clean.stderr.strip()}"
    answers = restart_answers(trial.db, "INC-1003")
    assert answers.step == "evidence_recorded" and answers.evidence, (
        f"after your function the run is at {answers.step} with{'' if answers.evidence else ' no'} evidence: "
        "it should read, store the evidence and move the step to evidence_recorded"
    )
    print("✓ a plain run: evidence stored, step evidence_recorded")

    crashed = new_trial("04-exercise")
    started = labkit_cli_forked("run", "--db", crashed.db, "--incident", "INC-1003", "--crash-at", "before_read")
    killed = run_answer_once(inspect_fn, "inspect", crashed.db, "INC-1003", kill_before="advance_txn")
    assert killed.killed_by == "SIGKILL", (
        f"your function never called advance_txn, so it could not be killed there ({killed.status}: {killed.stderr.strip()})"
    )
    recovered = labkit_cli_forked("recover", "--db", crashed.db)
    assert recovered.returncode == 0, (
        f"after a kill between storing the evidence and moving the step, recovery failed: {recovered.stderr.strip()} "
        "(was the evidence committed on its own, before the step?)"
    )
    results = check_invariants(crashed.db, crashed.call_log, {"INC-1003": 2}, crashed.provider())
    broken = [f"{r.number} ({r.statement}): {r.detail}" for r in results if not r.held]
    assert not broken, "after the kill and one recovery, invariants broke: " + "; ".join(broken)
    print("✓ killed between the evidence and the step: nothing half-written, recovery read again and finished")
