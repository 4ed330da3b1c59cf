"""Every exercise check can fail, and passes with the right answer.

Lessons ship their exercises unanswered: the learner's cell holds placeholders, and the
check cell after it (tagged ``raises-exception``) stores the failure a learner sees first,
"waiting for your answer". That stored failure is what nbval compares, so it proves the
check fails on a blank answer. This test proves the other half: with the solution kept in
the learner cell's metadata (``metadata.solution``, the same code the notebook shows in its
"Solution" block), every check passes and says so with a ✓.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9]*.ipynb"))
#: Lessons 02 to 06 each have at least one exercise with feedback (00 and 01 may too).
MUST_HAVE_EXERCISES = {"02_three_states", "03_durable_checkpoint", "04_rollback", "05_crash_and_reread", "06_single_receipt"}


def _exercise_cells(notebook):
    learner = {c.metadata["exercise"]: c for c in notebook.cells if "exercise" in c.metadata}
    checks = {c.metadata["exercise_check"]: c for c in notebook.cells if "exercise_check" in c.metadata}
    return learner, checks


def _errors(cell):
    return [(o["ename"], o["evalue"]) for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _printed(cell):
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_exercises_are_unanswered_in_the_committed_notebook(path):
    notebook = nbformat.read(path, as_version=4)
    learner, checks = _exercise_cells(notebook)
    if path.stem in MUST_HAVE_EXERCISES:
        assert learner, f"{path.stem} has no exercise"
    assert set(learner) == set(checks), "every exercise needs exactly one check cell, and every check an exercise"
    for number, cell in checks.items():
        assert "raises-exception" in cell.metadata.get("tags", []), f"check {number} must be tagged raises-exception"
        [(ename, evalue)] = _errors(cell) or [("none", "")]
        assert ename == "AssertionError" and "waiting for your answer" in evalue, (
            f"exercise {number}: the committed check should show the blank-answer feedback, not {ename}: {evalue}"
        )
        assert learner[number].metadata.get("solution", "").strip(), f"exercise {number} has no solution in its metadata"


WITH_EXERCISES = [p for p in NOTEBOOKS if _exercise_cells(nbformat.read(p, as_version=4))[0]]


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=[p.stem for p in WITH_EXERCISES])
def test_every_check_passes_with_the_solution(path):
    notebook = nbformat.read(path, as_version=4)
    learner, checks = _exercise_cells(notebook)
    for cell in learner.values():
        cell.source = cell.metadata["solution"]
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    for number, cell in checks.items():
        assert _errors(cell) == [], f"exercise {number}: the check rejected its own solution: {_errors(cell)}"
        assert "✓" in _printed(cell), f"exercise {number}: a passing check should say so with a ✓"
