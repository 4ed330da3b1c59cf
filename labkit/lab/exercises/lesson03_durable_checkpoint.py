"""Lesson 03 (03_durable_checkpoint): the learner's answers to the three restart questions, at every crash point.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing

from ...crashpoints import RUN_POINTS
from ...store import connect_readonly
from ..lesson import QUESTIONS, restart_answers
from .runner import clear_trials, killed_at, none_wrong, one_line, own_work


@one_line
def check_restart_answers(answer: Callable) -> None:
    """``answer(conn, incident) -> dict``: the learner's answers to the three restart questions.

    A child is killed at every crash point, each in a database of its own (once per kernel:
    later tries get a copy of what it left); the answer is asked about each, through a fresh
    connection, and compared with the rows.
    """
    clear_trials()
    own_work(answer, "restart_answers")
    wrong = []
    for point in RUN_POINTS:
        trial = killed_at("03-exercise", "INC-1005", point)
        truth = restart_answers(trial.db, "INC-1005").as_row()
        with closing(connect_readonly(trial.db)) as conn:
            given = answer(conn, "INC-1005")
        assert isinstance(given, dict), f"answer() should return a dict of the three questions, not {type(given).__name__}"
        for question in QUESTIONS:
            if given.get(question) not in ("yes", "no"):
                raise AssertionError(f"answer() should give 'yes' or 'no' for {question!r}, it gave {given.get(question)!r}")
            if given[question] != truth[question]:
                wrong.append(f"after a kill at {point}: {question} should be {truth[question]} (step {truth['step']}, "
                             f"evidence row {truth['evidence row']}, receipt {truth['receipt'] or 'none'})")
    none_wrong(wrong)
    print(f"✓ right at all {len(RUN_POINTS)} crash points, from the rows alone")
