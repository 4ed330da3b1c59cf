"""Lessons survive what learners do to them: running again, running twice, skipping a cell.

nbval checks one clean top-to-bottom run against the stored outputs. Run All again after it,
in the same kernel, is checked in nbval's own session (``make test`` passes ``--run-all-again``;
``RunAllAgain`` in the root conftest.py), so a lesson is not run once more just to get there.
These check the rest, each in a fresh kernel:

- every cell run with the code cell before it skipped (two passes: one skips the even
  cells, one the odd, the setup cell always runs): it works, or it says in one line which
  cell to run (a ``⚠`` line from labkit.lab.lesson), or, in an exercise check, it gives the
  exercise's feedback, or, in a cell tagged to raise, it raises the error it was written
  to show. Never another traceback.

Skipping the setup cell itself is the one case left out: before it runs, nothing of
labkit is loaded, so nothing can explain the NameError of the cell after it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from kernels import notebook_client, start_warm_children

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9]*.ipynb"))


def _errors(cell) -> list[tuple[str, str, list[str]]]:
    return [(o["ename"], o["evalue"], o.get("traceback", [])) for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _code_cells(notebook) -> list[tuple[int, nbformat.NotebookNode]]:
    return [(index, cell) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code" and cell.source.strip()]


def _acceptable(cell, errors, committed: set[str]) -> str | None:
    """None if the cell's errors are what a learner may see; otherwise why not.

    Allowed: the one-line ``⚠`` message, an exercise check's feedback, and, in a cell tagged
    to raise, the very error it raises in the committed run.
    """
    tagged = "raises-exception" in cell.metadata.get("tags", [])
    for ename, evalue, traceback in errors:
        friendly = len(traceback) == 1 and traceback[0].startswith("⚠")
        feedback = tagged and (ename == "AssertionError" or ename in committed)
        if not (friendly or feedback):
            return f"{ename}: {evalue[:120]} (a traceback of {len(traceback)} lines)"
    return None


@pytest.mark.parametrize("skipped", ["even", "odd"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_cell_whose_predecessor_was_skipped_works_or_says_what_to_run(path: Path, skipped: str):
    notebook = nbformat.read(path, as_version=4)
    cells = _code_cells(notebook)
    setup = cells[0][0]
    committed = {index: {ename for ename, _, _ in _errors(cell)} for index, cell in cells}
    client = notebook_client(notebook, path)
    problems = []
    with client.setup_kernel():
        start_warm_children(client)
        for position, (index, cell) in enumerate(cells):
            if index != setup and position % 2 == (0 if skipped == "even" else 1):
                continue
            cell.outputs = []
            client.execute_cell(cell, index)
            why = _acceptable(cell, _errors(cell), committed[index])
            if why:
                problems.append(f"cell {index + 1}: {why}")
    assert problems == [], "\n".join(problems)
