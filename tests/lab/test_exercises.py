"""Every exercise check can fail, passes with the right answer, and refuses the shortcuts.

Lessons ship their exercises unanswered: the learner's cell holds placeholders, and the
check cell after it (tagged ``raises-exception``) stores the failure a learner sees first,
"waiting for your answer". That stored failure is what nbval compares. The rest is here:

- with the solution kept in the learner cell's metadata (``metadata.solution``), every
  check passes and says so with a ✓;
- the notebook's folded "Solution" block, a second copy for the reader, is the same code;
- every shortcut kept in ``metadata.shortcuts`` (a constant, an empty function, the naive
  draft the lesson takes apart, the example the lesson has just shown, labkit's own code
  under another name) makes the check fail with its feedback, not with "waiting for your
  answer"; a shortcut kept as ``{"source": ..., "feedback": ...}`` must fail with feedback
  that contains that text (its own hint, not any failure);
- lessons 02 to 06 each have at least one exercise that asks for durable-workflow code
  (``metadata.builds``), checked by running it against real crashes or races.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from kernels import notebook_client, start_warm_children

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9]*.ipynb"))
#: Lessons 02 on each have at least one exercise, and one that builds (00 and 01 may too).
MUST_BUILD = {"02_three_states", "03_durable_checkpoint", "04_rollback", "05_crash_and_reread", "06_single_receipt",
              "07_evidence_contract", "08_versioning", "09_external_effects",
              "10_leases_and_fencing", "11_capacity_and_retention", "12_crash_explorer", "13_evaluation",
              "14_choosing_an_engine"}
FOLDED = re.compile(r"<details><summary>Solution</summary>\s*```python\n(.*?)```", re.DOTALL)


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
    if path.stem in MUST_BUILD:
        assert any(cell.metadata.get("builds") for cell in learner.values()), f"{path.stem} has no exercise that builds"
    assert set(learner) == set(checks), "every exercise needs exactly one check cell, and every check an exercise"
    for number, cell in checks.items():
        assert "raises-exception" in cell.metadata.get("tags", []), f"check {number} must be tagged raises-exception"
        [(ename, evalue)] = _errors(cell) or [("none", "")]
        assert ename == "AssertionError" and "waiting for your answer" in evalue, (
            f"exercise {number}: the committed check should show the blank-answer feedback, not {ename}: {evalue}"
        )
        assert learner[number].metadata.get("solution", "").strip(), f"exercise {number} has no solution in its metadata"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_folded_solution_is_the_same_code_as_the_tested_one(path):
    notebook = nbformat.read(path, as_version=4)
    learner, _ = _exercise_cells(notebook)
    folded = [match.group(1) for cell in notebook.cells if cell.cell_type == "markdown" for match in FOLDED.finditer(cell.source)]
    solutions = [cell.metadata["solution"] for cell in learner.values()]
    assert len(folded) == len(solutions), f"{len(folded)} folded solutions for {len(solutions)} exercises"
    for shown, tested in zip(folded, solutions, strict=True):
        assert shown.strip() == tested.strip(), "a folded Solution block differs from the solution the tests apply"


WITH_EXERCISES = [p for p in NOTEBOOKS if _exercise_cells(nbformat.read(p, as_version=4))[0]]


@pytest.mark.parametrize("path", WITH_EXERCISES, ids=[p.stem for p in WITH_EXERCISES])
def test_every_check_passes_with_the_solution_and_refuses_every_shortcut(path):
    notebook = nbformat.read(path, as_version=4)
    learner, checks = _exercise_cells(notebook)
    for cell in learner.values():
        cell.source = cell.metadata["solution"]
    client = notebook_client(notebook, path)
    last_check = max(index for index, cell in enumerate(notebook.cells) if any(cell is check for check in checks.values()))
    with client.setup_kernel():
        start_warm_children(client)
        # First as a learner who jumps to the exercises: the setup cell, then each answer and its
        # check. An exercise that asks about an earlier section's results (a prediction about its
        # table) cannot run that way; for a lesson with one, the cells run top to bottom instead,
        # up to the last check (nothing after it can change one).
        setup = next(index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code" and cell.source.strip())
        chosen = [setup] + [index for index, cell in enumerate(notebook.cells)
                            if "exercise" in cell.metadata or "exercise_check" in cell.metadata]
        for index in chosen:
            client.execute_cell(notebook.cells[index], index)
        if any(error[0] == "NameError" for check in checks.values() for error in _errors(check)):
            for index, cell in enumerate(notebook.cells[: last_check + 1]):
                if cell.cell_type == "code" and index != setup:
                    cell.outputs = []
                    client.execute_cell(cell, index)
        for number, check in checks.items():
            assert _errors(check) == [], f"exercise {number}: the check rejected its own solution: {_errors(check)}"
            assert "✓" in _printed(check), f"exercise {number}: a passing check should say so with a ✓"
        # Now each shortcut, in the same kernel, in place of the answer: the check must fail with feedback.
        index_of = {id(cell): index for index, cell in enumerate(notebook.cells)}
        for number, answer in learner.items():
            for kept in answer.metadata.get("shortcuts", []):
                shortcut, expected = (kept["source"], kept["feedback"]) if isinstance(kept, dict) else (kept, "")
                answer.source = shortcut
                client.execute_cell(answer, index_of[id(answer)])
                check = checks[number]
                client.execute_cell(check, index_of[id(check)])
                errors = _errors(check)
                assert errors and errors[0][0] == "AssertionError" and "waiting for your answer" not in errors[0][1], (
                    f"exercise {number}: the shortcut passed the check:\n{shortcut}\n{errors}"
                )
                assert expected in errors[0][1], (
                    f"exercise {number}: the shortcut failed, but not with its own feedback ({expected!r}):\n{shortcut}\n{errors}"
                )
