"""Lesson 06 (06_single_receipt): completion that racing workers may repeat, one receipt.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing

from ...coordinator import WORKFLOW_VERSION
from ...receipts import receipt_id_for
from ..processes import race_commands
from .runner import clear_trials, labkit_cli_forked, new_trial, one_line, own_work, returned_value, run_answer, run_answer_once


@one_line
def check_idempotent_completion(complete: Callable, workers: int = 3) -> None:
    """``complete(conn, incident, clock) -> Receipt``: completion that any number of workers may repeat.

    1. ``workers`` child processes race to complete one run, each held just before it
       begins a write transaction and released together once all are held (as
       :func:`labkit.lab.race` does): so whatever an answer decides *before* its write
       transaction, every worker has decided it before any of them writes. All must exit
       0 and return the same receipt, and one receipt row must exist;
    2. completing again returns that receipt and writes nothing.
    """
    clear_trials()
    own_work(complete, "Coordinator")
    trial = new_trial("06-exercise")
    prepared = labkit_cli_forked("run", "--db", trial.db, "--incident", "INC-1006", "--crash-at", "after_evidence_commit")
    assert prepared.killed_by == "SIGKILL", f"could not prepare the run: {prepared.stderr.strip()}"
    commands = [run_answer(complete, "complete", trial.db, "INC-1006", pause_before="transaction") for _ in range(workers)]
    outcomes = race_commands(commands)
    failed = [o for o in outcomes if o.returncode != 0]
    assert not failed, (
        f"{len(failed)} of {workers} racing workers failed: {failed[0].stderr.strip()}. A worker that finds the run "
        "completed by another should return that receipt, not fail: decide and write in one transaction"
    )
    returned = {returned_value(o) for o in outcomes}
    expected = receipt_id_for("INC-1006", WORKFLOW_VERSION)  # the run was started by this release
    assert returned == {expected}, f"every worker should return the one receipt {expected}; they returned {sorted(map(str, returned))}"
    with closing(sqlite3.connect(trial.db)) as conn:
        rows = conn.execute("SELECT COUNT(*) FROM receipts WHERE incident = 'INC-1006'").fetchone()[0]
        step = conn.execute("SELECT step FROM runs WHERE incident = 'INC-1006'").fetchone()[0]
    assert (rows, step) == (1, "report_completed"), f"after the race: {rows} receipt rows, step {step}"
    print(f"✓ {workers} workers raced, all held until every one had decided: one receipt, and each returned it")
    again = run_answer_once(complete, "complete", trial.db, "INC-1006")
    assert again.returncode == 0 and returned_value(again) == expected, (
        f"completing a completed run should return its receipt: {again.stderr.strip() or returned_value(again)}"
    )
    print("✓ completing once more returns the same receipt")
