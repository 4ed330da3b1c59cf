"""Run All again, in the kernel nbval just used: conftest.py's RunAllAgain, on in ``make test``.

A lesson a learner runs a second time from the top (the kernel still holding everything) must
work again, or raise the error a cell is tagged to raise. The check rides on nbval's pass, so it
is only as good as these two facts: ``make test`` asks for it, and it fails when a cell cannot run
twice.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

ROOT = Path(__file__).resolve().parents[2]


def test_make_test_runs_every_lesson_again_after_nbval():
    recipe = re.search(r"^test: .*?(?=^\S)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M | re.S)
    assert recipe and re.search(r"pytest notebooks .*--run-all-again", recipe.group(0)), recipe


def test_a_cell_that_cannot_run_twice_fails_and_a_tagged_error_may_repeat(tmp_path):
    # Under the repository (build/ is ignored by git), so that the root conftest.py applies.
    folder = ROOT / "build" / f"run-all-again-{tmp_path.name}"
    folder.mkdir(parents=True, exist_ok=True)
    notebook = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    once = new_code_cell("assert 'ran' not in globals(), 'this cell ran before'\nran = True", execution_count=1)
    raising = new_code_cell("raise ValueError('shown on purpose')", execution_count=2,
                            metadata={"tags": ["raises-exception"]},
                            outputs=[new_output("error", ename="ValueError", evalue="shown on purpose", traceback=[])])
    fine = new_code_cell("print('ok')", execution_count=3, outputs=[new_output("stream", name="stdout", text="ok\n")])
    notebook.cells = [once, raising, fine]
    path = folder / "twice.ipynb"
    nbformat.write(notebook, path)
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", str(path), "-n", "0", "--run-all-again", "-q"],
                              cwd=ROOT, capture_output=True, text=True, timeout=240)
    finally:
        path.unlink()
        folder.rmdir()
    summary = done.stdout.strip().splitlines()[-1]
    assert re.search(r"\b1 failed, 3 passed\b", summary), done.stdout[-3000:]
    assert "Cell 0: raised AssertionError; not tagged to raise" in done.stdout
    assert "Cell 1" not in done.stdout.split("Run All again, in the same kernel")[-1], "a tagged error raised again is fine"
