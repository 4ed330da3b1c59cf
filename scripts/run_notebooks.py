"""Re-execute notebooks in place, the one way the lab's committed outputs are produced.

    python scripts/run_notebooks.py [NOTEBOOK ...]     (default: every notebooks/*.ipynb)
    python scripts/run_notebooks.py --record-times [NOTEBOOK ...]

``--record-times`` also writes each notebook's Run All seconds into ``docs/run-times.json``,
which ``scripts/lesson_times.py`` counts as the learner's waiting: record them on an idle
machine (``uptime`` below 0.5), and say which in the commit.

Each notebook is cleared, its kernelspec set to ``python3``, and executed top to bottom by
nbclient in its own folder (as nbval and JupyterLab run it), without timing metadata, so
the stored outputs are exactly what strict nbval will compare. A cell may raise only if
it carries the ``raises-exception`` tag; any other error stops the run and nothing is written.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def execute(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    started = time.perf_counter()
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        record_timing=False,
        # Merge consecutive prints into one output, as nbval does before comparing: a cell
        # that prints around child processes is then stored the same way on every run.
        coalesce_streams=True,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    elapsed = time.perf_counter() - started
    _strip_machine_paths(notebook)
    nbformat.validate(notebook)
    nbformat.write(notebook, path)
    return elapsed


def _strip_machine_paths(notebook) -> None:
    """Tracebacks of the cells that must raise name files by absolute path; keep them relative.

    nbval compares only the error's name and value, but a committed notebook should not carry
    the folders of the machine that executed it.
    """
    prefixes = sorted({str(ROOT) + "/", str(Path(sys.prefix).resolve()) + "/", sys.prefix + "/"}, key=len, reverse=True)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                lines = output["traceback"]
                for prefix in prefixes:
                    lines = [line.replace(prefix, "") for line in lines]
                output["traceback"] = lines


RUN_TIMES = ROOT / "docs" / "run-times.json"


def main(args: list[str]) -> int:
    record = "--record-times" in args
    paths = [Path(a).resolve() for a in args if a != "--record-times"] or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    total = 0.0
    recorded = json.loads(RUN_TIMES.read_text(encoding="utf-8")) if RUN_TIMES.exists() else {}
    for path in paths:
        elapsed = execute(path)
        total += elapsed
        print(f"{path.relative_to(ROOT)}: executed in {elapsed:.1f} s")
        if record:
            recorded[path.stem] = round(elapsed, 1)
            RUN_TIMES.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n", encoding="utf-8")
    print(f"{len(paths)} notebooks in {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
