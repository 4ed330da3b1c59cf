"""Every lesson has a text copy (notebooks/text/NN_name.md) that says what its notebook says.

A review reads a lesson's change in the text copy; a copy that lags its notebook would show a
reviewer something that is not committed. scripts/lesson_text.py writes them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("lesson_text", ROOT / "scripts" / "lesson_text.py")
assert _spec and _spec.loader
lesson_text = importlib.util.module_from_spec(_spec)
sys.modules["lesson_text"] = lesson_text
_spec.loader.exec_module(lesson_text)


def test_every_lesson_has_a_text_copy_equal_to_its_notebook(capsys):
    assert lesson_text.main(["--check"]) == 0, capsys.readouterr().err


def test_the_text_copy_holds_every_cell_and_the_exercises_metadata_but_no_output():
    for path in lesson_text.lessons():
        notebook = nbformat.read(path, as_version=4)
        text = lesson_text.text_path(path).read_text(encoding="utf-8")
        assert text.count("```{code-cell}") == sum(cell.cell_type == "code" for cell in notebook.cells), path.stem
        for cell in notebook.cells:
            if "exercise" in cell.metadata:
                assert '"solution"' in text or "solution:" in text, f"{path.stem}: the solution is not in the text"
        assert "image/png" not in text and "output_type" not in text, f"{path.stem}: outputs leaked into the text"


def test_a_stale_copy_is_named(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "text"
    copy.mkdir()
    for path in lesson_text.lessons():
        (copy / f"{path.stem}.md").write_text(lesson_text.lesson_text(path), encoding="utf-8")
    (copy / "02_three_states.md").write_text("# changed by hand\n", encoding="utf-8")
    (copy / "99_gone.md").write_text("# a lesson that no longer exists\n", encoding="utf-8")
    monkeypatch.setattr(lesson_text, "TEXT", copy)
    assert lesson_text.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "02_three_states: its text copy is stale" in err and "99_gone.md: no lesson of that name" in err
    assert (copy / "02_three_states.md").read_text(encoding="utf-8") == "# changed by hand\n", "--check writes nothing"


def test_jupytext_is_a_converter_here_not_part_of_the_lab_s_jupyterlab():
    """The developers' set brings jupytext for the text copies; its Jupyter extensions are removed at
    install (Makefile), so the JupyterLab a developer or the browser test runs is the learner's."""
    prefix = Path(sys.prefix)
    if not (prefix / ".dev-installed").exists():  # Makefile's DEV_STAMP: a plain pip install keeps them
        pytest.skip("this environment was not made by make (no .dev-installed in it)")
    assert importlib.util.find_spec("jupytext") is not None
    left = [path for path in (
        prefix / "etc" / "jupyter" / "jupyter_server_config.d" / "jupytext.json",
        prefix / "etc" / "jupyter" / "jupyter_notebook_config.d" / "jupytext.json",
        prefix / "share" / "jupyter" / "labextensions" / "jupyterlab-jupytext",
    ) if path.exists()]
    assert left == [], f"jupytext's Jupyter extension is installed in the lab's environment: {left}; run make test"
