"""Lesson 05 (05_crash_and_reread): a recovery worker that finishes a run from its recorded step.
"""

from __future__ import annotations

from collections.abc import Callable

from ...crashpoints import RUN_POINTS
from ...engines import expected_reads
from ..lesson import restart_answers
from .runner import clear_trials, killed_at, none_wrong, one_line, own_work, run_answer_once


@one_line
def check_recovery_worker(resume: Callable) -> None:
    """``resume(conn, provider, incident, clock)``: finish one run from its recorded step.

    The decision to read is the exercise: an answer may complete through
    ``Coordinator.complete``, but not hand the read to ``inspect``, ``drive`` or ``recover``.

    For every crash point, a child is killed there (each in a database of its own, once per
    kernel: later tries get a copy of what it left); the
    learner's ``resume`` runs in a fresh child; the run must end completed with one
    receipt, and the provider's log must show exactly the reads N1 predicts: a second read
    only when the crash fell between a read and its commit.
    """
    clear_trials()
    own_work(resume, "drive", "inspect", "_inspect", "recover", "run_in_child", "labkit_cli")
    wrong = []
    for point in RUN_POINTS:
        trial = killed_at("05-exercise", "INC-1004", point)
        outcome = run_answer_once(resume, "resume", trial.db, "INC-1004")
        expected = expected_reads([(True, point)])  # killed at that point, once
        reads = trial.provider_log.reads_of("INC-1004")
        answers = restart_answers(trial.db, "INC-1004")
        if outcome.returncode != 0:
            wrong.append(f"after a kill at {point} your resume failed: {outcome.stderr.strip()}")
        elif answers.step != "report_completed" or answers.receipt is None:
            wrong.append(f"after a kill at {point} the run ended at {answers.step} without a receipt")
        elif reads != expected:
            why = "it read although the evidence was committed" if reads > expected else "it never read"
            wrong.append(f"after a kill at {point} the provider was read {reads} times, expected {expected}: {why}")
    none_wrong(wrong)
    print(f"✓ from every one of the {len(RUN_POINTS)} crash points: completed, one receipt, a read only where none was committed")
