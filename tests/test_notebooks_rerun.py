"""Every lesson runs again from the top in the same kernel, as a learner's second Run All does.

nbval checks the first run against the stored outputs; this checks the second. A lesson that
left a file behind, reused a name it had already created, or depended on a fresh kernel would
fail here: every code cell must succeed twice, and a cell tagged ``raises-exception`` must
raise the same error both times.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9]*.ipynb"))


def _errors(cell) -> list[tuple[str, str]]:
    return [(o["ename"], o["evalue"]) for o in cell.get("outputs", []) if o.get("output_type") == "error"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_second_run_all_in_the_same_kernel_succeeds(path: Path):
    notebook = nbformat.read(path, as_version=4)
    cells = [(index, cell) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code" and cell.source.strip()]
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(path.parent)}}
    )
    passes = []
    with client.setup_kernel():
        for _ in range(2):
            errors = {}
            for index, cell in cells:
                cell.outputs = []
                client.execute_cell(cell, index)  # raises CellExecutionError unless the cell is tagged
                errors[index] = _errors(cell)
            passes.append(errors)
    first, second = passes
    for index, cell in cells:
        tagged = "raises-exception" in cell.metadata.get("tags", [])
        assert bool(second[index]) == tagged, f"cell {index + 1}: raised {second[index]} on the second run"
        assert second[index] == first[index], f"cell {index + 1}: a different error on the second run"
